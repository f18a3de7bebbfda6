package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqlease/seqlease/audit"
	"github.com/seqlease/seqlease/migrations"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// errFlag wraps an error of the flag package, which has printed it: exit
// code 2.
var errFlag = errors.New("bad flag")

// usageError is a mistake on the command line: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// cli is one invocation.
type cli struct {
	dsn, schema string
	json        bool
	out, errOut io.Writer
	pool        *pgxpool.Pool
	store       *postgres.Store
}

const usage = `usage: seqlease [-dsn URL] [-schema NAME] [-json] COMMAND [ARGS]

commands:
  migrate up|down|status   apply, roll back (-steps N) or list the schema migrations
  streams                  every stream: next number, watermark, in flight, expired, open gaps
                           (and of them those whose work was recovered under a new number:
                           the others lost theirs), oldest unresolved; EXPIRED and RECOVERED
                           count up to 10000 (10000+: more; -json: the _capped fields)
  inspect STREAM           entries with their states (-from N, -limit K)
  gaps STREAM              open gaps with reasons (-limit K)
  trim STREAM BELOW        remove resolved entries below BELOW (never unresolved ones)
  watch STREAM             the watermark and the lag, live (-interval D, -count N)
  audit STREAM             check the ledger against I1, I2, I4 and I6 (-ordered, -max-unresolved D);
                           exit 1 on a violation
  leases                   live named leases: holder, fence, expiry (-owner O, -held-for D)
  force-release OWNER      end every named lease OWNER holds (a crashed agent's)
  inbox [CONSUMER]         count the inbox records (of CONSUMER, else of every consumer); with
                           -purge-older-than D first delete those received more than D ago by the
                           database's clock, in batches of -batch N (default 1000)
  hooks                    durable hooks of the cleanup loop not yet delivered: pending, failing
                           (at least one failed delivery), age of the oldest
  readers                  every reader's checkpoint: stream, checkpoint, watermark, lag
                           (-reader R, -stream S)
  delete-checkpoint -reader R -stream S
                           remove a reader's checkpoint: it starts again from the beginning
                           (or from the position it saves next)

The connection comes from -dsn, else DATABASE_URL, else the PG* environment variables.
`

// run runs the command line args and returns the exit code.
func run(ctx context.Context, args []string, out, errOut io.Writer) int {
	c := &cli{out: out, errOut: errOut}
	err := c.run(ctx, args)
	if c.pool != nil {
		c.pool.Close()
	}
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(errOut, "seqlease: %v\n\n%s", err, usage)
		return 2
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errFlag):
		return 2 // the flag package printed the error and the usage
	}
	fmt.Fprintf(errOut, "seqlease: %v\n", err)
	return 1
}

// flags returns a flag set with the global flags, which may come before or
// after the command.
func (c *cli) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.errOut)
	fs.Usage = func() { fmt.Fprint(c.errOut, usage) }
	if c.schema == "" {
		c.schema = migrations.DefaultSchema
	}
	fs.StringVar(&c.dsn, "dsn", c.dsn, "PostgreSQL URL (default: DATABASE_URL, else the PG* variables)")
	fs.StringVar(&c.schema, "schema", c.schema, "seqlease schema")
	fs.BoolVar(&c.json, "json", c.json, "print JSON")
	return fs
}

func (c *cli) run(ctx context.Context, args []string) error {
	global := c.flags("seqlease")
	if err := parse(global, args); err != nil {
		return err
	}
	args = global.Args()
	if len(args) == 0 {
		return usagef("no command")
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "migrate":
		return c.migrate(ctx, args)
	case "streams":
		return c.streams(ctx, args)
	case "inspect":
		return c.inspect(ctx, args)
	case "gaps":
		return c.gaps(ctx, args)
	case "trim":
		return c.trim(ctx, args)
	case "watch":
		return c.watch(ctx, args)
	case "audit":
		return c.audit(ctx, args)
	case "leases":
		return c.leases(ctx, args)
	case "force-release":
		return c.forceRelease(ctx, args)
	case "inbox":
		return c.inbox(ctx, args)
	case "hooks":
		return c.hooks(ctx, args)
	case "readers":
		return c.readers(ctx, args)
	case "delete-checkpoint":
		return c.deleteCheckpoint(ctx, args)
	case "help":
		fmt.Fprint(c.out, usage)
		return nil
	}
	return usagef("unknown command %q", cmd)
}

