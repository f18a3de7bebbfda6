package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqlease/seqlease/store"
)

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

// ListenDeafMessage is the message of the ERROR a listener logs when its
// self-check heard nothing.
const ListenDeafMessage = "postgres: LISTEN hears nothing: its self-check notice did not come back. " +
	"Is the connection behind a transaction-mode pooler (PgBouncer pool_mode = transaction)? " +
	"Give the listener a direct or session-mode connection with postgres.Config.ListenDSN. " +
	"Polling meanwhile: other processes' commits and releases are seen late and cost queries"

// resetter is a watch's sink: a store.Sink or a store.LeaseSink, perhaps
// a store.Poller.
type resetter interface{ Reset() }

// listener returns the LISTEN loop, on the schema's channel, of the watch
// op (in errors) named name (in logs): it passes the payloads it hears to
// deliver, and resets sink, or polls it while deaf (store.Poller's Poll,
// else Reset).
func (s *Store) listener(op, name string, sink resetter, deliver func(payload string)) (*listener, error) {
	connect, err := s.connector(op)
	if err != nil {
		return nil, err
	}
	l := &listener{name: name, channel: s.channel, connect: connect, db: s.db, deliver: deliver,
		reset: sink.Reset, poll: sink.Reset, checkTimeout: s.checkTimeout, pollEvery: s.deafPoll,
		recheckEvery: s.recheckEvery, logger: s.logger, health: &s.health, turned: make(chan struct{}, 1)}
	if p, ok := sink.(store.Poller); ok {
		l.poll = p.Poll
	}
	return l, nil
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

// ListenHealth reports what the self-checks of this Store's listeners
// found (store.ListenChecker): how many run, hear and are deaf now, since
// when one has not heard, when a check last heard, and how many checks
// heard nothing since the Store was made.
func (s *Store) ListenHealth() store.ListenHealth { return s.health.report() }
