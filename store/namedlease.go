package store

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// LeaseEventKind names an event in the life of a holding; the end reasons of
// a holding are a subset (LeaseReleased, LeaseExpired, LeaseForceReleased).
type LeaseEventKind string

// The events of a holding, as the audit history records them.
const (
	LeaseAcquired      LeaseEventKind = "acquired"
	LeaseRenewed       LeaseEventKind = "renewed"
	LeaseReleased      LeaseEventKind = "released"
	LeaseExpired       LeaseEventKind = "expired"
	LeaseForceReleased LeaseEventKind = "force-released"
)

// NamedLease is one holding of a named lease as the backend saw it at AsOf,
// by its own clock.
type NamedLease struct {
	Name  string
	Owner string
	// Fence is the fencing token of the holding: larger than that of every
	// earlier holding of the name, the same across its renewals.
	Fence      int64
	AcquiredAt time.Time // the backend's now when the holding began
	// RenewedAt is the backend's now at the last acquire or renewal: for
	// the result of AcquireLease or RenewLease, the now of that call.
	RenewedAt   time.Time
	ExpiresAt   time.Time // RenewedAt + the TTL asked for
	Renewals    int       // how many renewals the holding had
	MaxRenewals int       // the most renewals it may have; 0 means no limit
	// EndedAt is when the holding was released, force-released, or marked
	// expired by CleanupExpiredLeases; zero while it is not ended (it may
	// still have expired: see Held).
	EndedAt   time.Time
	EndReason LeaseEventKind // empty while not ended
	// AsOf is the backend's now when this record was read or written.
	AsOf time.Time
}

// Held reports whether the holding was live at AsOf: not ended and AsOf
// before ExpiresAt.
func (l NamedLease) Held() bool {
	return !l.ExpiresAt.IsZero() && l.EndedAt.IsZero() && l.AsOf.Before(l.ExpiresAt)
}

// LeaseStatus is the status of a holding, or of a waiter, as operators read
// it.
type LeaseStatus string

// The statuses of holdings (NamedLease.Status) and waiters (LeaseWaiter).
const (
	// LeaseStatusActive is a live holding: not ended, unexpired at AsOf.
	LeaseStatusActive LeaseStatus = "active"
	// LeaseStatusExpired is a holding past its expiry: marked expired by
	// maintenance (CleanupExpiredLeases), or not yet marked.
	LeaseStatusExpired LeaseStatus = "expired"
	// LeaseStatusReleased is a holding its holder released.
	LeaseStatusReleased LeaseStatus = "released"
	// LeaseStatusForceReleased is a holding an operator force-released.
	LeaseStatusForceReleased LeaseStatus = "force-released"
	// LeaseStatusPending is a process waiting for a name (a LeaseWaiter).
	LeaseStatusPending LeaseStatus = "pending"
)

// Status returns the status of the holding at AsOf, by the backend's clock:
// a holding past its expiry that maintenance has not marked yet reads as
// expired, not as active.
func (l NamedLease) Status() LeaseStatus {
	switch l.EndReason {
	case LeaseReleased:
		return LeaseStatusReleased
	case LeaseForceReleased:
		return LeaseStatusForceReleased
	case LeaseExpired:
		return LeaseStatusExpired
	}
	if l.Held() {
		return LeaseStatusActive
	}
	return LeaseStatusExpired
}

// Remaining returns the time the holding had left at AsOf (ExpiresAt -
// AsOf, by the backend's clock); zero once it ended or expired.
func (l NamedLease) Remaining() time.Duration {
	if !l.Held() {
		return 0
	}
	return l.ExpiresAt.Sub(l.AsOf)
}

// LeaseReason says why an event of the audit history happened.
type LeaseReason string

