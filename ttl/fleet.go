package ttl

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/seqlease/seqlease/internal/lifecycle"
	"github.com/seqlease/seqlease/store"
)

// Defaults of FleetConfig.
const (
	DefaultPoll         = time.Second
	DefaultQueryTimeout = 5 * time.Second
	// MaxPoll bounds FleetConfig.Poll.
	MaxPoll = time.Hour
)

// FleetStore is what a Fleet needs of a backend (store/memory,
// store/postgres): the settings table, and the database clock, on which a
// boost's end is written.
type FleetStore interface {
	store.Settings
	Now(ctx context.Context) (time.Time, error)
}

// FleetConfig configures a Fleet. A nil *FleetConfig, like the zero value
// of each field, means the defaults.
type FleetConfig struct {
	// Poll is how often the running Fleet re-reads the boost, besides the
	// notices of SettingsChanged, in [0, MaxPoll]. Default: DefaultPoll
	// (1 s).
	Poll time.Duration
	// QueryTimeout bounds each read and write of the table. Default:
	// DefaultQueryTimeout (5 s).
	QueryTimeout time.Duration
	// Logger receives the Fleet's warnings. Default: discard.
	Logger *slog.Logger
}

// Fleet is the TTL boost a fleet shares through the settings table
// (store.SettingTTLBoost). Raise sets it; Factor reports it, from a cache
// that Refresh, SettingsChanged and the running Fleet's poll keep up to
// date. It is a Booster for Policy.Boost, and a store.SettingsSink. It is
// safe for concurrent use.
type Fleet struct {
	store    FleetStore
	poll     time.Duration
	qTimeout time.Duration
	logger   *slog.Logger
	life     *lifecycle.Life
	wake     chan struct{}

	mu     sync.Mutex
	factor float64   // the boost known, 1 for none
	end    time.Time // its end on the local clock
	raises uint64    // Raises so far: a read begun before one is stale
}

// NewFleet returns a Fleet on s, not started: Factor reports 1 until a
// Refresh, a Raise or Start reads the table. Bad configuration is refused
// with an error naming the field that matches store.ErrInvalidArgument.
func NewFleet(s FleetStore, cfg *FleetConfig) (*Fleet, error) {
	cfg = cmp.Or(cfg, &FleetConfig{})
	switch {
	case cfg.Poll < 0 || cfg.Poll > MaxPoll:
		return nil, fmt.Errorf("ttl: FleetConfig.Poll %v must be in [0, %v]: %w", cfg.Poll, MaxPoll, store.ErrInvalidArgument)
	case cfg.QueryTimeout < 0:
		return nil, fmt.Errorf("ttl: FleetConfig.QueryTimeout %v is negative: %w", cfg.QueryTimeout, store.ErrInvalidArgument)
	}
	return &Fleet{
		store:    s,
		poll:     cmp.Or(cfg.Poll, DefaultPoll),
		qTimeout: cmp.Or(cfg.QueryTimeout, DefaultQueryTimeout),
		logger:   cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)),
		life:     lifecycle.New(errStopped),
		wake:     make(chan struct{}, 1),
		factor:   1,
	}, nil
}

// Factor reports the boost in force: its factor until its end, then 1.
func (f *Fleet) Factor() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.factor > 1 && time.Now().Before(f.end) {
		return f.factor
	}
	return 1
}

// Refresh reads the boost from the table now.
func (f *Fleet) Refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, f.qTimeout)
	defer cancel()
	f.mu.Lock()
	raises := f.raises
	f.mu.Unlock()
	factor, until, dbNow, err := f.read(ctx)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.raises == raises { // else a Raise cached a newer boost meanwhile
		f.setLocked(factor, until, dbNow)
	}
	return nil
}

// read returns the boost in the table (factor 1 for none) and the
// database's clock.
func (f *Fleet) read(ctx context.Context) (factor float64, until, dbNow time.Time, err error) {
	rows, err := f.store.ListSettings(ctx)
	if err != nil {
		return 0, time.Time{}, time.Time{}, fmt.Errorf("ttl: read the boost: %w", err)
	}
	if dbNow, err = f.store.Now(ctx); err != nil {
		return 0, time.Time{}, time.Time{}, fmt.Errorf("ttl: read the database clock: %w", err)
	}
	for _, r := range rows {
		if r.Key != store.SettingTTLBoost {
			continue
		}
		if factor, until, err = store.ParseTTLBoost(r.Value); err != nil {
			f.logger.Error("ttl: the boost in the table is refused; no boost", slog.Any("error", err))
			return 1, time.Time{}, dbNow, nil
		}
		return factor, until, dbNow, nil
	}
	return 1, time.Time{}, dbNow, nil
}

// setLocked caches a boost that ends at until on the database clock, whose
// time is now dbNow. f.mu is held.
func (f *Fleet) setLocked(factor float64, until, dbNow time.Time) {
	f.factor, f.end = factor, time.Now().Add(until.Sub(dbNow))
}

// Raise boosts the fleet's TTLs by factor (in 1..store.MaxTTLBoostFactor)
// for hold from now on the database clock, and returns the boost now in
// force. A boost in force that is larger or lasts longer is not cut: the
// result has the larger factor and the later end. Two processes raising at
// once may each write theirs; the later write wins, and both are alike.
func (f *Fleet) Raise(ctx context.Context, factor float64, hold time.Duration) error {
	if !(factor >= 1 && factor <= store.MaxTTLBoostFactor) || hold <= 0 || hold > store.MaxTTL {
		return fmt.Errorf("ttl: raise by %v for %v: factor must be in 1..%v, hold in (0, %v]: %w",
			factor, hold, store.MaxTTLBoostFactor, store.MaxTTL, store.ErrInvalidArgument)
	}
	ctx, cancel := context.WithTimeout(ctx, f.qTimeout)
	defer cancel()
	cur, curUntil, dbNow, err := f.read(ctx)
	if err != nil {
		return err
	}
	until := dbNow.Add(hold)
	if curUntil.After(dbNow) {
		factor, until = max(factor, cur), later(until, curUntil)
	}
	if _, err := f.store.SetSetting(ctx, store.SettingTTLBoost, store.FormatTTLBoost(factor, until),
		&store.SetSettingParams{By: "cascade"}); err != nil {
		return fmt.Errorf("ttl: raise the boost: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.raises++
	f.setLocked(factor, until, dbNow)
	return nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// SettingsChanged implements store.SettingsSink: a running Fleet re-reads
// the boost. It never blocks.
func (f *Fleet) SettingsChanged() {
	select {
	case f.wake <- struct{}{}:
	default: // a re-read is due already
	}
}

// Start reads the boost and, once it is read, runs the loop that keeps it
// up to date (every Poll, and on SettingsChanged) until Stop or ctx ends.
// A failed first read is returned, and the Fleet does not run.
func (f *Fleet) Start(ctx context.Context) error {
	return f.life.Start(ctx, func(ctx context.Context) error {
		if err := f.Refresh(ctx); err != nil {
			return err
		}
		f.life.Go(f.run)
		return nil
	})
}

// Stop ends the loop and waits for it. It is safe before Start and twice.
func (f *Fleet) Stop() { f.life.Stop() }

// run re-reads the boost every poll and on every notice.
func (f *Fleet) run(ctx context.Context) {
	t := time.NewTicker(f.poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-f.wake:
		}
		if err := f.Refresh(ctx); err != nil && ctx.Err() == nil {
			f.logger.Warn("ttl: reading the boost failed; the one known stays until its end", slog.Any("error", err))
		}
	}
}
