package cell

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
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
// watermark again (healReadings fresh readings in a row after the
// failure: a disk still being filled is not room, and a server started on
// a full disk could not use it), the embedded NATS is restarted in
// process, which opens
// the stores again and clears their write error (a file store that failed
// a write refuses every write after it); the cell's connection follows it
// by itself. The work that was queued or in flight is delivered again from
// the stores. The store counts as open again once the cell's connection
// is back on the new server and JetStream answers there: until then new
// inquiries are still refused as storage-full (the cell's choice, which
// the routers do not count against it), not as a queue it cannot reach
// (a failure, which opens their breakers). A restart that fails, or a
// connection that does not come back within healWait, ends the cell with
// an error, for its supervisor to start it again.
func (c *Cell) healStore(ctx context.Context) error {
	roomy := 0 // readings in a row since the failure that found room
	return c.everySample(ctx, func() error {
		if failed, why := c.ns.StoreFailed(); failed && !c.storeFailed() {
			c.disk.Failed(true, why)
			roomy = 0
			return nil
		}
		if !c.storeFailed() {
			return nil
		}
		// Room, read afresh twice in a row after the failure: a reading
		// from before it, or one taken while another process is still
		// filling the disk, is not room.
		if err := c.disk.Check(); err != nil || !c.disk.Room() {
			roomy = 0
			return nil
		}
		if roomy++; roomy < healReadings {
			return nil
		}
		c.log.Warn("restarting the embedded NATS in process: the store failed a write and its filesystem has room again",
			"used", fmt.Sprintf("%.1f%%", 100*c.disk.Usage().Used()))
		if err := c.ns.Restart(); err != nil {
			return fmt.Errorf("the store failed a write and the embedded NATS could not be restarted: %w", err)
		}
		if err := c.untilQueueBack(ctx); err != nil {
			return err
		}
		c.disk.Failed(false, "")
		return nil
	})
}

// healReadings is how many readings of the filesystem in a row, after a
// failed write, must find room before the store is opened again.
const healReadings = 2

// healWait bounds the wait for the cell's connection after the embedded
// NATS restarted in process (a restart takes tens of milliseconds).
const healWait = 15 * time.Second

// untilQueueBack waits until the cell's connection is back on its
// embedded NATS, restarted, and JetStream answers on it. The connection
// is asked to reconnect at once, not after its reconnect wait.
func (c *Cell) untilQueueBack(ctx context.Context) error {
	_ = c.nc.ForceReconnect() // fails only on a closed connection, which the wait below reports
	deadline := time.Now().Add(healWait)
	for {
		if c.nc.Status() == nats.CONNECTED {
			actx, cancel := context.WithTimeout(ctx, time.Second)
			_, err := c.js.AccountInfo(actx)
			cancel()
			if err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the embedded NATS restarted, but the cell's connection did not come back to it within %v", healWait)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(20 * time.Millisecond):
		}
	}
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
