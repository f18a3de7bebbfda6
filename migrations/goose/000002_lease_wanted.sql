-- 000002_lease_wanted: generated from sql/000002_lease_wanted.{up,down}.sql by migrations.Migration.Goose; do not edit.
-- +goose Up
-- A blocked acquire of a held name (of another process) marks the name
-- wanted until a moment: a release before it NOTIFYs the waiters; a release
-- after it sends nothing (nobody listens, and a NOTIFY serializes the commits
-- of every notifying transaction in the cluster). Acquires leave it as it is.
-- The column is not indexed, so the marks of waiters stay HOT updates.
ALTER TABLE leases ADD COLUMN wanted_until timestamptz;

-- +goose Down
ALTER TABLE leases DROP COLUMN wanted_until;
