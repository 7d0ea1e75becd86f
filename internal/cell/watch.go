package cell

import (
	"context"
	"fmt"
	"time"
)

// The cell's watchdogs of its own health: a pipeline that is stuck, and a
// store that failed a write for lack of space.

// watchStall ends the cell with an error when its pipeline has had work
// in flight and settled none of it for StallTimeout and a second more (its
// readiness fails from StallTimeout on): a stuck pipeline does not heal,
// and the supervisor's restart makes the next start count the crash in
// the inquiries it had in flight.
func (c *Cell) watchStall(ctx context.Context) error {
	return c.everySample(ctx, func() error {
		if d := c.pipe.Stalled(); d > c.cfg.StallTimeout+time.Second {
			c.log.Error("the pipeline is stuck: exiting for the supervisor to start the cell again",
				"inflight", c.pipe.Inflight(), "settled_none_for", d.Round(time.Millisecond).String())
			return fmt.Errorf("the pipeline is stuck: %d inquiries in flight and none settled for %v", c.pipe.Inflight(), d.Round(time.Millisecond))
		}
		return nil
	})
}

// storeFailed says whether the store failed a write and is not open again
// (the pipeline fetches nothing meanwhile).
func (c *Cell) storeFailed() bool { return c.disk != nil && c.disk.State().Failed != "" }

// healStore watches the embedded JetStream's file store: when it fails a
// write (its log says so: a full disk), the store refuses new inquiries
// and readiness fails at once; once the filesystem is below the low
// watermark again, the embedded NATS is restarted in process, which opens
// the stores again and clears their write error (a file store that failed
// a write refuses every write after it); the cell's connection follows it
// by itself. The work that was queued or in flight is delivered again from
// the stores. A restart that fails ends the cell with an error, for its
// supervisor to start it again.
func (c *Cell) healStore(ctx context.Context) error {
	return c.everySample(ctx, func() error {
		if failed, why := c.ns.StoreFailed(); failed && !c.storeFailed() {
			c.disk.Failed(true, why)
		}
		if !c.storeFailed() || !c.disk.Room() {
			return nil
		}
		c.log.Warn("restarting the embedded NATS in process: the store failed a write and its filesystem has room again",
			"used", fmt.Sprintf("%.1f%%", 100*c.disk.Usage().Used()))
		if err := c.ns.Restart(); err != nil {
			return fmt.Errorf("the store failed a write and the embedded NATS could not be restarted: %w", err)
		}
		c.disk.Failed(false, "")
		return nil
	})
}

// everySample runs check every SampleInterval until ctx ends (nil) or
// check fails (its error).
func (c *Cell) everySample(ctx context.Context, check func() error) error {
	t := time.NewTicker(c.cfg.SampleInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := check(); err != nil {
			return err
		}
	}
}
