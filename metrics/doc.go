// Package metrics makes seqlease observable: OpenTelemetry instruments for
// leases, commits, expiries, recovery, cleanup, gaps and named leases, spans
// for the operations that matter, and an alert evaluator with thresholds.
//
// # Wiring
//
// New creates every instrument once, on the MeterProvider it is given (nil:
// the global one, a no-op until the application installs an SDK), and hands
// out observers that the other packages take through small interfaces of
// their own, so none of them imports OpenTelemetry:
//
//	m, err := metrics.New(&metrics.Config{
//		MeterProvider: mp, TracerProvider: tp,
//		Watermarks:    b,                 // *barrier.Barrier: the lag gauge
//		Gaps:          st,                // the store counts open gaps (CountGaps)
//		Checkpoints:   st,                // the store lists the readers' checkpoints: reader lag
//		Alerts:        evaluator,         // optional: *metrics.Evaluator
//	})
//	leaser, _ := sequence.New(st, &sequence.Config{Barrier: b, Observer: m.Leaser()})
//	cleaner, _ := cleanup.New(st, &cleanup.Config{Observer: m.Cleanup()}) // its stream leases too
//	gaps, _ := gap.New(st, &gap.Config{Observer: m.Gaps()})
//	// named leases: lease.Config{Observer: m.NamedLeases()}
//
// Nothing registers itself anywhere global: to serve Prometheus, build the
// exporter on a registry of your own (examples/projection does, with
// -metrics :9464).
//
// # Attributes
//
// Instruments carry only low-cardinality attributes: stream and kind, the
// recovery step (method), an outcome (result, reason), and for alerts their
// name and level. Numbers and operation ids go on spans only. Streams beyond
// Config.MaxStreams are merged under OtherStream. The kind comes from
// sequence.LeaseOpts.Kind: keep it a small set (projection types), not an id.
//
// # Gauges
//
// The watermark lag (the highest number this process leased minus the
// stream's watermark), the open gaps, the last full scan's expired count,
// cascade mode and the alerts are observed by one callback at each
// collection, over the streams this process touched. The lag reads the
// barrier's in-memory watermark; the open gap count is one query per stream
// on PostgreSQL, made at most every Config.GapCountInterval. A read that
// fails is logged and skipped (the gap gauge keeps its last count); each is
// bounded by Config.QueryTimeout. The long-held named leases (holdings of
// this process older than Config.LongHeldAfter, by kind) are counted from
// the NamedLeaseObserver's own record of the holdings in progress (the
// lease package tells it when each begins and ends), with no query.
// The reader lag (seqlease.reader.lag, by reader and stream) is the
// stream's watermark minus the reader's saved checkpoint, for every
// checkpoint in the store (not only this process's), up to
// Config.MaxReaderSeries: one ListCheckpoints page (one query on
// PostgreSQL, watermarks included) per collection. The deaf listeners
// (seqlease.listen.deaf) and the self-checks that heard nothing
// (seqlease.listen.deaf_checks, a counter) are read from the store's
// ListenHealth (store.ListenChecker: Config.Listen, or Gaps or Checkpoints
// when it is one), with no query. The findings of lost history
// (seqlease.history.lost, a counter by stream, or by lease for a named
// lease) are read from the store's HistoryHealth (store.HistoryChecker:
// Config.History, or Gaps, Checkpoints or Listen when it is one), with no
// query. Close unregisters the callback.
//
// # Traces
//
// Spans, through the TracerProvider given (nil: the global one):
//
//	seqlease.lease          one Lease or LeaseN call
//	seqlease.commit         one Commit, CommitTx or Complete; event
//	                        seqlease.barrier.wait when its turn came
//	seqlease.cleanup.cycle  one cleanup cycle
//	  seqlease.recover      the recovery of one expired lease; an event
//	                        seqlease.recovery.step per step tried
//
// # Alerts
//
// An Evaluator keeps the events of a sliding window (default one hour) and
// watches five conditions: the share of granted leases that expired, the
// expired leases one full cleanup scan found at once, the share of recovery
// steps that failed, the open gaps, and the streams and named leases the
// store refuses because the database lost history it had shown
// (AlertHistoryLost, critical, fed from the store's HistoryHealth at each
// collection). Each alert has two states and sends
// only its transitions:
//
//	        condition holds
//	ok ─────────────────────────> firing      Alert{Firing: true}
//	 ^                              │
//	 └──────────────────────────────┘         Alert{Firing: false}
//	        condition ends
//
// so a condition that holds for an hour sends one alert, not one per event.
// Its clock is injected (EvaluatorConfig.Now). It sees one process; for a
// fleet, alert on the exported series (docs/operations.md has the PromQL).
//
// # Failure handling
//
// Recording never fails and never blocks on I/O: counters and histograms
// are in-memory, the observers are called synchronously on the operations'
// goroutines and do a map lookup and an atomic add. Only the gauges'
// callback reads (see Gauges), at the collector's pace, with timeouts.
package metrics
