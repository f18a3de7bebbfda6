package chaos_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/audit"
	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/internal/chaos"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// lostReply is a leaser whose connections go through a chaos.Proxy, and a
// direct view of the same schema (barrier, store, cleanup) that no fault
// touches.
type lostReply struct {
	proxy  *chaos.Proxy
	schema string
	pool   *pgxpool.Pool   // direct
	direct *postgres.Store // direct
	leaser *sequence.Leaser
	clean  *cleanup.Service // direct, run by hand (RunOnce)
	acked  map[int64][]byte
}

func newLostReply(t *testing.T, cfg *sequence.Config) *lostReply {
	t.Helper()
	ctx := t.Context()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	direct, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, chaos.CreateTables(ctx, pool, schema))
	b, err := barrier.New(direct, nil)
	require.NoError(t, err)
	require.NoError(t, b.Start(ctx))
	t.Cleanup(b.Stop)

	pcfg, err := pgxpool.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	cc := pcfg.ConnConfig
	require.NotEqual(t, byte('/'), cc.Host[0], "the proxy needs a TCP address, not a socket")
	proxy, err := chaos.NewProxy(net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))))
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	host, port, _ := net.SplitHostPort(proxy.Addr())
	p, _ := strconv.Atoi(port)
	cc.Host, cc.Port, cc.Fallbacks = host, uint16(p), nil
	pcfg.MaxConns = 2
	proxied, err := pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	t.Cleanup(proxied.Close)
	st, err := postgres.New(proxied, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	c := sequence.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Barrier = b
	l, err := sequence.New(st, &c)
	require.NoError(t, err)
	clean, err := cleanup.New(direct, nil)
	require.NoError(t, err)
	t.Cleanup(clean.Stop)
	return &lostReply{proxy: proxy, schema: schema, pool: pool, direct: direct, leaser: l, clean: clean, acked: map[int64][]byte{}}
}

// commitOf matches the message that carries x's commit: its Bind, with
// the token (in binary or text form) and the payload.
func commitOf(x *sequence.Lease, payload []byte) func([]byte) bool {
	tok := x.Token()
	text := []byte(fmt.Sprintf("%x-%x-%x-%x-%x", tok[0:4], tok[4:6], tok[6:8], tok[8:10], tok[10:]))
	return func(msg []byte) bool {
		return bytes.Contains(msg, payload) && (bytes.Contains(msg, tok[:]) || bytes.Contains(msg, text))
	}
}

func (r *lostReply) entry(t *testing.T, n int64) store.Entry {
	t.Helper()
	es, err := r.direct.Read(t.Context(), "lost", n-1, 1)
	require.NoError(t, err)
	require.Len(t, es, 1)
	return es[0]
}

func (r *lostReply) sideRows(t *testing.T, n int64) int {
	t.Helper()
	var rows int
	require.NoError(t, r.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+pgx.Identifier{r.schema, "chaos_side"}.Sanitize()+
		" WHERE number = $1", n).Scan(&rows))
	return rows
}

// lease leases the next number of the stream "lost".
func (r *lostReply) lease(t *testing.T, ttl time.Duration) *sequence.Lease {
	t.Helper()
	x, err := r.leaser.Lease(t.Context(), "lost", &sequence.LeaseOpts{TTL: ttl})
	require.NoError(t, err)
	return x
}

// expire waits until x expired by the database clock and runs a cleanup
// cycle, which resolves it if nothing else did; it returns how many
// expired leases the cycle found.
func (r *lostReply) expire(t *testing.T, x *sequence.Lease) int {
	t.Helper()
	waitDBClock(t.Context(), t, r.direct, x.ExpiresAt())
	res, err := r.clean.RunOnce(t.Context())
	require.NoError(t, err)
	return res.Expired
}

// cut waits for the armed fault to have happened.
func cut(t *testing.T, fired <-chan struct{}) {
	t.Helper()
	select {
	case <-fired:
	case <-time.After(30 * time.Second):
		t.Fatal("the armed fault never fired")
	}
}

// requireUnknown checks that err is a failure whose outcome is unknown,
// not a refusal.
func requireUnknown(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	require.False(t, chaos.Refused(err), "a lost connection reported as a refusal: %v", err)
}

func (r *lostReply) audit(t *testing.T) {
	t.Helper()
	rep, err := audit.Stream(t.Context(), r.direct, "lost", &audit.Options{Ordered: true, Acknowledged: r.acked})
	require.NoError(t, err)
	require.NoError(t, rep.Err())
}

