-- A blocked acquire of a held name (of another process) marks the name
-- wanted until a moment: a release before it NOTIFYs the waiters; a release
-- after it sends nothing (nobody listens, and a NOTIFY serializes the commits
-- of every notifying transaction in the cluster). Acquires leave it as it is.
-- The column is not indexed, so the marks of waiters stay HOT updates.
ALTER TABLE leases ADD COLUMN wanted_until timestamptz;
