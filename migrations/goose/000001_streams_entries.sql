-- 000001_streams_entries: generated from sql/000001_streams_entries.{up,down}.sql by migrations.Migration.Goose; do not edit.
-- +goose Up
-- seqlease 1: streams and their dense, numbered entries. entries.stream has no
-- foreign key: the lease statement writes both tables atomically, and a key
-- check per leased row would cost on the hot path.
-- Table names are unqualified: the migration runner sets search_path to the
-- configured schema. With golang-migrate, put search_path in the URL.
-- Stream names use the "C" collation: streams sort by their bytes on every
-- database, as in the memory backend.

CREATE TABLE streams (
    name        text        COLLATE "C" PRIMARY KEY,
    -- the highest number handed out (N); the next lease gets last_number + 1
    last_number bigint      NOT NULL CHECK (last_number >= 0),
    -- retention: entries below low_point were trimmed; readers asking for
    -- them get an error instead of silence
    low_point   bigint      NOT NULL DEFAULT 1 CHECK (low_point >= 1),
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE entries (
    stream       text        COLLATE "C" NOT NULL,
    number       bigint      NOT NULL CHECK (number >= 1),
    state        text        NOT NULL CHECK (state IN ('leased', 'committed', 'gap')),
    token        uuid        NOT NULL,
    owner        text        NOT NULL DEFAULT '',
    operation_id text        NOT NULL DEFAULT '',
    kind         text        NOT NULL DEFAULT '',
    leased_at    timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    renewals     integer     NOT NULL DEFAULT 0,
    resolved_at  timestamptz,
    payload      bytea,
    gap_reason   text,
    recovered_as bigint,
    -- a gap filled through the fill policy becomes committed and says so;
    -- gap_reason keeps why it had been a gap
    filled_at    timestamptz,
    filled_by    text,
    -- an entry that carries recovered work: the number it came from and how
    recovered_from bigint,
    recovery_type  text,
    PRIMARY KEY (stream, number),
    CONSTRAINT entries_resolved_iff_final CHECK ((state = 'leased') = (resolved_at IS NULL)),
    CONSTRAINT entries_gap_has_reason CHECK (state <> 'gap' OR gap_reason IS NOT NULL),
    CONSTRAINT entries_reason_only_on_gaps CHECK (gap_reason IS NULL OR state = 'gap' OR filled_at IS NOT NULL),
    CONSTRAINT entries_recovery_described CHECK ((recovered_from IS NULL) = (recovery_type IS NULL)),
    CONSTRAINT entries_filled_are_committed CHECK (filled_at IS NULL OR (state = 'committed' AND filled_by IS NOT NULL)),
    -- so the entries with a gap reason are exactly the open and the filled gaps
    CONSTRAINT entries_filled_were_gaps CHECK (filled_at IS NULL OR gap_reason IS NOT NULL)
);

-- Hot queries touch only unresolved entries: the oldest unresolved number of
-- a stream (the watermark), the in-flight count, the expired scan.
CREATE INDEX entries_unresolved ON entries (stream, number) WHERE state = 'leased';
CREATE INDEX entries_expiry ON entries (expires_at) WHERE state = 'leased';
-- Gaps are few; listing and counting them must not scan the history.
CREATE INDEX entries_gaps ON entries (stream, number) WHERE state = 'gap';
-- Open and filled gaps together (listing with filled ones): the entries that
-- have a gap reason.
CREATE INDEX entries_gap_history ON entries (stream, number) WHERE gap_reason IS NOT NULL;

-- Named leases (package lease): one row per name ever acquired, holding its
-- current or last holding. The row stays after the holding ends, so the
-- fencing token (fence) keeps growing across holders (I8). Renewals change
-- only unindexed columns, so they can be HOT updates; fillfactor leaves room.
CREATE TABLE leases (
    name         text        COLLATE "C" PRIMARY KEY,
    owner        text        COLLATE "C" NOT NULL,
    fence        bigint      NOT NULL CHECK (fence >= 1),
    acquired_at  timestamptz NOT NULL,
    renewed_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    renewals     integer     NOT NULL DEFAULT 0 CHECK (renewals >= 0),
    -- 0: no limit
    max_renewals integer     NOT NULL DEFAULT 0 CHECK (max_renewals >= 0),
    -- set when the holding was released, force-released, or marked expired
    ended_at     timestamptz,
    end_reason   text CHECK (end_reason IN ('released', 'expired', 'force-released')),
    CONSTRAINT leases_ended_has_reason CHECK ((ended_at IS NULL) = (end_reason IS NULL))
) WITH (fillfactor = 80);

-- Holdings not ended: by owner (ListLeases, ForceReleaseLeases) and by age
-- (long-held leases, the expired scan). Their size follows the live holdings.
CREATE INDEX leases_live_owner ON leases (owner, name) WHERE ended_at IS NULL;
CREATE INDEX leases_live_age ON leases (acquired_at) WHERE ended_at IS NULL;

-- The audit history of named leases; retention deletes by "at".
CREATE TABLE lease_history (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text        COLLATE "C" NOT NULL,
    owner      text        COLLATE "C" NOT NULL,
    fence      bigint      NOT NULL,
    event      text        NOT NULL CHECK (event IN ('acquired', 'renewed', 'released', 'expired', 'force-released')),
    at         timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);

CREATE INDEX lease_history_name ON lease_history (name, id);
CREATE INDEX lease_history_at ON lease_history (at);

-- +goose Down
DROP TABLE lease_history;
DROP TABLE leases;
DROP TABLE entries;
DROP TABLE streams;
