package store_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

func TestTokenRoundTrip(t *testing.T) {
	t.Parallel()
	a, b := store.NewToken(), store.NewToken()
	require.NotEqual(t, a, b)
	require.False(t, a.IsZero())
	s := a.String()
	require.Len(t, s, 36)
	require.Equal(t, byte('4'), s[14], "version 4 UUID")
	for _, form := range []string{s, strings.ReplaceAll(s, "-", ""), strings.ToUpper(s)} {
		got, err := store.ParseToken(form)
		require.NoError(t, err, form)
		require.Equal(t, a, got)
	}
}

func TestParseTokenRejects(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "zz", strings.Repeat("0", 32), "00000000-0000-0000-0000-000000000000",
		strings.Repeat("g", 32), strings.Repeat("a", 31), strings.Repeat("a", 33), "'; DROP TABLE x; --"} {
		_, err := store.ParseToken(s)
		require.ErrorIs(t, err, store.ErrInvalidToken, s)
		require.ErrorIs(t, err, store.ErrInvalidArgument, s)
	}
}

func FuzzParseToken(f *testing.F) {
	f.Add(store.NewToken().String())
	f.Add("")
	f.Add("----")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := store.ParseToken(s)
		if err != nil {
			require.ErrorIs(t, err, store.ErrInvalidToken)
			return
		}
		again, err := store.ParseToken(tok.String())
		require.NoError(t, err)
		require.Equal(t, tok, again)
	})
}

func TestGapError(t *testing.T) {
	t.Parallel()
	require.ErrorIs(t, store.GapError(store.ReasonReleased), store.ErrReleased)
	require.ErrorIs(t, store.GapError(store.ReasonExpired), store.ErrExpired)
	err := store.GapError("recovered")
	require.ErrorIs(t, err, store.ErrGap)
	require.ErrorContains(t, err, "recovered")
}
