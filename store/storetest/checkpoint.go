package storetest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

// checkpoint returns reader's saved position in stream.
func (b *bundle) checkpoint(reader, stream string) int64 {
	b.t.Helper()
	pos, err := b.s.Checkpoint(b.ctx, reader, stream)
	require.NoError(b.t, err, "Checkpoint %s/%s", reader, stream)
	return pos
}

// save saves reader's position in stream at base+at and checks that it
// succeeded.
func (b *bundle) save(reader, stream string, position int64, at time.Duration) {
	b.t.Helper()
	err := b.s.SaveCheckpoint(b.ctx, reader, stream, position, &store.SaveCheckpointParams{Now: b.at(at)})
	require.NoError(b.t, err, "SaveCheckpoint %s/%s at %d", reader, stream, position)
}

// listCheckpoints lists the checkpoints p selects, normalised.
func (b *bundle) listCheckpoints(p *store.ListCheckpointsParams) []store.Checkpoint {
	b.t.Helper()
	cs, err := b.s.ListCheckpoints(b.ctx, p)
	require.NoError(b.t, err, "ListCheckpoints")
	for i := range cs {
		cs[i].UpdatedAt = normTime(cs[i].UpdatedAt)
	}
	return cs
}

// requireRefused checks that err is a *store.CheckpointError matching
// sentinel and equal to want (with Err set to sentinel).
func requireRefused(t *testing.T, err, sentinel error, want store.CheckpointError) {
	t.Helper()
	require.ErrorIs(t, err, sentinel)
	require.False(t, store.IsInvalid(err), "a refused save is not bad input: %v", err)
	var ce *store.CheckpointError
	require.True(t, errors.As(err, &ce), "%v is not a *store.CheckpointError", err)
	want.Err = sentinel
	require.Equal(t, want, *ce)
}

// commitUpTo leases n numbers of stream and commits the first k of them.
func (b *bundle) commitUpTo(stream string, n, k int) []store.Entry {
	b.t.Helper()
	es := b.leaseHour(stream, n)
	for _, e := range es[:k] {
		b.commit(e, time.Second, nil)
	}
	return es
}

