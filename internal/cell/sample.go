package cell

import (
	"context"
	"time"

	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/queue"
	"github.com/cellkit/cellkit/internal/shed"
)

// sample is the last observation of the queue.
type sample struct {
	queue.Stats
	Failed, Dead int
	At           time.Time
	Err          error
}

// sampleLoop observes the queue for the shedder, readiness and metrics.
func (c *Cell) sampleLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.SampleInterval)
	defer t.Stop()
	var lastFailed time.Time
	var failed, dead int
	for {
		s := &sample{At: time.Now()}
		mark := c.shed.Mark()
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		s.Stats, s.Err = c.queue.Stats(qctx)
		if s.Err == nil && time.Since(lastFailed) >= time.Second {
			if f, d, err := c.queue.FailedCounts(qctx); err == nil {
				failed, dead, lastFailed = f, d, time.Now()
			}
		}
		cancel()
		s.Failed, s.Dead = failed, dead
		if s.Err == nil {
			depth := 0
			for _, n := range s.Depth {
				depth += n
			}
			instances := 1
			if c.leaser != nil {
				instances = c.leaser.Live()
			}
			c.shed.Observe(shed.Sample{
				Depth: depth, Oldest: s.Oldest, At: s.At, Mark: mark, Capacity: c.pipe.Capacity(), Places: c.pipe.Places(), Instances: instances, Idle: c.pipe.Inflight() == 0,
				High: s.Depth[inquiry.High], OldestHigh: s.OldestByLane[inquiry.High], OldestNormal: s.OldestByLane[inquiry.Normal],
			})
		}
		c.sample.Store(s)
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}
