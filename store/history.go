package store

import (
	"errors"
	"fmt"
	"time"
)

// ErrHistoryLost reports that the database answered with less history
// than this process had already seen: a number of a stream handed out (or
// counted) again, a watermark that went back, a fencing token issued
// again. It happens when the server that answers lost committed
// transactions, most often an asynchronous standby promoted by a failover
// before it had received them. The backend refuses the number or fence
// (nothing is handed out twice) and every later lease of the stream, or
// acquire of the name, until the process restarts or the operator accepts
// the server's history (see the backend's AcceptHistory). The error is a
// *HistoryLostError. Retrying the same call cannot succeed.
var ErrHistoryLost = errors.New("seqlease: the database lost history")

// What a HistoryLostError says went back.
const (
	// LostNumber: a lease, an append or a recovery got a number this
	// process had already seen handed out (or readable).
	LostNumber = "number"
	// LostWatermark: a read saw the stream's watermark below one it had
	// seen. A read refuses nothing (it may have gone to a replica that is
	// behind); it is only counted.
	LostWatermark = "watermark"
	// LostFence: an acquire of a named lease got a fencing token (or saw
	// a holder's fence) at or below one it had seen.
	LostFence = "fence"
)

// HistoryLostError reports a stream or a named lease whose history the
// database lost. It matches ErrHistoryLost.
type HistoryLostError struct {
	// Stream is the stream whose history went back; empty for a named
	// lease.
	Stream string
	// Name is the named lease whose fence went back; empty for a stream.
	Name string
	// What went back: LostNumber, LostWatermark or LostFence.
	What string
	// Seen is the highest number, watermark or fence this process had
	// seen before the statement that went back.
	Seen int64
	// Got is what that statement answered: at or below Seen (below it,
	// for a watermark).
	Got int64
	// At is when this process found it, by its own clock.
	At time.Time
}

// Error implements error.
func (e *HistoryLostError) Error() string {
	subject := "stream " + QuoteInput(e.Stream)
	if e.Stream == "" {
		subject = "lease " + QuoteInput(e.Name)
	}
	return fmt.Sprintf("%v: %s: %s %d after %d was seen: the server lost committed transactions "+
		"(an asynchronous standby promoted?); refused until the operator accepts its history",
		ErrHistoryLost, subject, e.What, e.Got, e.Seen)
}

// Is makes a *HistoryLostError match ErrHistoryLost.
func (e *HistoryLostError) Is(target error) bool { return target == ErrHistoryLost }

// HistoryHealth is what a backend that checks the database's history
// (HistoryChecker) found.
type HistoryHealth struct {
	// Refused are the streams and names whose leases (acquires) are
	// refused now, because their history went back, each with the
	// finding; they stay until accepted.
	Refused []HistoryLostError
	// Losses counts the findings since the backend was made, by stream
	// (Stream set) or named lease (Name set): one each time one was
	// refused (again, after an acceptance), and one each time a read
	// went back while it was not refused.
	Losses []HistoryLoss
}

// HistoryLoss counts the findings of lost history on one stream or name.
type HistoryLoss struct {
	Stream, Name string
	Count        int64
}

// HistoryChecker is implemented by a backend that notices when the
// database goes back on history it already showed (store/postgres).
type HistoryChecker interface {
	// HistoryHealth reports what it found so far.
	HistoryHealth() HistoryHealth
}
