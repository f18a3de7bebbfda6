DROP INDEX entries_parked;
ALTER TABLE entries
    DROP COLUMN parked_at,
    DROP COLUMN last_error,
    DROP COLUMN recovery_attempts;
