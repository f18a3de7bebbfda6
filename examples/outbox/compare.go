package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
)

// The write path alone, four ways (-compare-writes): the same orders, the
// same writers, the same transaction around the customer's row and the
// order's row, and for the outbox message either
//
//   - a plain outbox table: INSERT of the payload under a bigserial id. Its
//     ids are not dense (a rollback burns one) and not in commit order (a
//     transaction may commit after a later id's), so a relay reading it
//     must either guess about holes with a timeout or rely on the log
//     order of logical decoding;
//   - the same with pg_notify in the transaction, as a relay that is woken
//     by LISTEN rather than by polling needs;
//   - the seqlease entry, appended in the transaction while the root
//     Store's Watch runs (what the example's writer does): dense and in
//     commit order per stream, and no NOTIFY in the transaction;
//   - the same without a running Watch, so that the Store in the
//     transaction sends its NOTIFY inside it: what that costs.
//
// No relay runs: this measures what the outbox costs the application's
// transactions.

// plainTable is the plain outbox table of the comparison.
const plainTable = "outbox_plain"

// plainWriter writes orders with a plain outbox-table insert.
type plainWriter struct {
	*pgWriter
	table  string // quoted, schema-qualified
	notify bool
}

func (w *plainWriter) write(ctx context.Context, o order) (bool, error) {
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var seq int
	if err := tx.QueryRow(ctx, `INSERT INTO `+w.customers+` AS c (run, id, orders) VALUES ($1, $2, 1)
		ON CONFLICT (run, id) DO UPDATE SET orders = c.orders + 1 RETURNING orders`, w.run, o.Customer).Scan(&seq); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+w.orders+` (run, id, customer, seq, amount) VALUES ($1, $2, $3, $4, $5)`,
		w.run, o.ID, o.Customer, seq, o.Amount); err != nil {
		return false, err
	}
	payload, _ := json.Marshal(message{Order: o.ID, Customer: o.Customer, Seq: seq, Amount: o.Amount})
	if _, err := tx.Exec(ctx, `INSERT INTO `+w.table+` (stream, payload) VALUES ($1, $2)`, o.Route.stream, payload); err != nil {
		return false, err
	}
	if w.notify {
		if _, err := tx.Exec(ctx, `SELECT pg_notify('outbox_plain', $1)`, o.Route.stream); err != nil {
			return false, err
		}
	}
	if o.Declined {
		return false, nil
	}
	return true, tx.Commit(ctx)
}

// compareWrites measures the four ways, twice each, alternating, and
// prints orders per second.
func compareWrites(ctx context.Context, c config, out io.Writer) error {
	_, pg, pool, closeStore, err := openStore(ctx, c)
	if err != nil {
		return err
	}
	defer closeStore()
	table := pgx.Identifier{c.schema, plainTable}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (
		id bigserial PRIMARY KEY, stream text NOT NULL, payload bytea NOT NULL,
		created_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return err
	}
	ways := []struct {
		name  string
		watch bool // the writer runs the root Store's Watch
		make  func(*pgWriter) writer
	}{
		{"plain outbox insert", false, func(w *pgWriter) writer { return &plainWriter{w, table, false} }},
		{"plain insert + pg_notify", false, func(w *pgWriter) writer { return &plainWriter{w, table, true} }},
		{"seqlease Append, Watch running", true, func(w *pgWriter) writer { return w }},
		{"seqlease Append, NOTIFY in tx", false, func(w *pgWriter) writer { return w }},
	}
	fmt.Fprintf(out, "\nthe write path alone: %d orders (every %dth declined and rolled back), %d writers, %d streams, PostgreSQL\n",
		c.orders, c.decline, c.writers, c.streams)
	for round := 1; round <= 2; round++ {
		for _, way := range ways {
			n := newNames()
			n.streams = c.streams
			pw, err := newPGWriter(ctx, pool, pg, c.schema, n.run, way.watch)
			if err != nil {
				return err
			}
			var wc writeCounts
			start := time.Now()
			err = writeAll(ctx, c, way.make(pw), generate(c, n), &wc)
			elapsed := time.Since(start)
			pw.close()
			if err != nil {
				return fmt.Errorf("%s: %w", way.name, err)
			}
			fmt.Fprintf(out, "round %d  %-32s %6.0f orders/s  (%v)\n", round, way.name, float64(c.orders)/elapsed.Seconds(), elapsed.Round(time.Millisecond))
		}
	}
	return nil
}