// The reasons of history events. An acquired event has none.
const (
	// LeaseReasonRenewed: the holder renewed the holding.
	LeaseReasonRenewed LeaseReason = "renewed"
	// LeaseReasonReleased: the holder released the holding.
	LeaseReasonReleased LeaseReason = "released"
	// LeaseReasonExpired: the holding ran out without a renewal and
	// maintenance (CleanupExpiredLeases) marked it expired.
	LeaseReasonExpired LeaseReason = "expired"
	// LeaseReasonForceReleased: an operator force-released the holding
	// (LeaseEvent.Actor and Comment say who and why).
	LeaseReasonForceReleased LeaseReason = "force-released"
	// LeaseReasonLost: the holding ran out without a renewal and another
	// acquire took the name over before maintenance marked it: its holder
	// lost the name.
	LeaseReasonLost LeaseReason = "lost"
	// LeaseReasonMaxRenewals: the holding ran out having had its
	// MaxRenewals renewals (it could not be renewed again).
	LeaseReasonMaxRenewals LeaseReason = "max-renewals"
)

// DefaultLeaseReason is the reason of an event of kind recorded without
// one (before the backend kept reasons): the kind itself, none for
// acquired.
func DefaultLeaseReason(kind LeaseEventKind) LeaseReason {
	if kind == LeaseAcquired {
		return ""
	}
	return LeaseReason(kind)
}

// LeaseExpiryReason returns the reason of the expired event of a holding that
// ran out having had renewals of maxRenewals renewals; takenOver says
// whether an acquire took the name over before maintenance marked it.
func LeaseExpiryReason(renewals, maxRenewals int, takenOver bool) LeaseReason {
	switch {
	case maxRenewals > 0 && renewals >= maxRenewals:
		return LeaseReasonMaxRenewals
	case takenOver:
		return LeaseReasonLost
	}
	return LeaseReasonExpired
}

// LeaseEvent is one record of the audit history of named leases.
type LeaseEvent struct {
	ID    int64 // increasing in the order the events were recorded
	Name  string
	Owner string
	Fence int64
	Kind  LeaseEventKind
	// At is when it happened by the backend's clock: for LeaseExpired, the
	// expiry instant of the holding.
	At        time.Time
	ExpiresAt time.Time // the holding's expiry after the event
	// Reason says why the event happened (see LeaseReason); empty for
	// acquired.
	Reason LeaseReason
	// Actor and Comment are, for a force-release, the operator who did it
	// and the reason they gave (LeaseOpParams.Actor and Reason); empty
	// otherwise, or when the operator gave none.
	Actor   string
	Comment string
}

// AcquireLeaseParams are the options of AcquireLease. TTL is required.
type AcquireLeaseParams struct {
	TTL time.Duration // ExpiresAt = now + TTL
	// MaxRenewals bounds the renewals of the holding; 0 means no limit.
	MaxRenewals int
	// Wait, when positive, says that the caller waits for the name if it is
	// held, and will try again within Wait: the name is then marked wanted
	// until at least now + Wait (the mark is written, as now + 2×Wait, only
	// when it would run out sooner), so that the holder's ReleaseLease
	// notifies the watchers. Zero (a try-acquire) marks nothing: a held name
	// costs no write. At most MaxTTL.
	Wait      time.Duration
	NoHistory bool       // do not record the audit history
	Now       *time.Time // pins the backend's clock; nil uses its now
}

// AcquireLeaseRequest is one acquire of AcquireLeases: AcquireLease's
// arguments.
type AcquireLeaseRequest struct {
	Name        string
	Owner       string
	TTL         time.Duration
	MaxRenewals int
	Wait        time.Duration
}

// AcquireLeaseResult is the outcome of one acquire of AcquireLeases: the
// holding AcquireLease would return, or its error.
type AcquireLeaseResult struct {
	Lease NamedLease
	Err   error
}

// LeaseHolding names a holding (name, owner, fence): one release of
// ReleaseLeases.
type LeaseHolding struct {
	Name  string
	Owner string
	Fence int64
}

// LeaseBatchParams are the options of AcquireLeases and ReleaseLeases,
// shared by every item. A nil pointer means the defaults.
type LeaseBatchParams struct {
	NoHistory bool
	Now       *time.Time
}

