package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// telemetry is the demo's metrics pipeline: an OpenTelemetry MeterProvider
// whose reader is the Prometheus exporter, registered on a registry of its
// own (not Prometheus's global one), and the handler that serves it.
type telemetry struct {
	provider *sdkmetric.MeterProvider
	handler  http.Handler // serves the Prometheus text format

	mu      sync.Mutex
	closers []func() error // the Metrics built on provider
}

func newTelemetry() (*telemetry, error) {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	return &telemetry{
		provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter)),
		handler:  promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	}, nil
}

// onClose has fn run when the telemetry shuts down: the Metrics of a run
// stay readable (their last gauges) until then.
func (tm *telemetry) onClose(fn func() error) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	tm.closers = append(tm.closers, fn)
}

// shutdown closes the Metrics and the provider.
func (tm *telemetry) shutdown(ctx context.Context) error {
	tm.mu.Lock()
	closers := tm.closers
	tm.closers = nil
	tm.mu.Unlock()
	var errs []error
	for _, fn := range closers {
		errs = append(errs, fn())
	}
	return errors.Join(append(errs, tm.provider.Shutdown(ctx))...)
}

// serve serves /metrics on addr in the background. stop shuts the server
// and the provider down and waits for them.
func (tm *telemetry) serve(addr string) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", tm.handler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "projection: metrics server:", err)
		}
	})
	fmt.Fprintf(os.Stderr, "projection: serving metrics on http://%s/metrics\n", ln.Addr())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		wg.Wait()
		_ = tm.shutdown(ctx)
	}, nil
}
