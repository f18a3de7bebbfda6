package memory_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store/memory"
)

// funcSink is a Sink built from functions: a valid store.Sink whose
// dynamic type is not comparable.
type funcSink struct {
	resolved func(stream string, number int64)
	reset    func()
}

func (f funcSink) Resolved(stream string, number int64) { f.resolved(stream, number) }
func (f funcSink) Reset()                               { f.reset() }
func (f funcSink) ResolvedThrough(string, int64)        {}

// TestWatchTakesAnySink: Watch must not compare sinks by value to find its
// own registration when it ends: that panics for uncomparable types.
func TestWatchTakesAnySink(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	ctx, cancel := context.WithCancel(context.Background())
	sink := funcSink{resolved: func(string, int64) {}, reset: cancel}
	require.NotPanics(t, func() {
		require.ErrorIs(t, s.Watch(ctx, sink), context.Canceled)
	})
}
