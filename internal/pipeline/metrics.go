package pipeline

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	inquiries *prometheus.CounterVec
	failures  *prometheus.CounterVec
	seconds   *prometheus.HistogramVec
	latency   prometheus.Histogram
	steps     *prometheus.HistogramVec
	inflight  prometheus.Gauge
	callbacks *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, labels prometheus.Labels) (*metrics, error) {
	m := &metrics{
		inquiries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellkit_cell_deliveries_total", ConstLabels: labels,
			Help: "Work messages handled, by outcome: done, failed, dead, retry, interrupted, duplicate, stale, malformed.",
		}, []string{"outcome"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellkit_cell_failures_total", ConstLabels: labels,
			Help: "Failed pipeline attempts, by kind.",
		}, []string{"kind"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cellkit_cell_delivery_seconds", ConstLabels: labels,
			Help:    "Time to handle one work message, by outcome.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"outcome"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "cellkit_cell_inquiry_seconds", ConstLabels: labels,
			Help:    "Time from intake to a final status (done or failed).",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}),
		steps: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cellkit_cell_step_seconds", ConstLabels: labels,
			Help:    "Pipeline step latency (each agency, css, core_banking), waits for a session included.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"step"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cellkit_cell_inflight", ConstLabels: labels,
			Help: "Inquiries being processed by workers.",
		}),
		callbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellkit_cell_callbacks_total", ConstLabels: labels,
			Help: "Callbacks, by outcome: ok (delivered), retry (an attempt failed transiently and is tried again), error (failed for good), refused (an internal address), dropped (queue full).",
		}, []string{"outcome"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.inquiries, m.failures, m.seconds, m.latency, m.steps, m.inflight, m.callbacks} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
