package seqleasetest_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/seqleasetest"
)

func TestClock(t *testing.T) {
	t.Parallel()
	c := seqleasetest.NewClock(time.Time{})
	require.True(t, c.Now().Equal(seqleasetest.DefaultStart), "a zero start is DefaultStart")
	require.Equal(t, c.Now(), c.Now(), "the clock moves only when told")

	got := c.Advance(90 * time.Second)
	require.True(t, got.Equal(seqleasetest.DefaultStart.Add(90*time.Second)))
	require.True(t, c.Now().Equal(got))

	at := time.Date(2031, 6, 1, 12, 0, 0, 0, time.UTC)
	c.Set(at)
	require.True(t, c.Now().Equal(at))
	c.Set(time.Now())
	require.Equal(t, c.Now(), c.Now().Round(0), "the clock keeps no monotonic reading")
}

// TestClockConcurrent advances one clock from many goroutines while others
// read it: every step counts once (and -race checks the locking).
func TestClockConcurrent(t *testing.T) {
	t.Parallel()
	c := seqleasetest.NewClock(time.Time{})
	const workers, steps = 8, 100
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range steps {
				before := c.Now()
				require.False(t, c.Advance(time.Millisecond).Before(before.Add(time.Millisecond)))
			}
		})
	}
	wg.Wait()
	require.True(t, c.Now().Equal(seqleasetest.DefaultStart.Add(workers*steps*time.Millisecond)))
}
