// Package doccheck keeps the documentation honest: its tests fail `make
// test` when a relative link in the repository's Markdown points nowhere,
// or when a Go code sample in README.md or docs/ no longer compiles against
// the library.
//
// # Links
//
// Links finds every Markdown link and image in a file (outside code
// blocks and code spans) and every reference to a docs/ path in the
// repository's Go files and Makefile. A relative target must name an
// existing file or directory; a "#fragment" on a Markdown file must name
// one of its headings, spelled as GitHub spells the anchor (lower case,
// punctuation dropped, spaces as hyphens, "-1", "-2" for repeats).
//
// # Code samples
//
// Samples extracts every ```go block of a Markdown file. A block is
// type-checked with go/types against the packages it uses, compiled by
// `go list -export` in the examples module (which sees the library through
// its replace directive, and also has NATS, Prometheus and testify), so a
// sample may use the library, pgx, the OpenTelemetry SDK, JetStream and
// the standard library. Samples are written for readers, so the check
// follows these conventions:
//
//   - A block that parses as declarations (after an added package clause)
//     is checked as a file; otherwise its statements are wrapped in
//     func(ctx context.Context, pool *pgxpool.Pool, tx pgx.Tx,
//     st *postgres.Store, b *barrier.Barrier, leaser *sequence.Leaser,
//     m *lease.Manager, t *testing.T) error, so those names have their
//     usual types unless the sample declares its own.
//   - Imports are added for the packages a sample names (store, lease,
//     pgx, time, ...) unless it has its own import declarations.
//   - An elision "{ ... }" stands for a block, a line "..." for
//     statements, and ", ...)" for further arguments.
//   - Other undeclared plain identifiers (your code: process, apply,
//     eventID) are allowed; anything derived from them goes unchecked, but
//     every use of a library package, and of values the sample or the
//     placeholders declare, is checked. Unused variables are allowed.
//   - A block marked ```go fragment is not checked: use it only for what
//     is not Go code (a list of method signatures).
package doccheck
