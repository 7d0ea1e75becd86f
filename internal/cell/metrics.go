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
		Name: api.MetricCellQueueOldestAgeSeconds.Name,
		Help: api.MetricCellQueueOldestAgeSeconds.Help,
	}, last(func(s *sample) float64 {
		if s.Oldest.IsZero() {
			return 0
		}
		return time.Since(s.Oldest).Seconds()
	}))
	auto.NewGaugeFunc(prometheus.GaugeOpts{
		Name: api.MetricCellQueueMessages.Name,
		Help: api.MetricCellQueueMessages.Help,
	}, last(func(s *sample) float64 { return float64(s.Total) }))
	auto.NewGaugeFunc(prometheus.GaugeOpts{
		Name: api.MetricCellQueueDrainRate.Name,
		Help: api.MetricCellQueueDrainRate.Help,
	}, func() float64 { return c.shed.Rate() })
	auto.NewGaugeFunc(prometheus.GaugeOpts{
		Name: api.MetricCellFailedInquiries.Name,
		Help: api.MetricCellFailedInquiries.Help,
	}, last(func(s *sample) float64 { return float64(s.Failed) }))
	auto.NewGaugeFunc(prometheus.GaugeOpts{
		Name: api.MetricCellDeadLetters.Name,
		Help: api.MetricCellDeadLetters.Help,
	}, last(func(s *sample) float64 { return float64(s.Dead) }))
	auto.NewGaugeFunc(prometheus.GaugeOpts{
		Name: api.MetricCellReady.Name,
		Help: api.MetricCellReady.Help,
	}, func() float64 {
		if ok, _ := c.readiness(); ok {
			return 1
		}
		return 0
	})
	for _, lane := range queue.Lanes {
		auto.NewGaugeFunc(prometheus.GaugeOpts{
			Name: api.MetricCellQueueDepth.Name, ConstLabels: prometheus.Labels{api.LabelLane: string(lane)},
			Help: api.MetricCellQueueDepth.Help,
		}, last(func(s *sample) float64 { return float64(s.Depth[inquiry.Priority(lane)]) }))
		auto.NewGaugeFunc(prometheus.GaugeOpts{
			Name: api.MetricCellQueueLaneOldestAgeSeconds.Name, ConstLabels: prometheus.Labels{api.LabelLane: string(lane)},
			Help: api.MetricCellQueueLaneOldestAgeSeconds.Help,
		}, last(func(s *sample) float64 {
			if at := s.OldestByLane[lane]; !at.IsZero() {
				return time.Since(at).Seconds()
			}
			return 0
		}))
	}
	c.metrics.MustRegister(agencyLimits{m: c.follower.Map, desc: prometheus.NewDesc(api.MetricCellAgencyLimit.Name,
		api.MetricCellAgencyLimit.Help, api.MetricCellAgencyLimit.Labels, nil)})
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
