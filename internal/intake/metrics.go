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
			Name: api.MetricCellIntakeRequests,
			Help: "Intake API requests, by route (post, get, health: the routers' probes, other) and status code.",
		}, []string{"route", "code"}),
		seconds: auto.NewHistogramVec(prometheus.HistogramOpts{
			Name:    api.MetricCellIntakeSeconds,
			Help:    "Intake API latency, by route; a POST includes the synced record write and PubAck.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"route"}),
		shed: auto.NewCounterVec(prometheus.CounterOpts{
			Name: api.MetricCellIntakeShed,
			Help: "Inquiries turned away with 503, by reason: age (oldest pending over budget), wait (backlog would take longer than the budget to drain), depth, share (high priority over its share while normal asks for the rest), full (stream limit), closed, nats, storage (the store near full or failing a write), moving (the user's inquiries being moved to another cell).",
		}, []string{"reason"}),
		laneShed: auto.NewCounterVec(prometheus.CounterOpts{
			Name: "cellkit_cell_intake_lane_shed_total",
			Help: "Inquiries the shedder turned away (age, depth, wait, share), by lane (the router's Cellkit-Priority; normal without it).",
		}, []string{"lane"}),
		laneTaken: auto.NewCounterVec(prometheus.CounterOpts{
			Name: "cellkit_cell_intake_lane_accepted_total",
			Help: "New inquiries accepted (202, not replays), by lane.",
		}, []string{"lane"}),
		misdirected: auto.NewCounter(prometheus.CounterOpts{
			Name: "cellkit_cell_intake_misdirected_total",
			Help: "Inquiries refused with 421 because this cell does not own the user.",
		}),
		leaderWaits: auto.NewCounter(prometheus.CounterOpts{
			Name: "cellkit_cell_intake_leader_waits_total",
			Help: "New inquiries that waited for the cell's streams to have a leader again (tried more than once), whatever came of it.",
		}),
		open: auto.NewGauge(prometheus.GaugeOpts{
			Name: "cellkit_cell_intake_open",
			Help: "1 while the intake takes new inquiries.",
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
