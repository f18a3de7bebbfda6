-- (d) Lease, then commit, as two transactions, each client on a stream of
-- its own: lease_commit.sql with the stream named after the client
-- ('pgbench-' || :client_id, pgbench's built-in number of the client), so
-- every client bumps its own counter row and no client waits on another's
-- row lock. No ordering check, no NOTIFY, as in (b). Each statement is its
-- own transaction.
WITH s AS (
	INSERT INTO streams AS s (name, last_number) VALUES ('pgbench-' || :client_id::text, 1)
	ON CONFLICT (name) DO UPDATE SET last_number = s.last_number + 1
	RETURNING s.last_number
)
INSERT INTO entries (stream, number, state, token, owner, operation_id, kind, leased_at, expires_at)
SELECT 'pgbench-' || :client_id::text, s.last_number, 'leased', gen_random_uuid(), 'pgbench', '', '',
	clock_timestamp(), clock_timestamp() + interval '1 minute'
FROM s
RETURNING number, token \gset
UPDATE entries
SET state = 'committed', payload = '\x7061796c6f6164'::bytea,
	resolved_at = LEAST(clock_timestamp(), expires_at - interval '1 microsecond')
WHERE stream = 'pgbench-' || :client_id::text AND number = :number AND token = :token::uuid
	AND state = 'leased' AND expires_at > clock_timestamp();
