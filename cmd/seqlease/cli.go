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
	cmd         command // the command running; zero before one is chosen
	pool        *pgxpool.Pool
	store       *postgres.Store
}

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
		fmt.Fprintf(errOut, "seqlease: %v\n\n", err)
		if c.cmd.name != "" {
			fmt.Fprintf(errOut, "usage: %s\n(seqlease %s -h: its help and flags)\n", strings.TrimSpace(globalSynopsis+" "+c.cmd.name+" "+c.cmd.args), c.cmd.name)
		} else {
			printUsage(errOut)
		}
		return 2
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errFlag):
		return 2 // the flag package printed the error, c.parse the usage
	}
	fmt.Fprintf(errOut, "seqlease: %v\n", err)
	return 1
}

// flags returns a flag set with the global flags, which may come before or
// after the command.
func (c *cli) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.errOut)
	fs.Usage = func() {} // c.parse prints it
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
	if err := c.parse(global, args); err != nil {
		return err
	}
	args = global.Args()
	if len(args) == 0 {
		return usagef("no command")
	}
	name, args := args[0], args[1:]
	if name == "help" {
		if len(args) == 0 {
			printUsage(c.out)
			return nil
		}
		cmd, ok := lookup(args[0])
		if !ok {
			return usagef("help: unknown command %q", args[0])
		}
		c.cmd = cmd
		return cmd.run(c, ctx, []string{"-h"})
	}
	cmd, ok := lookup(name)
	if !ok {
		return usagef("unknown command %q", name)
	}
	c.cmd = cmd
	return cmd.run(c, ctx, args)
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

// parse parses args with fs. Asked for help (-h, --help), it prints the
// usage of the command (of seqlease before one) on stdout and returns
// flag.ErrHelp: exit code 0. The flag package's own errors, which it has
// printed, are marked for exit code 2, with the usage after them.
func (c *cli) parse(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	w := c.errOut
	if errors.Is(err, flag.ErrHelp) {
		w = c.out
	}
	if err != nil {
		if c.cmd.name == "" {
			printUsage(w)
		} else {
			printCommandUsage(w, c.cmd, fs)
		}
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		return fmt.Errorf("%w: %w", errFlag, err)
	}
	return err
}

// positional parses a command's flags around its positional arguments,
// of which it wants between least and most.
func (c *cli) positional(fs *flag.FlagSet, args []string, least, most int) ([]string, error) {
	var pos []string
	for len(args) > 0 {
		if err := c.parse(fs, args); err != nil {
			return nil, err
		}
		if args = fs.Args(); len(args) > 0 {
			pos, args = append(pos, args[0]), args[1:]
		}
	}
	switch {
	case len(pos) > most:
		return nil, usagef("%s: unexpected %q", fs.Name(), pos[most])
	case len(pos) < least:
		return nil, usagef("%s needs %s", fs.Name(), strings.Join(strings.Fields(c.cmd.args)[:least], " "))
	}
	return pos, nil
}