// RenewLeaseParams are the options of RenewLease. TTL is required.
type RenewLeaseParams struct {
	TTL       time.Duration // the new ExpiresAt is now + TTL
	NoHistory bool
	Now       *time.Time
}

// LeaseOpParams are the options of ReleaseLease, ForceReleaseLeases and
// GetLease (which ignores NoHistory). A nil pointer means the defaults.
type LeaseOpParams struct {
	NoHistory bool
	Now       *time.Time
	// Actor and Reason are, for ForceReleaseLeases only, the operator who
	// force-releases and why, recorded in the history of each holding it
	// ends (LeaseEvent.Actor and Comment). Actor: at most MaxNameLen
	// bytes; Reason: at most MaxTextLen bytes; both UTF-8 text without
	// control characters. Empty means none, but a Reason needs an Actor.
	// Other calls ignore them.
	Actor  string
	Reason string
	// Name and Fence are, for ForceReleaseLeases only, the one holding to
	// end: with Name, only owner's holding of Name (and with Fence, only
	// if its fencing token is Fence); empty and 0 mean any. Other calls
	// ignore them.
	Name  string
	Fence int64
}

// ValidateForceRelease checks a ForceReleaseLeases call (p may be nil).
// Its errors match ErrInvalidArgument and name the field.
func ValidateForceRelease(owner string, p *LeaseOpParams) error {
	if err := ValidateLeaseOwner(owner); err != nil {
		return err
	}
	if p == nil {
		return nil
	}
	if len(p.Actor) > MaxNameLen {
		return fmt.Errorf("%w: Actor: %d bytes, limit %d", ErrInvalidText, len(p.Actor), MaxNameLen)
	}
	if err := checkText(p.Actor); err != nil {
		return fmt.Errorf("%w: Actor: %v", ErrInvalidText, err)
	}
	if len(p.Reason) > MaxTextLen {
		return fmt.Errorf("%w: Reason: %d bytes, limit %d", ErrInvalidText, len(p.Reason), MaxTextLen)
	}
	if err := checkText(p.Reason); err != nil {
		return fmt.Errorf("%w: Reason: %v", ErrInvalidText, err)
	}
	if p.Reason != "" && p.Actor == "" {
		return fmt.Errorf("%w: Actor: empty, but required with a Reason", ErrInvalidText)
	}
	if p.Name != "" {
		if err := ValidateLeaseName(p.Name); err != nil {
			return fmt.Errorf("%w (LeaseOpParams.Name)", err)
		}
	}
	switch {
	case p.Fence < 0:
		return fmt.Errorf("%w: Fence %d is negative", ErrInvalidArgument, p.Fence)
	case p.Fence != 0 && p.Name == "":
		return fmt.Errorf("%w: Fence %d without a Name", ErrInvalidArgument, p.Fence)
	}
	return nil
}

// CleanupLeasesParams are the options of CleanupExpiredLeases.
type CleanupLeasesParams struct {
	Limit     int // at most this many holdings; 0 means DefaultListLimit
	NoHistory bool
	Now       *time.Time
}

// ListLeasesParams select the held leases ListLeases returns, ordered by
// name after AfterName.
type ListLeasesParams struct {
	Owner string // only this owner's; empty means every owner
	// Expired also lists the holdings past their expiry that maintenance
	// has not marked yet (their Status is LeaseStatusExpired).
	Expired bool
	// HeldFor keeps only holdings acquired at least this long before now
	// (long-held leases); zero means any age.
	HeldFor   time.Duration
	AfterName string
	Limit     int // at most this many; 0 means DefaultListLimit
	Now       *time.Time
}

// LeaseHistoryParams select events of the audit history: those with an ID
// above AfterID and, when BeforeID is above 0, below BeforeID; oldest
// first (ascending ID), or newest first with Newest.
type LeaseHistoryParams struct {
	AfterID int64
	// BeforeID, when above 0, keeps the events with an ID below it: with
	// Newest, the page older than one already read. Negative is refused
	// (ErrInvalidArgument).
	BeforeID int64
	// Newest lists the events newest first (descending ID): the latest
	// Limit events of the range rather than the earliest. A name renewed
	// every few seconds records thousands of events an hour; its latest
	// come first.
	Newest bool
	Limit  int // at most this many; 0 means DefaultListLimit
}

