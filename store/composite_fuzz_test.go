package store_test

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/seqlease/seqlease/store"
)

// Fuzz targets of the composite validators: the checks of a whole call,
// made of single-field checks (ValidateStream, ValidateText, ValidateTTL,
// ...; validate_fuzz_test.go checks those against independent oracles),
// counts, number ranges and orders. Each composite must accept a call
// exactly when every part is valid, refuse it otherwise with an error that
// matches ErrInvalidArgument and the sentinel of one of its invalid parts,
// and never panic (a nil params pointer included, where its type says nil
// means the defaults).

// parts collects the sentinels of the invalid parts of a call.
type parts []error

// check records sentinel when a single-field validator refused its part.
func (p *parts) check(err, sentinel error) {
	if err != nil {
		*p = append(*p, sentinel)
	}
}

// want records sentinel when a rule of the call does not hold.
func (p *parts) want(ok bool, sentinel error) {
	if !ok {
		*p = append(*p, sentinel)
	}
}

// text checks an optional free-text part.
func (p *parts) text(s string) { p.check(store.ValidateText("text", s), store.ErrInvalidText) }

// verdict fails t unless err is nil exactly when no part is invalid, and,
// when not nil, typed: ErrInvalidArgument and the sentinel of an invalid
// part.
func (p parts) verdict(t *testing.T, call string, err error) {
	t.Helper()
	switch {
	case len(p) == 0 && err != nil:
		t.Fatalf("%s refused a valid call: %v", call, err)
	case len(p) > 0 && err == nil:
		t.Fatalf("%s accepted a call whose parts are invalid: %v", call, []error(p))
	case err == nil:
		return
	case !store.IsInvalid(err):
		t.Fatalf("%s: %v does not match ErrInvalidArgument", call, err)
	case !slices.ContainsFunc(p, func(s error) bool { return errors.Is(err, s) }):
		t.Fatalf("%s: %v matches none of the sentinels of the invalid parts %v", call, err, []error(p))
	}
}

// count maps a fuzzed count onto 0..store.MaxBatch+1, the edges being the
// likeliest.
func count(n uint16) int {
	switch n % 8 {
	case 0:
		return 0
	case 1:
		return store.MaxBatch
	case 2:
		return store.MaxBatch + 1
	}
	return 1 + int(n/8)%8
}

// numbers returns n numbers from first on by step, with the one at index
// (at mod n) replaced by odd: the numbers of a batch.
func numbers(n int, first, step int64, at uint16, odd int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = first + int64(i)*step
	}
	if n > 0 {
		out[int(at)%n] = odd
	}
	return out
}

// ascending reports whether ns strictly increase.
func ascending(ns []int64) bool {
	for i := 1; i < len(ns); i++ {
		if ns[i] <= ns[i-1] {
			return false
		}
	}
	return true
}

// numberSeeds are numbers every numeric target starts from.
var numberSeeds = []int64{0, 1, 2, -1, math.MaxInt64, math.MinInt64}

func FuzzValidateLeaseCall(f *testing.F) {
	f.Add("s", true, "owner", uint16(3), int64(time.Second), "op", "kind", uint16(0), int64(time.Second), "op2", "kind2")
	f.Add("s", false, "", uint16(1), int64(time.Second), "", "", uint16(0), int64(time.Second), "", "")
	f.Add("s", true, "", uint16(0), int64(time.Second), "", "", uint16(0), int64(time.Second), "", "")
	f.Add("s", true, "", uint16(1), int64(time.Second), "", "", uint16(0), int64(time.Second), "", "")
	f.Add("s", true, "", uint16(2), int64(time.Second), "", "", uint16(0), int64(time.Second), "", "")
	f.Add("", true, "nul\x00", uint16(5), int64(0), "\xff", "tab\t", uint16(2), int64(store.MaxTTL)+1, "x", "y")
	for _, s := range hostileSeeds {
		f.Add("s", true, s, uint16(11), int64(time.Second), s, "k", uint16(7), int64(999), s, s)
	}
	f.Fuzz(func(t *testing.T, stream string, withParams bool, owner string, n uint16, ttl int64, op, kind string,
		at uint16, oddTTL int64, oddOp, oddKind string) {
		reqs := make([]store.LeaseRequest, count(n))
		for i := range reqs {
			reqs[i] = store.LeaseRequest{OperationID: op, Kind: kind, TTL: time.Duration(ttl)}
		}
		if len(reqs) > 0 {
			reqs[int(at)%len(reqs)] = store.LeaseRequest{OperationID: oddOp, Kind: oddKind, TTL: time.Duration(oddTTL)}
		}
		var p *store.LeaseParams
		if withParams {
			p = &store.LeaseParams{Owner: owner}
		}
		var bad parts
		bad.check(store.ValidateStream(stream), store.ErrInvalidStream)
		bad.want(len(reqs) >= 1 && len(reqs) <= store.MaxBatch, store.ErrInvalidCount)
		if p != nil {
			bad.text(p.Owner)
		}
		for _, r := range reqs {
			bad.check(store.ValidateTTL(r.TTL, 0), store.ErrInvalidTTL)
			bad.text(r.OperationID)
			bad.text(r.Kind)
		}
		bad.verdict(t, "ValidateLease", store.ValidateLease(stream, reqs, p))
	})
}

