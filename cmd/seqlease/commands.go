package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

// command is one subcommand: its synopsis, its help and how it runs. Every
// command parses its flags before it does anything else, so that
// `seqlease COMMAND -h` (and `seqlease help COMMAND`, which runs it with
// -h) prints its help and changes nothing.
type command struct {
	name    string
	args    string // the positional arguments and the command's flags, for the synopsis
	summary string // the line of the command list
	help    string // the command's own help, printed above its flags
	run     func(c *cli, ctx context.Context, args []string) error
}

// commands lists every subcommand, in the order of the usage. It is filled
// by init: the commands' functions print the usage, which reads it.
var commands []command

func init() {
	commands = []command{
		{"migrate", "up|down|status [-steps N] | sql VERSION [-down]", "apply, roll back or list the schema migrations; print one's SQL", helpMigrate, (*cli).migrate},
		{"streams", "", "every stream: next number, watermark, in flight, expired, open gaps, oldest unresolved", helpStreams, (*cli).streams},
		{"inspect", "STREAM [-from N] [-limit K]", "a stream's entries with their states", helpInspect, (*cli).inspect},
		{"gaps", "STREAM [-limit K]", "a stream's open gaps with their reasons", helpGaps, (*cli).gaps},
		{"fill-gap", "STREAM NUMBER -by WHO (-payload TEXT | -payload-file FILE) [-reason R,...]", "commit a payload under an open gap, recorded as filled", helpFillGap, (*cli).fillGap},
		{"parked", "[-stream S] [-limit K]", "parked entries: recovery kept failing; each holds its stream until an operator chooses", helpParked, (*cli).parked},
		{"unpark", "STREAM NUMBER", "let the cleanup loop try a parked entry again, from zero attempts", helpUnpark, (*cli).unpark},
		{"fill-parked", "STREAM NUMBER -by WHO (-payload TEXT | -payload-file FILE)", "commit a parked entry's work by hand under a new number", helpFillParked, (*cli).fillParked},
		{"give-up", "STREAM NUMBER [-reason R]", "give a parked entry up as a gap: its stream goes on", helpGiveUp, (*cli).giveUp},
		{"trim", "STREAM BELOW [-force]", "remove resolved entries below BELOW (never unresolved ones, nor unread by a reader)", helpTrim, (*cli).trim},
		{"watch", "STREAM [-interval D] [-count N]", "the watermark and the lag, live", helpWatch, (*cli).watch},
		{"audit", "STREAM [-ordered] [-max-unresolved D]", "check a stream's ledger against the invariants; report expired leases", helpAudit, (*cli).audit},
		{"cleanup", "[STREAM] [-dry-run] [-durable-hooks]", "one cleanup pass: expired leases become gaps, in order (-dry-run: only list)", helpCleanup, (*cli).cleanup},
		{"leases", "[-owner O] [-held-for D] [-expired]", "live named leases: holder, fence, status, time remaining", helpLeases, (*cli).leases},
		{"lease-history", "NAME [-after ID] [-limit K]", "a named lease's audit history: events, reasons, who force-released and why", helpLeaseHistory, (*cli).leaseHistory},
		{"lease-waiters", "[NAME] [-limit K]", "processes waiting for named leases (pending), since when", helpLeaseWaiters, (*cli).leaseWaiters},
		{"force-release", "OWNER [-by WHO [-reason R]]", "end every named lease OWNER holds (a crashed agent's), recording who and why", helpForceRelease, (*cli).forceRelease},
		{"inbox", "[CONSUMER] [-purge-older-than D] [-batch N]", "count (and purge) the inbox records", helpInbox, (*cli).inbox},
		{"hooks", "", "durable hooks of the cleanup loop not yet delivered", helpHooks, (*cli).hooks},
		{"readers", "[-reader R] [-stream S]", "every reader's checkpoint with its lag", helpReaders, (*cli).readers},
		{"delete-checkpoint", "-reader R -stream S", "remove a reader's checkpoint", helpDeleteCheckpoint, (*cli).deleteCheckpoint},
		{"serve", "[-addr HOST:PORT] [-allow-host NAME]... [-refresh D] [-operators FILE]", "the web interface: streams, gaps, leases, readers, live; actions for -operators", helpServe, (*cli).serve},
		{"config", "[get [KEY] | list | set KEY VALUE [-by WHO] | unset KEY]", "read and change the settings table: defaults the whole fleet follows", helpConfig + settingsHelp(), (*cli).config},
		{"version", "", "the binary's module version, and the schema's migration version", helpVersion, (*cli).version},
	}
}

// lookup returns the command called name.
func lookup(name string) (command, bool) {
	for _, cmd := range commands {
		if cmd.name == name {
			return cmd, true
		}
	}
	return command{}, false
}

const globalSynopsis = "seqlease [-dsn URL] [-schema NAME] [-json]"

