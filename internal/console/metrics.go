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
			Help: "Console requests refused with 401: reason missing (no token, cookie or certificate) or wrong (a token that is not the console's).",
		}, []string{"reason"}),
	}
	for _, r := range []string{"ok", "error"} {
		m.collections.WithLabelValues(r)
	}
	for _, r := range []string{"missing", "wrong"} {
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
}
