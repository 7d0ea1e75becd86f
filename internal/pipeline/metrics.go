package pipeline

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/cellkit/cellkit/internal/api"
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
	auto := promauto.With(reg)
	return &metrics{
		inquiries: auto.NewCounterVec(prometheus.CounterOpts{
			Name: api.MetricCellDeliveries.Name,
			Help: api.MetricCellDeliveries.Help,
		}, api.MetricCellDeliveries.Labels),
		failures: auto.NewCounterVec(prometheus.CounterOpts{
			Name: api.MetricCellFailures.Name,
			Help: api.MetricCellFailures.Help,
		}, api.MetricCellFailures.Labels),
		seconds: auto.NewHistogramVec(prometheus.HistogramOpts{
			Name:    api.MetricCellDeliverySeconds.Name,
			Help:    api.MetricCellDeliverySeconds.Help,
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, api.MetricCellDeliverySeconds.Labels),
		latency: auto.NewHistogram(prometheus.HistogramOpts{
			Name:    api.MetricCellInquirySeconds.Name,
			Help:    api.MetricCellInquirySeconds.Help,
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}),
		steps: auto.NewHistogramVec(prometheus.HistogramOpts{
			Name:    api.MetricCellStepSeconds.Name,
			Help:    api.MetricCellStepSeconds.Help,
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, api.MetricCellStepSeconds.Labels),
		inflight: auto.NewGauge(prometheus.GaugeOpts{
			Name: api.MetricCellInflight.Name,
			Help: api.MetricCellInflight.Help,
		}),
		callbacks: auto.NewCounterVec(prometheus.CounterOpts{
			Name: api.MetricCellCallbacks.Name,
			Help: api.MetricCellCallbacks.Help,
		}, api.MetricCellCallbacks.Labels),
		panics: auto.NewCounterVec(prometheus.CounterOpts{
			Name: api.MetricCellPanics.Name,
			Help: api.MetricCellPanics.Help,
		}, api.MetricCellPanics.Labels),
		quarantined: auto.NewCounter(prometheus.CounterOpts{
			Name: api.MetricCellQuarantined.Name,
			Help: api.MetricCellQuarantined.Help,
		}),
	}
}
