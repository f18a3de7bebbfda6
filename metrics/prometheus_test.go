package metrics_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// TestPrometheusNames runs the script with the OpenTelemetry Prometheus
// exporter (on a registry of its own) and checks the names it serves against
// docs/operations.md and docs/grafana-dashboard.json: every seqlease_ name
// they use is served, and every served family is documented.
func TestPrometheusNames(t *testing.T) {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	require.NoError(t, err)
	b := setup(t, sdkmetric.WithReader(exporter))
	b.script(t)
	ctx := context.Background()
	nl := b.m.NamedLeases()
	nl.Acquire(ctx, "cleanup", nil)
	nl.Renew(ctx, "cleanup", errors.New("timeout"))
	nl.Lost(ctx, "cleanup", time.Minute)
	defer nl.Held("cleanup")()

	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	body, err := io.ReadAll(rec.Body)
	require.NoError(t, err)
	text := string(body)
	require.Contains(t, text, "\nseqlease_lease_expired_total{")

	// The series names served, with a histogram's _bucket, _sum, _count.
	served := map[string]bool{}
	families := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (seqlease_\S+) (\S+)$`).FindAllStringSubmatch(text, -1) {
		families[m[1]] = true
		served[m[1]] = true
		if m[2] == "histogram" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				served[m[1]+suffix] = true
			}
		}
	}
	require.Len(t, families, 22)

	name := regexp.MustCompile(`seqlease_[a-z_]+[a-z]`)
	for _, doc := range []string{"../docs/operations.md", "../docs/grafana-dashboard.json"} {
		raw, err := os.ReadFile(doc)
		require.NoError(t, err)
		used := map[string]bool{}
		for _, n := range name.FindAllString(string(raw), -1) {
			if n == "seqlease_migrations" || n == "seqlease_app" || n == "seqlease_migrator" {
				continue // role and table names in the tuning section
			}
			used[n] = true
			require.True(t, served[n], "%s uses %s, which the exporter does not serve", doc, n)
		}
		if strings.HasSuffix(doc, ".md") {
			for f := range families {
				require.True(t, used[f], "%s does not document %s", doc, f)
			}
		}
	}
}