// printUsage prints the usage of the whole command.
func printUsage(w io.Writer) {
	fmt.Fprintf(w, "usage: %s COMMAND [ARGS]\n\ncommands:\n", globalSynopsis)
	for _, cmd := range commands {
		fmt.Fprintf(w, "  %-18s %s\n", cmd.name, cmd.summary)
	}
	fmt.Fprint(w, `  help [COMMAND]     this text, or a command's help (as seqlease COMMAND -h)

global flags (before or after the command):
  -dsn URL      PostgreSQL URL (default: DATABASE_URL, else the PG* variables)
  -schema NAME  seqlease schema (default "seqlease")
  -json         print JSON for scripts: snake_case keys, an empty list is []

Exit codes: 0 success, 1 failure (including an audit that found violations),
2 a mistake on the command line.
`)
}

// printCommandUsage prints cmd's synopsis, help and flags (fs's, without
// the global ones).
func printCommandUsage(w io.Writer, cmd command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: %s %s", globalSynopsis, cmd.name)
	if cmd.args != "" {
		fmt.Fprint(w, " "+cmd.args)
	}
	fmt.Fprintf(w, "\n\n%s\n", strings.TrimSpace(cmd.help))
	own := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	own.SetOutput(w)
	fs.VisitAll(func(f *flag.Flag) {
		if !globalFlag(f.Name) {
			own.Var(f.Value, f.Name, f.Usage)
			own.Lookup(f.Name).DefValue = f.DefValue
		}
	})
	n := 0
	own.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprint(w, "\nflags:\n")
		own.PrintDefaults()
	}
	fmt.Fprint(w, "\nglobal flags: -dsn URL, -schema NAME, -json (seqlease help)\n")
}

func globalFlag(name string) bool { return name == "dsn" || name == "schema" || name == "json" }

const helpConfig = `
Reads and changes the settings table of -schema: the defaults of named
leases and of the cleanup loop that every process on the schema follows,
read at its Start and again on every change, without a redeploy.

  config              every known setting, set or not (config get, config list)
  config get KEY      one setting
  config set KEY VAL  set it (-by WHO is kept with it); every process
                      applies it within a moment
  config unset KEY    remove it: the processes fall back to their Go
                      Config or the library default

A field a process sets in its Go Config (lease.Config, cleanup.Config)
wins over the table; the table wins over the library default. A value is
checked before anything is written, with the error the Go Config gives its
field: an unknown key, a value of the wrong type or out of range changes
nothing. Durations are Go durations (30s, 1m30s), switches true or false,
shares decimals, a boost a factor and an end ("2 until
2026-01-02T15:04:05Z"). Keys:
`

const helpMigrate = `
Applies (up), rolls back (down, -steps migrations) or lists (status) the
schema migrations of -schema. Migrations run under an advisory lock, so
concurrent runs wait for each other; up and down print the migrations they
applied or rolled back, status every migration this binary knows and every
one the database recorded.

sql VERSION prints the SQL of one migration this binary embeds, its up
file (-down: its down file) as is, without connecting: for teams that
apply the schema with goose or golang-migrate. Its table names are
unqualified: run it with search_path set to the schema.`

const helpStreams = `
Lists every stream: the next number, the watermark, the leases in flight,
the expired ones (not yet resolved by a cleaner), the open gaps and of them
the RECOVERED ones (their work was recovered under a new number: nothing
lost; the others lost their work, which the pipeline must redeliver or an
operator fill), and the oldest unresolved number with its age. EXPIRED and
RECOVERED are counted by listing entries, up to 10,000 per stream: beyond
that the table shows 10000+ and the JSON sets expired_capped or
open_gaps_recovered_capped.`

const helpInspect = `
Lists a stream's entries from -from on, with their states (leased,
committed, gap), owners, expiries, payload sizes and recovery notes. After
a trim the entries below the stream's low point are gone: when -from is
below it, the listing starts at the low point, and a note on stderr says
so.`

const helpGaps = `
Lists a stream's open gaps (not filled), with their reasons and, for those
whose work was recovered, the number it moved to.`

const helpFillGap = `
Commits a payload under an open gap, through the gap package's fill
policy: the entry becomes committed, keeps its gap reason and records -by
and the time as its filler. It refuses, changing nothing, a number that is
not an open gap (leased, committed, already filled; a typed "not a gap"
error), a gap whose work was recovered under another number (filling it
would apply that work twice), and with -reason a gap whose reason is not
listed. Running the command is the operator's approval: without -reason
every other open gap may be filled. Filling does not move the watermark;
readers already past the number saw it as a gap.`

const helpTrim = `
Removes the resolved entries of a stream below BELOW (retention), never an
unresolved one nor the watermark's: the new low point is at most the
watermark + 1. It refuses, changing nothing, to remove entries a reader
with a checkpoint on the stream has not read (BELOW above its checkpoint
+ 1), naming the reader: -force trims anyway, and that reader can no
longer read them (seqlease readers lists the checkpoints;
delete-checkpoint removes a reader that is gone).`

