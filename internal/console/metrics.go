package console

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are the console's own (docs/metrics.md).
type metrics struct {
	collections *prometheus.CounterVec
	seconds     prometheus.Histogram
	unreachable prometheus.Gauge
	streams     prometheus.Gauge
	refused     *prometheus.CounterVec
	untrusted   prometheus.Gauge
	bad         prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		collections: f.NewCounterVec(prometheus.CounterOpts{
			Name: "cellkit_console_collections_total",
			Help: "Collections of the console's view, by registry: ok (the map read) or error (the last map kept).",
		}, []string{"registry"}),
		seconds: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "cellkit_console_collection_seconds",
			Help:    "Time one collection of the console's view took (every admin API asked in parallel, each bounded).",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
		}),
		unreachable: f.NewGauge(prometheus.GaugeOpts{
			Name: "cellkit_console_cells_unreachable",
			Help: "Cells whose admin API no instance answered at the last collection.",
		}),
		streams: f.NewGauge(prometheus.GaugeOpts{
			Name: "cellkit_console_streams",
			Help: "Event streams (pages) open.",
		}),
		refused: f.NewCounterVec(prometheus.CounterOpts{
			Name: "cellkit_console_auth_failures_total",
			Help: "Console requests refused: reason missing (no token, cookie or certificate), wrong (a token that is not the console's), expired (a session cookie ended, expired or unknown), all 401; limited (429: a token while its client's, or everyone's, budget of wrong tokens is spent).",
		}, []string{"reason"}),
		untrusted: f.NewGauge(prometheus.GaugeOpts{
			Name: "cellkit_console_admin_untrusted",
			Help: "Admin endpoints in the map or the routers' announcements the console did not call at the last collection: not trusted with its credentials.",
		}),
		bad: f.NewGauge(prometheus.GaugeOpts{
			Name: "cellkit_console_bad_values",
			Help: "Values in the last view that were not finite numbers (NaN, ±Inf), dropped and named on their cards.",
		}),
	}
	for _, r := range []string{"ok", "error"} {
		m.collections.WithLabelValues(r)
	}
	for _, r := range []string{refusedMissing, refusedWrong, refusedExpired, refusedLimited} {
		m.refused.WithLabelValues(r)
	}
	return m
}

func (m *metrics) collected(v *View) {
	r := "ok"
	if !v.Registry.OK {
		r = "error"
	}
	m.collections.WithLabelValues(r).Inc()
	m.seconds.Observe(v.CollectSeconds)
	n := 0
	for _, c := range v.Cells {
		if c.Health == HealthDown {
			n++
		}
	}
	m.unreachable.Set(float64(n))
	m.untrusted.Set(float64(len(v.Refused)))
	bad := len(v.Bad)
	for _, c := range v.Cells {
		bad += len(c.Bad)
	}
	for _, r := range v.Routers {
		bad += len(r.Bad)
	}
	m.bad.Set(float64(bad))
}
