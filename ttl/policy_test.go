package ttl_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/ttl"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type factor float64

func (f factor) Factor() float64 { return float64(f) }

func TestPolicyTTL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		load  float64
		boost ttl.Booster
		want  time.Duration
	}{
		{"idle is Min", 0, nil, 10 * time.Second},
		{"saturated is Max", 1, nil, 70 * time.Second},
		{"in proportion between", 0.5, nil, 40 * time.Second},
		{"a load above 1 is 1", 7, nil, 70 * time.Second},
		{"a negative load is 0", -1, nil, 10 * time.Second},
		{"NaN is 0", math.NaN(), nil, 10 * time.Second},
		{"a boost multiplies", 0, factor(2), 20 * time.Second},
		{"a boost is capped at Max", 0.5, factor(3), 70 * time.Second},
		{"+Inf boost is Max", 0, factor(math.Inf(1)), 70 * time.Second},
		{"a boost below 1 is none", 0, factor(0.1), 10 * time.Second},
		{"a NaN boost is none", 0, factor(math.NaN()), 10 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := ttl.Policy{Min: 10 * time.Second, Max: 70 * time.Second,
				Signal: func() float64 { return c.load }, Boost: c.boost}
			require.NoError(t, p.Validate(0))
			require.Equal(t, c.want, p.TTL())
		})
	}
	t.Run("no signal is load 0", func(t *testing.T) {
		p := ttl.Policy{Min: time.Second, Max: time.Minute}
		require.Equal(t, time.Second, p.TTL())
	})
}

func TestPolicyValidateNamesTheField(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		p      ttl.Policy
		maxTTL time.Duration
		field  string
	}{
		{ttl.Policy{}, 0, "Min"},
		{ttl.Policy{Min: -time.Second, Max: time.Second}, 0, "Min"},
		{ttl.Policy{Min: 2 * time.Hour, Max: 3 * time.Hour}, time.Hour, "Min"},
		{ttl.Policy{Min: time.Minute}, 0, "Max"},
		{ttl.Policy{Min: time.Minute, Max: time.Second}, 0, "Max"},
		{ttl.Policy{Min: time.Minute, Max: 2 * time.Hour}, time.Hour, "Max"},
		{ttl.Policy{Min: time.Minute, Max: store.MaxTTL + 1}, 0, "Max"},
	} {
		err := c.p.Validate(c.maxTTL)
		require.ErrorIs(t, err, store.ErrInvalidArgument, "%+v", c.p)
		var fe *ttl.FieldError
		require.True(t, errors.As(err, &fe), "%v", err)
		require.Equal(t, c.field, fe.Field, "%v", err)
		require.Contains(t, err.Error(), "Policy."+c.field)
	}
	require.NoError(t, (&ttl.Policy{Min: time.Hour, Max: time.Hour}).Validate(time.Hour), "Min = Max = the limit")
}
