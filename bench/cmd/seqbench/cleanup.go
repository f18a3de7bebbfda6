package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// cleanupSpecs time one cleanup cycle over n expired leases of one stream
// on PostgreSQL (the gap step: nothing to recover).
func cleanupSpecs() []spec {
	var out []spec
	for _, c := range []struct {
		n      int
		paced  bool
		suffix string
	}{
		{10_000, false, ""},
		{100_000, false, ""},
		{10_000, true, ", default cascade pacing"},
	} {
		key := fmt.Sprintf("cleanup/%d", c.n)
		if c.paced {
			key += "/paced"
		}
		out = append(out, spec{
			key:     key,
			section: secCleanup,
			name:    "resolve " + group(strconv.Itoa(c.n)) + " expired leases, one cycle" + c.suffix,
			metrics: []metric{{key: "s", label: "time", unit: "s"}, {key: "rate", unit: "leases/s"}},
			run: func(ctx context.Context, e *env) (map[string]float64, error) {
				n := c.n
				if e.smoke {
					n /= 10
				}
				return cleanupRun(ctx, e, n, c.paced)
			},
		})
	}
	return out
}

// cleanupRun leases n numbers that expire at once, then times RunOnce.
// Unless paced, cascade mode is kept off (its pauses between batches are a
// deliberate throttle, not work).
func cleanupRun(ctx context.Context, e *env, n int, paced bool) (map[string]float64, error) {
	schema, drop, err := e.newSchema(ctx)
	if err != nil {
		return nil, err
	}
	defer drop()
	pool, err := e.pool(ctx, 4, "")
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	for left := n; left > 0; left -= store.MaxBatch {
		reqs := make([]store.LeaseRequest, min(left, store.MaxBatch))
		for i := range reqs {
			reqs[i] = store.LeaseRequest{TTL: time.Microsecond, OperationID: "op"}
		}
		if _, err := s.Lease(ctx, "bench", reqs, &store.LeaseParams{Owner: "seqbench"}); err != nil {
			return nil, err
		}
	}
	cfg := &cleanup.Config{}
	if !paced {
		cfg.Cascade = &cleanup.CascadeConfig{Threshold: 1 << 30}
	}
	sv, err := cleanup.New(s, cfg)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	res, err := sv.RunOnce(ctx)
	took := time.Since(start)
	if err != nil {
		return nil, err
	}
	if got := res.Resolved[recovery.MethodGap]; got != n || res.Failed != 0 {
		return nil, fmt.Errorf("cleanup resolved %d of %d expired leases (%d failed)", got, n, res.Failed)
	}
	return map[string]float64{"s": took.Seconds(), "rate": float64(n) / took.Seconds()}, nil
}
