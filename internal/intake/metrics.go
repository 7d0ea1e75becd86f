package intake

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	requests    *prometheus.CounterVec
	seconds     *prometheus.HistogramVec
	shed        *prometheus.CounterVec
	misdirected prometheus.Counter
	open        prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, labels prometheus.Labels) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellkit_cell_intake_requests_total", ConstLabels: labels,
			Help: "Intake API requests, by route (post, get, other) and status code.",
		}, []string{"route", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cellkit_cell_intake_seconds", ConstLabels: labels,
			Help:    "Intake API latency, by route; a POST includes the synced record write and PubAck.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"route"}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellkit_cell_intake_shed_total", ConstLabels: labels,
			Help: "Inquiries turned away with 503, by reason: age (oldest pending over budget), wait (backlog would take longer than the budget to drain), depth, full (stream limit), closed, nats.",
		}, []string{"reason"}),
		misdirected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cellkit_cell_intake_misdirected_total", ConstLabels: labels,
			Help: "Inquiries refused with 421 because this cell does not own the user.",
		}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cellkit_cell_intake_open", ConstLabels: labels,
			Help: "1 while the intake takes new inquiries.",
		}),
	}
	for _, reason := range []string{"age", "depth", "wait", "full", "closed", "nats"} {
		m.shed.WithLabelValues(reason)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.seconds, m.shed, m.misdirected, m.open} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
