package cell

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/metric"
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
	metric.GaugeFunc(c.metrics, api.MetricCellQueueOldestAgeSeconds, last(func(s *sample) float64 {
		if s.Oldest.IsZero() {
			return 0
		}
		return time.Since(s.Oldest).Seconds()
	}))
	metric.GaugeFunc(c.metrics, api.MetricCellQueueMessages, last(func(s *sample) float64 { return float64(s.Total) }))
	metric.GaugeFunc(c.metrics, api.MetricCellQueueDrainRate, func() float64 { return c.shed.Rate() })
	metric.GaugeFunc(c.metrics, api.MetricCellFailedInquiries, last(func(s *sample) float64 { return float64(s.Failed) }))
	metric.GaugeFunc(c.metrics, api.MetricCellDeadLetters, last(func(s *sample) float64 { return float64(s.Dead) }))
	metric.GaugeFunc(c.metrics, api.MetricCellReady, func() float64 {
		if ok, _ := c.readiness(); ok {
			return 1
		}
		return 0
	})
	for _, lane := range queue.Lanes {
		laneOf := prometheus.Labels{api.LabelLane: string(lane)}
		metric.GaugeFunc(c.metrics, api.MetricCellQueueDepth,
			last(func(s *sample) float64 { return float64(s.Depth[inquiry.Priority(lane)]) }), laneOf)
		metric.GaugeFunc(c.metrics, api.MetricCellQueueLaneOldestAgeSeconds, last(func(s *sample) float64 {
			if at := s.OldestByLane[lane]; !at.IsZero() {
				return time.Since(at).Seconds()
			}
			return 0
		}), laneOf)
	}
	c.metrics.MustRegister(agencyLimits{m: c.follower.Map, desc: metric.Desc(api.MetricCellAgencyLimit)})
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