func FuzzValidateBatch(f *testing.F) {
	for _, first := range numberSeeds {
		f.Add("s", uint16(3), first, int64(1), uint16(0), first, uint16(9))
	}
	f.Add("s", uint16(11), int64(1), int64(1), uint16(1), int64(1), uint16(1))  // a repeated number
	f.Add("s", uint16(11), int64(5), int64(-1), uint16(0), int64(5), uint16(9)) // descending
	f.Add("s", uint16(1), int64(1), int64(1), uint16(0), int64(1), uint16(0))   // a zero token
	f.Add("nul\x00", uint16(1), int64(1), int64(1), uint16(0), int64(1), uint16(9))
	f.Add("s", uint16(1), int64(1), int64(1), uint16(0), int64(1), uint16(9))
	f.Add("s", uint16(2), int64(1), int64(1), uint16(0), int64(1), uint16(9))
	f.Fuzz(func(t *testing.T, stream string, n uint16, first, step int64, at uint16, odd int64, zeroAt uint16) {
		ns := numbers(count(n), first, step, at, odd)
		items := make([]store.CommitItem, len(ns))
		for i, num := range ns {
			items[i] = store.CommitItem{Number: num, Token: store.Token{1, byte(i)}}
		}
		if len(items) > 0 && zeroAt%3 == 0 {
			items[int(zeroAt/3)%len(items)].Token = store.Token{}
		}
		var bad parts
		bad.check(store.ValidateStream(stream), store.ErrInvalidStream)
		bad.want(len(items) >= 1 && len(items) <= store.MaxBatch, store.ErrInvalidCount)
		for _, it := range items {
			bad.want(it.Number >= 1, store.ErrInvalidNumber)
			bad.want(!it.Token.IsZero(), store.ErrInvalidToken)
		}
		bad.want(ascending(ns), store.ErrInvalidNumber)
		bad.verdict(t, "ValidateBatch", store.ValidateBatch(stream, items))
		if len(items) == 1 {
			var one parts
			one.check(store.ValidateStream(stream), store.ErrInvalidStream)
			one.want(items[0].Number >= 1, store.ErrInvalidNumber)
			one.want(!items[0].Token.IsZero(), store.ErrInvalidToken)
			one.verdict(t, "ValidateHolding", store.ValidateHolding(stream, items[0].Number, items[0].Token))
		}
	})
}

// reasonParts checks a gap reason as ExpiryReason and the recoveries take
// it: empty (the default) or valid text other than ReasonReleased, which
// only the holder's Release records.
func (p *parts) reason(reason string) {
	p.want(reason != store.ReasonReleased, store.ErrInvalidText)
	p.text(reason)
}

func FuzzValidateRecover(f *testing.F) {
	for _, n := range numberSeeds {
		f.Add("s", n, int64(0), true, "", "retry", "owner")
	}
	f.Add("s", int64(1), int64(-1), true, "", "retry", "")
	f.Add("s", int64(1), int64(2), true, store.ReasonReleased, "retry", "")
	f.Add("s", int64(1), int64(0), true, "expired", "", "")
	f.Add("s", int64(1), int64(0), false, "", "retry", "")
	for _, s := range hostileSeeds {
		f.Add(s, int64(1), int64(0), true, s, s, s)
	}
	f.Fuzz(func(t *testing.T, stream string, number, recoveredAs int64, withParams bool, reason, recoveryType, owner string) {
		// ExpiryReason: stream, number, the number the work moved to, and
		// the reason, whose default is ReasonExpired.
		var bad parts
		bad.check(store.ValidateStream(stream), store.ErrInvalidStream)
		bad.want(number >= 1, store.ErrInvalidNumber)
		bad.want(recoveredAs >= 0, store.ErrInvalidNumber)
		bad.reason(reason)
		got, err := store.ExpiryReason(stream, number, &store.ResolveExpiredParams{Reason: reason, RecoveredAs: recoveredAs})
		bad.verdict(t, "ExpiryReason", err)
		if want := cmpOr(reason, store.ReasonExpired); err == nil && got != want {
			t.Fatalf("ExpiryReason(reason %q) = %q, want %q", reason, got, want)
		}

		// ValidateRecover: the same but the moved-to number, plus a
		// required recovery type and the owner.
		bad = nil
		bad.check(store.ValidateStream(stream), store.ErrInvalidStream)
		bad.want(number >= 1, store.ErrInvalidNumber)
		var p *store.RecoverParams
		if withParams {
			p = &store.RecoverParams{Reason: reason, RecoveryType: recoveryType, Owner: owner}
			bad.reason(reason)
			bad.text(recoveryType)
			bad.text(owner)
		}
		bad.want(p != nil && p.RecoveryType != "", store.ErrInvalidText) // required: no params, no type
		bad.verdict(t, "ValidateRecover", store.ValidateRecover(stream, number, p))
	})
}

