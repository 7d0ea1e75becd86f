package intake

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/metric"
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
	m := &metrics{
		requests: metric.CounterVec(reg, api.MetricCellIntakeRequests),
		seconds: metric.HistogramVec(reg, api.MetricCellIntakeSeconds,
			[]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}),
		shed:        metric.CounterVec(reg, api.MetricCellIntakeShed),
		laneShed:    metric.CounterVec(reg, api.MetricCellIntakeLaneShed),
		laneTaken:   metric.CounterVec(reg, api.MetricCellIntakeLaneAccepted),
		misdirected: metric.Counter(reg, api.MetricCellIntakeMisdirected),
		leaderWaits: metric.Counter(reg, api.MetricCellIntakeLeaderWaits),
		open:        metric.Gauge(reg, api.MetricCellIntakeOpen),
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
