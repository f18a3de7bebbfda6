package postgres

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqlease/seqlease/store"
)

// Listening. Watch and WatchLeases hear the other processes through LISTEN
// on the schema's channel, each on a connection of its own: one taken out
// of the DB (a pool), or dialled with Config.ListenDSN. A LISTEN through a
// transaction-mode pooler (PgBouncer's pool_mode = transaction) succeeds
// and then hears nothing, without an error: the pooler lends the server
// session that ran it to other clients between transactions. So each
// listening connection proves that it hears. Once it listens (at the start
// and after every reconnect) its owner sends a self-check notice,
// "c<TAB><32 hex digits>" with a token of its own, on the channel through
// the DB like any notice, and waits up to Config.ListenCheckTimeout to hear
// it. The other listeners ignore it (no Store id, no lease record).
//
//	            LISTEN, send the self-check
//	  connect ──────────────────────────────> checking ──(heard)──> hearing
//	     ^                                       │                   │
//	     │                                       (not heard in time) │
//	     │ after Config.DeafRecheckInterval      v                   │
//	     └─────────────────────────────────── deaf                   │
//	     └───────────────── (connection lost: backoff) ──────────────┘
//
// A deaf listener logs at ERROR level what to do (ListenDSN), counts in
// ListenHealth (metrics exports it), and has its sink polled every
// Config.DeafPollInterval until a later check hears: store.Poller's Poll
// if the sink has it, else Reset, which make the barrier re-read the
// watermarks of the streams with waiters and the lease Manager retry its
// blocked acquires, as notices would have had them do. After
// Config.DeafRecheckInterval it reconnects and checks again; it polls
// through the reconnect. Notices that do arrive are delivered as ever.

// Defaults of Config.
const (
	DefaultListenCheckTimeout  = 5 * time.Second
	DefaultDeafPollInterval    = 50 * time.Millisecond
	DefaultDeafRecheckInterval = 30 * time.Second
)

// Names of the listeners, in logs.
const (
	listenerResolutions = "resolutions" // Watch
	listenerLeases      = "leases"      // WatchLeases
)

// errRecheck ends a deaf listener's connection: reconnect and check again.
var errRecheck = errors.New("deaf listener: reconnect and check again")

// listener is what a watch does with its listening connection.
type listener struct {
	name    string               // listenerResolutions or listenerLeases
	listen  string               // the LISTEN statement
	reset   func()               // the sink's Reset
	poll    func()               // while deaf: the sink's Poll, else its Reset
	deliver func(payload string) // a notification that is not a self-check

	mu     sync.Mutex
	deaf   bool          // the last check heard nothing; cleared when one hears
	turned chan struct{} // capacity 1: deaf turned true (pollWhileDeaf)
}

// newListener returns the listener named name that runs the statement
// listen and tells sink (a store.Sink or store.LeaseSink, whose Reset is
// reset) what it hears through deliver.
func newListener(name, listen string, sink any, reset func(), deliver func(payload string)) *listener {
	l := &listener{name: name, listen: listen, reset: reset, poll: reset, deliver: deliver, turned: make(chan struct{}, 1)}
	if p, ok := sink.(store.Poller); ok {
		l.poll = p.Poll
	}
	return l
}

// connector returns how the watch named op gets its listening
// connections: dialled with Config.ListenDSN, or taken out of the DB,
// which must then be a pool.
func (s *Store) connector(op string) (func(context.Context) (*pgx.Conn, error), error) {
	if s.listenConfig != nil {
		return func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, s.listenConfig) }, nil
	}
	pool, ok := s.db.(interface {
		Acquire(ctx context.Context) (*pgxpool.Conn, error)
	})
	if !ok {
		return nil, fmt.Errorf("%s: %w: the DB is a %T, not a pool (or set Config.ListenDSN)", op, store.ErrUnsupported, s.db)
	}
	return func(ctx context.Context) (*pgx.Conn, error) {
		pc, err := pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		return pc.Hijack(), nil // a listening connection must not go back to the pool
	}, nil
}

// watchLoop runs l until ctx ends: it listens, and reconnects after a
// connection error with exponential backoff (up to a 30 s pause), or at
// once to check again when it was deaf. While l is deaf, a goroutine polls
// its sink.
func (s *Store) watchLoop(ctx context.Context, connect func(context.Context) (*pgx.Conn, error), l *listener) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	pctx, stopPolling := context.WithCancel(ctx)
	defer stopPolling()
	wg.Go(func() { s.pollWhileDeaf(pctx, l) })
	s.health.track(l)
	defer s.health.untrack(l)
	defer s.setDeaf(ctx, l, false, 0) // a deaf listener that ends is deaf no more

	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 50 * time.Millisecond
	bo.MaxInterval = 30 * time.Second
	bo.MaxElapsedTime = 0
	for {
		err := s.listenOnce(ctx, connect, l, bo.Reset)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, errRecheck) {
			continue
		}
		pause := bo.NextBackOff()
		s.logger.WarnContext(ctx, "postgres: listener lost, reconnecting", slog.String("listener", l.name),
			slog.Any("error", err), slog.Duration("pause", pause))
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// listenOnce holds one listening connection until it fails, ctx ends, or
// it was deaf for Config.DeafRecheckInterval (errRecheck).
func (s *Store) listenOnce(ctx context.Context, connect func(context.Context) (*pgx.Conn, error), l *listener, connected func()) error {
	conn, err := connect(ctx)
	if err != nil {
		return err
	}
	defer s.health.hearing(l, false)
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, l.listen); err != nil {
		return err
	}
	connected()
	l.reset()
	heard, err := s.selfCheck(ctx, conn, l)
	if err != nil {
		return err
	}
	s.setDeaf(ctx, l, !heard, s.checkTimeout)
	if heard {
		s.health.hearing(l, true)
	}
	var recheck context.Context = ctx
	if !heard {
		var cancel context.CancelFunc
		recheck, cancel = context.WithTimeout(ctx, s.recheckEvery)
		defer cancel()
	}
	for {
		n, err := conn.WaitForNotification(recheck)
		switch {
		case err != nil && ctx.Err() == nil && recheck.Err() != nil:
			return errRecheck
		case err != nil:
			return err
		}
		if !isSelfCheck(n.Payload) {
			l.deliver(n.Payload)
		}
	}
}

