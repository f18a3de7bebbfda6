package chaos_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/chaos"
	"github.com/seqlease/seqlease/store"
)

// TestCheckLeaseHistory feeds the I8 checker fabricated histories: legal
// ones pass, each kind of violation is reported.
func TestCheckLeaseHistory(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ev := func(id int64, kind store.LeaseEventKind, owner string, fence int64, atMS, expMS int) store.LeaseEvent {
		return store.LeaseEvent{ID: id, Name: "n", Owner: owner, Fence: fence, Kind: kind, At: at(atMS), ExpiresAt: at(expMS)}
	}
	const (
		acq = store.LeaseAcquired
		ren = store.LeaseRenewed
		rel = store.LeaseReleased
		exp = store.LeaseExpired
	)
	for _, tc := range []struct {
		name   string
		events []store.LeaseEvent
		bad    bool
	}{
		{"released, then taken", []store.LeaseEvent{
			ev(1, acq, "a", 1, 0, 100), ev(2, ren, "a", 1, 60, 160), ev(3, rel, "a", 1, 120, 160), ev(4, acq, "b", 2, 130, 230),
		}, false},
		{"expired, then taken at the expiry", []store.LeaseEvent{
			ev(1, acq, "a", 1, 0, 100), ev(2, exp, "a", 1, 100, 100), ev(3, acq, "b", 2, 100, 200),
		}, false},
		{"a fence of a holder without history in between", []store.LeaseEvent{
			ev(1, acq, "a", 1, 0, 100), ev(2, acq, "b", 3, 300, 400),
		}, false},
		{"events out of id order are sorted", []store.LeaseEvent{
			ev(3, acq, "b", 2, 100, 200), ev(1, acq, "a", 1, 0, 100),
		}, false},
		{"taken before the expiry", []store.LeaseEvent{
			ev(1, acq, "a", 1, 0, 100), ev(2, acq, "b", 2, 99, 200),
		}, true},
		{"taken before the renewed expiry", []store.LeaseEvent{
			ev(1, acq, "a", 1, 0, 100), ev(2, ren, "a", 1, 50, 150), ev(3, acq, "b", 2, 120, 220),
		}, true},
		{"a fence reused", []store.LeaseEvent{
			ev(1, acq, "a", 1, 0, 100), ev(2, acq, "b", 1, 200, 300),
		}, true},
		{"a fence going back", []store.LeaseEvent{
			ev(1, acq, "a", 5, 0, 100), ev(2, acq, "b", 4, 200, 300),
		}, true},
		{"renewed after the expiry", []store.LeaseEvent{
			ev(1, acq, "a", 1, 0, 100), ev(2, ren, "a", 1, 100, 200),
		}, true},
		{"renewed after the release", []store.LeaseEvent{
			ev(1, acq, "a", 1, 0, 100), ev(2, rel, "a", 1, 10, 100), ev(3, ren, "a", 1, 20, 120),
		}, true},
		{"renewed by another owner", []store.LeaseEvent{
			ev(1, acq, "a", 1, 0, 100), ev(2, ren, "b", 1, 10, 110),
		}, true},
		{"an event of a fence never granted", []store.LeaseEvent{
			ev(1, acq, "a", 1, 0, 100), ev(2, ren, "b", 2, 10, 110),
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := chaos.CheckLeaseHistory(tc.events)
			if tc.bad {
				require.NotEmpty(t, bad)
			} else {
				require.Empty(t, bad)
			}
		})
	}
}
