package cleanup

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPausesNeverAboveMax: the pause after failed cycles grows to MaxBackoff
// and never passes it, though cenkalti/backoff randomizes by ±50% after
// capping at its MaxInterval.
func TestPausesNeverAboveMax(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ initial, max time.Duration }{
		{time.Second, DefaultMaxBackoff},
		{time.Second, 20 * time.Millisecond}, // the initial pause above the max
		{10 * time.Millisecond, 2 * time.Second},
	} {
		p := newPauses(c.initial, c.max)
		var longest time.Duration
		for range 1000 {
			d := p.next()
			require.Positive(t, d)
			require.LessOrEqual(t, d, c.max, "%+v", c)
			longest = max(longest, d)
		}
		require.Equal(t, c.max, longest, "%+v: it grows to the max", c)
		p.reset()
		require.LessOrEqual(t, p.next(), min(c.initial*3/2, c.max), "%+v: reset starts over", c)
	}
}