func FuzzValidateExpiredBatch(f *testing.F) {
	for _, first := range numberSeeds {
		f.Add("s", uint16(3), first, int64(1), uint16(0), first, "", int64(0))
	}
	f.Add("s", uint16(3), int64(1), int64(0), uint16(0), int64(1), "", int64(0)) // repeated numbers
	f.Add("s", uint16(1), int64(1), int64(1), uint16(0), int64(1), "", int64(2))
	f.Add("s", uint16(1), int64(1), int64(1), uint16(0), int64(1), store.ReasonReleased, int64(0))
	f.Add("s", uint16(1), int64(1), int64(1), uint16(0), int64(1), "nul\x00", int64(0))
	f.Add("", uint16(0), int64(1), int64(1), uint16(0), int64(1), "", int64(-1))
	f.Fuzz(func(t *testing.T, stream string, n uint16, first, step int64, at uint16, odd int64, reason string, recoveredAs int64) {
		ns := numbers(count(n), first, step, at, odd)
		var bad parts
		bad.check(store.ValidateStream(stream), store.ErrInvalidStream)
		bad.want(len(ns) >= 1 && len(ns) <= store.MaxBatch, store.ErrInvalidCount)
		for _, num := range ns {
			bad.want(num >= 1, store.ErrInvalidNumber)
		}
		bad.want(recoveredAs == 0, store.ErrInvalidNumber) // a batch of gaps moves no work
		bad.reason(reason)
		got, err := store.ValidateExpiredBatch(stream, ns, &store.ResolveExpiredParams{Reason: reason, RecoveredAs: recoveredAs})
		bad.verdict(t, "ValidateExpiredBatch", err)
		if want := cmpOr(reason, store.ReasonExpired); err == nil && got != want {
			t.Fatalf("ValidateExpiredBatch(reason %q) = %q, want %q", reason, got, want)
		}
	})
}

func FuzzValidateRecoverBatch(f *testing.F) {
	for _, first := range numberSeeds {
		f.Add("s", uint16(3), first, int64(1), uint16(0), first, "retry", uint16(1), "", true, "", "")
	}
	f.Add("s", uint16(3), int64(1), int64(0), uint16(0), int64(1), "retry", uint16(1), "", true, "", "")
	f.Add("s", uint16(11), int64(1), int64(1), uint16(4), int64(5), "retry", uint16(0), "", true, "", "") // an item without a type
	f.Add("s", uint16(1), int64(1), int64(1), uint16(0), int64(1), "retry", uint16(1), "", true, store.ReasonReleased, "")
	f.Add("s", uint16(1), int64(1), int64(1), uint16(0), int64(1), "retry", uint16(1), "", true, "moved", "nul\x00")
	f.Fuzz(func(t *testing.T, stream string, n uint16, first, step int64, at uint16, odd int64, recoveryType string,
		typeAt uint16, oddType string, withParams bool, reason, owner string) {
		ns := numbers(count(n), first, step, at, odd)
		items := make([]store.RecoverItem, len(ns))
		for i, num := range ns {
			items[i] = store.RecoverItem{Number: num, RecoveryType: recoveryType}
		}
		if len(items) > 0 && typeAt%2 == 0 {
			items[int(typeAt/2)%len(items)].RecoveryType = oddType
		}
		var p *store.RecoverBatchParams // nil means the defaults
		if withParams {
			p = &store.RecoverBatchParams{Reason: reason, Owner: owner}
		} else {
			reason, owner = "", ""
		}
		var bad parts
		bad.check(store.ValidateStream(stream), store.ErrInvalidStream)
		bad.want(len(items) >= 1 && len(items) <= store.MaxBatch, store.ErrInvalidCount)
		for _, it := range items {
			bad.want(it.Number >= 1, store.ErrInvalidNumber)
			bad.want(it.RecoveryType != "", store.ErrInvalidText)
			bad.text(it.RecoveryType)
		}
		bad.want(ascending(ns), store.ErrInvalidNumber)
		bad.reason(reason)
		bad.text(owner)
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("ValidateRecoverBatch(%q, %d items, %+v) panicked: %v", stream, len(items), p, r)
				}
			}()
			err = store.ValidateRecoverBatch(stream, items, p)
		}()
		bad.verdict(t, "ValidateRecoverBatch", err)
	})
}

