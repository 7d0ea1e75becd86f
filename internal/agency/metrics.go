package agency

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/breaker"
	"github.com/cellkit/cellkit/internal/sessionpool"
)

// Metrics are the agency link's metrics (cellkit_agency_*), labelled by
// agency; constant labels (the cell) are added to all of them. One Metrics
// serves every Client of a process.
type Metrics struct {
	calls       *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	state       *prometheus.GaugeVec
	transitions *prometheus.CounterVec
	limit       *prometheus.GaugeVec
	pool        *sessionpool.Metrics
}

// NewMetrics registers the agency and session pool metrics with reg.
func NewMetrics(reg prometheus.Registerer, constLabels prometheus.Labels) (*Metrics, error) {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellkit_agency_calls_total", ConstLabels: constLabels,
			Help: "Agency calls by outcome: ok, code_error, timeout, transport_error, circuit_open, limited, exhausted, canceled.",
		}, []string{"agency", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cellkit_agency_call_seconds", ConstLabels: constLabels,
			Help:    "Agency call latency, rejections included.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10},
		}, []string{"agency", "outcome"}),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cellkit_agency_breaker_state", ConstLabels: constLabels,
			Help: "Circuit breaker state: 0 closed, 1 open, 2 half-open, 3 forced open, 4 forced closed.",
		}, []string{"agency"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellkit_agency_breaker_transitions_total", ConstLabels: constLabels,
			Help: "Circuit breaker state changes, by the state entered.",
		}, []string{"agency", "to"}),
		limit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cellkit_agency_concurrency_limit", ConstLabels: constLabels,
			Help: "Current adaptive concurrency limit.",
		}, []string{"agency"}),
	}
	for _, c := range []prometheus.Collector{m.calls, m.latency, m.state, m.transitions, m.limit} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	pool, err := sessionpool.NewMetrics(reg, constLabels)
	if err != nil {
		return nil, err
	}
	m.pool = pool
	return m, nil
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
