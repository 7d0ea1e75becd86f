package console

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/metric"
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
	m := &metrics{
		collections: metric.CounterVec(reg, api.MetricConsoleCollections),
		seconds: metric.Histogram(reg, api.MetricConsoleCollectionSeconds,
			[]float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}),
		unreachable: metric.Gauge(reg, api.MetricConsoleCellsUnreachable),
		streams:     metric.Gauge(reg, api.MetricConsoleStreams),
		refused:     metric.CounterVec(reg, api.MetricConsoleAuthFailures),
		untrusted:   metric.Gauge(reg, api.MetricConsoleAdminUntrusted),
		bad:         metric.Gauge(reg, api.MetricConsoleBadValues),
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