func FuzzValidateAcquireLease(f *testing.F) {
	f.Add("name", "owner", true, int64(time.Second), 0, int64(0), int64(1))
	f.Add("name", "owner", false, int64(time.Second), 0, int64(0), int64(1))
	f.Add("name", "owner", true, int64(time.Second), -1, int64(0), int64(0))
	f.Add("name", "owner", true, int64(time.Second), math.MaxInt32, int64(store.MaxTTL), int64(-1))
	f.Add("name", "owner", true, int64(time.Second), math.MaxInt32+1, int64(store.MaxTTL)+1, int64(math.MaxInt64))
	f.Add("name", "owner", true, int64(999), 0, int64(-1), int64(1))
	for _, s := range hostileSeeds {
		f.Add(s, s, true, int64(time.Second), 3, int64(time.Second), int64(2))
	}
	f.Fuzz(func(t *testing.T, name, owner string, withParams bool, ttl int64, maxRenewals int, wait, fence int64) {
		holder := func(b *parts) {
			b.check(store.ValidateLeaseName(name), store.ErrInvalidLeaseName)
			b.check(store.ValidateLeaseOwner(owner), store.ErrInvalidOwner)
		}
		var bad parts
		holder(&bad)
		var p *store.AcquireLeaseParams
		if withParams {
			p = &store.AcquireLeaseParams{TTL: time.Duration(ttl), MaxRenewals: maxRenewals, Wait: time.Duration(wait)}
			bad.check(store.ValidateTTL(p.TTL, 0), store.ErrInvalidTTL)
			bad.want(maxRenewals >= 0 && maxRenewals <= math.MaxInt32, store.ErrInvalidCount) // 0: no limit
			bad.want(p.Wait >= 0 && p.Wait <= store.MaxTTL, store.ErrInvalidTTL)
		} else {
			bad.want(false, store.ErrInvalidTTL) // the TTL is required
		}
		bad.verdict(t, "ValidateAcquireLease", store.ValidateAcquireLease(name, owner, p))
		if p != nil {
			r := store.AcquireLeaseRequest{Name: name, Owner: owner, TTL: p.TTL, MaxRenewals: maxRenewals, Wait: p.Wait}
			bad.verdict(t, "ValidateAcquireLeaseRequest", store.ValidateAcquireLeaseRequest(r))
		}

		// The triple that names a holding, a renewal, and a waiter's
		// announcement.
		bad = nil
		holder(&bad)
		bad.want(fence >= 1, store.ErrInvalidFence)
		bad.verdict(t, "ValidateHoldingOf", store.ValidateHoldingOf(name, owner, fence))
		var rp *store.RenewLeaseParams
		if withParams {
			rp = &store.RenewLeaseParams{TTL: time.Duration(ttl)}
			bad.check(store.ValidateTTL(rp.TTL, 0), store.ErrInvalidTTL)
		} else {
			bad.want(false, store.ErrInvalidTTL)
		}
		bad.verdict(t, "ValidateRenewLease", store.ValidateRenewLease(name, owner, fence, rp))
		bad = nil
		holder(&bad)
		bad.want(fence >= 0, store.ErrInvalidFence) // 0: no holding seen
		bad.verdict(t, "ValidateLeaseWaiter", store.ValidateLeaseWaiter(store.LeaseWaiter{Name: name, Waiter: owner, Fence: fence,
			Since: time.Unix(0, wait)}))
	})
}

// limitParts checks a listing's limit: 0 (the default) to MaxListLimit.
func (p *parts) limit(limit int) {
	p.want(limit >= 0 && limit <= store.MaxListLimit, store.ErrInvalidCount)
}

// wantLimit fails t unless an accepted listing got its effective limit.
func wantLimit(t *testing.T, call string, limit, got int, err error) {
	t.Helper()
	if want := cmp(limit, store.DefaultListLimit); err == nil && got != want {
		t.Fatalf("%s(limit %d) = %d, want %d", call, limit, got, want)
	}
}

