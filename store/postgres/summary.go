package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seqlease/seqlease/store"
)

var _ store.StreamSummarizer = (*Store)(nil)

// summarizeSQL reads the summaries of the streams named in $1, in their
// order, in one statement: one snapshot and one round trip for a whole
// page of streams. Each part reads an index: the unresolved and parked
// entries and the gaps from their partial indexes, the throughput's
// numbers from the primary key.
//
// The throughput (store.Throughput) probes back from the last number by
// 2^k - 1 for the most recent number resolved at the window's start (lo),
// then reads every stride-th number after lo, from the last one down. Up
// to a stride of 2 it reads them from one range of the primary key (the
// range holds at most twice $6 rows: cheaper than a lookup each, measured
// at about 2 us a lookup against 0.75 us a row of a range); past it, with
// one lookup each. The branches are gated on the stride, so only one runs
// per stream. Each resolution in the window falls in the interval
// date_bin finds for it less a microsecond: the intervals end at their
// last microsecond (store.Bucket).
//
// $2 now (NULL: the clock), $3 the cap on expired leases, $4 the window's
// start offset in microseconds before now, $5 the step in microseconds (0:
// no throughput), $6 the samples.
const summarizeSQL = `
WITH c AS MATERIALIZED (
	SELECT t AS now, t - $4::bigint * interval '1 microsecond' AS since
	FROM (SELECT COALESCE($2::timestamptz, clock_timestamp()) AS t) x
)
SELECT s.name, s.last_number, s.low_point, u.n, o.number, o.leased_at, g.n, x.n, p.n,
	c.since, lo.n, sd.stride, t.bins, t.counts
FROM c, unnest($1::text[]) WITH ORDINALITY AS r(name, ord)
JOIN {s}.streams s ON s.name = r.name
CROSS JOIN LATERAL (
	SELECT count(*) AS n FROM {s}.entries e WHERE e.stream = s.name AND e.state = 'leased'
) u
LEFT JOIN LATERAL (
	SELECT e.number, e.leased_at FROM {s}.entries e
	WHERE e.stream = s.name AND e.state = 'leased' ORDER BY e.number LIMIT 1
) o ON true
CROSS JOIN LATERAL (
	SELECT count(*) AS n FROM {s}.entries e WHERE e.stream = s.name AND e.state = 'gap'
) g
CROSS JOIN LATERAL (
	SELECT count(*) AS n FROM (
		SELECT 1 FROM {s}.entries e
		WHERE e.stream = s.name AND e.state = 'leased' AND e.expires_at <= c.now LIMIT $3
	) y
) x
CROSS JOIN LATERAL (
	SELECT count(*) AS n FROM {s}.entries e
	WHERE e.stream = s.name AND e.state = 'leased' AND e.parked_at IS NOT NULL
) p
CROSS JOIN LATERAL (
	SELECT COALESCE(max(e.number), s.low_point - 1) AS n FROM {s}.entries e
	WHERE $5::bigint > 0 AND e.stream = s.name AND e.resolved_at <= c.since
		AND e.number = ANY (ARRAY(SELECT s.last_number - ((1::bigint << k) - 1) FROM generate_series(0, 62) k
			WHERE (1::bigint << k) - 1 <= s.last_number - s.low_point))
) lo
CROSS JOIN LATERAL (
	SELECT GREATEST(1, (s.last_number - lo.n + $6::bigint - 1) / $6::bigint) AS stride
) sd
CROSS JOIN LATERAL (
	SELECT array_agg(b.bin) AS bins, array_agg(b.n) AS counts
	FROM (
		SELECT date_bin($5::bigint * interval '1 microsecond', a.at - interval '1 microsecond', c.since) AS bin,
			count(*) AS n
		FROM (
			SELECT e.resolved_at AS at FROM {s}.entries e
			WHERE sd.stride <= 2 AND e.stream = s.name AND e.number > lo.n AND e.number <= s.last_number
				AND (s.last_number - e.number) % sd.stride = 0
			UNION ALL
			SELECT e.resolved_at FROM {s}.entries e
			WHERE sd.stride > 2 AND e.stream = s.name
				AND e.number = ANY (ARRAY(SELECT generate_series(s.last_number, lo.n + 1, -sd.stride)))
		) a
		WHERE $5::bigint > 0 AND a.at > c.since AND a.at <= c.now
		GROUP BY 1
	) b
) t
ORDER BY r.ord`

// SummarizeStreams implements store.StreamSummarizer in one statement.
func (s *Store) SummarizeStreams(ctx context.Context, streams []string, p *store.SummaryParams) ([]store.StreamSummary, error) {
	const op = "summarize streams"
	sum, err := store.ValidateSummary(streams, p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if len(streams) == 0 {
		return nil, nil
	}
	var now *time.Time
	if p != nil {
		now = p.Now
	}
	rows, err := s.db.Query(ctx, s.q.summarize, streams, now, sum.ExpiredLimit,
		sum.Window().Microseconds(), sum.Step.Microseconds(), sum.Samples)
	if err != nil {
		return nil, interpretError(op, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.StreamSummary, error) {
		return scanSummary(row, sum)
	})
	if err != nil {
		return nil, interpretError(op, err)
	}
	return out, nil
}

// scanSummary scans one row of summarizeSQL.
func scanSummary(row pgx.CollectableRow, sum store.Summary) (store.StreamSummary, error) {
	var (
		out        store.StreamSummary
		last       int64
		oldest     *int64
		oldestAt   *time.Time
		since      time.Time
		lo, stride int64
		bins       []time.Time
		counts     []int64
	)
	st := &out.StreamStats
	err := row.Scan(&st.Stream, &last, &st.LowPoint, &st.Unresolved, &oldest, &oldestAt,
		&out.OpenGaps, &out.Expired, &out.Parked, &since, &lo, &stride, &bins, &counts)
	if err != nil {
		return out, err
	}
	st.NextNumber, st.Watermark = last+1, last
	if oldest != nil {
		st.OldestUnresolved, st.OldestUnresolvedAt, st.Watermark = *oldest, *oldestAt, *oldest-1
	}
	if sum.Step == 0 {
		return out, nil
	}
	t := store.Throughput{Since: since, Step: sum.Step, Counts: make([]int64, sum.Buckets), From: lo + 1, Stride: stride}
	for i, bin := range bins {
		b := int(bin.Sub(since) / sum.Step)
		if b < 0 || b >= sum.Buckets {
			return out, fmt.Errorf("interval %d of %d", b, sum.Buckets)
		}
		t.Counts[b] = counts[i] * stride
	}
	out.Throughput = t
	return out, nil
}
