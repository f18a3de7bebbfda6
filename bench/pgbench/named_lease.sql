-- (c) One named-lease acquire plus release, each client on its own name:
-- the upsert with a guard that a hand-written named lease needs (take the
-- name if it was never held, or its holding ended or expired; the fencing
-- token grows by one), then the fenced release. No read before the write,
-- no audit history, no NOTIFY. Tables are seqlease's (the leases table).
INSERT INTO leases AS l (name, owner, fence, acquired_at, renewed_at, expires_at)
VALUES ('pgbench-' || :client_id::text, 'pgbench', 1, clock_timestamp(), clock_timestamp(),
	clock_timestamp() + interval '1 minute')
ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, fence = l.fence + 1,
	acquired_at = EXCLUDED.acquired_at, renewed_at = EXCLUDED.renewed_at,
	expires_at = EXCLUDED.expires_at, renewals = 0, ended_at = NULL, end_reason = NULL
WHERE l.ended_at IS NOT NULL OR l.expires_at <= clock_timestamp()
RETURNING fence \gset
UPDATE leases SET ended_at = clock_timestamp(), end_reason = 'released'
WHERE name = 'pgbench-' || :client_id::text AND fence = :fence AND owner = 'pgbench'
	AND ended_at IS NULL;
