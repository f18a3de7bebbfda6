-- 000003_checkpoints: generated from sql/000003_checkpoints.{up,down}.sql by migrations.Migration.Goose; do not edit.
-- +goose Up
-- Reader checkpoints: the named position of a reader (a projection, a relay)
-- in a stream, the last number it processed. One row per (reader, stream).
-- A save moves position forward only, never past the stream's watermark; it
-- can run in the reader's own transaction, so that the reader's writes and
-- its checkpoint commit together. No foreign key to streams: a reader may
-- register before its stream exists, and a checkpoint outlives a stream's
-- trimmed entries.
CREATE TABLE checkpoints (
    reader     text        COLLATE "C" NOT NULL,
    stream     text        COLLATE "C" NOT NULL,
    position   bigint      NOT NULL CHECK (position >= 0),
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (reader, stream)
);

-- +goose Down
DROP TABLE checkpoints;
