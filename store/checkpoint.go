package store

import (
	"errors"
	"fmt"
	"time"
)

// Checkpoint is the saved position of a named reader in a stream: the last
// number the reader processed. Listings (ListCheckpoints) also give the
// stream's watermark, read in the same snapshot, so that
// Watermark - Position is the reader's lag.
type Checkpoint struct {
	Reader   string
	Stream   string
	Position int64 // the last number the reader processed; it resumes after it
	// UpdatedAt is when the position was last saved, by the backend's clock.
	UpdatedAt time.Time
	// Watermark is the stream's watermark when the listing was read (0 for
	// a stream that does not exist yet).
	Watermark int64
}

// Lag returns how many resolved numbers the reader has still to pass:
// Watermark - Position, never negative.
func (c Checkpoint) Lag() int64 { return max(c.Watermark-c.Position, 0) }

// SaveCheckpointParams are the per-call options of SaveCheckpoint. A nil
// pointer means the defaults.
type SaveCheckpointParams struct {
	Now *time.Time // pins the backend's clock for UpdatedAt; nil uses its now
}

// ListCheckpointsParams select checkpoints. Results come in (reader,
// stream) byte order, starting after the cursor (AfterReader, AfterStream).
// A nil pointer means every checkpoint, from the start, DefaultListLimit of
// them.
type ListCheckpointsParams struct {
	Reader      string // only this reader's; empty means every reader
	Stream      string // only this stream's; empty means every stream
	AfterReader string // the cursor: the last (reader, stream) of the previous page
	AfterStream string
	Limit       int // at most this many; zero means DefaultListLimit
}

// Errors of checkpoints.
var (
	// ErrInvalidReader reports an empty, over-long or malformed reader
	// name (the rules of stream names). It matches ErrInvalidArgument.
	ErrInvalidReader = newInvalid("invalid reader name")
	// ErrCheckpointBackwards reports a save below the reader's saved
	// position: a checkpoint never moves back (delete it first to rewind
	// on purpose). The error is a *CheckpointError.
	ErrCheckpointBackwards = errors.New("seqlease: checkpoint would move backwards")
	// ErrCheckpointAhead reports a save beyond the stream's watermark: a
	// reader can only have processed resolved entries. The error is a
	// *CheckpointError.
	ErrCheckpointAhead = errors.New("seqlease: checkpoint beyond the watermark")
	// ErrCheckpointNotFound reports a DeleteCheckpoint of a checkpoint that
	// was never saved (or was deleted already).
	ErrCheckpointNotFound = errors.New("seqlease: checkpoint not found")
)

// CheckpointError is a refused SaveCheckpoint. It matches Err, which is
// ErrCheckpointBackwards or ErrCheckpointAhead.
type CheckpointError struct {
	Err       error
	Reader    string
	Stream    string
	Current   int64 // the saved position (0 when none was saved)
	Asked     int64 // the position the call asked for
	Watermark int64 // the stream's watermark, set with ErrCheckpointAhead
}

// Error implements error.
func (e *CheckpointError) Error() string {
	if errors.Is(e.Err, ErrCheckpointAhead) {
		return fmt.Sprintf("%v: reader %s, stream %s: asked %d, watermark %d", e.Err, QuoteInput(e.Reader), QuoteInput(e.Stream), e.Asked, e.Watermark)
	}
	return fmt.Sprintf("%v: reader %s, stream %s: at %d, asked %d", e.Err, QuoteInput(e.Reader), QuoteInput(e.Stream), e.Current, e.Asked)
}

// Unwrap returns Err, so that errors.Is matches the sentinel.
func (e *CheckpointError) Unwrap() error { return e.Err }

// ValidateReader checks a reader name: the rules of stream names, 1 to
// MaxNameLen bytes of valid UTF-8 with no control characters.
func ValidateReader(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty", ErrInvalidReader)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrInvalidReader, len(name), MaxNameLen)
	}
	if err := checkText(name); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidReader, err)
	}
	return nil
}

// ValidateCheckpointKey checks the (reader, stream) pair that names a
// checkpoint.
func ValidateCheckpointKey(reader, stream string) error {
	if err := ValidateReader(reader); err != nil {
		return err
	}
	return ValidateStream(stream)
}

// ValidateSaveCheckpoint checks a SaveCheckpoint call: a valid reader and
// stream, and a position of at least 0.
func ValidateSaveCheckpoint(reader, stream string, position int64) error {
	if err := ValidateCheckpointKey(reader, stream); err != nil {
		return err
	}
	if position < 0 {
		return fmt.Errorf("%w: position %d", ErrInvalidNumber, position)
	}
	return nil
}

// ValidateListCheckpoints checks a ListCheckpoints call and returns its
// effective limit: valid names where set (filters and cursor) and a limit in
// range. A nil p means the defaults.
func ValidateListCheckpoints(p *ListCheckpointsParams) (int, error) {
	if p == nil {
		p = &ListCheckpointsParams{}
	}
	for _, name := range []string{p.Reader, p.AfterReader} {
		if name != "" {
			if err := ValidateReader(name); err != nil {
				return 0, err
			}
		}
	}
	for _, name := range []string{p.Stream, p.AfterStream} {
		if name != "" {
			if err := ValidateStream(name); err != nil {
				return 0, err
			}
		}
	}
	return ListLimit(p.Limit)
}

// SaveDecision decides a SaveCheckpoint from the saved position (0 and
// !exists when none) and the stream's watermark: nil with write true to
// write, nil with write false for a repeat of the saved position (a no-op
// success), or the *CheckpointError of a refusal. Both backends decide
// with it.
func SaveDecision(reader, stream string, position, current int64, exists bool, watermark int64) (write bool, err error) {
	switch {
	case position > watermark:
		return false, &CheckpointError{Err: ErrCheckpointAhead, Reader: reader, Stream: stream,
			Current: current, Asked: position, Watermark: watermark}
	case exists && position < current:
		return false, &CheckpointError{Err: ErrCheckpointBackwards, Reader: reader, Stream: stream,
			Current: current, Asked: position, Watermark: watermark}
	case exists && position == current:
		return false, nil
	}
	return true, nil
}