// explain turns store errors into operator advice.
func (c *cli) explain(err error, stream string) error {
	var te *store.TrimmedError
	switch {
	case errors.Is(err, postgres.ErrSchemaMissing):
		return fmt.Errorf("schema %s is not migrated: run `seqlease -schema %s migrate up` (%w)", store.QuoteInput(c.schema), c.schema, err)
	case errors.Is(err, store.ErrStreamNotFound):
		return fmt.Errorf("unknown stream %s in schema %s (`seqlease streams` lists them)", store.QuoteInput(stream), store.QuoteInput(c.schema))
	case errors.As(err, &te):
		return fmt.Errorf("entries of %s below %d were trimmed; start at -from %d", store.QuoteInput(stream), te.LowPoint, te.LowPoint)
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

// migrationRow is one line of `migrate up` and `migrate down`.
type migrationRow struct {
	Action   string `json:"action"` // up or down
	Version  int    `json:"version"`
	Name     string `json:"name"`
	Checksum string `json:"checksum"`
}

// statusRow is one line of `migrate status`.
type statusRow struct {
	Version    int       `json:"version"`
	Name       string    `json:"name"`
	Applied    bool      `json:"applied"`
	AppliedAt  time.Time `json:"applied_at,omitzero"` // absent while pending
	ChecksumOK bool      `json:"checksum_ok"`
	Known      bool      `json:"known"` // this binary embeds it
}

func (c *cli) migrate(ctx context.Context, args []string) error {
	fs := c.flags("migrate")
	steps := fs.Int("steps", 1, "migrations to roll back (down)")
	down := fs.Bool("down", false, "sql: print the migration's down SQL, not its up SQL")
	pos, err := c.positional(fs, args, 0, 2)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("migrate needs up, down, status or sql")
	}
	action := pos[0]
	switch {
	case action == "sql":
		stepsSet := false
		fs.Visit(func(f *flag.Flag) { stepsSet = stepsSet || f.Name == "steps" })
		switch {
		case len(pos) != 2:
			return usagef("migrate sql needs a VERSION")
		case stepsSet:
			return usagef("migrate sql: -steps is for down")
		}
		return c.migrationSQL(pos[1], *down)
	case action != "up" && action != "down" && action != "status":
		return usagef("migrate: unknown action %q", action)
	case len(pos) > 1:
		return usagef("migrate: unexpected %q", pos[1])
	case *down:
		return usagef("migrate: -down is for sql")
	case *steps < 1:
		return usagef("migrate: -steps must be at least 1")
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
	default: // status
		st, err := m.Status(ctx, c.pool)
		if err != nil {
			return err
		}
		out := make([]statusRow, len(st))
		rows := make([][]string, len(st))
		for i, s := range st {
			out[i] = statusRow{s.Version, s.Name, s.Applied, s.AppliedAt, s.ChecksumOK, s.Known}
			applied, checksum := "pending", "-"
			if s.Applied {
				applied, checksum = s.AppliedAt.Format(time.RFC3339), strconv.FormatBool(s.ChecksumOK)
			}
			rows[i] = []string{strconv.Itoa(s.Version), s.Name, applied, checksum, strconv.FormatBool(s.Known)}
		}
		return c.emit(out, []string{"VERSION", "NAME", "APPLIED", "CHECKSUM OK", "KNOWN"}, rows)
	}
	if err != nil {
		return err
	}
	out := make([]migrationRow, len(done))
	rows := make([][]string, len(done))
	for i, d := range done {
		out[i] = migrationRow{action, d.Version, d.Name, d.Checksum}
		rows[i] = []string{action, d.String()}
	}
	if len(rows) == 0 {
		rows = [][]string{{action, "nothing to do"}}
	}
	return c.emit(out, []string{"ACTION", "MIGRATION"}, rows)
}

// migrationSQLRow is the output of `migrate sql -json`.
type migrationSQLRow struct {
	Version   int    `json:"version"`
	Name      string `json:"name"`
	Direction string `json:"direction"` // up or down
	SQL       string `json:"sql"`
}

// migrationSQL prints the up (or down) SQL of the embedded migration
// version, as its file holds it, for other migration tools: no database
// is needed.
func (c *cli) migrationSQL(version string, down bool) error {
	ms := migrations.Migrations()
	v, err := strconv.Atoi(version)
	if err != nil || v < 1 || v > len(ms) {
		return usagef("migrate sql: VERSION must be a migration of this binary, 1..%d, not %q", len(ms), version)
	}
	m := ms[v-1]
	row := migrationSQLRow{Version: m.Version, Name: m.Name, Direction: "up", SQL: m.Up}
	if down {
		row.Direction, row.SQL = "down", m.Down
	}
	if c.json {
		return c.emit(row, nil, nil)
	}
	_, err = io.WriteString(c.out, row.SQL)
	return err
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
	if _, err := c.positional(fs, args, 0, 0); err != nil {
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
	expired, expiredCapped, err := c.expired(ctx, name, nil)
	if err != nil {
		return streamRow{}, err
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

// expired lists the first maxCount expired leases of stream (by the
// database clock, or at now); capped says there are more.
func (c *cli) expired(ctx context.Context, stream string, now *time.Time) (es []store.Entry, capped bool, err error) {
	es, err = c.store.ListExpired(ctx, &store.ListExpiredParams{Stream: stream, Limit: maxCount, Now: now})
	if err != nil || len(es) < maxCount {
		return es, false, err
	}
	last := es[len(es)-1]
	more, err := c.store.ListExpired(ctx, &store.ListExpiredParams{Stream: stream, AfterStream: last.Stream,
		AfterNumber: last.Number, Limit: 1, Now: now})
	return es, len(more) > 0, err
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
	// the recovery record of a leased, expired entry (seqlease parked)
	RecoveryAttempts int       `json:"recovery_attempts,omitempty"`
	LastError        string    `json:"last_error,omitempty"`
	ParkedAt         time.Time `json:"parked_at,omitzero"`
}

func toRow(e store.Entry) entryRow {
	return entryRow{
		Number: e.Number, State: string(e.State), Owner: e.Owner, OperationID: e.OperationID, Kind: e.Kind,
		LeasedAt: e.LeasedAt, ExpiresAt: e.ExpiresAt, ResolvedAt: e.ResolvedAt, GapReason: e.GapReason,
		RecoveredAs: e.RecoveredAs, RecoveredFrom: e.RecoveredFrom, RecoveryType: e.RecoveryType,
		FilledBy: e.FilledBy, PayloadBytes: len(e.Payload),
		RecoveryAttempts: e.RecoveryAttempts, LastError: e.LastRecoveryError, ParkedAt: e.ParkedAt,
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
		case !r.ParkedAt.IsZero():
			note = fmt.Sprintf("parked after %d failed recoveries (seqlease parked)", r.RecoveryAttempts)
		case r.RecoveryAttempts > 0:
			note = fmt.Sprintf("%d failed recoveries", r.RecoveryAttempts)
		}
		rows[i] = []string{fmt.Sprint(r.Number), r.State, r.GapReason, r.OperationID, r.Kind, r.Owner,
			r.ExpiresAt.Format(time.RFC3339Nano), fmt.Sprint(r.PayloadBytes), note}
	}
	return c.emit(out, []string{"NUMBER", "STATE", "REASON", "OPERATION", "KIND", "OWNER", "EXPIRES", "PAYLOAD", "NOTE"}, rows)
}

func (c *cli) inspect(ctx context.Context, args []string) error {
	fs := c.flags("inspect")
	from := fs.Int64("from", 1, "first number to show")
	limit := fs.Int("limit", 100, "entries to show")
	pos, err := c.positional(fs, args, 1, 1)
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
	// Entries below the low point are gone: start there. Another trim may
	// move it on meanwhile, hence the loop (bounded by the trims).
	var te *store.TrimmedError
	for tries := 0; tries < 10 && errors.As(err, &te); tries++ {
		fmt.Fprintf(c.errOut, "seqlease: entries of %q below %d were trimmed (its low point); showing from %d\n", pos[0], te.LowPoint, te.LowPoint)
		es, err = c.store.Read(ctx, pos[0], te.LowPoint-1, *limit)
	}
	if err != nil {
		return c.explain(err, pos[0])
	}
	return c.emitEntries(es)
}

func (c *cli) gaps(ctx context.Context, args []string) error {
	fs := c.flags("gaps")
	limit := fs.Int("limit", 100, "gaps to show")
	pos, err := c.positional(fs, args, 1, 1)
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
	force := fs.Bool("force", false, "trim even the entries a reader has not read")
	pos, err := c.positional(fs, args, 2, 2)
	if err != nil {
		return err
	}
	below, err := strconv.ParseInt(pos[1], 10, 64)
	if err != nil || below < 1 {
		return usagef("trim: BELOW must be a number of at least 1, not %q", pos[1])
	}
	if err := store.ValidateStream(pos[0]); err != nil {
		return usagef("trim: %v", err)
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	if !*force {
		if err := c.unread(ctx, pos[0], below); err != nil {
			return err
		}
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

// errUnread is matched by the refusal of a trim that would remove entries
// a reader has not read: an *unreadError.
var errUnread = errors.New("entries a reader has not read")

// unreadError refuses a trim below Below of Stream: Reader's checkpoint is
// Checkpoint, so it has still to read Checkpoint+1 on.
type unreadError struct {
	Stream, Reader    string
	Checkpoint, Below int64
}

func (e *unreadError) Error() string {
	return fmt.Sprintf("trim: refused, nothing trimmed: reader %s is at %d on stream %s, so trimming below %d would remove %d..%d, which it has not read "+
		"(-force trims anyway; seqlease delete-checkpoint removes a reader that is gone)",
		store.QuoteInput(e.Reader), e.Checkpoint, store.QuoteInput(e.Stream), e.Below, e.Checkpoint+1, e.Below-1)
}

func (e *unreadError) Is(target error) bool { return target == errUnread }

// unread returns an *unreadError when trimming stream below below would
// remove entries that the reader with the lowest checkpoint on it has not
// read. A checkpoint only moves forward, so one that allows the trim now
// still does when the trim runs (a reader that starts meanwhile starts
// after the trim, as after any trim).
func (c *cli) unread(ctx context.Context, stream string, below int64) error {
	p := &store.ListCheckpointsParams{Stream: stream, Limit: store.MaxListLimit}
	var lowest *store.Checkpoint
	for {
		cs, err := c.store.ListCheckpoints(ctx, p)
		if err != nil {
			return c.explain(err, stream)
		}
		for i := range cs {
			if lowest == nil || cs[i].Position < lowest.Position {
				lowest = &cs[i]
			}
		}
		if len(cs) < p.Limit {
			break
		}
		p.AfterReader, p.AfterStream = cs[len(cs)-1].Reader, cs[len(cs)-1].Stream
	}
	if lowest != nil && below > lowest.Position+1 {
		return &unreadError{Stream: stream, Reader: lowest.Reader, Checkpoint: lowest.Position, Below: below}
	}
	return nil
}

func (c *cli) watch(ctx context.Context, args []string) error {
	fs := c.flags("watch")
	interval := fs.Duration("interval", time.Second, "time between lines")
	count := fs.Int("count", 0, "lines to print (0: until interrupted)")
	pos, err := c.positional(fs, args, 1, 1)
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

// auditRow is the JSON of `audit`.
type auditRow struct {
	Stream    string `json:"stream"`
	LowPoint  int64  `json:"low_point"` // the entries read are low_point..last
	Last      int64  `json:"last"`
	Committed int    `json:"committed"`
	Gaps      int    `json:"gaps"`
	Leased    int    `json:"leased"`
	Recovered int    `json:"recovered"` // committed entries carrying moved work
	Filled    int    `json:"filled"`
	// Expired lists the leases that expired and are unresolved (up to
	// maxCount: ExpiredCapped says there are more). They are violations
	// only with -max-unresolved, when older than it.
	Expired       []expiredRow   `json:"expired_unresolved"`
	ExpiredCapped bool           `json:"expired_unresolved_capped"`
	Checks        []string       `json:"checks"`
	Violations    []violationRow `json:"violations"`
	OK            bool           `json:"ok"` // no violation: exit code 0
}

// expiredRow is an expired, unresolved lease in `audit`.
type expiredRow struct {
	Number      int64         `json:"number"`
	Owner       string        `json:"owner"`
	OperationID string        `json:"operation_id"`
	Kind        string        `json:"kind"`
	ExpiresAt   time.Time     `json:"expires_at"`
	Overdue     time.Duration `json:"overdue_ns"` // how long past its expiry, by the database clock
}

// violationRow is a violation in `audit`.
type violationRow struct {
	Invariant string `json:"invariant"`
	Number    int64  `json:"number,omitempty"` // 0 (absent): the stream as a whole
	Detail    string `json:"detail"`
}

// maxExpiredLines is how many expired leases the table of `audit` lists
// one by one (the JSON lists up to maxCount).
const maxExpiredLines = 20

func (c *cli) audit(ctx context.Context, args []string) error {
	fs := c.flags("audit")
	ordered := fs.Bool("ordered", false, "also check I4: the stream is written with ordered commits only")
	maxUnresolved := fs.Duration("max-unresolved", 0, "also check I6: no lease unresolved longer than this past its expiry (e.g. the cleanup interval plus a cycle)")
	pos, err := c.positional(fs, args, 1, 1)
	if err != nil {
		return err
	}
	stream := pos[0]
	if *maxUnresolved < 0 {
		return usagef("audit: -max-unresolved must not be negative")
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	now, err := c.store.Now(ctx)
	if err != nil {
		return c.explain(err, stream)
	}
	if _, err := c.store.Stats(ctx, stream); err != nil {
		return c.explain(err, stream)
	}
	r, err := audit.Stream(ctx, c.store, stream, &audit.Options{Ordered: *ordered, MaxUnresolved: *maxUnresolved, Now: now})
	if err != nil {
		return c.explain(err, stream)
	}
	expired, capped, err := c.expired(ctx, stream, &now)
	if err != nil {
		return c.explain(err, stream)
	}
	row := auditRow{
		Stream: stream, LowPoint: r.LowPoint, Last: r.Last, Committed: r.Committed, Gaps: r.Gaps, Leased: r.Leased,
		Recovered: r.Recovered, Filled: r.Filled, Expired: []expiredRow{}, ExpiredCapped: capped,
		Checks: r.Checks, Violations: []violationRow{}, OK: r.OK(),
	}
	rows := [][]string{{"entries", fmt.Sprintf("%d..%d", r.LowPoint, r.Last)},
		{"committed", fmt.Sprint(r.Committed)}, {"gaps", fmt.Sprint(r.Gaps)}, {"leased", fmt.Sprint(r.Leased)},
		{"recovered", fmt.Sprint(r.Recovered)}, {"filled", fmt.Sprint(r.Filled)}}
	for _, ch := range r.Checks {
		rows = append(rows, []string{"checked", ch})
	}
	for _, e := range expired {
		row.Expired = append(row.Expired, expiredRow{e.Number, e.Owner, e.OperationID, e.Kind, e.ExpiresAt, now.Sub(e.ExpiresAt)})
	}
	if len(expired) > 0 {
		rows = append(rows, []string{"expired", fmt.Sprintf("%s leases expired and unresolved: does a cleanup loop run? (seqlease cleanup %s -dry-run)",
			atLeast(len(expired), row.ExpiredCapped), stream)})
	} else {
		rows = append(rows, []string{"expired", "0 leases expired and unresolved"})
	}
	for i, e := range row.Expired {
		if i == maxExpiredLines {
			rows = append(rows, []string{"EXPIRED", fmt.Sprintf("... and %s more (-json lists up to %d)", atLeast(len(expired)-i, row.ExpiredCapped), maxCount)})
			break
		}
		rows = append(rows, []string{"EXPIRED", fmt.Sprintf("entry %d: unresolved %v past its expiry (owner %q, operation %q)",
			e.Number, e.Overdue.Round(time.Millisecond), e.Owner, e.OperationID)})
	}
	for _, v := range r.Violations {
		row.Violations = append(row.Violations, violationRow{v.Invariant, v.Number, v.Detail})
		rows = append(rows, []string{"VIOLATION", v.String()})
	}
	if err := c.emit(row, []string{"AUDIT", stream}, rows); err != nil {
		return err
	}
	if !r.OK() {
		return fmt.Errorf("audit of %s found %d violations", store.QuoteInput(stream), len(r.Violations))
	}
	return nil
}

// hooksRow is the hooks command's JSON.
type hooksRow struct {
	Pending  int64      `json:"pending"`
	Failing  int64      `json:"failing"`
	OldestAt *time.Time `json:"oldest_at"` // null when none is pending
}

func (c *cli) hooks(ctx context.Context, args []string) error {
	fs := c.flags("hooks")
	if _, err := c.positional(fs, args, 0, 0); err != nil {
		return err
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

func (c *cli) inbox(ctx context.Context, args []string) error {
	fs := c.flags("inbox")
	olderThan := fs.Duration("purge-older-than", 0, "delete the records received more than this long ago (0: purge nothing)")
	batch := fs.Int("batch", store.DefaultPurgeLimit, "records deleted per statement")
	pos, err := c.positional(fs, args, 0, 1)
	if err != nil {
		return err
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
