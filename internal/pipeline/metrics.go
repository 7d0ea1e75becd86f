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
			Name: api.MetricCellDeliveries,
			Help: "Work messages handled, by outcome: done, failed, dead, retry, interrupted, duplicate, stale, malformed.",
		}, []string{"outcome"}),
		failures: auto.NewCounterVec(prometheus.CounterOpts{
			Name: "cellkit_cell_failures_total",
			Help: "Failed pipeline attempts, by kind.",
		}, []string{"kind"}),
		seconds: auto.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cellkit_cell_delivery_seconds",
			Help:    "Time to handle one work message, by outcome.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"outcome"}),
		latency: auto.NewHistogram(prometheus.HistogramOpts{
			Name:    api.MetricCellInquirySeconds,
			Help:    "Time from intake to a final status (done or failed).",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}),
		steps: auto.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cellkit_cell_step_seconds",
			Help:    "Pipeline step latency (each agency, css, core_banking), waits for a session included.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"step"}),
		inflight: auto.NewGauge(prometheus.GaugeOpts{
			Name: "cellkit_cell_inflight",
			Help: "Inquiries being processed by workers.",
		}),
		callbacks: auto.NewCounterVec(prometheus.CounterOpts{
			Name: "cellkit_cell_callbacks_total",
			Help: "Callbacks, by outcome: ok (delivered), retry (an attempt failed transiently and is tried again), error (failed for good), refused (an internal address), dropped (queue full).",
		}, []string{"outcome"}),
		panics: auto.NewCounterVec(prometheus.CounterOpts{
			Name: api.MetricCellPanics,
			Help: "Panics recovered while processing an inquiry (which is then failed with \"internal error\" and dead-lettered), delivering a callback or serving a request (answered 500), by step: an agency's name, css, scoring, core_banking, pipeline, callback, intake, admin.",
		}, []string{"step"}),
		quarantined: auto.NewCounter(prometheus.CounterOpts{
			Name: "cellkit_cell_quarantined_total",
			Help: "Inquiries quarantined at a start (failed as suspected poison and dead-lettered): in flight at each of the last crashes of the cell.",
		}),
	}
}
