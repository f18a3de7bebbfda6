package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store/postgres"
)

// order is one order a writer places.
type order struct {
	Index    int
	ID       string
	Customer string
	Route    route // its customer's region
	Amount   int64 // cents
	Declined bool  // turned down after its outbox entry was written
	Abandon  bool  // a gap is left in its stream just before it (-abandon)
}

// message is an order's outbox message: the payload of its entry, and the
// data of its JetStream message.
type message struct {
	Order    string `json:"order"`
	Customer string `json:"customer"`
	Seq      int    `json:"seq"` // the customer's Seq-th order: 1, 2, 3, ...
	Amount   int64  `json:"amount"`
}

// generate returns c.orders orders from c.seed. Customer k belongs to
// region k mod c.streams.
func generate(c config, n names) []order {
	r := rand.New(rand.NewPCG(c.seed, c.seed^0x0b0c))
	orders := make([]order, c.orders)
	for i := range orders {
		k := r.IntN(c.customers)
		orders[i] = order{
			Index:    i,
			ID:       fmt.Sprintf("o%06d", i),
			Customer: fmt.Sprintf("c%04d", k),
			Route:    n.route(k % c.streams),
			Amount:   int64(100 + r.IntN(100_000)),
			Declined: c.decline > 0 && i%c.decline == c.decline-1,
			Abandon:  c.abandon > 0 && i%c.abandon == c.abandon-1,
		}
	}
	return orders
}

// writer places orders with their outbox messages.
type writer interface {
	// write places o: its row and its outbox entry, atomically; a declined
	// order leaves neither. placed reports whether it was placed.
	write(ctx context.Context, o order) (placed bool, err error)
	// leaveGap leases a number of stream outside any transaction and gives
	// it up: a gap, which the relay must skip.
	leaveGap(ctx context.Context, stream string) error
	// rows returns the order rows of the run: order id -> the customer's
	// sequence number of the order.
	rows(ctx context.Context) (map[string]int, error)
}

// Order tables of the example, in the schema of -schema. Rows are keyed by
// the run, so runs share the tables without meeting.
const (
	customersTable = "outbox_customers"
	ordersTable    = "outbox_orders"
)

// pgWriter places orders on PostgreSQL.
type pgWriter struct {
	pool      *pgxpool.Pool
	run       string
	st        *postgres.Store  // the root Store, on the pool
	leaser    *sequence.Leaser // on st: InTx per transaction, and leaveGap
	watch     *barrier.Barrier // runs st's Watch; nil: none (the notices go in the transactions)
	customers string           // quoted, schema-qualified
	orders    string
}

