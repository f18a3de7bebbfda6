-- 000005_pending_hooks: generated from sql/000005_pending_hooks.{up,down}.sql by migrations.Migration.Goose; do not edit.
-- +goose Up
-- seqlease 5: hooks that survive a crash. The cleanup loop's durable hook of
-- an expired entry is recorded here by the statement that resolves the
-- entry (a gap or a move), so the record commits with the resolution or not
-- at all; a deliverer claims due records, runs the hook and deletes the
-- record only once the hook returned without error (at least once).
-- The entry's fields are copied: retention may trim the entry before its
-- hook is delivered. No foreign key, for the same reason.
CREATE TABLE pending_hooks (
    stream       text        COLLATE "C" NOT NULL,
    number       bigint      NOT NULL,
    token        uuid        NOT NULL,
    owner        text        NOT NULL,
    operation_id text        NOT NULL,
    kind         text        NOT NULL,
    leased_at    timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    renewals     integer     NOT NULL,
    created_at   timestamptz NOT NULL,
    -- when the record may be claimed next: at creation, after a claim that
    -- lapsed (the deliverer died), or after a failure's backoff
    due_at       timestamptz NOT NULL,
    -- claims so far; a claim's own number fences its acknowledgement
    attempts     integer     NOT NULL DEFAULT 0,
    last_error   text,
    PRIMARY KEY (stream, number)
);

CREATE INDEX pending_hooks_due ON pending_hooks (due_at);

-- +goose Down
DROP TABLE pending_hooks;
