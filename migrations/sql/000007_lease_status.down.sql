DROP TABLE lease_waiters;
ALTER TABLE lease_history
    DROP COLUMN comment,
    DROP COLUMN actor,
    DROP COLUMN reason;
