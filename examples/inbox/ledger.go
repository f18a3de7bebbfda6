package main

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqlease/seqlease/migrations"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
)

// inboxConsumer is the name the inbox records of this demo are kept under.
const inboxConsumer = "inbox-demo/payments"

// ledger is the application: accounts credited by payments. apply is one
// transaction: the inbox record of the message and, on its first receipt,
// the credit.
type ledger interface {
	// apply records that message id of run was received and, if it is
	// the first receipt, credits p; first is false for a duplicate, which
	// changes nothing.
	apply(ctx context.Context, run, id string, p payment) (first bool, err error)
	// tally returns how often each payment of run was credited (from the
	// journal of credits) and the balance of each account in run.
	tally(ctx context.Context, run string) (credits map[string]int, balances map[string]int64, err error)
	// inbox is the store that keeps the inbox records.
	inbox() inboxStore
}

// inboxStore is what the demo uses of the store's inbox records.
type inboxStore interface {
	CountReceived(ctx context.Context, consumer string) (int64, error)
	PurgeReceived(ctx context.Context, p *store.PurgeReceivedParams) (int64, error)
}

// memLedger keeps the accounts in memory next to a memory store's inbox
// records. Its mutex plays the transaction: the record and the credit are
// made under it, so no one sees one without the other.
type memLedger struct {
	st       *memory.Store
	noInbox  bool // credit every delivery, duplicates too (tests: the check must catch it)
	mu       sync.Mutex
	credits  map[string]int
	balances map[string]int64
}

func newMemLedger(noInbox bool) *memLedger {
	return &memLedger{st: memory.New(nil), noInbox: noInbox, credits: map[string]int{}, balances: map[string]int64{}}
}

func (l *memLedger) apply(ctx context.Context, _, id string, p payment) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	first, err := l.st.MarkReceived(ctx, inboxConsumer, id, nil)
	if err != nil || (!first && !l.noInbox) {
		return false, err
	}
	l.credits[id]++
	l.balances[p.Account] += p.Amount
	return true, nil
}

func (l *memLedger) tally(context.Context, string) (map[string]int, map[string]int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	credits := make(map[string]int, len(l.credits))
	for k, v := range l.credits {
		credits[k] = v
	}
	balances := make(map[string]int64, len(l.balances))
	for k, v := range l.balances {
		balances[k] = v
	}
	return credits, balances, nil
}

func (l *memLedger) inbox() inboxStore { return l.st }

// pgLedger keeps the accounts in PostgreSQL: a journal of credits (with no
// unique key on the payment, so a double credit would show) and a balance
// per account, in the demo's schema next to seqlease's tables.
type pgLedger struct {
	pool    *pgxpool.Pool
	schema  string
	st      *postgres.Store // on the pool: purge and counts, and InTx in each transaction
	credit  string          // the statement of a credit
	credits string          // quoted table names
	balance string
}

// openPGLedger connects, migrates the schema and creates the demo's tables.
func openPGLedger(ctx context.Context, c config) (*pgLedger, error) {
	pool, err := pgxpool.New(ctx, c.dsn)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	l := &pgLedger{
		pool: pool, schema: c.schema,
		credits: pgx.Identifier{c.schema, "inbox_demo_credits"}.Sanitize(),
		balance: pgx.Identifier{c.schema, "inbox_demo_balances"}.Sanitize(),
	}
	if err := l.setup(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return l, nil
}

func (l *pgLedger) setup(ctx context.Context) error {
	m, err := migrations.New(&migrations.Config{Schema: l.schema})
	if err != nil {
		return err
	}
	if _, err := m.Up(ctx, l.pool); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if l.st, err = postgres.New(l.pool, &postgres.Config{Schema: l.schema}); err != nil {
		return err
	}
	_, err = l.pool.Exec(ctx, `
CREATE TABLE IF NOT EXISTS `+l.credits+` (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	run text NOT NULL, payment_id text NOT NULL, account text NOT NULL, amount bigint NOT NULL);
CREATE INDEX IF NOT EXISTS inbox_demo_credits_run ON `+l.credits+` (run);
CREATE TABLE IF NOT EXISTS `+l.balance+` (
	run text NOT NULL, account text NOT NULL, balance bigint NOT NULL, PRIMARY KEY (run, account))`)
	if err != nil {
		return fmt.Errorf("demo tables: %w", err)
	}
	// One statement: the journal row and the balance.
	l.credit = `
WITH c AS (INSERT INTO ` + l.credits + ` (run, payment_id, account, amount) VALUES ($1, $2, $3, $4))
INSERT INTO ` + l.balance + ` AS b (run, account, balance) VALUES ($1, $3, $4)
ON CONFLICT (run, account) DO UPDATE SET balance = b.balance + EXCLUDED.balance`
	return nil
}

// apply is the inbox consumer's transaction: the Store as seen from the
// transaction (InTx) records the message, and only a first receipt credits
// the account. Both commit together or not at all.
func (l *pgLedger) apply(ctx context.Context, run, id string, p payment) (first bool, err error) {
	err = pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		if first, err = l.st.InTx(tx).MarkReceived(ctx, inboxConsumer, id, nil); err != nil || !first {
			return err
		}
		_, err = tx.Exec(ctx, l.credit, run, id, p.Account, p.Amount)
		return err
	})
	return first, err
}

func (l *pgLedger) tally(ctx context.Context, run string) (map[string]int, map[string]int64, error) {
	credits := map[string]int{}
	balances := map[string]int64{}
	rows, err := l.pool.Query(ctx, `SELECT payment_id FROM `+l.credits+` WHERE run = $1`, run)
	if err != nil {
		return nil, nil, err
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, nil, err
		}
		credits[id]++
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	rows, err = l.pool.Query(ctx, `SELECT account, balance FROM `+l.balance+` WHERE run = $1`, run)
	if err != nil {
		return nil, nil, err
	}
	for rows.Next() {
		var account string
		var balance int64
		if err := rows.Scan(&account, &balance); err != nil {
			return nil, nil, err
		}
		balances[account] = balance
	}
	return credits, balances, rows.Err()
}

func (l *pgLedger) inbox() inboxStore { return l.st }

func (l *pgLedger) close() { l.pool.Close() }

// credited counts the credits of run so far (the progress of a -procs run).
func (l *pgLedger) credited(ctx context.Context, run string) (int, error) {
	var n int
	err := l.pool.QueryRow(ctx, `SELECT count(*) FROM `+l.credits+` WHERE run = $1`, run).Scan(&n)
	return n, err
}