// TestLostCommitReply cuts the connection of a commit (a proxy between pgx
// and PostgreSQL that reads the protocol) after the server executed it and
// before the reply reaches the client, or before the server sees it; or
// ends the backend (pg_terminate_backend) while the commit's transaction
// runs. A retry with the same handle must report the true outcome, and the
// work must be committed at most once (I7): one ledger entry with the first
// payload, one side row of CommitTx, the function run once per commit that
// took effect.
func TestLostCommitReply(t *testing.T) {
	t.Run("reply lost after the commit", func(t *testing.T) {
		t.Parallel()
		r := newLostReply(t, nil)
		x := r.lease(t, time.Minute)
		payload := []byte("first")
		fired := r.proxy.Arm(chaos.Rule{Match: []func([]byte) bool{commitOf(x, payload)}, Action: chaos.DropReply})
		requireUnknown(t, x.Commit(t.Context(), payload))
		cut(t, fired)
		require.Equal(t, store.Committed, r.entry(t, x.Number()).State, "the server committed before the reply was lost")
		require.NoError(t, x.Commit(t.Context(), payload), "the retry reports the commit that took effect")
		r.acked[x.Number()] = payload
		// The database alone, asked with the same token, reports the first
		// commit; with another payload it refuses, and keeps the first.
		_, err := r.direct.Commit(t.Context(), "lost", x.Number(), x.Token(), &store.CommitParams{Payload: payload, Ordered: true})
		require.NoError(t, err)
		_, err = r.direct.Commit(t.Context(), "lost", x.Number(), x.Token(), &store.CommitParams{Payload: []byte("second"), Ordered: true})
		require.ErrorIs(t, err, store.ErrPayloadMismatch)
		require.Equal(t, payload, r.entry(t, x.Number()).Payload)
		r.audit(t)
	})

	t.Run("request lost before the server saw it", func(t *testing.T) {
		t.Parallel()
		r := newLostReply(t, nil)
		x := r.lease(t, time.Minute)
		payload := []byte("only")
		fired := r.proxy.Arm(chaos.Rule{Match: []func([]byte) bool{commitOf(x, payload)}, Action: chaos.DropRequest})
		requireUnknown(t, x.Commit(t.Context(), payload))
		cut(t, fired)
		require.Equal(t, store.Leased, r.entry(t, x.Number()).State, "the request never reached the server")
		require.NoError(t, x.Commit(t.Context(), payload), "the retry commits")
		r.acked[x.Number()] = payload
		r.audit(t)
	})

	t.Run("CommitTx reply lost after COMMIT", func(t *testing.T) {
		t.Parallel()
		r := newLostReply(t, nil)
		x := r.lease(t, time.Minute)
		payload := []byte("tx")
		var runs atomic.Int32
		fn := r.sideRow(x, &runs, nil)
		fired := r.proxy.Arm(chaos.Rule{Match: []func([]byte) bool{commitOf(x, payload), chaos.SimpleQuery("commit")}, Action: chaos.DropReply})
		requireUnknown(t, sequence.CommitTx(t.Context(), x, payload, fn))
		cut(t, fired)
		require.Equal(t, store.Committed, r.entry(t, x.Number()).State)
		require.NoError(t, sequence.CommitTx(t.Context(), x, payload, fn))
		require.EqualValues(t, 1, runs.Load(), "the retry of a commit that took effect does not run the function again")
		require.Equal(t, 1, r.sideRows(t, x.Number()))
		r.acked[x.Number()] = payload
		r.audit(t)
	})

	t.Run("reply lost, then the lease expires before the retry", func(t *testing.T) {
		t.Parallel()
		r := newLostReply(t, nil)
		x := r.lease(t, 500*time.Millisecond)
		payload := []byte("late retry")
		fired := r.proxy.Arm(chaos.Rule{Match: []func([]byte) bool{commitOf(x, payload)}, Action: chaos.DropReply})
		requireUnknown(t, x.Commit(t.Context(), payload))
		cut(t, fired)
		require.Zero(t, r.expire(t, x), "a committed entry is not expired")
		require.NoError(t, x.Commit(t.Context(), payload), "the retry after the expiry still reports the commit")
		r.acked[x.Number()] = payload
		r.audit(t)
	})

	t.Run("request lost, then the lease expires before the retry", func(t *testing.T) {
		t.Parallel()
		r := newLostReply(t, nil)
		x := r.lease(t, 500*time.Millisecond)
		payload := []byte("never")
		fired := r.proxy.Arm(chaos.Rule{Match: []func([]byte) bool{commitOf(x, payload)}, Action: chaos.DropRequest})
		requireUnknown(t, x.Commit(t.Context(), payload))
		cut(t, fired)
		require.Equal(t, 1, r.expire(t, x), "the cleanup resolves the expired lease")
		require.ErrorIs(t, x.Commit(t.Context(), payload), sequence.ErrExpired, "the retry reports that it never committed")
		e := r.entry(t, x.Number())
		require.Equal(t, store.Gap, e.State)
		r.audit(t)
	})

	t.Run("group commit reply lost", func(t *testing.T) {
		t.Parallel()
		// A group waits for company, so the three commits go in one batch.
		r := newLostReply(t, &sequence.Config{GroupDelay: 300 * time.Millisecond})
		xs, err := r.leaser.LeaseN(t.Context(), "lost", 3, &sequence.LeaseOpts{TTL: time.Minute})
		require.NoError(t, err)
		payloads := [][]byte{[]byte("g1"), []byte("g2"), []byte("g3")}
		fired := r.proxy.Arm(chaos.Rule{Match: []func([]byte) bool{commitOf(xs[0], payloads[0])}, Action: chaos.DropReply})
		errs := make([]error, 3)
		var wg sync.WaitGroup
		for i := 2; i >= 0; i-- { // the later numbers park first; the first leads
			wg.Go(func() { errs[i] = xs[i].Commit(t.Context(), payloads[i]) })
			time.Sleep(20 * time.Millisecond)
		}
		wg.Wait()
		cut(t, fired)
		for i, x := range xs {
			requireUnknown(t, errs[i]) // all three were in the lost exchange
			require.Equal(t, store.Committed, r.entry(t, x.Number()).State)
			require.NoError(t, x.Commit(t.Context(), payloads[i]))
			require.Equal(t, payloads[i], r.entry(t, x.Number()).Payload)
			r.acked[x.Number()] = payloads[i]
		}
		r.audit(t)
	})

	t.Run("backend terminated inside the commit transaction", func(t *testing.T) {
		t.Parallel()
		r := newLostReply(t, nil)
		x := r.lease(t, time.Minute)
		payload := []byte("terminated")
		pids := make(chan uint32, 1)
		var runs atomic.Int32
		fn := r.sideRow(x, &runs, pids)
		done := make(chan error, 1)
		go func() { done <- sequence.CommitTx(t.Context(), x, payload, fn) }()
		pid := <-pids // the conditional write and the side row are done; the transaction sleeps
		var ended bool
		require.NoError(t, r.pool.QueryRow(t.Context(), "SELECT pg_terminate_backend($1)", pid).Scan(&ended))
		require.True(t, ended)
		requireUnknown(t, <-done)
		require.Equal(t, store.Leased, r.entry(t, x.Number()).State, "the transaction died with its backend")
		require.Zero(t, r.sideRows(t, x.Number()))
		require.NoError(t, sequence.CommitTx(t.Context(), x, payload, fn), "the retry commits")
		require.EqualValues(t, 2, runs.Load(), "the function ran again: its first run was rolled back")
		require.Equal(t, 1, r.sideRows(t, x.Number()))
		r.acked[x.Number()] = payload
		r.audit(t)
	})
}

// sideRow is a CommitTx function that writes x's side row and counts its
// runs; with pids, its first run sends its backend's pid there and then
// sleeps in the transaction, for the test to end the backend.
func (r *lostReply) sideRow(x *sequence.Lease, runs *atomic.Int32, pids chan<- uint32) func(context.Context, pgx.Tx) error {
	insert := "INSERT INTO " + pgx.Identifier{r.schema, "chaos_side"}.Sanitize() + " (stream, number, op) VALUES ($1, $2, $3)"
	return func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, insert, x.Stream(), x.Number(), "op"); err != nil {
			return err
		}
		if runs.Add(1) == 1 && pids != nil {
			pids <- tx.Conn().PgConn().PID()
			_, err := tx.Exec(ctx, "SELECT pg_sleep(30)")
			return err
		}
		return nil
	}
}
