// Command seqlease is the operator's view of a seqlease database: migrate the
// schema, list streams with their watermarks and in-flight leases, inspect a
// stream's entries and gaps, trim its history, watch it live, audit its
// ledger, list or force-release named leases, and count or purge inbox
// records.
//
//	seqlease [-dsn URL] [-schema NAME] [-json] COMMAND [ARGS]
//
//	migrate up|down|status   apply, roll back (-steps N) or list the schema migrations
//	streams                  every stream: next number, watermark, in flight, expired, open gaps
//	                         and of them the recovered ones, oldest unresolved
//	inspect STREAM           entries with their states (-from N, -limit K)
//	gaps STREAM              open gaps with reasons (-limit K)
//	trim STREAM BELOW        remove resolved entries below BELOW (never unresolved ones)
//	watch STREAM             the watermark and the lag, live (-interval D, -count N)
//	audit STREAM             check the ledger against I1, I2, I4 and I6 (-ordered,
//	                         -max-unresolved D); exit 1 on a violation
//	leases                   live named leases: holder, fence, expiry (-owner O, -held-for D)
//	force-release OWNER      end every named lease OWNER holds (a crashed agent's)
//	inbox [CONSUMER]         count the inbox records; -purge-older-than D deletes the old
//	                         ones first, in batches of -batch N
//
// In `streams`, OPEN GAPS counts every gap not filled; RECOVERED says how
// many of them had their work recovered under a new number (nothing lost);
// the rest lost their work, which the pipeline must redeliver or an operator
// fill. EXPIRED and RECOVERED are counted by listing entries, up to 10,000
// per stream: beyond that the table shows 10000+ and the JSON sets
// expired_capped or open_gaps_recovered_capped.
//
// The connection comes from -dsn, else DATABASE_URL, else the standard PG*
// environment variables. Output is a table; -json prints JSON for scripts
// (an empty list is []). Exit codes: 0 success, 1 failure (including an
// audit that found violations), 2 a mistake on the command line.
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
