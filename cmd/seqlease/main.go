// Command seqlease is the operator's view of a seqlease database: migrate the
// schema, list streams with their watermarks and in-flight leases, inspect a
// stream's entries and gaps, trim its history, and watch it live.
//
//	seqlease [-dsn URL] [-schema NAME] [-json] COMMAND [ARGS]
//
//	migrate up|down|status   apply, roll back (-steps N) or list the schema migrations
//	streams                  every stream: next number, watermark, in flight, expired, open gaps, oldest unresolved
//	inspect STREAM           entries with their states (-from N, -limit K)
//	gaps STREAM              open gaps with reasons (-limit K)
//	trim STREAM BELOW        remove resolved entries below BELOW (never unresolved ones)
//	watch STREAM             the watermark and the lag, live (-interval, -count)
//
// The connection comes from -dsn, else DATABASE_URL, else the standard PG*
// environment variables. Output is a table; -json prints JSON for scripts.
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
