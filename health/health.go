package health

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/store"
)

// Pinger proves that the database is reachable and takes writes, changing
// nothing: store/postgres and store/memory.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Cleaner tells whether a cleanup loop runs and when its last full pass
// ended: a *cleanup.Service.
type Cleaner interface {
	Status() cleanup.Status
}

// StreamSource lists the streams and describes each (its watermark and
// its oldest unresolved entry), with the backend's clock: store/postgres
// and store/memory.
type StreamSource interface {
	Streams(ctx context.Context, after string, limit int) ([]string, error)
	Stats(ctx context.Context, stream string) (store.StreamStats, error)
	Now(ctx context.Context) (time.Time, error)
}

// CheckpointSource lists the readers' checkpoints with their streams'
// watermarks, with the backend's clock: store/postgres and store/memory.
type CheckpointSource interface {
	ListCheckpoints(ctx context.Context, p *store.ListCheckpointsParams) ([]store.Checkpoint, error)
	Now(ctx context.Context) (time.Time, error)
}

// Defaults of Config.
const (
	DefaultTimeout        = 2 * time.Second
	DefaultListenGrace    = 15 * time.Second
	DefaultMaxStall       = 5 * time.Minute
	DefaultMaxReaderStall = 5 * time.Minute
	DefaultMaxStreams     = 100
	DefaultMaxCheckpoints = 100
	// DefaultCleanupStaleIntervals is how many cleanup intervals may pass
	// without a full pass before the cleanup check fails, by default, but
	// never less than DefaultCleanupStaleMin.
	DefaultCleanupStaleIntervals = 3
	// DefaultCleanupStaleMin is the shortest default of CleanupStale: a
	// full pass may outlast three short intervals (a mass expiry, slow
	// trackers) while the loop works.
	DefaultCleanupStaleMin = 30 * time.Second
	// MaxItems bounds Config.MaxStreams and Config.MaxCheckpoints: a
	// report is read at every probe.
	MaxItems = store.MaxListLimit
)

// Config configures a Checker. Each check runs only when its source is
// set (Database, Listen, History, Cleanup, Streams, Checkpoints); at least one must
// be. The zero value of every other field means its default.
type Config struct {
	// Database is checked to be reachable and writable ("database"):
	// a *postgres.Store or *memory.Store. Optional.
	Database Pinger
	// Listen is checked to hear the other processes ("listen"): a
	// *postgres.Store whose watches (a started barrier, a lease Manager)
	// run in this process. Optional.
	Listen store.ListenChecker
	// ListenGrace is how long a watch may go without hearing (connecting,
	// checking, reconnecting) before the check fails; a watch whose
	// self-check heard nothing (deaf) fails it at once. Default:
	// DefaultListenGrace (15 s).
	ListenGrace time.Duration
	// History is checked for streams and named leases refused because the
	// database went back on history it had shown ("history"): a
	// *postgres.Store, after an asynchronous failover. Optional.
	History store.HistoryChecker
	// Cleanup is checked to run and to finish full passes ("cleanup"): a
	// *cleanup.Service. Optional.
	Cleanup Cleaner
	// CleanupStale is the longest time without a full cleanup pass (since
	// the last one, or since Start) before the check fails. Default:
	// DefaultCleanupStaleIntervals times the loop's Interval, at least
	// DefaultCleanupStaleMin (30 s with the cleanup default of 5 s).
	CleanupStale time.Duration
	// Streams is the store whose streams' watermarks are checked, one
	// result per stream ("stream"). Optional.
	Streams StreamSource
	// StreamNames are the streams to check. Default: every stream
	// Streams lists, in name order, up to MaxStreams (a "streams" result
	// says when there are more).
	StreamNames []string
	// MaxStreams bounds the streams listed when StreamNames is empty, at
	// most MaxItems: each costs a query per check on PostgreSQL.
	// Default: DefaultMaxStreams (100).
	MaxStreams int
	// MaxLag fails a stream whose numbers handed out beyond its watermark
	// (the last number minus the watermark: leased or resolved out of
	// order, waiting for the numbers below) are more than MaxLag.
	// Default: 0, no count check.
	MaxLag int64
	// MaxStall fails a stream whose oldest unresolved entry, the one that
	// holds its watermark, was leased longer ago than MaxStall by the
	// backend's clock. Default: DefaultMaxStall (5 min); negative: no
	// stall check.
	MaxStall time.Duration
	// Checkpoints is the store whose readers' checkpoints are checked
	// against their streams' watermarks, one result per reader and stream
	// ("reader"). Optional.
	Checkpoints CheckpointSource
	// Readers are the readers to check. Default: every checkpoint
	// Checkpoints lists, in (reader, stream) order, up to MaxCheckpoints
	// (a "readers" result says when there are more).
	Readers []string
	// MaxCheckpoints bounds the checkpoints listed (in all, whether
	// Readers is set or not), at most MaxItems. Default:
	// DefaultMaxCheckpoints (100).
	MaxCheckpoints int
	// MaxReaderLag fails a reader whose checkpoint is more than
	// MaxReaderLag numbers behind its stream's watermark. Default: 0, no
	// count check.
	MaxReaderLag int64
	// MaxReaderStall fails a reader that is behind its stream's watermark
	// and saved no checkpoint for longer than MaxReaderStall, by the
	// backend's clock. Default: DefaultMaxReaderStall (5 min); negative:
	// no stall check.
	MaxReaderStall time.Duration
	// Timeout bounds each check; a check that times out fails. The checks
	// run side by side, so Check returns within about one Timeout.
	// Default: DefaultTimeout (2 s).
	Timeout time.Duration
	// Now is the process's clock, for the ages of the cleanup passes and
	// of the listeners' states. Default: time.Now.
	Now func() time.Time
}

