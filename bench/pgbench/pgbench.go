// Package pgbench runs PostgreSQL's pgbench with the custom scripts of this
// directory, which do the SQL work of seqlease without its ordering logic:
// they are the physical limit the seqlease figures are compared with. The
// same statements, taken from the scripts by Statements, drive the raw pgx
// loops, so both limits run exactly the same SQL.
package pgbench

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"
)

//go:embed *.sql
var scripts embed.FS

// The scripts.
const (
	Lease           = "lease.sql"             // (a) one lease per transaction
	LeaseCommit     = "lease_commit.sql"      // (b) lease, then commit: two transactions
	NamedLease      = "named_lease.sql"       // (c) named-lease acquire (guarded upsert) + release
	OwnStream       = "own_stream.sql"        // (d) (b), each client on its own stream
	OwnStreamNotify = "own_stream_notify.sql" // (d+notify) (d), the commit also NOTIFYing once
	Sequence        = "sequence.sql"          // (e) (b), numbered by a plain sequence (nextval)
)

// SequenceName is the sequence that script Sequence takes its numbers from:
// whoever runs it creates it first, in the schema the script runs in.
const SequenceName = "pgbench_numbers"

// Scripts returns the names of all the scripts, sorted.
func Scripts() []string {
	names, _ := fs.Glob(scripts, "*.sql")
	return names
}

// Script returns the text of a script.
func Script(name string) (string, error) {
	b, err := scripts.ReadFile(name)
	if err != nil {
		return "", fmt.Errorf("pgbench: %w", err)
	}
	return string(b), nil
}

// variable matches a pgbench variable (:name), not a cast (::type).
var variable = regexp.MustCompile(`(^|[^:]):([a-z_][a-z0-9_]*)`)

// Statements returns the SQL statements of a script, without comments, with
// its pgbench variables turned into positional parameters in the order they
// first appear in each statement ($1, $2, ...), and the names of those
// variables per statement.
func Statements(name string) (stmts []string, vars [][]string, err error) {
	text, err := Script(name)
	if err != nil {
		return nil, nil, err
	}
	var cur []string
	flush := func() {
		sql := strings.TrimSpace(strings.Join(cur, "\n"))
		cur = nil
		if sql == "" {
			return
		}
		var names []string
		sql = variable.ReplaceAllStringFunc(sql, func(m string) string {
			sub := variable.FindStringSubmatch(m)
			i := indexOf(names, sub[2])
			if i < 0 {
				names = append(names, sub[2])
				i = len(names) - 1
			}
			return sub[1] + "$" + strconv.Itoa(i+1)
		})
		stmts = append(stmts, sql)
		vars = append(vars, names)
	}
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, "\n")
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		switch {
		case strings.HasSuffix(line, `\gset`):
			cur = append(cur, strings.TrimSuffix(line, `\gset`))
			flush()
		case strings.HasSuffix(line, ";"):
			cur = append(cur, strings.TrimSuffix(line, ";"))
			flush()
		default:
			cur = append(cur, line)
		}
	}
	flush()
	return stmts, vars, nil
}

func indexOf(names []string, name string) int {
	for i, n := range names {
		if n == name {
			return i
		}
	}
	return -1
}

// Params say how to run a script.
type Params struct {
	// DSN is the database, as a libpq URL or connection string.
	DSN string
	// Schema is put first on the search_path (PGOPTIONS): the freshly
	// migrated schema whose tables the script uses.
	Schema string
	// Script is the script's name (Lease, LeaseCommit, NamedLease, ...).
	Script string
	// Clients is the number of concurrent connections (pgbench -c).
	Clients int
	// Duration is the measured window, rounded up to whole seconds; pgbench
	// runs for it plus connectAllowance per client, rounded down to whole
	// seconds (-T).
	Duration time.Duration
}

// connectAllowance is what -T gets on top of the window per client.
// pgbench's -T counts the time its threads take to open their connections
// (one after the other), but its tps leaves it out; at up to 40 ms per
// connection on a loaded 2-core machine, 64 clients can spend 2 s of a
// short -T connecting and finish no script at all. Rounded down to whole
// seconds, the allowance adds nothing up to 19 clients.
const connectAllowance = 50 * time.Millisecond

// tpsLine is pgbench's summary of transactions (script runs) per second.
var tpsLine = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)

// Path finds the pgbench program: on PATH, else in the Debian install.
func Path() (string, error) {
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench")
	if len(matches) > 0 {
		return matches[len(matches)-1], nil
	}
	return "", errors.New("pgbench: not found on PATH nor in /usr/lib/postgresql/*/bin (install postgresql-client)")
}

// Run runs the script with pgbench (prepared statements, like pgx) and
// returns the script runs per second it reports.
func Run(ctx context.Context, p Params) (float64, error) {
	prog, err := Path()
	if err != nil {
		return 0, err
	}
	text, err := Script(p.Script)
	if err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp("", "seqbench-pgbench-")
	if err != nil {
		return 0, fmt.Errorf("pgbench: %w", err)
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, p.Script)
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		return 0, fmt.Errorf("pgbench: %w", err)
	}
	secs := max(int((p.Duration+time.Second-1)/time.Second), 1) + int(time.Duration(p.Clients)*connectAllowance/time.Second)
	threads := max(min(p.Clients, runtime.NumCPU()), 1)
	cmd := exec.CommandContext(ctx, prog, "-n", "-M", "prepared",
		"-c", strconv.Itoa(p.Clients), "-j", strconv.Itoa(threads),
		"-T", strconv.Itoa(secs), "-f", file, p.DSN)
	cmd.Env = append(os.Environ(), "PGOPTIONS="+strings.TrimSpace(os.Getenv("PGOPTIONS")+" -c search_path="+p.Schema))
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("pgbench %s -c %d: %w: %s", p.Script, p.Clients, err, lastLines(stderr.String(), 5))
	}
	m := tpsLine.FindStringSubmatch(out.String())
	if m == nil {
		return 0, fmt.Errorf("pgbench %s -c %d: no tps in its output: %s", p.Script, p.Clients, lastLines(out.String(), 5))
	}
	return strconv.ParseFloat(m[1], 64)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], " | ")
}