func FuzzValidateListings(f *testing.F) {
	for _, n := range numberSeeds {
		f.Add("s", "", "", n, 0, true, "", int64(0))
	}
	for _, l := range []int{-1, 1, store.MaxListLimit, store.MaxListLimit + 1, math.MaxInt, math.MinInt} {
		f.Add("s", "t", "name", int64(1), l, true, "reason", int64(time.Hour))
	}
	f.Add("s", "", "", int64(1), 0, true, "", int64(store.MaxTTL)*1000)
	f.Add("s", "", "", int64(1), 0, true, "", int64(store.MaxTTL)*1000+1)
	f.Add("s", "", "", int64(1), 0, true, "", int64(-1))
	for _, s := range hostileSeeds {
		f.Add(s, s, s, int64(1), 0, true, s, int64(0))
	}
	f.Fuzz(func(t *testing.T, stream, text, name string, number int64, limit int, withParams bool, reason string, heldFor int64) {
		var bad parts
		bad.check(store.ValidateStream(stream), store.ErrInvalidStream)
		bad.want(number >= 0, store.ErrInvalidNumber)
		bad.limit(limit)
		got, err := store.ValidateRead(stream, number, limit)
		bad.verdict(t, "ValidateRead", err)
		wantLimit(t, "ValidateRead", limit, got, err)

		// ListGaps: nil params mean the defaults.
		var gp *store.ListGapsParams
		bad = nil
		bad.check(store.ValidateStream(stream), store.ErrInvalidStream)
		if withParams {
			gp = &store.ListGapsParams{After: number, Limit: limit, Reason: reason}
			bad.want(number >= 0, store.ErrInvalidNumber)
			bad.text(reason)
			bad.limit(limit)
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("ValidateListGaps(%q, %+v) panicked: %v", stream, gp, r)
				}
			}()
			got, err = store.ValidateListGaps(stream, gp)
		}()
		bad.verdict(t, "ValidateListGaps", err)
		if gp != nil {
			wantLimit(t, "ValidateListGaps", limit, got, err)
		}

		// ListExpired: an optional stream, and a cursor: after a stream
		// (empty: from the first) and a number.
		bad = nil
		if text != "" {
			bad.check(store.ValidateStream(text), store.ErrInvalidStream)
		}
		if name != "" {
			bad.check(store.ValidateStream(name), store.ErrInvalidStream)
		}
		bad.want(number >= 0, store.ErrInvalidNumber)
		bad.limit(limit)
		got, err = store.ValidateListExpired(&store.ListExpiredParams{Stream: text, AfterStream: name, AfterNumber: number, Limit: limit})
		bad.verdict(t, "ValidateListExpired", err)
		wantLimit(t, "ValidateListExpired", limit, got, err)

		// ListLeases: an optional owner, an age, a cursor after a name.
		bad = nil
		if text != "" {
			bad.check(store.ValidateLeaseOwner(text), store.ErrInvalidOwner)
		}
		bad.want(heldFor >= 0 && time.Duration(heldFor) <= store.MaxTTL*1000, store.ErrInvalidTTL)
		if name != "" {
			bad.check(store.ValidateLeaseName(name), store.ErrInvalidLeaseName)
		}
		bad.limit(limit)
		got, err = store.ValidateListLeases(&store.ListLeasesParams{Owner: text, HeldFor: time.Duration(heldFor), AfterName: name, Limit: limit})
		bad.verdict(t, "ValidateListLeases", err)
		wantLimit(t, "ValidateListLeases", limit, got, err)

		// Fill: FilledBy is required (no params, no FilledBy). Trim.
		bad = nil
		bad.check(store.ValidateStream(stream), store.ErrInvalidStream)
		bad.want(number >= 1, store.ErrInvalidNumber)
		var fp *store.FillParams
		if withParams {
			fp = &store.FillParams{FilledBy: text}
		}
		bad.want(fp != nil && fp.FilledBy != "", store.ErrInvalidText)
		if fp != nil {
			bad.text(fp.FilledBy)
		}
		bad.verdict(t, "ValidateFill", store.ValidateFill(stream, number, fp))
		bad = nil
		bad.check(store.ValidateStream(stream), store.ErrInvalidStream)
		bad.want(number >= 1, store.ErrInvalidNumber)
		bad.verdict(t, "ValidateTrim", store.ValidateTrim(stream, number))
	})
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func cmp(n, def int) int {
	if n == 0 {
		return def
	}
	return n
}
