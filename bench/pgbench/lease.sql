-- (a) One lease per transaction: the work of seqlease's lease statement for
-- one number (store/postgres/sql.go, "lease"): bump the stream's counter row
-- and insert the leased entry, in one statement. Nothing else: no
-- coalescing, no ordering. Runs with search_path set to a freshly migrated
-- schema (seqlease's own tables).
WITH s AS (
	INSERT INTO streams AS s (name, last_number) VALUES ('pgbench', 1)
	ON CONFLICT (name) DO UPDATE SET last_number = s.last_number + 1
	RETURNING s.last_number
)
INSERT INTO entries (stream, number, state, token, owner, operation_id, kind, leased_at, expires_at)
SELECT 'pgbench', s.last_number, 'leased', gen_random_uuid(), 'pgbench', '', '',
	clock_timestamp(), clock_timestamp() + interval '1 minute'
FROM s
RETURNING number, token;
