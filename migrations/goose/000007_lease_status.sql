-- 000007_lease_status: generated from sql/000007_lease_status.{up,down}.sql by migrations.Migration.Goose; do not edit.
-- +goose Up
-- seqlease 7: status and audit reasons of named leases. Each history record
-- says why (reason: NULL for acquired, and for records written before this
-- migration, which read as their event), and a force-release who did it
-- (actor) and why (comment), as the operator gave them.
ALTER TABLE lease_history
    ADD COLUMN reason  text CHECK (reason IN ('renewed', 'released', 'expired', 'force-released', 'lost', 'max-renewals')),
    ADD COLUMN actor   text CHECK (octet_length(actor) <= 200),
    ADD COLUMN comment text CHECK (octet_length(comment) <= 1024);

-- The waiters of named leases, for operators: one row per waiting process
-- (waiter, its owner) and name, written by the announcement a blocked
-- acquire already sends to other processes (AnnounceLeaseWaiter), deleted
-- by its withdrawal, and dead once "until" passes without a refresh (the
-- cleanup of expired leases deletes those) or once the waiter holds the
-- name with a larger fence than it saw (listings leave those out).
CREATE TABLE lease_waiters (
    name   text        COLLATE "C" NOT NULL,
    waiter text        COLLATE "C" NOT NULL,
    since  timestamptz NOT NULL,
    fence  bigint      NOT NULL CHECK (fence >= 0),
    until  timestamptz NOT NULL,
    PRIMARY KEY (name, waiter)
);

-- +goose Down
DROP TABLE lease_waiters;
ALTER TABLE lease_history
    DROP COLUMN comment,
    DROP COLUMN actor,
    DROP COLUMN reason;
