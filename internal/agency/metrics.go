package agency

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/breaker"
	"github.com/cellkit/cellkit/internal/metric"
	"github.com/cellkit/cellkit/internal/sessionpool"
)

// Metrics are the agency link's metrics (cellkit_agency_*), labelled by
// agency, with the session pools' (cellkit_pool_*). One Metrics serves
// every Client of a process; callers add labels of their own (the cell) by
// wrapping the registerer.
type Metrics struct {
	calls       *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	state       *prometheus.GaugeVec
	transitions *prometheus.CounterVec
	limit       *prometheus.GaugeVec
	pool        *sessionpool.Metrics
}

// NewMetrics builds the agency and session pool metrics and registers them
// with reg (nil: none are registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	return &Metrics{
		calls: metric.CounterVec(reg, api.MetricAgencyCalls),
		latency: metric.HistogramVec(reg, api.MetricAgencyCallSeconds,
			[]float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10}),
		state:       metric.GaugeVec(reg, api.MetricAgencyBreakerState),
		transitions: metric.CounterVec(reg, api.MetricAgencyBreakerTransitions),
		limit:       metric.GaugeVec(reg, api.MetricAgencyConcurrencyLimit),
		pool:        sessionpool.NewMetrics(reg),
	}
}

// callOutcomes are the outcomes of cellkit_agency_calls_total.
var callOutcomes = []string{"ok", "code_error", "timeout", "transport_error", "circuit_open", "limited", "exhausted", "canceled"}

// add exports an agency's counters at 0, so that rate() and increase() see
// their first event (a series born at 1 shows no increase from its first
// sample): its calls by outcome (and their latency) and its breaker's
// transitions by state.
func (m *Metrics) add(agency string) {
	if m == nil {
		return
	}
	for _, o := range callOutcomes {
		m.calls.WithLabelValues(agency, o)
		m.latency.WithLabelValues(agency, o)
	}
	for _, s := range []breaker.State{breaker.Closed, breaker.Open, breaker.HalfOpen, breaker.ForcedOpen, breaker.ForcedClosed} {
		m.transitions.WithLabelValues(agency, s.String())
	}
}

func (m *Metrics) observe(agency, outcome string, took time.Duration) {
	if m == nil {
		return
	}
	m.calls.WithLabelValues(agency, outcome).Inc()
	m.latency.WithLabelValues(agency, outcome).Observe(took.Seconds())
}

func (m *Metrics) breakerChanged(agency string, from, to breaker.State) {
	if m == nil {
		return
	}
	m.state.WithLabelValues(agency).Set(float64(to))
	if from != to {
		m.transitions.WithLabelValues(agency, to.String()).Inc()
	}
}

func (m *Metrics) limitChanged(agency string, limit int) {
	if m == nil {
		return
	}
	m.limit.WithLabelValues(agency).Set(float64(limit))
}

// BreakerState is the breaker state gauge of an agency (for tests and
// dashboards that read it directly).
func (m *Metrics) BreakerState(agency string) prometheus.Gauge {
	return m.state.WithLabelValues(agency)
}
