package batch

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testWave returns a wave on a clock the test moves.
func testWave() (*Wave, *time.Time) {
	now := time.Unix(1_000_000, 0)
	return &Wave{now: func() time.Time { return now }}, &now
}

func isOpen(ch chan struct{}) bool { return ch != nil && !isClosed(ch) }

// TestWaveAwaitsTheCallersItAnswered: after a batch of several is answered,
// a leader waits until as many calls arrived; the last arrival wakes it.
// A batch of one is no wave.
func TestWaveAwaitsTheCallersItAnswered(t *testing.T) {
	w, _ := testWave()
	w.sent(1)
	w.answered(1, 1, time.Millisecond)
	ch, _, _, _ := w.await()
	require.Nil(t, ch, "a lone call says nothing of waves")

	w.sent(4)
	w.answered(4, 4, time.Millisecond)
	ch, loop, _, _ := w.await()
	require.True(t, isOpen(ch), "four callers were answered together")
	require.False(t, loop)
	for range 3 {
		w.Arrive()
		require.True(t, isOpen(ch))
		again, _, _, _ := w.await()
		require.Equal(t, ch, again, "nothing changed for the leader")
	}
	w.Arrive()
	require.True(t, isClosed(ch), "the last caller woke the leader")
	ch, _, _, _ = w.await()
	require.Nil(t, ch)
}

// TestWaveWindowEnds: callers that do not call again within waveWindow
// are not awaited, and a caller gone missing is forgotten.
func TestWaveWindowEnds(t *testing.T) {
	w, now := testWave()
	w.sent(3)
	w.answered(3, 3, time.Millisecond)
	w.Arrive()
	*now = now.Add(waveWindow + time.Microsecond)
	ch, _, _, _ := w.await()
	require.Nil(t, ch, "the window is over")

	w.sent(2)
	w.answered(2, 2, time.Millisecond)
	ch, _, _, _ = w.await()
	require.True(t, isOpen(ch))
	w.forget()
	require.True(t, isClosed(ch), "forget wakes the leader")
	ch, _, _, _ = w.await()
	require.Nil(t, ch)

	w.sent(2)
	w.answered(2, 1, time.Millisecond) // one of them gave up: not awaited
	w.Arrive()
	ch, _, _, _ = w.await()
	require.Nil(t, ch)
}

// TestWaveLoopAwaitsTheCallsOut: once most answered callers keep calling
// again at once, a leader also waits for the callers of backend calls
// still out, and is woken when they are answered and have called again;
// callers that stop coming back lower the share until it stops.
func TestWaveLoopAwaitsTheCallsOut(t *testing.T) {
	w, _ := testWave()
	w.sent(1)
	ch, loop, _, _ := w.await()
	require.Nil(t, ch, "no loop yet: a call out is not awaited")
	require.False(t, loop)
	w.answered(1, 1, time.Millisecond)

	rounds := 0
	for ; !(w.loop >= loopShare); rounds++ {
		w.sent(2)
		w.answered(2, 2, time.Millisecond)
		w.Arrive()
		w.Arrive()
	}
	require.LessOrEqual(t, rounds, 6, "a few rounds of callers that come back make a loop")

	w.sent(3)
	ch, loop, longest, _ := w.await()
	require.True(t, isOpen(ch), "callers loop: the calls out are awaited")
	require.True(t, loop)
	require.Equal(t, time.Millisecond, longest)
	w.answered(3, 3, 2*time.Millisecond)
	require.True(t, isClosed(ch), "an answer wakes the leader to look again")
	ch, _, longest, _ = w.await()
	require.True(t, isOpen(ch), "now it awaits the callers just answered")
	require.Equal(t, 2*time.Millisecond, longest)
	w.Arrive()
	w.Arrive()
	w.Arrive()
	require.True(t, isClosed(ch))
	ch, _, _, _ = w.await()
	require.Nil(t, ch)

	for rounds = 0; w.loop >= loopShare; rounds++ {
		w.sent(2)
		w.answered(2, 2, time.Millisecond)
		w.forget() // nobody came back
	}
	require.LessOrEqual(t, rounds, 2)
	w.sent(1)
	ch, _, _, _ = w.await()
	require.Nil(t, ch, "no loop any more: a call out is not awaited")
}

// TestWaveRoundWaitThatRunsOutLowersTheShare: a leader's wait for the
// calls out that runs out (forget with nobody answered) lowers the share.
func TestWaveRoundWaitThatRunsOutLowersTheShare(t *testing.T) {
	w, _ := testWave()
	w.loop = 1
	w.sent(1)
	ch, loop, _, _ := w.await()
	require.True(t, isOpen(ch))
	require.True(t, loop)
	w.forget()
	require.True(t, isClosed(ch))
	require.Less(t, w.loop, 1.0)
}