// newPGWriter makes the order tables if needed and a writer over st, the
// Store on pool. With watch, it starts a barrier on st, whose Watch takes
// over the notices of what the writers' transactions commit (see write);
// close stops it.
func newPGWriter(ctx context.Context, pool *pgxpool.Pool, st *postgres.Store, schema, run string, watch bool) (*pgWriter, error) {
	w := &pgWriter{
		pool: pool, run: run, st: st,
		customers: pgx.Identifier{schema, customersTable}.Sanitize(),
		orders:    pgx.Identifier{schema, ordersTable}.Sanitize(),
	}
	_, err := pool.Exec(ctx, `
		CREATE TABLE IF NOT EXISTS `+w.customers+` (
			run text NOT NULL, id text NOT NULL, orders int NOT NULL,
			PRIMARY KEY (run, id));
		CREATE TABLE IF NOT EXISTS `+w.orders+` (
			run text NOT NULL, id text NOT NULL, customer text NOT NULL,
			seq int NOT NULL, amount bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now(),
			PRIMARY KEY (run, id))`)
	if err != nil {
		return nil, fmt.Errorf("order tables: %w", err)
	}
	cfg := &sequence.Config{Owner: "outbox-writer", UnorderedOnly: true} // appends only
	if watch {
		if w.watch, err = barrier.New(st, nil); err != nil {
			return nil, err
		}
		if err := w.watch.Start(ctx); err != nil {
			return nil, err
		}
		cfg.Barrier = w.watch
	}
	if w.leaser, err = sequence.New(st, cfg); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

// close stops the writer's barrier, if it runs one.
func (w *pgWriter) close() {
	if w.watch != nil {
		w.watch.Stop()
	}
}

// write is the transactional outbox write, whole: one transaction of the
// application's, in which
//
//  1. the customer's row is locked (and its order count bumped): a
//     customer's orders are written one at a time, in order;
//  2. the order's row is inserted;
//  3. the order's outbox entry is appended (Leaser.Append through the
//     Store as seen from the transaction, postgres.Store.InTx): one
//     statement takes the stream's next number and inserts the entry
//     committed. It takes the stream's counter row lock, held until the
//     transaction ends, so the numbers of a stream are handed out in the
//     order their transactions commit, and a later order of a customer
//     gets a later number;
//  4. the transaction commits: the row and the message exist together, or
//     (the order declined, an error, a crash) neither does. A rollback also
//     undoes the counter's increment, so the stream has no hole.
//
// The locks are always taken in this order (customer, then stream), so two
// writers never deadlock. Appending last keeps the stream's counter locked
// for the least time: writers of a stream wait for each other only from the
// append to the commit.
//
// No NOTIFY is sent inside the transaction while the root Store's Watch
// runs (w.watch): the Store in the transaction hands the new number to it
// with the transaction's id, and the Watch notices it to the relays once
// the transaction committed. A NOTIFY in the transaction would make
// PostgreSQL commit every notifying transaction of the cluster one at a
// time (docs/outbox.md has the figures).
func (w *pgWriter) write(ctx context.Context, o order) (bool, error) {
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(ctx) }() // a no-op after Commit
	var seq int
	if err := tx.QueryRow(ctx, `INSERT INTO `+w.customers+` AS c (run, id, orders) VALUES ($1, $2, 1)
		ON CONFLICT (run, id) DO UPDATE SET orders = c.orders + 1 RETURNING orders`, w.run, o.Customer).Scan(&seq); err != nil {
		return false, fmt.Errorf("customer %s: %w", o.Customer, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+w.orders+` (run, id, customer, seq, amount) VALUES ($1, $2, $3, $4, $5)`,
		w.run, o.ID, o.Customer, seq, o.Amount); err != nil {
		return false, fmt.Errorf("order %s: %w", o.ID, err)
	}
	payload, _ := json.Marshal(message{Order: o.ID, Customer: o.Customer, Seq: seq, Amount: o.Amount})
	inTx := w.leaser.InTx(w.st.InTx(tx)) // the Leaser in this transaction: cheap, one per transaction
	if _, err := inTx.Append(ctx, o.Route.stream, &sequence.AppendOpts{OperationID: o.ID, Kind: "order-placed"}, payload); err != nil {
		return false, fmt.Errorf("append: %w", err)
	}
	if o.Declined {
		return false, nil // the deferred rollback undoes the rows, the number and the entry
	}
	return true, tx.Commit(ctx)
}

func (w *pgWriter) leaveGap(ctx context.Context, stream string) error {
	l, err := w.leaser.Lease(ctx, stream, &sequence.LeaseOpts{Kind: "abandoned"})
	if err != nil {
		return err
	}
	return l.Release(ctx)
}

func (w *pgWriter) rows(ctx context.Context) (map[string]int, error) {
	rs, err := w.pool.Query(ctx, `SELECT id, seq FROM `+w.orders+` WHERE run = $1`, w.run)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	var id string
	var seq int
	_, err = pgx.ForEachRow(rs, []any{&id, &seq}, func() error {
		out[id] = seq
		return nil
	})
	return out, err
}

// memWriter places orders on the in-memory backend. There is no database
// transaction to put the order and its entry in: a per-customer mutex
// stands for the customer's row lock, and a declined order, whose number is
// leased already, gives it up (a gap, which the relay skips) where
// PostgreSQL would roll the number back. A crash of the process loses
// everything in memory anyway, entries and orders alike.
type memWriter struct {
	leaser *sequence.Leaser
	mu     sync.Mutex
	seqs   map[string]*customer
	orders map[string]int // id -> the customer's sequence number
}

type customer struct {
	mu     sync.Mutex
	orders int
}

func newMemWriter(leaser *sequence.Leaser) *memWriter {
	return &memWriter{leaser: leaser, seqs: map[string]*customer{}, orders: map[string]int{}}
}

func (w *memWriter) customer(id string) *customer {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.seqs[id]
	if c == nil {
		c = &customer{}
		w.seqs[id] = c
	}
	return c
}

func (w *memWriter) write(ctx context.Context, o order) (bool, error) {
	c := w.customer(o.Customer)
	c.mu.Lock() // the customer's "row lock", held until the entry is written
	defer c.mu.Unlock()
	l, err := w.leaser.Lease(ctx, o.Route.stream, &sequence.LeaseOpts{OperationID: o.ID, Kind: "order-placed"})
	if err != nil {
		return false, fmt.Errorf("lease: %w", err)
	}
	if o.Declined {
		return false, l.Release(ctx) // no rollback here: the number becomes a gap
	}
	payload, _ := json.Marshal(message{Order: o.ID, Customer: o.Customer, Seq: c.orders + 1, Amount: o.Amount})
	if err := l.Complete(ctx, payload); err != nil {
		return false, fmt.Errorf("complete: %w", err)
	}
	c.orders++
	w.mu.Lock()
	w.orders[o.ID] = c.orders
	w.mu.Unlock()
	return true, nil
}

func (w *memWriter) leaveGap(ctx context.Context, stream string) error {
	l, err := w.leaser.Lease(ctx, stream, &sequence.LeaseOpts{Kind: "abandoned"})
	if err != nil {
		return err
	}
	return l.Release(ctx)
}

func (w *memWriter) rows(context.Context) (map[string]int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int, len(w.orders))
	for id, seq := range w.orders {
		out[id] = seq
	}
	return out, nil
}