// HistoryBounds returns the IDs a LeaseHistory call lists between,
// exclusive: p.AfterID and p.BeforeID, or math.MaxInt64 for no upper
// bound. A negative BeforeID is refused (ErrInvalidArgument).
func HistoryBounds(p *LeaseHistoryParams) (after, before int64, err error) {
	switch {
	case p.BeforeID < 0:
		return 0, 0, fmt.Errorf("%w: BeforeID %d is negative", ErrInvalidArgument, p.BeforeID)
	case p.BeforeID == 0:
		return p.AfterID, math.MaxInt64, nil
	}
	return p.AfterID, p.BeforeID, nil
}

// LeaseWaiterTTL is how long an announcement of a waiter counts without a
// refresh: ListLeaseWaiters shows it that long after it was made.
const LeaseWaiterTTL = 10 * time.Second

// ListLeaseWaitersParams select the waiters ListLeaseWaiters returns.
type ListLeaseWaitersParams struct {
	Name  string     // only this name's; empty means every name
	Limit int        // at most this many; 0 means DefaultListLimit
	Now   *time.Time // pins the backend's clock; nil uses its now
}

// LeaseWaiter is the announcement of a blocked acquire, sent by
// AnnounceLeaseWaiter to the other processes' watches (package lease uses
// it to hand a name over roughly first come, first served across
// processes), and kept for LeaseWaiterTTL so that operators see who waits
// (ListLeaseWaiters). Its status is LeaseStatusPending.
type LeaseWaiter struct {
	Name   string
	Waiter string // the waiting owner (one announcement per owner and name)
	// Since is when the waiter asked for the name, by the backend's clock:
	// waiters that asked earlier go first. Zero withdraws the owner's
	// announcement (it no longer waits).
	Since time.Time
	// Fence is the fence of the last holding of Name the waiter saw (0:
	// none); a holding of Name by Waiter with a larger fence shows that the
	// announced waiter got its turn.
	Fence int64
}

// Withdrawn reports whether w withdraws its owner's announcement.
func (w LeaseWaiter) Withdrawn() bool { return w.Since.IsZero() }

// Status returns LeaseStatusPending: a listed waiter waits for its name.
// It lets operators' views show holdings and waiters in one column.
func (w LeaseWaiter) Status() LeaseStatus { return LeaseStatusPending }

// ValidateLeaseWaiter checks an announcement.
func ValidateLeaseWaiter(w LeaseWaiter) error {
	if err := ValidateLeaseName(w.Name); err != nil {
		return err
	}
	if err := ValidateLeaseOwner(w.Waiter); err != nil {
		return err
	}
	if w.Fence < 0 {
		return fmt.Errorf("%w: %d", ErrInvalidFence, w.Fence)
	}
	return nil
}

// LeaseSink receives the notices of a backend's WatchLeases. Its methods
// must not block.
type LeaseSink interface {
	// Freed reports that a holding of name ended (force-released, marked
	// expired, or released while the name was wanted: see
	// AcquireLeaseParams.Wait): the name may be free.
	Freed(name string)
	// Wanted reports a waiter's announcement (AnnounceLeaseWaiter), the
	// sender's own included.
	Wanted(w LeaseWaiter)
	// Reset reports that notices may have been missed (a reconnect).
	Reset()
}

