-- (d+notify) own_stream.sql, with one NOTIFY in the commit's transaction:
-- the commit's conditional write also calls pg_notify once (for the one row
-- it updates), as a commit that wakes waiters of other processes would in
-- its own transaction. Against (d), it shows what one NOTIFY per committing
-- transaction costs: PostgreSQL serializes the commits of all notifying
-- transactions of the cluster. Nobody listens. Two transactions, as (d).
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
	AND state = 'leased' AND expires_at > clock_timestamp()
RETURNING pg_notify('seqbench', 'r ' || stream || ' ' || number);
