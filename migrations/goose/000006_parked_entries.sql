-- 000006_parked_entries: generated from sql/000006_parked_entries.{up,down}.sql by migrations.Migration.Goose; do not edit.
-- +goose Up
-- seqlease 6: parked work. The cleanup loop counts the failed recoveries of
-- an expired entry on its row, with the last error (cut to 1024 bytes), so a
-- restart does not forget them; after the configured number of attempts it
-- parks the entry (parked_at): still leased, its stream still waits, and no
-- cleaner tries it again until an operator unparks it, commits its work or
-- gives it up as a gap. NULL means none: the columns cost nothing on the
-- rows of entries that never failed.
ALTER TABLE entries
    ADD COLUMN recovery_attempts integer CHECK (recovery_attempts >= 0),
    ADD COLUMN last_error        text    CHECK (octet_length(last_error) <= 1024),
    ADD COLUMN parked_at         timestamptz;

-- Parked entries are few: listing and counting them reads this index only.
-- A resolution drops the row out of it.
CREATE INDEX entries_parked ON entries (stream, number) WHERE parked_at IS NOT NULL AND state = 'leased';

-- +goose Down
DROP INDEX entries_parked;
ALTER TABLE entries
    DROP COLUMN parked_at,
    DROP COLUMN last_error,
    DROP COLUMN recovery_attempts;
