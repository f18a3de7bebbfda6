package sequence

import "github.com/seqlease/seqlease/store"

// Errors of this package: the same values as package store's, so errors.Is
// matches either name.
var (
	ErrInvalidArgument = store.ErrInvalidArgument // any bad input
	ErrInvalidStream   = store.ErrInvalidStream   // empty, over-long or malformed stream name
	ErrInvalidTTL      = store.ErrInvalidTTL      // lease duration not positive or above Config.MaxTTL
	ErrInvalidCount    = store.ErrInvalidCount    // batch size not positive or above store.MaxBatch
	ErrPayloadTooLarge = store.ErrPayloadTooLarge // payload above Config.MaxPayload
	ErrExpired         = store.ErrExpired         // the lease expired by the database clock
	ErrReleased        = store.ErrReleased        // the lease was released
	ErrCommitted       = store.ErrCommitted       // the entry is already committed
	ErrPayloadMismatch = store.ErrPayloadMismatch // a commit repeated with another payload than the one committed
	ErrGap             = store.ErrGap             // the entry was resolved as a gap
	ErrTokenMismatch   = store.ErrTokenMismatch   // the token does not hold the lease
	ErrNotFound        = store.ErrNotFound        // the number was never handed out
)
