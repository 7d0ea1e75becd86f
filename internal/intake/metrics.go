package intake

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/cellkit/cellkit/internal/api"
)

type metrics struct {
	requests    *prometheus.CounterVec
	seconds     *prometheus.HistogramVec
	shed        *prometheus.CounterVec
	laneShed    *prometheus.CounterVec
	laneTaken   *prometheus.CounterVec
	misdirected prometheus.Counter
	leaderWaits prometheus.Counter
	open        prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	auto := promauto.With(reg)
	m := &metrics{
		requests: auto.NewCounterVec(prometheus.CounterOpts{
			Name: api.MetricCellIntakeRequests.Name,
			Help: api.MetricCellIntakeRequests.Help,
		}, api.MetricCellIntakeRequests.Labels),
		seconds: auto.NewHistogramVec(prometheus.HistogramOpts{
			Name:    api.MetricCellIntakeSeconds.Name,
			Help:    api.MetricCellIntakeSeconds.Help,
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, api.MetricCellIntakeSeconds.Labels),
		shed: auto.NewCounterVec(prometheus.CounterOpts{
			Name: api.MetricCellIntakeShed.Name,
			Help: api.MetricCellIntakeShed.Help,
		}, api.MetricCellIntakeShed.Labels),
		laneShed: auto.NewCounterVec(prometheus.CounterOpts{
			Name: api.MetricCellIntakeLaneShed.Name,
			Help: api.MetricCellIntakeLaneShed.Help,
		}, api.MetricCellIntakeLaneShed.Labels),
		laneTaken: auto.NewCounterVec(prometheus.CounterOpts{
			Name: api.MetricCellIntakeLaneAccepted.Name,
			Help: api.MetricCellIntakeLaneAccepted.Help,
		}, api.MetricCellIntakeLaneAccepted.Labels),
		misdirected: auto.NewCounter(prometheus.CounterOpts{
			Name: api.MetricCellIntakeMisdirected.Name,
			Help: api.MetricCellIntakeMisdirected.Help,
		}),
		leaderWaits: auto.NewCounter(prometheus.CounterOpts{
			Name: api.MetricCellIntakeLeaderWaits.Name,
			Help: api.MetricCellIntakeLeaderWaits.Help,
		}),
		open: auto.NewGauge(prometheus.GaugeOpts{
			Name: api.MetricCellIntakeOpen.Name,
			Help: api.MetricCellIntakeOpen.Help,
		}),
	}
	for reason := range reasonKind {
		m.shed.WithLabelValues(string(reason))
	}
	// Counters are exported at 0 from the start, so that rate() and
	// increase() see their first event; the codes are those the intake
	// answers most (others appear at their first answer).
	for route, codes := range map[string][]string{
		"post": {"202", "400", "421", "503"}, "get": {"200", "404"}, "health": {"200", "503"}, "other": {"404"},
	} {
		m.seconds.WithLabelValues(route)
		for _, code := range codes {
			m.requests.WithLabelValues(route, code)
		}
	}
	for _, lane := range []string{"high", "normal"} {
		m.laneShed.WithLabelValues(lane)
		m.laneTaken.WithLabelValues(lane)
	}
	return m
}
