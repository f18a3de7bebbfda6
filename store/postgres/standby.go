package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/seqlease/seqlease/migrations"
	"github.com/seqlease/seqlease/store"
)

// Defaults of StandbyConfig.
const (
	DefaultStandbyPollInterval = time.Second
	DefaultReplayPollInterval  = 10 * time.Millisecond
)

const (
	// replayWaitMax bounds the wait of a notice for the standby's replay:
	// a standby that does not replay that far within it leaves the
	// notice's numbers to the poll.
	replayWaitMax = 30 * time.Second
	// maxHeard bounds the notice records waiting for the replay; beyond
	// it they are dropped and the sink is reset once the replay passes.
	maxHeard = 10_000
	// listenerStandby names the listener of a Standby's Watch, in logs.
	listenerStandby = "standby wake-ups"
)

// StandbyConfig configures a Standby. A nil *StandbyConfig means the
// defaults; so does the zero value of each field.
type StandbyConfig struct {
	// Schema holds the tables, as on the primary. Default:
	// migrations.DefaultSchema ("seqlease"); it must be Primary's schema
	// when Primary is set.
	Schema string
	// Logger receives diagnostics. Default: discard.
	Logger *slog.Logger
	// AcquireTimeout bounds each wait for a connection of a
	// *pgxpool.Pool, as Config.AcquireTimeout does. Default:
	// DefaultAcquireTimeout (5 s).
	AcquireTimeout time.Duration
	// Primary is the Store on the primary: on a pool (or with
	// Config.ListenDSN), not in a transaction.
	// Checkpoint reads and writes go to it: SaveCheckpoint and
	// DeleteCheckpoint, and Checkpoint, so that a reader starts after
	// the position it last saved even when the standby has not replayed
	// that save yet. Watch also LISTENs on it (one connection, dialled
	// as Primary's own Watch does) to wake followers as soon as the
	// standby has replayed what the primary noticed. Default: none;
	// checkpoint writes fail with store.ErrReadOnly, checkpoints are
	// read from the standby, and followers wake on the poll alone.
	Primary *Store
	// PollInterval is how often Watch has the sink re-read the standby
	// (its Reset, or store.Poller's Poll): it bounds how late a follower
	// hears of what the standby replayed when no notice tells it.
	// Default: DefaultStandbyPollInterval (1 s).
	PollInterval time.Duration
	// ReplayPollInterval is how often, after a notice from Primary, Watch
	// asks the standby whether it has replayed that far. Default:
	// DefaultReplayPollInterval (10 ms).
	ReplayPollInterval time.Duration
}

// Standby reads a seqlease schema on a hot standby (a streaming replica
// in recovery) and never writes to it: it is a barrier.Source, so a
// barrier over it serves ordered readers (barrier.Entries, replays and
// followers) from the standby, and it keeps checkpoints through
// StandbyConfig.Primary. Its reads see the primary's resolved entries as
// far as the standby has replayed them. It is safe for concurrent use.
type Standby struct {
	s          *Store // on the standby's DB: reads only
	primary    *Store
	poll       time.Duration
	replayPoll time.Duration
	logger     *slog.Logger
}

