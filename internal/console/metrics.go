package console

import (
	"github.com/cellkit/cellkit/internal/api"
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
			Name: api.MetricConsoleCollections.Name,
			Help: api.MetricConsoleCollections.Help,
		}, api.MetricConsoleCollections.Labels),
		seconds: f.NewHistogram(prometheus.HistogramOpts{
			Name:    api.MetricConsoleCollectionSeconds.Name,
			Help:    api.MetricConsoleCollectionSeconds.Help,
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
		}),
		unreachable: f.NewGauge(prometheus.GaugeOpts{
			Name: api.MetricConsoleCellsUnreachable.Name,
			Help: api.MetricConsoleCellsUnreachable.Help,
		}),
		streams: f.NewGauge(prometheus.GaugeOpts{
			Name: api.MetricConsoleStreams.Name,
			Help: api.MetricConsoleStreams.Help,
		}),
		refused: f.NewCounterVec(prometheus.CounterOpts{
			Name: api.MetricConsoleAuthFailures.Name,
			Help: api.MetricConsoleAuthFailures.Help,
		}, api.MetricConsoleAuthFailures.Labels),
		untrusted: f.NewGauge(prometheus.GaugeOpts{
			Name: api.MetricConsoleAdminUntrusted.Name,
			Help: api.MetricConsoleAdminUntrusted.Help,
		}),
		bad: f.NewGauge(prometheus.GaugeOpts{
			Name: api.MetricConsoleBadValues.Name,
			Help: api.MetricConsoleBadValues.Help,
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
