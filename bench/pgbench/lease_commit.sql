-- (b) Lease, then commit, as two transactions: the lease of lease.sql, then
-- the conditional write of seqlease's commit (store/postgres/sql.go,
-- "commit") without its ordering check and without its NOTIFY (both exist
-- only for ordering). Each statement is its own transaction.
WITH s AS (
	INSERT INTO streams AS s (name, last_number) VALUES ('pgbench', 1)
	ON CONFLICT (name) DO UPDATE SET last_number = s.last_number + 1
	RETURNING s.last_number
)
INSERT INTO entries (stream, number, state, token, owner, operation_id, kind, leased_at, expires_at)
SELECT 'pgbench', s.last_number, 'leased', gen_random_uuid(), 'pgbench', '', '',
	clock_timestamp(), clock_timestamp() + interval '1 minute'
FROM s
RETURNING number, token \gset
UPDATE entries
SET state = 'committed', payload = '\x7061796c6f6164'::bytea,
	resolved_at = LEAST(clock_timestamp(), expires_at - interval '1 microsecond')
WHERE stream = 'pgbench' AND number = :number AND token = :token::uuid AND state = 'leased'
	AND expires_at > clock_timestamp();