// Errors of named leases.
var (
	// ErrInvalidLeaseName reports an empty, over-long or malformed name.
	ErrInvalidLeaseName = newInvalid("invalid lease name")
	// ErrInvalidOwner reports an empty, over-long or malformed owner.
	ErrInvalidOwner = newInvalid("invalid lease owner")
	// ErrInvalidFence reports a fencing token below 1.
	ErrInvalidFence = newInvalid("invalid fencing token")

	// ErrHeld reports an acquire of a name another holding holds. The error
	// is a *HeldError, which tells the holder.
	ErrHeld = errors.New("seqlease: lease is held")
	// ErrNotHolder reports a renew or release by a caller that does not
	// hold the holding it names (another owner, or a fence never issued).
	ErrNotHolder = errors.New("seqlease: not the holder of the lease")
	// ErrLeaseNotFound reports a name that was never acquired.
	ErrLeaseNotFound = errors.New("seqlease: lease not found")
	// ErrForceReleased reports a holding that ForceReleaseLeases ended.
	ErrForceReleased = errors.New("seqlease: lease force-released")
	// ErrMaxRenewals reports a renewal past the holding's MaxRenewals.
	ErrMaxRenewals = errors.New("seqlease: lease reached its maximum renewals")
	// ErrStaleFence reports a fencing token that no longer holds its name.
	// The error is a *FenceError.
	ErrStaleFence = errors.New("seqlease: fencing token no longer holds the lease")
)

// HeldError reports that another holding holds the name. It matches ErrHeld.
type HeldError struct {
	Name      string
	Owner     string    // the current holder
	Fence     int64     // its fencing token
	ExpiresAt time.Time // its expiry, by the backend's clock
	AsOf      time.Time // the backend's now when it was seen held
}

// Error implements error.
func (e *HeldError) Error() string {
	return fmt.Sprintf("%v: %s by %s (fence %d) until %s", ErrHeld, QuoteInput(e.Name), QuoteInput(e.Owner), e.Fence,
		e.ExpiresAt.UTC().Format(time.RFC3339Nano))
}

// Is makes a *HeldError match ErrHeld.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// Remaining returns how long the holding had left when it was seen:
// ExpiresAt - AsOf, by the backend's clock.
func (e *HeldError) Remaining() time.Duration { return max(e.ExpiresAt.Sub(e.AsOf), 0) }

// FenceError reports a fencing token that no longer holds its name. It
// matches ErrStaleFence. Reason says why Fence does not hold:
//
//   - "superseded": a later holding took the name (Fence < Current; it
//     may have ended since);
//   - "never issued": no holding of the name ever had Fence (Fence >
//     Current): a token of another database or schema, or a database that
//     lost its latest fences (restored from a backup, or failed over to a
//     replica that had not received them);
//   - "expired": Fence is the current holding, past its expiry by the
//     backend's clock, marked expired by maintenance or not yet;
//   - "released": Fence is the current holding, and its holder released
//     it;
//   - "force-released": Fence is the current holding, and an operator or a
//     Monitor force-released it;
//   - "not found": the name was never acquired (Current is 0).
type FenceError struct {
	Name    string
	Fence   int64 // the token checked
	Current int64 // the name's current fence; 0 if the name was never acquired
	Reason  string
}

// Error implements error.
func (e *FenceError) Error() string {
	return fmt.Sprintf("%v: %s fence %d: %s (current fence %d)", ErrStaleFence, QuoteInput(e.Name), e.Fence, e.Reason, e.Current)
}

// Is makes a *FenceError match ErrStaleFence.
func (e *FenceError) Is(target error) bool { return target == ErrStaleFence }

// EndError returns the error for a renewal of a holding that ended for
// reason: ErrReleased, ErrExpired or ErrForceReleased.
func EndError(reason LeaseEventKind) error {
	switch reason {
	case LeaseReleased:
		return ErrReleased
	case LeaseForceReleased:
		return ErrForceReleased
	}
	return ErrExpired
}

// ValidateLeaseName checks a lease name: 1 to MaxNameLen bytes of valid UTF-8
// with no control characters.
func ValidateLeaseName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty", ErrInvalidLeaseName)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrInvalidLeaseName, len(name), MaxNameLen)
	}
	if err := checkText(name); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidLeaseName, err)
	}
	return nil
}

// ValidateLeaseOwner checks a lease owner: 1 to MaxNameLen bytes of valid
// UTF-8 with no control characters.
func ValidateLeaseOwner(owner string) error {
	if owner == "" {
		return fmt.Errorf("%w: empty", ErrInvalidOwner)
	}
	if len(owner) > MaxNameLen {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrInvalidOwner, len(owner), MaxNameLen)
	}
	if err := checkText(owner); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidOwner, err)
	}
	return nil
}