// Checker runs the checks of its Config. It is an http.Handler, and safe
// for concurrent use.
type Checker struct {
	cfg Config // defaults filled in; StreamNames and Readers sorted, without repeats
}

// New returns a Checker of cfg, or an error matching
// store.ErrInvalidArgument that names the field at fault.
func New(cfg *Config) (*Checker, error) {
	if cfg == nil || (cfg.Database == nil && cfg.Listen == nil && cfg.History == nil && cfg.Cleanup == nil &&
		cfg.Streams == nil && cfg.Checkpoints == nil) {
		return nil, fmt.Errorf("health: Config checks nothing: set Database, Listen, History, Cleanup, Streams or Checkpoints: %w",
			store.ErrInvalidArgument)
	}
	c := *cfg
	for _, f := range []struct {
		name string
		bad  bool
		v    any
	}{
		{"Timeout", c.Timeout < 0, c.Timeout},
		{"ListenGrace", c.ListenGrace < 0, c.ListenGrace},
		{"CleanupStale", c.CleanupStale < 0, c.CleanupStale},
		{"MaxLag", c.MaxLag < 0, c.MaxLag},
		{"MaxReaderLag", c.MaxReaderLag < 0, c.MaxReaderLag},
		{"MaxStreams", c.MaxStreams < 0 || c.MaxStreams > MaxItems, c.MaxStreams},
		{"MaxCheckpoints", c.MaxCheckpoints < 0 || c.MaxCheckpoints > MaxItems, c.MaxCheckpoints},
	} {
		if f.bad {
			return nil, fmt.Errorf("health: Config.%s %v is out of range (negative, or a count above %d): %w",
				f.name, f.v, MaxItems, store.ErrInvalidArgument)
		}
	}
	for i, s := range c.StreamNames {
		if err := store.ValidateStream(s); err != nil {
			return nil, fmt.Errorf("health: Config.StreamNames[%d]: %w", i, err)
		}
	}
	for i, r := range c.Readers {
		if err := store.ValidateReader(r); err != nil {
			return nil, fmt.Errorf("health: Config.Readers[%d]: %w", i, err)
		}
	}
	c.StreamNames = slices.Compact(slices.Sorted(slices.Values(c.StreamNames)))
	c.Readers = slices.Compact(slices.Sorted(slices.Values(c.Readers)))
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.ListenGrace == 0 {
		c.ListenGrace = DefaultListenGrace
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = DefaultMaxStreams
	}
	if c.MaxCheckpoints == 0 {
		c.MaxCheckpoints = DefaultMaxCheckpoints
	}
	if c.MaxStall == 0 {
		c.MaxStall = DefaultMaxStall
	}
	if c.MaxReaderStall == 0 {
		c.MaxReaderStall = DefaultMaxReaderStall
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return &Checker{cfg: c}, nil
}

// Names of the checks, in Component.Check.
const (
	CheckDatabase = "database" // Config.Database: reachable and writable
	CheckListen   = "listen"   // Config.Listen: the watches hear
	CheckHistory  = "history"  // Config.History: nothing refused for lost history
	CheckCleanup  = "cleanup"  // Config.Cleanup: the loop runs and passes
	CheckStreams  = "streams"  // Config.Streams: the listing itself (failed, cut short)
	CheckStream   = "stream"   // Config.Streams: one stream's watermark
	CheckReader   = "reader"   // Config.Checkpoints: one reader's checkpoint
	CheckReaders  = "readers"  // Config.Checkpoints: the listing itself (failed, cut short)
)

// Report is what one Check found. It encodes to JSON with snake_case
// names.
type Report struct {
	// Healthy is true when every component is.
	Healthy bool `json:"healthy"`
	// CheckedAt is when the checks began (Config.Now), and Duration how
	// long they took.
	CheckedAt time.Time     `json:"checked_at"`
	Duration  time.Duration `json:"-"`
	// DurationSeconds is Duration in seconds, for the JSON.
	DurationSeconds float64 `json:"duration_seconds"`
	// Components are the results: database, listen, history, cleanup, then the
	// streams in name order, then the readers in (reader, stream) order.
	Components []Component `json:"components"`
}

// Component is the result of one check, or of one stream or reader.
type Component struct {
	// Check names the check: CheckDatabase, CheckListen, ...
	Check string `json:"check"`
	// Stream and Reader name what a CheckStream or CheckReader result is
	// about.
	Stream string `json:"stream,omitempty"`
	Reader string `json:"reader,omitempty"`
	// Healthy is the verdict, and Message says why, with the figures.
	Healthy bool   `json:"healthy"`
	Message string `json:"message"`
	// Observed holds the figures the verdict rests on and the thresholds
	// it applied, by snake_case name: counts and numbers are int64,
	// durations float64 seconds (names ending in _seconds).
	Observed map[string]any `json:"observed,omitempty"`
}

// Check runs every configured check, side by side, each bounded by
// Config.Timeout, and returns what they found once all have returned. A
// source that ignores its context holds the report until it returns.
func (c *Checker) Check(ctx context.Context) Report {
	began := c.cfg.Now()
	start := time.Now()
	type run struct {
		enabled bool
		fn      func(context.Context) []Component
		out     []Component
	}
	runs := []*run{
		{enabled: c.cfg.Database != nil, fn: c.database},
		{enabled: c.cfg.Listen != nil, fn: c.listen},
		{enabled: c.cfg.History != nil, fn: c.history},
		{enabled: c.cfg.Cleanup != nil, fn: c.cleanup},
		{enabled: c.cfg.Streams != nil, fn: c.streams},
		{enabled: c.cfg.Checkpoints != nil, fn: c.readers},
	}
	var wg sync.WaitGroup
	for _, r := range runs {
		if r.enabled {
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
				defer cancel()
				r.out = r.fn(cctx)
			})
		}
	}
	wg.Wait()
	rep := Report{Healthy: true, CheckedAt: began, Components: []Component{}}
	for _, r := range runs {
		for _, comp := range r.out {
			rep.Healthy = rep.Healthy && comp.Healthy
			rep.Components = append(rep.Components, comp)
		}
	}
	rep.Duration = time.Since(start)
	rep.DurationSeconds = rep.Duration.Seconds()
	return rep
}

// ServeHTTP answers GET and HEAD with the report: status 200 when healthy,
// 503 when not, and the report as a JSON body (none for HEAD). Other
// methods get 405. The checks run under the request's context.
func (c *Checker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "health: method not allowed: use GET or HEAD", http.StatusMethodNotAllowed)
		return
	}
	rep := c.Check(r.Context())
	body, err := json.MarshalIndent(rep, "", "  ")
	if err != nil { // a Component's Observed holds only numbers
		http.Error(w, "health: encode the report: "+err.Error(), http.StatusInternalServerError)
		return
	}
	body = append(body, '\n')
	status := http.StatusOK
	if !rep.Healthy {
		status = http.StatusServiceUnavailable
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}
