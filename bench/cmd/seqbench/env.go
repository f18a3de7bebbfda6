package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqlease/seqlease/migrations"
)

// env is what every measurement gets: the database, the run's durations,
// and a small pool of its own for setup and inspection.
type env struct {
	dsn   string
	admin *pgxpool.Pool
	smoke bool
	dur   time.Duration // measured window of a timed run
	warm  time.Duration // warm-up before the window
	memD  time.Duration // measured window of an in-memory run

	schemas atomic.Int64
}

// schemaPrefix starts every schema the benchmarks create.
const schemaPrefix = "seqbench_"

// newSchema creates and migrates a fresh schema, and returns its name and
// a function that drops it.
func (e *env) newSchema(ctx context.Context) (string, func(), error) {
	name := fmt.Sprintf("%s%d_%d", schemaPrefix, os.Getpid(), e.schemas.Add(1))
	m, err := migrations.New(&migrations.Config{Schema: name})
	if err != nil {
		return "", nil, err
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := e.admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			fmt.Fprintf(os.Stderr, "seqbench: dropping schema %s: %v\n", name, err)
		}
	}
	if _, err := m.Up(ctx, e.admin); err != nil {
		drop()
		return "", nil, fmt.Errorf("migrate %s: %w", name, err)
	}
	return name, drop, nil
}

// pool opens a pool of at most maxConns connections; with a searchPath, its
// sessions find unqualified tables there (the raw loops).
func (e *env) pool(ctx context.Context, maxConns int, searchPath string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(e.dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(maxConns)
	if searchPath != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = searchPath
	}
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := p.Ping(ctx); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// walLSN returns the server's current WAL write position.
func (e *env) walLSN(ctx context.Context) (string, error) {
	var lsn string
	err := e.admin.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn)
	return lsn, err
}

// walSince returns the WAL bytes written since lsn, by every session of the
// server.
func (e *env) walSince(ctx context.Context, lsn string) (float64, error) {
	var n float64
	err := e.admin.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::float8", lsn).Scan(&n)
	return n, err
}

// facts are the machine facts the report starts with.
type facts struct {
	Date, Command, Go, OS, Kernel, CPU string
	CPUs, GOMAXPROCS                   int
	PG, SyncCommit, Fsync, FullPage    string
	WalSync, SharedBuffers, MaxConns   string
	Host, LoadStart, LoadEnd, Commit   string
	Elapsed                            time.Duration
}

func (e *env) facts(ctx context.Context) (facts, error) {
	f := facts{
		Date:       time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		Go:         runtime.Version(),
		OS:         runtime.GOOS + "/" + runtime.GOARCH,
		Kernel:     strings.TrimSpace(readFile("/proc/sys/kernel/osrelease")),
		CPU:        cpuModel(),
		CPUs:       runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		LoadStart:  loadAvg(),
	}
	cfg, err := pgx.ParseConfig(e.dsn)
	if err == nil {
		f.Host = fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
	}
	row := e.admin.QueryRow(ctx, `SELECT version(), current_setting('synchronous_commit'), current_setting('fsync'),
		current_setting('full_page_writes'), current_setting('wal_sync_method'), current_setting('shared_buffers'),
		current_setting('max_connections')`)
	if err := row.Scan(&f.PG, &f.SyncCommit, &f.Fsync, &f.FullPage, &f.WalSync, &f.SharedBuffers, &f.MaxConns); err != nil {
		return f, fmt.Errorf("server settings: %w", err)
	}
	if i := strings.Index(f.PG, " on "); i > 0 {
		f.PG = f.PG[:i]
	}
	return f, nil
}

func readFile(name string) string {
	b, err := os.ReadFile(name)
	if err != nil {
		return ""
	}
	return string(b)
}

func cpuModel() string {
	for line := range strings.Lines(readFile("/proc/cpuinfo")) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// loadAvg returns the 1, 5 and 15 minute load averages.
func loadAvg() string {
	fields := strings.Fields(readFile("/proc/loadavg"))
	if len(fields) < 3 {
		return "unknown"
	}
	return strings.Join(fields[:3], " ")
}