// ValidateHoldingOf checks the (name, owner, fence) triple that names a
// holding.
func ValidateHoldingOf(name, owner string, fence int64) error {
	if err := ValidateLeaseName(name); err != nil {
		return err
	}
	if err := ValidateLeaseOwner(owner); err != nil {
		return err
	}
	if fence < 1 {
		return fmt.Errorf("%w: %d", ErrInvalidFence, fence)
	}
	return nil
}

// ValidateAcquireLease checks an AcquireLease call.
func ValidateAcquireLease(name, owner string, p *AcquireLeaseParams) error {
	if err := ValidateLeaseName(name); err != nil {
		return err
	}
	if err := ValidateLeaseOwner(owner); err != nil {
		return err
	}
	if p == nil {
		return fmt.Errorf("%w: no TTL", ErrInvalidTTL)
	}
	if err := ValidateTTL(p.TTL, 0); err != nil {
		return err
	}
	if p.MaxRenewals < 0 || p.MaxRenewals > math.MaxInt32 {
		return fmt.Errorf("%w: MaxRenewals %d must be in [0, %d]", ErrInvalidCount, p.MaxRenewals, math.MaxInt32)
	}
	if p.Wait < 0 || p.Wait > MaxTTL {
		return fmt.Errorf("%w: Wait %v must be in [0, %v]", ErrInvalidTTL, p.Wait, MaxTTL)
	}
	return nil
}

// ValidateAcquireLeaseRequest checks one acquire of AcquireLeases.
func ValidateAcquireLeaseRequest(r AcquireLeaseRequest) error {
	return ValidateAcquireLease(r.Name, r.Owner, &AcquireLeaseParams{TTL: r.TTL, MaxRenewals: r.MaxRenewals, Wait: r.Wait})
}

// ValidateRenewLease checks a RenewLease call.
func ValidateRenewLease(name, owner string, fence int64, p *RenewLeaseParams) error {
	if err := ValidateHoldingOf(name, owner, fence); err != nil {
		return err
	}
	if p == nil {
		return fmt.Errorf("%w: no TTL", ErrInvalidTTL)
	}
	return ValidateTTL(p.TTL, 0)
}

// ValidateListLeases checks a ListLeases call and returns its effective
// limit.
func ValidateListLeases(p *ListLeasesParams) (int, error) {
	if p.Owner != "" {
		if err := ValidateLeaseOwner(p.Owner); err != nil {
			return 0, err
		}
	}
	if p.HeldFor < 0 || p.HeldFor > MaxTTL*1000 {
		return 0, fmt.Errorf("%w: HeldFor %v", ErrInvalidTTL, p.HeldFor)
	}
	if p.AfterName != "" {
		if err := ValidateLeaseName(p.AfterName); err != nil {
			return 0, err
		}
	}
	return ListLimit(p.Limit)
}

// FenceVerdict judges a fencing token against the current holding of its
// name: nil if fence is the current fence and the holding is live (not
// ended, unexpired), else a *FenceError saying why not.
func FenceVerdict(name string, fence, current int64, endReason LeaseEventKind, unexpired bool) error {
	e := &FenceError{Name: name, Fence: fence, Current: current}
	switch {
	case fence != current:
		e.Reason = "superseded"
		if fence > current {
			e.Reason = "never issued"
		}
	case endReason != "":
		e.Reason = string(endReason)
	case !unexpired:
		e.Reason = string(LeaseExpired)
	default:
		return nil
	}
	return e
}

// ValidateListLeaseWaiters checks a ListLeaseWaiters call and returns its
// effective limit.
func ValidateListLeaseWaiters(p *ListLeaseWaitersParams) (int, error) {
	if p.Name != "" {
		if err := ValidateLeaseName(p.Name); err != nil {
			return 0, err
		}
	}
	return ListLimit(p.Limit)
}
