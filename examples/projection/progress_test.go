package main

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store/memory"
)

// TestMeter checks the progress line's figures: the rate over the last
// interval and overall, and the time left from the smoothed rate.
func TestMeter(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := newMeter(t0, 3000)

	f := m.sample(t0.Add(time.Second), 100)
	require.Equal(t, 100.0, f.recent)
	require.Equal(t, 100.0, f.overall)
	require.Equal(t, 29*time.Second, f.left, "2900 left at 100/s")
	require.Equal(t, "   1.0s  applied 100/3000 (3%)  100 events/s (overall 100)  left ~29s", f.String())

	f = m.sample(t0.Add(2*time.Second), 300)
	require.Equal(t, 200.0, f.recent, "200 in the last second")
	require.Equal(t, 150.0, f.overall, "300 in two seconds")
	// smoothed: 0.3*200 + 0.7*100 = 130/s; 2700 left
	require.Equal(t, "21s", f.left.Round(time.Second).String())

	f = m.sample(t0.Add(3*time.Second), 3000)
	require.Equal(t, time.Duration(0), f.left, "all applied")

	stuck := newMeter(t0, 10)
	f = stuck.sample(t0.Add(time.Second), 0)
	require.Contains(t, f.String(), "left ~?", "nothing applied yet: no estimate")
}

// TestProgressQuietThenLines feeds the progress loop ticks: none before
// progressQuiet prints (a short run stays quiet), each one after prints a
// line with the applied count out of the total.
func TestProgressQuietThenLines(t *testing.T) {
	p := &pipeline{
		c:  config{progress: time.Second},
		st: memory.New(nil), stream: "projection-quiet",
		events: generate(1, 10, 2),
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ticks, done := make(chan time.Time), make(chan struct{})
	var out bytes.Buffer
	var applied int64 // one more event at each tick
	next := func() int64 { applied++; return applied }
	var wg sync.WaitGroup
	wg.Go(func() { p.progressLoop(done, ticks, start, next, &out) })
	for s := 1; s <= 6; s++ {
		ticks <- start.Add(time.Duration(s) * time.Second)
	}
	close(done)
	wg.Wait()

	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	require.Len(t, lines, 2, "lines only at 5 s and 6 s: %q", out.String())
	require.True(t, strings.HasPrefix(lines[0], "   5.0s  applied 5/10 (50%)  1 events/s (overall 1)  left ~5s"), lines[0])
	require.True(t, strings.HasPrefix(lines[1], "   6.0s  applied 6/10 (60%)"), lines[1])
	require.Contains(t, lines[1], "recovered 0")
}
