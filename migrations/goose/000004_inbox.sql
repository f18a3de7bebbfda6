-- 000004_inbox: generated from sql/000004_inbox.{up,down}.sql by migrations.Migration.Goose; do not edit.
-- +goose Up
-- seqlease 4: inbox records. A consumer of an at-least-once broker records
-- each message it received, in the transaction that applies the message's
-- effect; the primary key decides duplicates (INSERT ... ON CONFLICT DO
-- NOTHING), and a concurrent insert of the same pair waits for the
-- transaction that wrote it first. Rows are only inserted and deleted, never
-- updated. received_at comes first so that no padding precedes it, and is
-- indexed for retention: PurgeReceived deletes the oldest records first, in
-- bounded batches. Names use the "C" collation: ids compare by their bytes.

CREATE TABLE inbox (
    received_at timestamptz NOT NULL,
    consumer    text        COLLATE "C" NOT NULL,
    message_id  text        COLLATE "C" NOT NULL,
    PRIMARY KEY (consumer, message_id)
);

CREATE INDEX inbox_received_at ON inbox (received_at);

-- +goose Down
DROP TABLE inbox;
