package cleanup

import (
	"context"
	"errors"
	"fmt"

	"github.com/seqlease/seqlease/store"
)

// Move is one expired entry's work moved to a new number, as Config.MoveTx
// sees it inside the moving transaction.
type Move struct {
	Stream      string
	Number      int64  // the expired entry's number: a gap pointing at NewNumber once the transaction commits
	NewNumber   int64  // the committed entry that carries the work
	OperationID string // the expired entry's, which the new entry keeps
	Kind        string
	Payload     []byte // the work, as committed under NewNumber
	Method      string // the recovery step that found it: recovery.MethodPartialWork, recovery.MethodRetry, or a custom WorkFinder's name
}

// TxMover is the application's function for the transaction that moves
// expired work (Config.MoveTx): a MoveTxFunc[T] for the backend's
// transaction type T. Only MoveTxFunc implements it.
type TxMover interface {
	// supports reports whether s runs functions of this type in its moving
	// transactions (store.TxRecoverer[T]).
	supports(s Store) bool
	// txType names the transaction type, for errors.
	txType() string
	// recoverTx moves items as RecoverExpiredBatch would, running the
	// function on the moves inside the transaction. fnErr is the
	// function's error: then nothing moved. Any other error leaves the
	// outcome unknown.
	recoverTx(ctx context.Context, s Store, e []store.Entry, items []store.RecoverItem, p *store.RecoverBatchParams) (res []store.RecoverResult, fnErr, err error)
}

// MoveTxFunc is the application's function that runs inside the
// transaction that moves expired work, with the moves it makes: the writes
// the holders would have made inside their committing transactions
// (sequence.CommitTx) are made with the moves, atomically. T is the
// backend's transaction type, pgx.Tx for store/postgres:
//
//	cfg.MoveTx = cleanup.MoveTxFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, moves []cleanup.Move) error {
//		for _, m := range moves {
//			if _, err := tx.Exec(ctx, "INSERT INTO read_model ...", m.OperationID, m.Payload); err != nil {
//				return err
//			}
//		}
//		return nil
//	})
//
// If it fails, the whole transaction rolls back: no entry of the batch
// moves, they stay expired and are tried again next cycle, and the failure
// counts as a failed recovery of the batch's first entry
// (recovery.Config.MaxAttempts). The transaction, the function included, is
// bounded by Config.MoveTxTimeout (ctx ends then, with the same outcome).
// It is not called when nothing moved.
type MoveTxFunc[T any] func(ctx context.Context, tx T, moves []Move) error

func (f MoveTxFunc[T]) supports(s Store) bool {
	_, ok := s.(store.TxRecoverer[T])
	return ok
}

func (MoveTxFunc[T]) txType() string { return fmt.Sprintf("%T", *new(T)) }

func (f MoveTxFunc[T]) recoverTx(ctx context.Context, s Store, es []store.Entry, items []store.RecoverItem, p *store.RecoverBatchParams) ([]store.RecoverResult, error, error) {
	var fnErr error
	res, err := s.(store.TxRecoverer[T]).RecoverExpiredTx(ctx, es[0].Stream, items, p, func(ctx context.Context, tx T, moved []int64) error {
		moves := make([]Move, 0, len(items))
		for i, to := range moved {
			if to == 0 {
				continue
			}
			e := es[i]
			moves = append(moves, Move{Stream: e.Stream, Number: e.Number, NewNumber: to, OperationID: e.OperationID,
				Kind: e.Kind, Payload: items[i].Payload, Method: items[i].RecoveryType})
		}
		fnErr = f(ctx, tx, moves)
		return fnErr
	})
	if fnErr != nil {
		return nil, fnErr, nil
	}
	return res, nil, err
}

// errMoveTx prefixes the failures of Config.MoveTx.
var errMoveTx = errors.New("cleanup: MoveTx failed; the batch rolled back")