func testCheckpoints(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("none saved is 0, for an unknown stream too", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		require.Zero(t, b.checkpoint("r", s))
		b.commitUpTo(s, 2, 2)
		require.Zero(t, b.checkpoint("r", s))
		require.Empty(t, b.listCheckpoints(&store.ListCheckpointsParams{Stream: s}))
	})

	t.Run("moves forward up to the watermark; a repeat is a no-op", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		b.commitUpTo(s, 5, 3) // watermark 3
		b.save("r", s, 2, time.Second)
		require.Equal(t, int64(2), b.checkpoint("r", s))
		b.save("r", s, 3, 2*time.Second)
		require.Equal(t, int64(3), b.checkpoint("r", s))
		b.save("r", s, 3, 3*time.Second) // an idempotent retry: nothing written
		require.Equal(t, []store.Checkpoint{{Reader: "r", Stream: s, Position: 3, UpdatedAt: b.time(2 * time.Second), Watermark: 3}},
			b.listCheckpoints(&store.ListCheckpointsParams{Stream: s}), "the repeat changed updated_at")
	})

	t.Run("refuses to move backwards and changes nothing", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		b.commitUpTo(s, 4, 4)
		b.save("r", s, 3, time.Second)
		before := b.listCheckpoints(nil)
		for _, asked := range []int64{2, 0} {
			err := b.s.SaveCheckpoint(b.ctx, "r", s, asked, &store.SaveCheckpointParams{Now: b.at(2 * time.Second)})
			requireRefused(t, err, store.ErrCheckpointBackwards, store.CheckpointError{Reader: "r", Stream: s, Current: 3, Asked: asked, Watermark: 4})
			require.NotErrorIs(t, err, store.ErrCheckpointAhead)
		}
		require.Equal(t, before, b.listCheckpoints(nil))
	})

	t.Run("refuses a position past the watermark and changes nothing", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.commitUpTo(s, 5, 2) // 3 is leased: watermark 2
		b.commit(es[3], time.Second, nil)
		b.save("r", s, 1, time.Second)
		before := b.listCheckpoints(nil)
		for _, asked := range []int64{3, 4, 6} {
			err := b.s.SaveCheckpoint(b.ctx, "r", s, asked, nil)
			requireRefused(t, err, store.ErrCheckpointAhead, store.CheckpointError{Reader: "r", Stream: s, Current: 1, Asked: asked, Watermark: 2})
			require.NotErrorIs(t, err, store.ErrCheckpointBackwards)
		}
		require.Equal(t, before, b.listCheckpoints(nil))

		// A gap resolves its number as a commit does.
		b.release(es[2], 2*time.Second)
		b.save("r", s, 4, 3*time.Second)
		require.Equal(t, int64(4), b.checkpoint("r", s))
	})

	t.Run("a stream that does not exist yet has watermark 0", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("-later")
		err := b.s.SaveCheckpoint(b.ctx, "r", s, 1, nil)
		requireRefused(t, err, store.ErrCheckpointAhead, store.CheckpointError{Reader: "r", Stream: s, Asked: 1})
		require.Empty(t, b.listCheckpoints(nil))
		b.save("r", s, 0, time.Second) // registers the reader at the start
		require.Equal(t, []store.Checkpoint{{Reader: "r", Stream: s, UpdatedAt: b.time(time.Second)}}, b.listCheckpoints(nil))
		b.requireNoStream(s)
	})

	t.Run("readers and streams are independent", func(t *testing.T) {
		b := setup(t, newStore)
		s1, s2 := b.name("-1"), b.name("-2")
		b.commitUpTo(s1, 3, 3)
		b.commitUpTo(s2, 3, 3)
		b.save("a", s1, 3, time.Second)
		b.save("b", s1, 1, time.Second)
		b.save("a", s2, 2, time.Second)
		require.Equal(t, int64(3), b.checkpoint("a", s1))
		require.Equal(t, int64(1), b.checkpoint("b", s1))
		require.Equal(t, int64(2), b.checkpoint("a", s2))
		require.Zero(t, b.checkpoint("b", s2))
	})

	t.Run("delete removes it, and a later save may start lower", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		b.commitUpTo(s, 3, 3)
		b.save("r", s, 3, time.Second)
		b.save("other", s, 2, time.Second)
		require.NoError(t, b.s.DeleteCheckpoint(b.ctx, "r", s))
		require.Zero(t, b.checkpoint("r", s))
		require.Equal(t, int64(2), b.checkpoint("other", s), "another reader's checkpoint went too")
		err := b.s.DeleteCheckpoint(b.ctx, "r", s)
		require.ErrorIs(t, err, store.ErrCheckpointNotFound)
		require.False(t, store.IsInvalid(err))
		b.save("r", s, 1, 2*time.Second) // a rewind on purpose
		require.Equal(t, int64(1), b.checkpoint("r", s))
	})

	t.Run("lists in (reader, stream) order, filtered and paged, with watermarks", func(t *testing.T) {
		b := setup(t, newStore)
		s1, s2 := b.name("-a"), b.name("-b")
		b.commitUpTo(s1, 4, 4)
		b.commitUpTo(s2, 3, 2)
		b.save("y", s2, 1, time.Second)
		b.save("x", s1, 4, 2*time.Second)
		b.save("x", s2, 2, 3*time.Second)
		b.save("y", s1, 0, 4*time.Second)
		all := []store.Checkpoint{
			{Reader: "x", Stream: s1, Position: 4, UpdatedAt: b.time(2 * time.Second), Watermark: 4},
			{Reader: "x", Stream: s2, Position: 2, UpdatedAt: b.time(3 * time.Second), Watermark: 2},
			{Reader: "y", Stream: s1, Position: 0, UpdatedAt: b.time(4 * time.Second), Watermark: 4},
			{Reader: "y", Stream: s2, Position: 1, UpdatedAt: b.time(time.Second), Watermark: 2},
		}
		require.Equal(t, all, b.listCheckpoints(nil))
		require.Equal(t, []int64{0, 0, 4, 1}, []int64{all[0].Lag(), all[1].Lag(), all[2].Lag(), all[3].Lag()})
		require.Equal(t, all[:2], b.listCheckpoints(&store.ListCheckpointsParams{Reader: "x"}))
		require.Equal(t, []store.Checkpoint{all[1], all[3]}, b.listCheckpoints(&store.ListCheckpointsParams{Stream: s2}))
		require.Equal(t, all[3:], b.listCheckpoints(&store.ListCheckpointsParams{Reader: "y", Stream: s2}))

		var paged []store.Checkpoint
		p := &store.ListCheckpointsParams{Limit: 3}
		for {
			page := b.listCheckpoints(p)
			paged = append(paged, page...)
			if len(page) < p.Limit {
				break
			}
			p.AfterReader, p.AfterStream = page[len(page)-1].Reader, page[len(page)-1].Stream
		}
		require.Equal(t, all, paged)
		require.Equal(t, all[1:2], b.listCheckpoints(&store.ListCheckpointsParams{AfterReader: "x", AfterStream: s1, Limit: 1}))
		require.Empty(t, b.listCheckpoints(&store.ListCheckpointsParams{AfterReader: "y", AfterStream: s2}))

		// The watermark is read with the listing.
		b.commitUpTo(s2, 1, 0)
		b.release(b.entry(s2, 3), 5*time.Second) // 3 resolves; 4 is leased
		require.Equal(t, int64(3), b.listCheckpoints(&store.ListCheckpointsParams{Reader: "y", Stream: s2})[0].Watermark)
	})

	t.Run("bad input is refused and changes nothing", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		b.commitUpTo(s, 2, 2)
		b.save("r", s, 1, time.Second)
		before := b.listCheckpoints(nil)
		for _, c := range []struct {
			name   string
			reader string
			stream string
			pos    int64
			want   error
		}{
			{"empty reader", "", s, 2, store.ErrInvalidReader},
			{"long reader", strings.Repeat("r", store.MaxNameLen+1), s, 2, store.ErrInvalidReader},
			{"reader not UTF-8", "r\xff", s, 2, store.ErrInvalidReader},
			{"reader with a control character", "r\n", s, 2, store.ErrInvalidReader},
			{"empty stream", "r", "", 2, store.ErrInvalidStream},
			{"negative position", "r", s, -1, store.ErrInvalidNumber},
		} {
			t.Run(c.name, func(t *testing.T) {
				errs := map[string]error{"SaveCheckpoint": b.s.SaveCheckpoint(b.ctx, c.reader, c.stream, c.pos, nil)}
				if c.pos >= 0 {
					_, errs["Checkpoint"] = b.s.Checkpoint(b.ctx, c.reader, c.stream)
					errs["DeleteCheckpoint"] = b.s.DeleteCheckpoint(b.ctx, c.reader, c.stream)
				}
				for op, err := range errs {
					require.ErrorIs(t, err, c.want, op)
					require.ErrorIs(t, err, store.ErrInvalidArgument, op)
				}
				require.Equal(t, before, b.listCheckpoints(nil))
			})
		}
		long := strings.Repeat("r", store.MaxNameLen)
		require.NoError(t, b.s.SaveCheckpoint(b.ctx, long, s, 2, nil), "a reader name of MaxNameLen bytes")
		require.NoError(t, b.s.DeleteCheckpoint(b.ctx, long, s))
		for _, c := range []struct {
			name string
			p    store.ListCheckpointsParams
			want error
		}{
			{"bad reader filter", store.ListCheckpointsParams{Reader: "\x00"}, store.ErrInvalidReader},
			{"bad cursor reader", store.ListCheckpointsParams{AfterReader: "\xff"}, store.ErrInvalidReader},
			{"bad stream filter", store.ListCheckpointsParams{Stream: "\x01"}, store.ErrInvalidStream},
			{"negative limit", store.ListCheckpointsParams{Limit: -1}, store.ErrInvalidCount},
			{"limit too large", store.ListCheckpointsParams{Limit: store.MaxListLimit + 1}, store.ErrInvalidCount},
		} {
			_, err := b.s.ListCheckpoints(b.ctx, &c.p)
			require.ErrorIs(t, err, c.want, c.name)
			require.ErrorIs(t, err, store.ErrInvalidArgument, c.name)
		}
		ctx, cancel := context.WithCancel(b.ctx)
		cancel()
		err := b.s.SaveCheckpoint(ctx, "r", s, 2, nil)
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, before, b.listCheckpoints(nil))
	})

	t.Run("concurrent saves lose nothing and never go back", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		const savers, per = 4, 25
		b.commitUpTo(s, savers*per, savers*per)
		var wg sync.WaitGroup
		errs := make(chan error, savers*per)
		for g := range savers {
			wg.Go(func() {
				// Saver g saves g+1, g+1+savers, ...: interleaved, so many
				// saves arrive behind a higher one.
				last := int64(0)
				for i := range per {
					pos := int64(g + 1 + i*savers)
					err := b.s.SaveCheckpoint(b.ctx, "r", s, pos, nil)
					if err != nil && !errors.Is(err, store.ErrCheckpointBackwards) {
						errs <- err
						return
					}
					got, err := b.s.Checkpoint(b.ctx, "r", s)
					if err != nil {
						errs <- err
						return
					}
					if got < pos || got < last {
						errs <- errors.New("the checkpoint went back")
						return
					}
					last = got
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, int64(savers*per), b.checkpoint("r", s))
	})
}
