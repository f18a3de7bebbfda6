-- 000009_recovery_stats: generated from sql/000009_recovery_stats.{up,down}.sql by migrations.Migration.Goose; do not edit.
-- +goose Up
-- seqlease 9: the recovery record of each kind of work and method, so that
-- a step selector sees what recovery did for a kind before a restart. The
-- cleanup loop adds each cycle's tallies in one statement; the counts are
-- totals over the life of the table, with the times of the last success
-- and the last failure. Rows are few: one per kind and step tried on it.
CREATE TABLE recovery_stats (
    kind              text        COLLATE "C" NOT NULL CHECK (octet_length(kind) <= 1024),
    method            text        COLLATE "C" NOT NULL CHECK (method <> '' AND octet_length(method) <= 1024),
    recovered         bigint      NOT NULL DEFAULT 0 CHECK (recovered >= 0),
    declined          bigint      NOT NULL DEFAULT 0 CHECK (declined >= 0),
    failed            bigint      NOT NULL DEFAULT 0 CHECK (failed >= 0),
    last_recovered_at timestamptz,
    last_failed_at    timestamptz,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, method)
);

-- +goose Down
DROP TABLE recovery_stats;