const helpWatch = `
Prints the watermark, its progress, the lag (handed out but not yet below
the watermark) and the leases in flight every -interval, -count times or
until interrupted. With -json, one JSON object per line.`

const helpAudit = `
Reads the stream's whole ledger and checks it against the invariants: I1
(dense: no hole, no duplicate), I2 (every entry resolved once, its fields
consistent with its state), with -ordered I4 (written with ordered commits
only), with -max-unresolved D I6 (no lease unresolved longer than D past
its expiry). It always lists the leases that expired and are still
unresolved (a cleanup loop should resolve them within its interval; if none
runs, seqlease cleanup does), counted by listing up to 10,000.

Exit code: 1 when a violation was found, else 0. Expired, unresolved
leases are reported but are a violation only with -max-unresolved, when one
is older than D past its expiry.`

const helpCleanup = `
Runs one pass of the cleanup loop over STREAM, or over every stream, for
when no cleanup loop runs (every process crashed, or none runs one): each
expired lease becomes a gap with reason "expired", in number order per
stream, under the same per-stream named lease the loop takes
(seqlease/cleanup/STREAM), so it never races a running cleaner: a stream
another cleaner leads is skipped and counted. An expired lease behind a
live earlier lease of its stream waits for it, as in the loop.

The pass resolves by gaps only: recovering the work under a new number
needs the application's trackers (WorkTracker, OperationTracker), which
only the application has. To recover work, start the application's
cleanup loop instead. For the same reason the application's in-process
hooks (cleanup.Config.Hooks) do not run for the entries this pass
resolves; with -durable-hooks the pass records a durable hook for each of
them, which the application's loop delivers if it has a DurableHook
(without one the records stay pending: seqlease hooks counts them).

With -dry-run it only lists what a pass would do (gap, wait behind a live
lease, skip: another cleaner leads the stream) and changes nothing; it
takes no lease. Exit code 1 when some expired lease could not be resolved
(the error says why), else 0.`

const helpLeases = `
Lists the live named leases: name, owner, fence, status, how long held,
time remaining (by the database clock), renewals. With -expired it also
lists the holdings past their expiry that maintenance has not marked yet:
their status is expired (not active) and they have no time remaining.
Holdings that ended (released, force-released, marked expired) are not
listed: seqlease lease-history NAME shows them.`

const helpLeaseHistory = `
Lists the audit history of the named lease NAME in the order it was
recorded: each event (acquired, renewed, released, expired,
force-released) with why (REASON: renewed, released, expired,
force-released, lost, max-renewals; none for acquired), the owner, the
fence, the expiry after the event and, for a force-release, who did it
(ACTOR) and why (COMMENT), as force-release -by and -reason gave them. An
expired event's reason is lost when another acquire took the name over
before maintenance marked the holding, max-renewals when the holding ran
out having had its maximum renewals. It lists -limit events after the
event -after (paging: a note on stderr gives the next -after when there
are more). History is recorded by the lease.Managers that keep it (the
default) and trimmed after their retention (7 days by default); the
cleanup loop's stream leases record none.`

const helpLeaseWaiters = `
Lists the processes waiting for NAME, else for any named lease: the
waiter (its owner), its status (pending), when it asked for the name by
the database clock and how long it has waited, and the fence of the last
holding it saw. A blocked acquire announces itself and repeats the
announcement every 3 s while it waits; an announcement counts for 10 s,
so a waiter that crashed drops out of the list within 10 s, and one that
got the name or gave up at once.`

const helpForceRelease = `
Ends every live named lease OWNER holds, as when an agent crashed and its
leases must not wait for their expiry. Its holder learns of the loss at its
next renewal; the fences of later holders are larger. -by names who
force-releases and -reason says why: both are recorded in the history of
each lease it ends (seqlease lease-history shows them as ACTOR and
COMMENT). -by may be given alone; -reason needs -by. Text with control
characters, a -by over 200 bytes or a -reason over 1024 bytes is refused
(exit 2), and nothing is released.`

const helpInbox = `
Counts the inbox records of CONSUMER, else of every consumer. With
-purge-older-than D it first deletes those received more than D ago by the
database's clock, in batches of -batch.`

const helpHooks = `
Counts the durable hooks of the cleanup loop not yet delivered: pending,
failing (at least one failed delivery) and the age of the oldest.`

const helpReaders = `
Lists every reader's checkpoint (-reader, -stream to filter) with the
stream's watermark and the lag.`

const helpDeleteCheckpoint = `
Removes a reader's checkpoint of a stream: the reader starts again from the
beginning, or from the position it saves next.`

const helpVersion = `
Prints the binary's module version (from its build information: a
released version when installed with go install ...@VERSION, "(devel)" for
a local build, with the VCS revision when known) and the newest schema
migration it embeds; when the database answers, the schema's migration
version too (0: not migrated), else why it could not be read. Exit code 0
either way.`
