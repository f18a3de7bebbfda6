package ui_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// recoverer moves expired work to a new number (what recovery does).
type recoverer interface {
	RecoverExpired(ctx context.Context, stream string, number int64, p *store.RecoverParams) (int64, error)
	FillGap(ctx context.Context, stream string, number int64, p *store.FillParams) error
}

// TestGapsShowWhereWorkWent lists gaps whose work moved (recovered_as),
// was delivered again under a later number with the same operation id,
// was filled, was lost, or cannot be traced: "lost" only for the gap
// whose operation no later number committed.
func TestGapsShowWhereWorkWent(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			now, err := s.Now(ctx)
			require.NoError(t, err)
			past := now.Add(-time.Hour)
			// 1 o-1, 2 o-2, 3 o-3, 4 no operation id, 5 o-5: all expired.
			_, err = s.Lease(ctx, "work", []store.LeaseRequest{{TTL: time.Minute, OperationID: "o-1"}, {TTL: time.Minute, OperationID: "o-2"},
				{TTL: time.Minute, OperationID: "o-3"}, {TTL: time.Minute}, {TTL: time.Minute, OperationID: "o-5"}},
				&store.LeaseParams{Owner: "w", Now: &past})
			require.NoError(t, err)
			moved, err := s.(recoverer).RecoverExpired(ctx, "work", 2, &store.RecoverParams{Payload: []byte("r"), RecoveryType: "retry", Owner: "cleaner"})
			require.NoError(t, err) // 6: o-2, recovered
			_, err = s.ResolveExpiredBatch(ctx, "work", []int64{1, 3, 4, 5}, nil)
			require.NoError(t, err)
			require.NoError(t, s.(recoverer).FillGap(ctx, "work", 5, &store.FillParams{Payload: []byte("f"), FilledBy: "ana"}))
			// 7: o-1 delivered again by the application, committed.
			es, err := s.Lease(ctx, "work", []store.LeaseRequest{{TTL: time.Hour, OperationID: "o-1"}}, &store.LeaseParams{Owner: "w"})
			require.NoError(t, err)
			_, err = s.Commit(ctx, "work", es[0].Number, es[0].Token, nil)
			require.NoError(t, err)

			b := prepareActions(t, s) // a handler with actions: the fill links
			r := get(t, b.h, "/gaps?stream=work&filled=1")
			require.Equal(t, http.StatusOK, r.status, r.body)
			requireSafe(t, r)
			work := map[string]string{}
			for _, n := range []string{"1", "2", "3", "4", "5"} {
				row := cellsOf(rowWithNumber(t, r.body, n))
				work[n] = row[2]
			}
			require.Equal(t, map[string]string{
				"1": "7 committed again",
				"2": strconv.FormatInt(moved, 10) + " recovered",
				"3": "lost",
				"4": "untraced: no operation id",
				"5": "filled here",
			}, work)
			require.Contains(t, r.body, `href="fill-gap?number=3&amp;stream=work"`, "a lost gap can be filled")
			require.NotContains(t, r.body, `href="fill-gap?number=1&amp;`, "filling 1 would apply o-1 twice")
			require.Contains(t, r.body, `href="stream?after=0&amp;name=work#n7"`, "the number the work went to is linked")

			// The confirmation page refuses it too.
			c := request(t, b.h, http.MethodGet, q("/fill-gap", "stream", "work", "number", "1"), nil, operator)
			require.Equal(t, http.StatusConflict, c.status, c.body)
			require.Contains(t, c.body, "committed again as 7")

			// A form drawn while 3 was lost, posted once o-3 was delivered
			// again, is refused, and 3 stays a gap.
			f := form(t, b.h, q("/fill-gap", "stream", "work", "number", "3"), operator)
			f.Set("reason", "restore o-3")
			es, err = s.Lease(ctx, "work", []store.LeaseRequest{{TTL: time.Hour, OperationID: "o-3"}}, &store.LeaseParams{Owner: "w"})
			require.NoError(t, err)
			_, err = s.Commit(ctx, "work", es[0].Number, es[0].Token, nil)
			require.NoError(t, err)
			p := request(t, b.h, http.MethodPost, "/actions/fill-gap", f, operator)
			require.Equal(t, http.StatusConflict, p.status, p.body)
			got, err := s.Read(ctx, "work", 2, 1)
			require.NoError(t, err)
			require.Equal(t, store.Gap, got[0].State)
		})
	}
}

// TestGapsSearchBounded: a gap whose operation was committed again beyond
// the numbers the page searches is not called lost.
func TestGapsSearchBounded(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	ctx := t.Context()
	past := time.Now().Add(-time.Hour)
	_, err := s.Lease(ctx, "busy", []store.LeaseRequest{{TTL: time.Minute, OperationID: "far"}}, &store.LeaseParams{Owner: "w", Now: &past})
	require.NoError(t, err)
	_, err = s.ResolveExpiredBatch(ctx, "busy", []int64{1}, nil)
	require.NoError(t, err)
	reqs := make([]store.LeaseRequest, 1000)
	for i := range reqs {
		reqs[i].TTL = time.Hour
	}
	for range 11 {
		_, err = s.Lease(ctx, "busy", reqs, &store.LeaseParams{Owner: "w"})
		require.NoError(t, err)
	}
	es, err := s.Lease(ctx, "busy", []store.LeaseRequest{{TTL: time.Hour, OperationID: "far"}}, &store.LeaseParams{Owner: "w"})
	require.NoError(t, err)
	_, err = s.Commit(ctx, "busy", es[0].Number, es[0].Token, nil)
	require.NoError(t, err)
	r := get(t, newHandler(t, s, nil), "/gaps?stream=busy")
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, "not found up to 10001", cellsOf(rowWithNumber(t, r.body, "1"))[2])
}

// rowWithNumber returns the table row whose first cell is number.
func rowWithNumber(t *testing.T, body, number string) string {
	t.Helper()
	for _, row := range strings.Split(body, "<tr")[1:] {
		if c := cellsOf(row); len(c) > 0 && c[0] == number {
			return row
		}
	}
	t.Fatalf("no row %s in %s", number, body)
	return ""
}
