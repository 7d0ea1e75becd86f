package pipeline

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/metric"
)

type metrics struct {
	inquiries   *prometheus.CounterVec
	failures    *prometheus.CounterVec
	seconds     *prometheus.HistogramVec
	latency     prometheus.Histogram
	steps       *prometheus.HistogramVec
	inflight    prometheus.Gauge
	callbacks   *prometheus.CounterVec
	panics      *prometheus.CounterVec
	quarantined prometheus.Counter
}

// The label values the pipeline's counters take. Each series is exported at
// 0 from the start, so that rate() and increase() see its first event: a
// series born at 1 shows no increase from its first sample, and an alert
// on it would not fire on the event it exists for.
var (
	callbackOutcomes = []string{"ok", "retry", "error", "refused", "dropped"}
	// panicSteps are the steps besides each agency's name.
	panicSteps = []string{"css", "scoring", "core_banking", "pipeline", "callback", "intake", "admin"}
)

// newMetrics builds the pipeline's metrics for agencies (their names are
// steps of cellkit_cell_panics_total and cellkit_cell_step_seconds), every
// series of a known label set exported from the start (histograms empty).
func newMetrics(reg prometheus.Registerer, agencies []string) *metrics {
	m := buildMetrics(reg)
	for _, o := range deliveryOutcomes {
		m.inquiries.WithLabelValues(string(o))
		m.seconds.WithLabelValues(string(o))
	}
	for _, s := range append(slices.Clone(agencies), "css", "core_banking") {
		m.steps.WithLabelValues(s)
	}
	for _, k := range failureKinds {
		m.failures.WithLabelValues(string(k))
	}
	for _, o := range callbackOutcomes {
		m.callbacks.WithLabelValues(o)
	}
	for _, s := range append(slices.Clone(agencies), panicSteps...) {
		m.panics.WithLabelValues(s)
	}
	return m
}

func buildMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		inquiries: metric.CounterVec(reg, api.MetricCellDeliveries),
		failures:  metric.CounterVec(reg, api.MetricCellFailures),
		seconds: metric.HistogramVec(reg, api.MetricCellDeliverySeconds,
			[]float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}),
		latency: metric.Histogram(reg, api.MetricCellInquirySeconds,
			[]float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}),
		steps: metric.HistogramVec(reg, api.MetricCellStepSeconds,
			[]float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}),
		inflight:    metric.Gauge(reg, api.MetricCellInflight),
		callbacks:   metric.CounterVec(reg, api.MetricCellCallbacks),
		panics:      metric.CounterVec(reg, api.MetricCellPanics),
		quarantined: metric.Counter(reg, api.MetricCellQuarantined),
	}
}