// NewStandby returns a Standby that reads through db, a pool of
// connections to a hot standby. It validates cfg but does not touch the
// database. Bad config fails with an error matching
// store.ErrInvalidArgument.
func NewStandby(db DB, cfg *StandbyConfig) (*Standby, error) {
	if cfg == nil {
		cfg = &StandbyConfig{}
	}
	schema := cmp.Or(cfg.Schema, migrations.DefaultSchema)
	switch {
	case cfg.PollInterval < 0:
		return nil, fmt.Errorf("postgres: StandbyConfig.PollInterval %v is negative: %w", cfg.PollInterval, store.ErrInvalidArgument)
	case cfg.ReplayPollInterval < 0:
		return nil, fmt.Errorf("postgres: StandbyConfig.ReplayPollInterval %v is negative: %w", cfg.ReplayPollInterval, store.ErrInvalidArgument)
	case cfg.Primary != nil && cfg.Primary.notes.inTx():
		return nil, fmt.Errorf("postgres: StandbyConfig.Primary is a Store in a transaction; give the Store on the primary's pool: %w", store.ErrInvalidArgument)
	case cfg.Primary != nil && cfg.Primary.channel != schema:
		return nil, fmt.Errorf("postgres: StandbyConfig.Schema %s is not Primary's schema %s: %w",
			store.QuoteInput(schema), store.QuoteInput(cfg.Primary.channel), store.ErrInvalidArgument)
	}
	if cfg.Primary != nil {
		if _, err := cfg.Primary.connector("standby"); err != nil {
			return nil, fmt.Errorf("postgres: StandbyConfig.Primary cannot listen: %w: %w", store.ErrInvalidArgument, err)
		}
	}
	logger := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	// New's logger only warns of a pool smaller than what writers need,
	// which a Standby does not need.
	s, err := New(db, &Config{Schema: schema, AcquireTimeout: cfg.AcquireTimeout})
	if err != nil {
		return nil, fmt.Errorf("postgres: standby: %w", err)
	}
	s.logger = logger
	// A standby is behind its primary, and a Standby behind a balancer of
	// several is behind by different amounts from one read to the next:
	// its reads would look like lost history. Writes, which alone refuse,
	// go to the primary's Store, which tracks its own.
	s.tracks = false
	return &Standby{s: s, primary: cfg.Primary, logger: logger,
		poll:       cmp.Or(cfg.PollInterval, DefaultStandbyPollInterval),
		replayPoll: cmp.Or(cfg.ReplayPollInterval, DefaultReplayPollInterval)}, nil
}

// Snapshot returns the barrier's starting point for stream as replayed on
// the standby (see Store.Snapshot).
func (sb *Standby) Snapshot(ctx context.Context, stream string, limit int) (store.Snapshot, error) {
	return sb.s.Snapshot(ctx, stream, limit)
}

// ReadResolved returns resolved entries after a number up to the
// watermark as replayed on the standby (see Store.ReadResolved).
func (sb *Standby) ReadResolved(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error) {
	return sb.s.ReadResolved(ctx, stream, after, limit)
}

// Read returns entries of stream after a number, resolved or not, as
// replayed on the standby (see Store.Read).
func (sb *Standby) Read(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error) {
	return sb.s.Read(ctx, stream, after, limit)
}

// Stats describes stream as replayed on the standby (see Store.Stats).
func (sb *Standby) Stats(ctx context.Context, stream string) (store.StreamStats, error) {
	return sb.s.Stats(ctx, stream)
}

// Streams lists the streams as replayed on the standby (see
// Store.Streams).
func (sb *Standby) Streams(ctx context.Context, after string, limit int) ([]string, error) {
	return sb.s.Streams(ctx, after, limit)
}

// Checkpoint returns the position reader saved for stream, 0 if none:
// read on StandbyConfig.Primary when set, else on the standby (where a
// save made moments ago may not be replayed yet).
func (sb *Standby) Checkpoint(ctx context.Context, reader, stream string) (int64, error) {
	if sb.primary != nil {
		return sb.primary.Checkpoint(ctx, reader, stream)
	}
	return sb.s.Checkpoint(ctx, reader, stream)
}

// SaveCheckpoint saves reader's position in stream on
// StandbyConfig.Primary (see Store.SaveCheckpoint). Without a Primary it
// fails with store.ErrReadOnly, having sent nothing.
func (sb *Standby) SaveCheckpoint(ctx context.Context, reader, stream string, position int64, p *store.SaveCheckpointParams) error {
	if err := store.ValidateSaveCheckpoint(reader, stream, position); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	if sb.primary == nil {
		return sb.readOnly("save checkpoint")
	}
	return sb.primary.SaveCheckpoint(ctx, reader, stream, position, p)
}

// DeleteCheckpoint deletes reader's checkpoint of stream on
// StandbyConfig.Primary (see Store.DeleteCheckpoint). Without a Primary
// it fails with store.ErrReadOnly, having sent nothing.
func (sb *Standby) DeleteCheckpoint(ctx context.Context, reader, stream string) error {
	if err := store.ValidateCheckpointKey(reader, stream); err != nil {
		return fmt.Errorf("delete checkpoint: %w", err)
	}
	if sb.primary == nil {
		return sb.readOnly("delete checkpoint")
	}
	return sb.primary.DeleteCheckpoint(ctx, reader, stream)
}

