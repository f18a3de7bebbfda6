// Package failover holds the high-availability tests: they run against a
// real Patroni cluster (scripts/with-patroni: one etcd, two PostgreSQL nodes
// with synchronous replication) and lose its primary node mid-load.
//
// The tests are behind the build tag "failover", so `go test ./...` does not
// build them; `make failover` runs them under scripts/with-patroni, which
// sets SEQLEASE_TEST_HA_URL (a multi-host URL with
// target_session_attrs=read-write) and what a test needs to kill a node. A
// test fails, never skips, when SEQLEASE_TEST_HA_URL is unset.
//
// TestFailover kills the primary's Patroni, postmaster and backends with
// SIGKILL while ordered workers lease and commit on two streams, the
// cleanup loop runs, a following reader reads each stream and a named-lease
// holder (the runner, Manager.Run) writes rows fenced with
// postgres.CheckFence. Nothing is restarted. It measures how long each
// takes to resume after the standby accepts writes, and checks: every
// acknowledged commit survives, each stream is dense, ordered and
// resolved, no number is handed out twice, each reader yields exactly its
// stream's sequence, fencing tokens only grow, the holding at the kill ends
// at its local deadline (within the TTL of its last renewal), and a write
// with its fence is refused afterwards.
//
// TestFailoverAsync runs on a cluster with asynchronous replication
// (SEQLEASE_PATRONI_ASYNC=1 scripts/with-patroni). It cuts the standby off
// (SIGSTOP of the primary's WAL senders) while the primary goes on
// acknowledging commits and fences, kills the primary, and checks that
// once Patroni promotes the standby, which never received them, the Store
// refuses every stream and the named lease with store.ErrHistoryLost: no
// number handed out twice, no fence repeated, the HistoryLost alert
// firing. It reports how many acknowledged commits were lost.
//
// TestStandbyReader commits on the primary while followers read the
// synchronous standby through a postgres.Standby (woken by the primary's
// notices, or by polling alone): each must yield exactly the primary's
// resolved sequence, gaps included, never above the standby's watermark;
// it logs their lag behind the primary's commits, and checks that a replay
// from 0 on the standby equals one on the primary. TestStandbyPromoted
// kills the primary under such followers: they ride through the standby's
// promotion and yield exactly what the new primary holds. It kills a node,
// so it runs last.
package failover
