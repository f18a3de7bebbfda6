-- (e) Lease, then commit, as two transactions, numbered by a plain
-- PostgreSQL sequence instead of a counter row: the leased entry takes
-- nextval('pgbench_numbers') for its number (no row lock to wait on, but no
-- density either: a rolled-back lease burns its number), then the commit's
-- conditional write of lease_commit.sql. Every client uses the one stream
-- 'pgbench'. The harness creates the sequence in the fresh schema first.
INSERT INTO entries (stream, number, state, token, owner, operation_id, kind, leased_at, expires_at)
VALUES ('pgbench', nextval('pgbench_numbers'), 'leased', gen_random_uuid(), 'pgbench', '', '',
	clock_timestamp(), clock_timestamp() + interval '1 minute')
RETURNING number, token \gset
UPDATE entries
SET state = 'committed', payload = '\x7061796c6f6164'::bytea,
	resolved_at = LEAST(clock_timestamp(), expires_at - interval '1 microsecond')
WHERE stream = 'pgbench' AND number = :number AND token = :token::uuid AND state = 'leased'
	AND expires_at > clock_timestamp();
