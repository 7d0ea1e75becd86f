package cell

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/queue"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// registerMetrics adds the cell's gauges: the queue's, read from the last
// queue sample, and the agencies' session limits, from the map.
func (c *Cell) registerMetrics() {
	last := func(f func(*sample) float64) func() float64 {
		return func() float64 {
			s := c.sample.Load()
			if s == nil || s.Err != nil {
				return 0
			}
			return f(s)
		}
	}
	auto := promauto.With(c.metrics)
	auto.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "cellkit_cell_queue_oldest_age_seconds",
		Help: "Age of the oldest unacked work message (0 when the queue is empty).",
	}, last(func(s *sample) float64 {
		if s.Oldest.IsZero() {
			return 0
		}
		return time.Since(s.Oldest).Seconds()
	}))
	auto.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "cellkit_cell_queue_messages",
		Help: "Inquiries queued or in flight.",
	}, last(func(s *sample) float64 { return float64(s.Total) }))
	auto.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "cellkit_cell_queue_drain_rate",
		Help: "Work messages settled per second (moving average).",
	}, func() float64 { return c.shed.Rate() })
	auto.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "cellkit_cell_failed_inquiries",
		Help: "Inquiries on the error stream.",
	}, last(func(s *sample) float64 { return float64(s.Failed) }))
	auto.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "cellkit_cell_dead_letters",
		Help: "Inquiries on the dead-letter stream.",
	}, last(func(s *sample) float64 { return float64(s.Dead) }))
	auto.NewGaugeFunc(prometheus.GaugeOpts{
		Name: api.MetricCellReady,
		Help: "1 when /readyz answers 200.",
	}, func() float64 {
		if ok, _ := c.readiness(); ok {
			return 1
		}
		return 0
	})
	for _, lane := range queue.Lanes {
		auto.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cellkit_cell_queue_depth", ConstLabels: prometheus.Labels{"lane": string(lane)},
			Help: "Work messages not yet acked, by lane.",
		}, last(func(s *sample) float64 { return float64(s.Depth[inquiry.Priority(lane)]) }))
		auto.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cellkit_cell_queue_lane_oldest_age_seconds", ConstLabels: prometheus.Labels{"lane": string(lane)},
			Help: "Age of the lane's oldest unacked work message (0 when the lane is empty); the lane is shed past its age budget.",
		}, last(func(s *sample) float64 {
			if at := s.OldestByLane[lane]; !at.IsZero() {
				return time.Since(at).Seconds()
			}
			return 0
		}))
	}
	c.metrics.MustRegister(agencyLimits{m: c.follower.Map, desc: prometheus.NewDesc("cellkit_cell_agency_limit",
		"Sessions the agency allows across all cells (its limit in the cell's map).", []string{"agency"}, nil)})
}

// agencyLimits exports each agency's session limit from the cell's map, so
// that the sum of the cells' pool sizes can be checked against it. Before
// the first map it exports nothing rather than a limit of 0.
type agencyLimits struct {
	m    func() *slotmap.Map
	desc *prometheus.Desc
}

func (a agencyLimits) Describe(ch chan<- *prometheus.Desc) { ch <- a.desc }

func (a agencyLimits) Collect(ch chan<- prometheus.Metric) {
	m := a.m()
	if m == nil {
		return
	}
	for name, limit := range m.Agencies() {
		ch <- prometheus.MustNewConstMetric(a.desc, prometheus.GaugeValue, float64(limit), name)
	}
}
