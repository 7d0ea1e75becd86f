package cell

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/queue"
)

// registerMetrics adds the cell's gauges, read from the last queue sample.
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
		Help: "Messages in the work stream.",
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
		Name: "cellkit_cell_ready",
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
	}
}