// connect opens the pool and checks that the database answers.
func (c *cli) connect(ctx context.Context) error {
	if err := migrations.ValidateSchema(c.schema); err != nil {
		return usagef("-schema: %v", err)
	}
	dsn := c.dsn
	if dsn == "" {
		dsn = os.Getenv("DATABASE_URL")
	}
	cfg, err := pgxpool.ParseConfig(dsn) // "" reads the PG* variables
	if err != nil {
		return fmt.Errorf("bad connection string %s: %w", redact(dsn), err)
	}
	cfg.MaxConns = 4
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(cctx, cfg)
	if err == nil {
		err = pool.Ping(cctx)
		if err != nil {
			pool.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("cannot connect to PostgreSQL at %s: %w\n(set -dsn, DATABASE_URL or the PG* variables)",
			redact(cfg.ConnString()), err)
	}
	c.pool = pool
	c.store, err = postgres.New(pool, &postgres.Config{Schema: c.schema})
	return err
}

// parse parses args with fs, marking the flag package's own errors (which
// it has printed with the usage) for exit code 2.
func parse(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		return fmt.Errorf("%w: %w", errFlag, err)
	}
	return err
}

// explain turns store errors into operator advice.
func (c *cli) explain(err error, stream string) error {
	var te *store.TrimmedError
	switch {
	case errors.Is(err, postgres.ErrSchemaMissing):
		return fmt.Errorf("schema %q is not migrated: run `seqlease -schema %s migrate up` (%w)", c.schema, c.schema, err)
	case errors.Is(err, store.ErrStreamNotFound):
		return fmt.Errorf("unknown stream %q in schema %q (`seqlease streams` lists them)", stream, c.schema)
	case errors.As(err, &te):
		return fmt.Errorf("entries of %q below %d were trimmed; start at -from %d", stream, te.LowPoint, te.LowPoint)
	}
	return err
}

func redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	if dsn == "" {
		return "(PG* environment)"
	}
	return "(connection string)"
}