func (sb *Standby) readOnly(op string) error {
	return fmt.Errorf("%s: %w (a postgres.Standby without StandbyConfig.Primary)", op, store.ErrReadOnly)
}

// Watch reports to sink, until ctx ends, what the standby replays: it
// resets sink at the start and polls it every StandbyConfig.PollInterval
// (store.Poller's Poll, else Reset), so that the receiver re-reads the
// standby. With StandbyConfig.Primary it also listens on the primary and
// delivers each notice it hears once the standby has replayed as far as
// the primary was when it heard it (see Reading from a hot standby in
// standby.go). It sends no LISTEN, NOTIFY or write to the standby.
func (sb *Standby) Watch(ctx context.Context, sink store.Sink) error {
	poll := sink.Reset
	if p, ok := sink.(store.Poller); ok {
		poll = p.Poll
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if sb.primary != nil {
		c := &catchUp{sb: sb, sink: sink, wake: make(chan struct{}, 1)}
		l, err := sb.primary.listener("standby watch", listenerStandby, sink, c.heard)
		if err != nil {
			return err
		}
		wg.Go(func() { c.run(ctx) })
		wg.Go(func() { _ = l.run(ctx) })
	}
	sink.Reset()
	t := time.NewTicker(sb.poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			poll()
		}
	}
}

// catchUp holds the notices heard from the primary until the standby has
// replayed what they report.
type catchUp struct {
	sb   *Standby
	sink store.Sink
	wake chan struct{} // capacity 1: something was heard

	mu       sync.Mutex
	records  []notice
	overflow bool // records were dropped: reset the sink instead
}

// heard takes a notice's payload from the primary's listener; it does not
// block.
func (c *catchUp) heard(payload string) {
	_, records, ok := parsePayload(payload)
	if !ok {
		return
	}
	c.mu.Lock()
	if len(c.records)+len(records) > maxHeard {
		c.records, c.overflow = nil, true
	} else {
		c.records = append(c.records, records...)
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// take returns what was heard since the last take.
func (c *catchUp) take() ([]notice, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	records, overflow := c.records, c.overflow
	c.records, c.overflow = nil, false
	return records, overflow
}

// run delivers what is heard once the standby has replayed it, until ctx
// ends.
func (c *catchUp) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		}
		records, overflow := c.take()
		if len(records) == 0 && !overflow {
			continue
		}
		if !c.sb.awaitReplay(ctx) {
			continue // the poll covers them
		}
		if overflow {
			c.sink.Reset()
			continue
		}
		for _, nt := range records {
			nt.deliver(c.sink)
		}
	}
}

// awaitReplay reads the primary's WAL position and reports whether the
// standby replayed up to it (or is no longer in recovery) within
// replayWaitMax. Errors are logged at debug level: the poll covers what
// is not delivered.
func (sb *Standby) awaitReplay(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, replayWaitMax)
	defer cancel()
	var target string
	if err := sb.primary.db.QueryRow(ctx, standbyPrimaryLSN).Scan(&target); err != nil {
		sb.debug(ctx, "postgres: standby: the primary's WAL position not read", err)
		return false
	}
	t := time.NewTicker(sb.replayPoll)
	defer t.Stop()
	for {
		var replayed bool
		err := sb.s.db.QueryRow(ctx, standbyReplayed, target).Scan(&replayed)
		switch {
		case err != nil:
			sb.debug(ctx, "postgres: standby: the replay position not read", err)
			return false
		case replayed:
			return true
		}
		select {
		case <-ctx.Done():
			sb.debug(ctx, "postgres: standby: did not replay a notice's commits in time", ctx.Err())
			return false
		case <-t.C:
		}
	}
}

func (sb *Standby) debug(ctx context.Context, msg string, err error) {
	if !errors.Is(context.Cause(ctx), context.Canceled) {
		sb.logger.DebugContext(ctx, msg, slog.Any("error", err))
	}
}

// The statements of a Standby's catch-up: the primary's WAL position (a
// server in recovery fails it: it did not send the notice), and whether
// the standby replayed up to $1 or is no longer in recovery (promoted: it
// has all it will ever have).
const (
	standbyPrimaryLSN = `SELECT pg_current_wal_lsn()::text`
	standbyReplayed   = `SELECT NOT pg_is_in_recovery() OR COALESCE(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)`
)
