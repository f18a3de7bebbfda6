package migrations

import (
	"errors"
	"fmt"

	"github.com/seqlease/seqlease/store"
)

// ErrInvalidSchema is returned (wrapped) by ValidateSchema and New when a
// schema name is not a plain lower-case PostgreSQL identifier. It also
// matches store.ErrInvalidArgument.
var ErrInvalidSchema error = &invalidError{msg: "migrations: invalid schema name"}

// ErrChecksumMismatch is matched by a *ChecksumError: a migration recorded
// as applied was applied from SQL that differs from the SQL embedded in this
// binary.
var ErrChecksumMismatch = errors.New("migrations: checksum mismatch")

// ErrInvalidSteps is returned (wrapped) by Down when steps is not positive.
// It also matches store.ErrInvalidArgument.
var ErrInvalidSteps error = &invalidError{msg: "migrations: invalid steps"}

// invalidError is a bad-argument sentinel: it matches itself and
// store.ErrInvalidArgument, so callers can treat every seqlease input error
// alike.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }

// Is makes the sentinel match store.ErrInvalidArgument.
func (e *invalidError) Is(target error) bool { return target == store.ErrInvalidArgument }

// ErrUnknownVersion is matched by an *UnknownVersionError: Down was asked to
// roll back a version that this binary does not know, so it has no down SQL
// for it.
var ErrUnknownVersion = errors.New("migrations: unknown version")

// ChecksumError reports that the migration Version was applied from SQL whose
// checksum (Applied, as recorded in the tracking table) differs from the
// checksum of the SQL embedded in this binary (Embedded). It matches
// ErrChecksumMismatch with errors.Is.
//
// A mismatch means the migration files were edited after they were applied
// somewhere; applied migrations are immutable, so the fix is a new migration,
// never an edit.
type ChecksumError struct {
	// Version is the migration's version.
	Version int
	// Name is the migration's name as embedded in this binary.
	Name string
	// Applied is the sha256 hex checksum recorded when it was applied.
	Applied string
	// Embedded is the sha256 hex checksum of the embedded up SQL.
	Embedded string
}

// Error implements error.
func (e *ChecksumError) Error() string {
	return fmt.Sprintf("migrations: checksum mismatch for migration %06d_%s: applied %s, embedded %s",
		e.Version, e.Name, e.Applied, e.Embedded)
}

// Is reports whether target is ErrChecksumMismatch.
func (e *ChecksumError) Is(target error) bool { return target == ErrChecksumMismatch }

// UnknownVersionError reports that the tracking table records Version (under
// Name) as applied, but this binary has no migration with that version: a
// newer binary applied it. It matches ErrUnknownVersion with errors.Is.
type UnknownVersionError struct {
	// Version is the applied version unknown to this binary.
	Version int
	// Name is the name recorded in the tracking table.
	Name string
}

// Error implements error.
func (e *UnknownVersionError) Error() string {
	return fmt.Sprintf("migrations: applied migration %06d_%s is unknown to this binary (applied by a newer version?)",
		e.Version, e.Name)
}

// Is reports whether target is ErrUnknownVersion.
func (e *UnknownVersionError) Is(target error) bool { return target == ErrUnknownVersion }

// ErrPending is matched by the error of a schema that lacks migrations
// this binary needs (a *PendingError).
var ErrPending = errors.New("migrations: schema not migrated")

// PendingError reports that Schema lacks the migrations Pending (in
// version order) of the Want versions this binary needs: apply them with
// `seqlease migrate up` or Migrator.Up. It matches ErrPending.
type PendingError struct {
	// Schema is the schema checked.
	Schema string
	// Pending are the versions not applied.
	Pending []int
	// Want is the version this binary needs.
	Want int
}

// Error implements error.
func (e *PendingError) Error() string {
	return fmt.Sprintf("migrations: schema %q lacks %d of the %d migrations this build needs (version %d): run `seqlease -schema %s migrate up`, or open with migrations on",
		e.Schema, len(e.Pending), e.Want, e.Want, e.Schema)
}

// Is reports whether target is ErrPending.
func (e *PendingError) Is(target error) bool { return target == ErrPending }