// emit prints v as JSON, or rows as a table under header. An empty list
// prints as [] (not null), so scripts can iterate it.
func (c *cli) emit(v any, header []string, rows [][]string) error {
	if c.json {
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Slice && rv.IsNil() {
			v = []struct{}{}
		}
		enc := json.NewEncoder(c.out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

func (c *cli) migrate(ctx context.Context, args []string) error {
	fs := c.flags("migrate")
	steps := fs.Int("steps", 1, "migrations to roll back (down)")
	if len(args) == 0 {
		return usagef("migrate needs up, down or status")
	}
	action := args[0]
	if action != "up" && action != "down" && action != "status" {
		return usagef("migrate: unknown action %q", action)
	}
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("migrate %s: unexpected %q", action, fs.Arg(0))
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	m, err := migrations.New(&migrations.Config{Schema: c.schema})
	if err != nil {
		return err
	}
	var done []migrations.Migration
	switch action {
	case "up":
		done, err = m.Up(ctx, c.pool)
	case "down":
		done, err = m.Down(ctx, c.pool, *steps)
	case "status":
		st, err := m.Status(ctx, c.pool)
		if err != nil {
			return err
		}
		rows := make([][]string, len(st))
		for i, s := range st {
			applied, checksum := "pending", "-"
			if s.Applied {
				applied, checksum = s.AppliedAt.Format(time.RFC3339), strconv.FormatBool(s.ChecksumOK)
			}
			rows[i] = []string{strconv.Itoa(s.Version), s.Name, applied, checksum, strconv.FormatBool(s.Known)}
		}
		return c.emit(st, []string{"VERSION", "NAME", "APPLIED", "CHECKSUM OK", "KNOWN"}, rows)
	default:
		return usagef("migrate: unknown action %q", action)
	}
	if err != nil {
		return err
	}
	rows := make([][]string, len(done))
	for i, d := range done {
		rows[i] = []string{action, d.String()}
	}
	if len(rows) == 0 {
		rows = [][]string{{action, "nothing to do"}}
	}
	return c.emit(done, []string{"ACTION", "MIGRATION"}, rows)
}

// maxCount is where the counts that `streams` takes by listing entries
// (expired leases, recovered gaps) stop, so that one stream in a mass
// expiry cannot make the command read without bound: one listing.
const maxCount = store.MaxListLimit

// streamRow is one line of `streams`.
type streamRow struct {
	Stream     string `json:"stream"`
	NextNumber int64  `json:"next_number"`
	Watermark  int64  `json:"watermark"`
	InFlight   int64  `json:"in_flight"`
	Expired    int    `json:"expired"`
	// ExpiredCapped says Expired stopped at maxCount: there are more.
	ExpiredCapped bool  `json:"expired_capped"`
	OpenGaps      int64 `json:"open_gaps"`
	// RecoveredGaps counts the open gaps whose work was recovered under a
	// new number (recovered_as); the other open gaps lost their work.
	RecoveredGaps int `json:"open_gaps_recovered"`
	// RecoveredCapped says RecoveredGaps counts only the first maxCount
	// open gaps: it is a lower bound.
	RecoveredCapped  bool          `json:"open_gaps_recovered_capped"`
	OldestUnresolved int64         `json:"oldest_unresolved,omitempty"`
	OldestAge        time.Duration `json:"oldest_unresolved_age_ns,omitempty"`
	LowPoint         int64         `json:"low_point"`
}

func (c *cli) streams(ctx context.Context, args []string) error {
	fs := c.flags("streams")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	now, err := c.store.Now(ctx)
	if err != nil {
		return c.explain(err, "")
	}
	var out []streamRow
	after := ""
	for {
		names, err := c.store.Streams(ctx, after, store.MaxListLimit)
		if err != nil {
			return c.explain(err, "")
		}
		for _, name := range names {
			r, err := c.streamRow(ctx, name, now)
			if err != nil {
				return c.explain(err, name)
			}
			out = append(out, r)
		}
		if len(names) < store.MaxListLimit {
			break
		}
		after = names[len(names)-1]
	}
	rows := make([][]string, len(out))
	for i, r := range out {
		age := "-"
		if r.OldestUnresolved > 0 {
			age = fmt.Sprintf("%d (%v)", r.OldestUnresolved, r.OldestAge.Round(time.Millisecond))
		}
		rows[i] = []string{r.Stream, fmt.Sprint(r.NextNumber), fmt.Sprint(r.Watermark), fmt.Sprint(r.InFlight),
			atLeast(r.Expired, r.ExpiredCapped), fmt.Sprint(r.OpenGaps), atLeast(r.RecoveredGaps, r.RecoveredCapped), age}
	}
	return c.emit(out, []string{"STREAM", "NEXT", "WATERMARK", "IN FLIGHT", "EXPIRED", "OPEN GAPS", "RECOVERED", "OLDEST UNRESOLVED"}, rows)
}

// atLeast prints a count that may have stopped short: 10000+.
func atLeast(n int, capped bool) string {
	if capped {
		return fmt.Sprintf("%d+", n)
	}
	return strconv.Itoa(n)
}

func (c *cli) streamRow(ctx context.Context, name string, now time.Time) (streamRow, error) {
	st, err := c.store.Stats(ctx, name)
	if err != nil {
		return streamRow{}, err
	}
	expired, err := c.store.ListExpired(ctx, &store.ListExpiredParams{Stream: name, Limit: maxCount})
	if err != nil {
		return streamRow{}, err
	}
	expiredCapped := false
	if len(expired) == maxCount {
		more, err := c.store.ListExpired(ctx, &store.ListExpiredParams{Stream: name, AfterStream: name, AfterNumber: expired[len(expired)-1].Number, Limit: 1})
		if err != nil {
			return streamRow{}, err
		}
		expiredCapped = len(more) > 0
	}
	gaps, err := c.store.CountGaps(ctx, name)
	if err != nil {
		return streamRow{}, err
	}
	recovered, recoveredCapped, err := c.recoveredGaps(ctx, name)
	if err != nil {
		return streamRow{}, err
	}
	r := streamRow{
		Stream: name, NextNumber: st.NextNumber, Watermark: st.Watermark, InFlight: st.Unresolved,
		Expired: len(expired), ExpiredCapped: expiredCapped, OpenGaps: gaps,
		RecoveredGaps: recovered, RecoveredCapped: recoveredCapped,
		OldestUnresolved: st.OldestUnresolved, LowPoint: st.LowPoint,
	}
	if st.OldestUnresolved > 0 {
		r.OldestAge = now.Sub(st.OldestUnresolvedAt)
	}
	return r, nil
}

// recoveredGaps counts the open gaps of stream whose work was recovered
// under a new number, among its first maxCount open gaps; capped says there
// are more open gaps than that.
func (c *cli) recoveredGaps(ctx context.Context, stream string) (n int, capped bool, err error) {
	gs, err := c.store.ListGaps(ctx, stream, &store.ListGapsParams{Limit: maxCount})
	if err != nil {
		return 0, false, err
	}
	for _, g := range gs {
		if g.RecoveredAs != 0 {
			n++
		}
	}
	if len(gs) == maxCount {
		more, err := c.store.ListGaps(ctx, stream, &store.ListGapsParams{After: gs[len(gs)-1].Number, Limit: 1})
		if err != nil {
			return 0, false, err
		}
		capped = len(more) > 0
	}
	return n, capped, nil
}

// entryRow is one line of `inspect` and `gaps`.
type entryRow struct {
	Number        int64     `json:"number"`
	State         string    `json:"state"`
	Owner         string    `json:"owner"`
	OperationID   string    `json:"operation_id"`
	Kind          string    `json:"kind"`
	LeasedAt      time.Time `json:"leased_at"`
	ExpiresAt     time.Time `json:"expires_at"`
	ResolvedAt    time.Time `json:"resolved_at,omitzero"`
	GapReason     string    `json:"gap_reason,omitempty"`
	RecoveredAs   int64     `json:"recovered_as,omitempty"`
	RecoveredFrom int64     `json:"recovered_from,omitempty"`
	RecoveryType  string    `json:"recovery_type,omitempty"`
	FilledBy      string    `json:"filled_by,omitempty"`
	PayloadBytes  int       `json:"payload_bytes"`
}

func toRow(e store.Entry) entryRow {
	return entryRow{
		Number: e.Number, State: string(e.State), Owner: e.Owner, OperationID: e.OperationID, Kind: e.Kind,
		LeasedAt: e.LeasedAt, ExpiresAt: e.ExpiresAt, ResolvedAt: e.ResolvedAt, GapReason: e.GapReason,
		RecoveredAs: e.RecoveredAs, RecoveredFrom: e.RecoveredFrom, RecoveryType: e.RecoveryType,
		FilledBy: e.FilledBy, PayloadBytes: len(e.Payload),
	}
}

func (c *cli) emitEntries(es []store.Entry) error {
	out := make([]entryRow, len(es))
	rows := make([][]string, len(es))
	for i, e := range es {
		r := toRow(e)
		out[i] = r
		note := ""
		switch {
		case r.RecoveredAs != 0:
			note = fmt.Sprintf("recovered as %d", r.RecoveredAs)
		case r.RecoveredFrom != 0:
			note = fmt.Sprintf("%s of %d", r.RecoveryType, r.RecoveredFrom)
		case r.FilledBy != "":
			note = "filled by " + r.FilledBy
		}
		rows[i] = []string{fmt.Sprint(r.Number), r.State, r.GapReason, r.OperationID, r.Kind, r.Owner,
			r.ExpiresAt.Format(time.RFC3339Nano), fmt.Sprint(r.PayloadBytes), note}
	}
	return c.emit(out, []string{"NUMBER", "STATE", "REASON", "OPERATION", "KIND", "OWNER", "EXPIRES", "PAYLOAD", "NOTE"}, rows)
}

// streamArgs parses a command's flags around its positional arguments.
func (c *cli) streamArgs(fs *flag.FlagSet, args []string, want int, names string) ([]string, error) {
	var pos []string
	for len(args) > 0 {
		if err := parse(fs, args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) > 0 {
			pos = append(pos, args[0])
			args = args[1:]
		}
	}
	if len(pos) != want {
		return nil, usagef("%s needs %s", fs.Name(), names)
	}
	return pos, nil
}

func (c *cli) inspect(ctx context.Context, args []string) error {
	fs := c.flags("inspect")
	from := fs.Int64("from", 1, "first number to show")
	limit := fs.Int("limit", 100, "entries to show")
	pos, err := c.streamArgs(fs, args, 1, "STREAM")
	if err != nil {
		return err
	}
	if *from < 1 || *limit < 1 || *limit > store.MaxListLimit {
		return usagef("inspect: -from must be at least 1 and -limit in 1..%d", store.MaxListLimit)
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	es, err := c.store.Read(ctx, pos[0], *from-1, *limit)
	if err != nil {
		return c.explain(err, pos[0])
	}
	return c.emitEntries(es)
}

func (c *cli) gaps(ctx context.Context, args []string) error {
	fs := c.flags("gaps")
	limit := fs.Int("limit", 100, "gaps to show")
	pos, err := c.streamArgs(fs, args, 1, "STREAM")
	if err != nil {
		return err
	}
	if *limit < 1 || *limit > store.MaxListLimit {
		return usagef("gaps: -limit must be in 1..%d", store.MaxListLimit)
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	es, err := c.store.ListGaps(ctx, pos[0], &store.ListGapsParams{Limit: *limit})
	if err != nil {
		return c.explain(err, pos[0])
	}
	return c.emitEntries(es)
}

func (c *cli) trim(ctx context.Context, args []string) error {
	fs := c.flags("trim")
	pos, err := c.streamArgs(fs, args, 2, "STREAM BELOW")
	if err != nil {
		return err
	}
	below, err := strconv.ParseInt(pos[1], 10, 64)
	if err != nil || below < 1 {
		return usagef("trim: BELOW must be a number of at least 1, not %q", pos[1])
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	low, err := c.store.Trim(ctx, pos[0], below)
	if err != nil {
		return c.explain(err, pos[0])
	}
	res := struct {
		Stream   string `json:"stream"`
		LowPoint int64  `json:"low_point"`
	}{pos[0], low}
	return c.emit(res, []string{"STREAM", "LOW POINT"}, [][]string{{pos[0], fmt.Sprint(low)}})
}

func (c *cli) watch(ctx context.Context, args []string) error {
	fs := c.flags("watch")
	interval := fs.Duration("interval", time.Second, "time between lines")
	count := fs.Int("count", 0, "lines to print (0: until interrupted)")
	pos, err := c.streamArgs(fs, args, 1, "STREAM")
	if err != nil {
		return err
	}
	if *interval <= 0 || *count < 0 {
		return usagef("watch: -interval must be positive and -count not negative")
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	var last int64 = -1
	for i := 0; *count == 0 || i < *count; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
		}
		st, err := c.store.Stats(ctx, pos[0])
		if err != nil {
			return c.explain(err, pos[0])
		}
		lag := st.NextNumber - 1 - st.Watermark
		if c.json {
			if err := json.NewEncoder(c.out).Encode(struct {
				Time      time.Time `json:"time"`
				Watermark int64     `json:"watermark"`
				Lag       int64     `json:"lag"`
				InFlight  int64     `json:"in_flight"`
			}{time.Now().UTC(), st.Watermark, lag, st.Unresolved}); err != nil {
				return err
			}
			continue
		}
		moved := ""
		if last >= 0 {
			moved = fmt.Sprintf("  (+%d)", st.Watermark-last)
		}
		fmt.Fprintf(c.out, "%s  watermark %d%s  lag %d  in flight %d\n", time.Now().Format("15:04:05"), st.Watermark, moved, lag, st.Unresolved)
		last = st.Watermark
	}
	return nil
}

func (c *cli) audit(ctx context.Context, args []string) error {
	fs := c.flags("audit")
	ordered := fs.Bool("ordered", false, "also check I4: the stream is written with ordered commits only")
	maxUnresolved := fs.Duration("max-unresolved", 0, "also check I6: no lease unresolved longer than this past its expiry (e.g. the cleanup interval plus a cycle)")
	pos, err := c.streamArgs(fs, args, 1, "STREAM")
	if err != nil {
		return err
	}
	if *maxUnresolved < 0 {
		return usagef("audit: -max-unresolved must not be negative")
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	opts := &audit.Options{Ordered: *ordered, MaxUnresolved: *maxUnresolved}
	if *maxUnresolved > 0 {
		if opts.Now, err = c.store.Now(ctx); err != nil {
			return c.explain(err, pos[0])
		}
	}
	if _, err := c.store.Stats(ctx, pos[0]); err != nil {
		return c.explain(err, pos[0])
	}
	r, err := audit.Stream(ctx, c.store, pos[0], opts)
	if err != nil {
		return c.explain(err, pos[0])
	}
	rows := [][]string{{"entries", fmt.Sprintf("%d..%d", r.LowPoint, r.Last)},
		{"committed", fmt.Sprint(r.Committed)}, {"gaps", fmt.Sprint(r.Gaps)}, {"leased", fmt.Sprint(r.Leased)},
		{"recovered", fmt.Sprint(r.Recovered)}, {"filled", fmt.Sprint(r.Filled)}}
	for _, ch := range r.Checks {
		rows = append(rows, []string{"checked", ch})
	}
	for _, v := range r.Violations {
		rows = append(rows, []string{"VIOLATION", v.String()})
	}
	if err := c.emit(r, []string{"AUDIT", pos[0]}, rows); err != nil {
		return err
	}
	if !r.OK() {
		return fmt.Errorf("audit of %q found %d violations", pos[0], len(r.Violations))
	}
	return nil
}

// leaseRow is one line of `leases`.
type leaseRow struct {
	Name       string    `json:"name"`
	Owner      string    `json:"owner"`
	Fence      int64     `json:"fence"`
	AcquiredAt time.Time `json:"acquired_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	Renewals   int       `json:"renewals"`
}

func (c *cli) leases(ctx context.Context, args []string) error {
	fs := c.flags("leases")
	owner := fs.String("owner", "", "only this owner's leases")
	heldFor := fs.Duration("held-for", 0, "only leases held at least this long (long-held leases)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("leases: unexpected %q", fs.Arg(0))
	}
	if *heldFor < 0 {
		return usagef("leases: -held-for must not be negative")
	}
	if *owner != "" {
		if err := store.ValidateLeaseOwner(*owner); err != nil {
			return usagef("leases: -owner: %v", err)
		}
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	now, err := c.store.Now(ctx)
	if err != nil {
		return c.explain(err, "")
	}
	var out []leaseRow
	var rows [][]string
	for after := ""; ; {
		ls, err := c.store.ListLeases(ctx, &store.ListLeasesParams{Owner: *owner, HeldFor: *heldFor, AfterName: after, Limit: store.MaxListLimit})
		if err != nil {
			return c.explain(err, "")
		}
		for _, l := range ls {
			out = append(out, leaseRow{l.Name, l.Owner, l.Fence, l.AcquiredAt, l.ExpiresAt, l.Renewals})
			rows = append(rows, []string{l.Name, l.Owner, fmt.Sprint(l.Fence), now.Sub(l.AcquiredAt).Round(time.Millisecond).String(),
				l.ExpiresAt.Sub(now).Round(time.Millisecond).String(), fmt.Sprint(l.Renewals)})
		}
		if len(ls) < store.MaxListLimit {
			break
		}
		after = ls[len(ls)-1].Name
	}
	return c.emit(out, []string{"NAME", "OWNER", "FENCE", "HELD FOR", "EXPIRES IN", "RENEWALS"}, rows)
}

// hooksRow is the hooks command's JSON.
type hooksRow struct {
	Pending  int64      `json:"pending"`
	Failing  int64      `json:"failing"`
	OldestAt *time.Time `json:"oldest_at"` // null when none is pending
}

func (c *cli) hooks(ctx context.Context, args []string) error {
	fs := c.flags("hooks")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("hooks: unexpected %q", fs.Arg(0))
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	st, err := c.store.HookStats(ctx)
	if err != nil {
		return c.explain(err, "")
	}
	row := hooksRow{Pending: st.Pending, Failing: st.Failing}
	oldest := "-"
	if !st.OldestAt.IsZero() {
		row.OldestAt = &st.OldestAt
		now, err := c.store.Now(ctx)
		if err != nil {
			return c.explain(err, "")
		}
		oldest = now.Sub(st.OldestAt).Round(time.Millisecond).String()
	}
	return c.emit(row, []string{"PENDING", "FAILING", "OLDEST"}, [][]string{{fmt.Sprint(st.Pending), fmt.Sprint(st.Failing), oldest}})
}

func (c *cli) forceRelease(ctx context.Context, args []string) error {
	fs := c.flags("force-release")
	pos, err := c.streamArgs(fs, args, 1, "OWNER")
	if err != nil {
		return err
	}
	if err := store.ValidateLeaseOwner(pos[0]); err != nil {
		return usagef("force-release: OWNER: %v", err)
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	ended, err := c.store.ForceReleaseLeases(ctx, pos[0], nil)
	if err != nil {
		return c.explain(err, "")
	}
	out := make([]leaseRow, len(ended))
	rows := make([][]string, len(ended))
	for i, l := range ended {
		out[i] = leaseRow{l.Name, l.Owner, l.Fence, l.AcquiredAt, l.ExpiresAt, l.Renewals}
		rows[i] = []string{l.Name, fmt.Sprint(l.Fence), "force-released"}
	}
	if len(rows) == 0 {
		rows = [][]string{{"-", "-", "no live lease held by " + pos[0]}}
	}
	return c.emit(out, []string{"NAME", "FENCE", "RESULT"}, rows)
}

func (c *cli) inbox(ctx context.Context, args []string) error {
	fs := c.flags("inbox")
	olderThan := fs.Duration("purge-older-than", 0, "delete the records received more than this long ago (0: purge nothing)")
	batch := fs.Int("batch", store.DefaultPurgeLimit, "records deleted per statement")
	var pos []string
	for len(args) > 0 {
		if err := parse(fs, args); err != nil {
			return err
		}
		if args = fs.Args(); len(args) > 0 {
			pos, args = append(pos, args[0]), args[1:]
		}
	}
	if len(pos) > 1 {
		return usagef("inbox: unexpected %q", pos[1])
	}
	consumer := ""
	if len(pos) == 1 {
		consumer = pos[0]
		if err := store.ValidateConsumer(consumer); err != nil {
			return usagef("inbox: CONSUMER: %v", err)
		}
	}
	if *olderThan < 0 || *batch < 1 || *batch > store.MaxPurgeLimit {
		return usagef("inbox: -purge-older-than must not be negative and -batch must be in 1..%d", store.MaxPurgeLimit)
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	var purged int64
	if *olderThan > 0 {
		p := &store.PurgeReceivedParams{Consumer: consumer, OlderThan: *olderThan, Limit: *batch}
		for {
			n, err := c.store.PurgeReceived(ctx, p)
			if err != nil {
				return c.explain(err, "")
			}
			purged += n
			if n < int64(*batch) {
				break
			}
		}
	}
	n, err := c.store.CountReceived(ctx, consumer)
	if err != nil {
		return c.explain(err, "")
	}
	name := consumer
	if name == "" {
		name = "(all)"
	}
	res := struct {
		Consumer string `json:"consumer"`
		Records  int64  `json:"records"`
		Purged   int64  `json:"purged"`
	}{consumer, n, purged}
	return c.emit(res, []string{"CONSUMER", "RECORDS", "PURGED"}, [][]string{{name, fmt.Sprint(n), fmt.Sprint(purged)}})
}
