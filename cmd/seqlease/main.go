// Command seqlease is the operator's view of a seqlease database: migrate the
// schema, list streams with their watermarks and in-flight leases, inspect a
// stream's entries and gaps, fill a gap, decide parked entries (unpark,
// fill, give up), trim its history, watch it live,
// audit its ledger, run a cleanup pass when no cleanup loop runs, list,
// trace or force-release named leases and list their waiters, count or purge inbox records, count
// the durable hooks, list or delete reader checkpoints, serve a read-only
// web interface, and tell versions.
//
//	go install github.com/seqlease/seqlease/cmd/seqlease@latest
//
//	seqlease [-dsn URL] [-schema NAME] [-json] COMMAND [ARGS]
//
//	migrate up|down|status   apply, roll back (-steps N) or list the schema migrations
//	streams                  every stream: next number, watermark, in flight, expired, open gaps
//	                         and of them the recovered ones, oldest unresolved
//	inspect STREAM           entries with their states (-from N, -limit K); after a trim it
//	                         starts at the low point and says so
//	gaps STREAM              open gaps with reasons (-limit K)
//	fill-gap STREAM NUMBER   commit a payload under an open gap through the fill policy
//	                         (-by WHO, -payload TEXT or -payload-file FILE, -reason R,...)
//	parked                   parked entries with their attempts and last error (-stream S,
//	                         -limit K): recovery kept failing; each holds its stream
//	unpark STREAM NUMBER     let the cleanup loop try a parked entry again, from zero attempts
//	fill-parked STREAM NUMBER
//	                         commit a parked entry's work by hand under a new number
//	                         (-by WHO, -payload TEXT or -payload-file FILE)
//	give-up STREAM NUMBER    give a parked entry up as a gap (-reason R, default given-up)
//	trim STREAM BELOW        remove resolved entries below BELOW (never unresolved ones)
//	watch STREAM             the watermark and the lag, live (-interval D, -count N)
//	audit STREAM             check the ledger against I1-I4 and I6 (-ordered,
//	                         -max-unresolved D) and list the expired, unresolved leases;
//	                         exit 1 on a violation
//	cleanup [STREAM]         one pass of the cleanup loop, gaps only, under its per-stream
//	                         named lease (-dry-run: list what it would do; -durable-hooks)
//	leases                   live named leases: holder, fence, status, time remaining (-owner O,
//	                         -held-for D; -expired: also those past expiry, not yet marked)
//	lease-history NAME       a named lease's audit history with reasons, and who force-released
//	                         and why (-after ID, -limit K)
//	lease-waiters [NAME]     processes waiting for named leases (pending), since when (-limit K)
//	force-release OWNER      end every named lease OWNER holds (a crashed agent's), recording
//	                         who and why (-by WHO, -reason R: needs -by)
//	inbox [CONSUMER]         count the inbox records; -purge-older-than D deletes the old
//	                         ones first, in batches of -batch N
//	hooks                    durable hooks not yet delivered: pending, failing, oldest
//	readers                  every reader's checkpoint with its lag (-reader R, -stream S)
//	delete-checkpoint        remove a reader's checkpoint (-reader R -stream S)
//	serve                    the web interface on -addr (default 127.0.0.1:8080): streams, one
//	                         stream's numbers, gaps, named leases, readers, live; read-only, or
//	                         with actions for the operators of -operators FILE (HTTP Basic)
//	version                  the binary's module version and the schema's migration version
//	help [COMMAND]           the usage, or a command's (as seqlease COMMAND -h)
//
// Every command has its own help: `seqlease COMMAND -h` (or --help, or
// `seqlease help COMMAND`) prints its synopsis, what it does and its flags
// on stdout, exits 0 and touches no database.
//
// In `streams`, OPEN GAPS counts every gap not filled; RECOVERED says how
// many of them had their work recovered under a new number (nothing lost);
// the rest lost their work, which the pipeline must redeliver or an operator
// fill (fill-gap). EXPIRED and RECOVERED are counted by listing entries, up
// to 10,000 per stream: beyond that the table shows 10000+ and the JSON sets
// expired_capped or open_gaps_recovered_capped.
//
// `cleanup` is for when no cleanup loop runs (after a crash of every
// process): it resolves expired leases as the loop does, in number order
// per stream and under the loop's stream lease, but by gaps only, since
// recovering work needs the application's trackers, and without the
// application's hooks (with -durable-hooks it records durable hooks for the
// application's loop to deliver).
//
// The connection comes from -dsn, else DATABASE_URL, else the standard PG*
// environment variables. Output is a table; -json prints JSON for scripts,
// with snake_case keys throughout (durations are integers in nanoseconds,
// in keys ending in _ns; times are RFC 3339), and an empty list is [].
// Notes that are not the output (a trimmed range skipped, more pages) go to
// stderr. Exit codes: 0 success, 1 failure (including an audit that found
// violations, and a cleanup pass that left leases it failed to resolve), 2
// a mistake on the command line.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