// selfCheckPrefix starts a self-check notice's payload.
const selfCheckPrefix = "c\t"

// isSelfCheck reports whether payload is a self-check notice (anyone's).
func isSelfCheck(payload string) bool { return strings.HasPrefix(payload, selfCheckPrefix) }

// selfCheck sends a self-check notice through the DB and waits up to
// Config.ListenCheckTimeout to hear it on conn, delivering what else it
// hears meanwhile. An error is the connection's or the notice's (not
// sent: it proves nothing either way).
func (s *Store) selfCheck(ctx context.Context, conn *pgx.Conn, l *listener) (heard bool, err error) {
	tok := store.NewToken()
	payload := selfCheckPrefix + hex.EncodeToString(tok[:])
	cctx, cancel := context.WithTimeout(ctx, s.checkTimeout)
	defer cancel()
	if _, err := s.db.Exec(cctx, s.q.selfCheck, s.channel, payload); err != nil {
		if ctx.Err() == nil && cctx.Err() != nil {
			return false, fmt.Errorf("LISTEN self-check: the notice was not sent within %v: %w", s.checkTimeout, err)
		}
		return false, interpretError("LISTEN self-check", err)
	}
	for {
		n, err := conn.WaitForNotification(cctx)
		switch {
		case err != nil && ctx.Err() == nil && cctx.Err() != nil:
			return false, nil
		case err != nil:
			return false, err
		case n.Payload == payload:
			return true, nil
		case !isSelfCheck(n.Payload):
			l.deliver(n.Payload)
		}
	}
}

// setDeaf records what l's last check found (waited: how long it waited),
// logs it and counts it (ListenHealth).
func (s *Store) setDeaf(ctx context.Context, l *listener, deaf bool, waited time.Duration) {
	l.mu.Lock()
	was := l.deaf
	l.deaf = deaf
	l.mu.Unlock()
	if deaf && !was {
		select {
		case l.turned <- struct{}{}:
		default:
		}
	}
	switch {
	case deaf:
		s.health.mu.Lock()
		s.health.checks.DeafChecks++
		if !was {
			s.health.checks.Deaf++
		}
		s.health.mu.Unlock()
		s.logger.ErrorContext(ctx, ListenDeafMessage, slog.String("listener", l.name),
			slog.Duration("waited", waited), slog.Duration("poll_interval", s.deafPoll),
			slog.Duration("recheck_in", s.recheckEvery))
	case was:
		s.health.mu.Lock()
		s.health.checks.Deaf--
		s.health.mu.Unlock()
		if ctx.Err() == nil {
			s.logger.InfoContext(ctx, "postgres: LISTEN hears again; polling stopped", slog.String("listener", l.name))
		}
	}
}

// ListenDeafMessage is the message of the ERROR a listener logs when its
// self-check heard nothing.
const ListenDeafMessage = "postgres: LISTEN hears nothing: its self-check notice did not come back. " +
	"Is the connection behind a transaction-mode pooler (PgBouncer pool_mode = transaction)? " +
	"Give the listener a direct or session-mode connection with postgres.Config.ListenDSN. " +
	"Polling meanwhile: other processes' commits and releases are seen late and cost queries"

// pollWhileDeaf polls l's sink every Config.DeafPollInterval while l is
// deaf, until ctx ends.
func (s *Store) pollWhileDeaf(ctx context.Context, l *listener) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.turned:
		}
		t := time.NewTicker(s.deafPoll)
		for l.isDeaf() {
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
				l.poll()
			}
		}
		t.Stop()
	}
}

func (l *listener) isDeaf() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deaf
}

// listenHealth is what a Store's listeners found (ListenHealth).
type listenHealth struct {
	mu     sync.Mutex
	checks store.ListenHealth // the counts and LastHeard; the rest is computed from since
	// since has a key per running listener: since when it has not heard
	// (it connects, checks, is deaf or reconnects), or zero while it hears.
	since map[*listener]time.Time
}

// track records that l runs, not hearing yet.
func (h *listenHealth) track(l *listener) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.since == nil {
		h.since = map[*listener]time.Time{}
	}
	h.since[l] = time.Now()
}

// untrack records that l no longer runs.
func (h *listenHealth) untrack(l *listener) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.since, l)
}

// hearing records that l's self-check just heard (true), or that l's
// connection ended (false): it hears no more from now, unless it had
// not heard already.
func (h *listenHealth) hearing(l *listener, heard bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	since, ok := h.since[l]
	switch {
	case !ok:
	case heard:
		h.since[l] = time.Time{}
		h.checks.LastHeard = time.Now()
	case since.IsZero():
		h.since[l] = time.Now()
	}
}

// ListenHealth reports what the self-checks of this Store's listeners
// found (store.ListenChecker): how many run, hear and are deaf now, since
// when one has not heard, when a check last heard, and how many checks
// heard nothing since the Store was made.
func (s *Store) ListenHealth() store.ListenHealth {
	h := &s.health
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.checks
	out.Watches = len(h.since)
	for _, since := range h.since {
		switch {
		case since.IsZero():
			out.Hearing++
		case out.NotHearingSince.IsZero() || since.Before(out.NotHearingSince):
			out.NotHearingSince = since
		}
	}
	return out
}
