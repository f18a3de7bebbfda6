package seqleasetest_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/seqleasetest"
	"github.com/seqlease/seqlease/store/postgres"
)

// TestMain checks for leaked goroutines after the tests (goleak) and closes
// the shared PostgreSQL pools.
func TestMain(m *testing.M) { pgtest.Main(m) }

// backend makes a Stack on one backend, with cfg's other settings.
type backend struct {
	name  string
	stack func(t *testing.T, cfg *seqleasetest.Config) *seqleasetest.Stack
}

// backends are the backends every helper is tested on: memory (the
// default) and PostgreSQL, in a fresh migrated schema.
func backends() []backend {
	return []backend{
		{"memory", func(t *testing.T, cfg *seqleasetest.Config) *seqleasetest.Stack {
			return seqleasetest.Setup(t, cfg)
		}},
		{"postgres", func(t *testing.T, cfg *seqleasetest.Config) *seqleasetest.Stack {
			t.Helper()
			c := seqleasetest.Config{}
			if cfg != nil {
				c = *cfg
			}
			c.Store = pgStore(t)
			return seqleasetest.Setup(t, &c)
		}},
	}
}

// pgStore returns a PostgreSQL store on a fresh schema dropped after t.
func pgStore(t *testing.T) *postgres.Store {
	t.Helper()
	pool := pgtest.Shared(t, false)
	st, err := postgres.New(pool, &postgres.Config{Schema: pgtest.NewSchema(t, pool)})
	require.NoError(t, err)
	return st
}

// fakeTB records the failures a helper reports instead of ending the test.
type fakeTB struct {
	failures []string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failures = append(f.failures, fmt.Sprintf(format, args...))
}

// requireFailed checks that the helper failed exactly once, with a message
// that contains every one of parts, and forgets the failure.
func (f *fakeTB) requireFailed(t *testing.T, parts ...string) {
	t.Helper()
	require.Len(t, f.failures, 1, "want exactly one failure, got %q", f.failures)
	msg := f.failures[0]
	f.failures = nil
	require.True(t, strings.HasPrefix(msg, "seqleasetest: "), "message %q has no package prefix", msg)
	for _, p := range parts {
		require.Contains(t, msg, p)
	}
}

// requirePassed checks that the helper reported no failure.
func (f *fakeTB) requirePassed(t *testing.T) {
	t.Helper()
	require.Empty(t, f.failures, "want no failure")
}
