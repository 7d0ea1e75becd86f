package drill

import (
	"context"
	"fmt"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/loadtest"
)

// Drain: under load, `cellctl drain CELL --wait`, which moves the
// users' inquiries with them; the moved users see no error but the
// fence's (503 user-moving with Retry-After, while their last messages
// are copied), the drained cell's queue empties, no id is lost; then
// undrain (the inquiries move back).
func Drain(ctx context.Context, c Config) (*loadtest.Result, error) {
	c = c.withDefaults(60 * time.Second)
	st := c.Stack
	if _, err := st.Proc(c.Cell); err != nil {
		return nil, err
	}
	// The load covers the baseline, the drain and After; the drain usually
	// ends long before Fault, so the load is cut short after After.
	r, err := c.runner(c.Baseline + c.Fault + c.After)
	if err != nil {
		return nil, err
	}
	ctx2, cancel := context.WithCancel(ctx)
	defer cancel()
	wait := startLoad(ctx2, r)
	var drainAt, drainedAt time.Duration
	var queue api.CellStatus
	var actErr error
	func() {
		if actErr = sleepUntil(ctx, r, c.Baseline); actErr != nil {
			return
		}
		drainAt = r.Elapsed()
		r.Mark("drain " + c.Cell)
		c.logf("cellctl drain %s --wait at %.1fs", c.Cell, drainAt.Seconds())
		dctx, dcancel := context.WithTimeout(ctx, c.Fault)
		defer dcancel()
		if _, actErr = st.Cellctl(dctx, "drain", c.Cell, "--wait"); actErr != nil {
			return
		}
		drainedAt = r.Elapsed()
		r.Mark(c.Cell + " drained")
		c.logf("%s drained at %.1fs", c.Cell, drainedAt.Seconds())
		queue, actErr = st.Status(ctx, c.Cell)
		if actErr != nil {
			return
		}
		actErr = sleepUntil(ctx, r, drainedAt+c.After)
	}()
	cancel() // stop sending; what was sent completes
	res, err := loadEnded("drain", wait, actErr)
	if err != nil {
		return res, err
	}
	end := r.Elapsed()
	d := &loadtest.Verdict{Name: "drain"}
	cells := loadtest.UserCells(res.Samples, 0, drainAt)
	moved := loadtest.Window{From: drainAt, To: end, Users: func(u int) bool { return cells[u] == c.Cell }}.Stats(res.Samples)
	others := loadtest.Window{From: drainAt, To: end, Users: func(u int) bool { return cells[u] != c.Cell }}.Stats(res.Samples)
	checkMoved(d, "moved users", moved)
	d.Check("other users' errors", others.Errors == 0, fmt.Sprintf("%d of %d %v", others.Errors, others.N, others.Status), "0")
	after := loadtest.UserCells(res.Samples, drainedAt, end)
	still := 0
	for _, cell := range after {
		if cell == c.Cell {
			still++
		}
	}
	d.Check(c.Cell+" answers no one after the drain", still == 0, fmt.Sprintf("%d users", still), "0")
	d.Check(c.Cell+"'s queue after drain --wait", queue.Queue.Messages == 0 && queue.Inflight == 0,
		fmt.Sprintf("%d queued, %d in flight", queue.Queue.Messages, queue.Inflight), "0, 0")
	d.Note("drain --wait took %.1fs", (drainedAt - drainAt).Seconds())
	c.logf("verifying %d accepted ids...", countAccepted(res.Samples))
	d.CheckVerification(r.Verify(ctx, res.Samples, c.VerifyWithin, c.Replays))
	// Restore.
	if _, err := st.Cellctl(ctx, "undrain", c.Cell); err != nil {
		return res, err
	}
	if err := st.WaitReady(ctx, c.Cell, 30*time.Second); err != nil {
		return res, err
	}
	res.Events = append(res.Events, loadtest.Event{At: r.Elapsed(), Name: "undrain " + c.Cell})
	c.logf("undrained %s", c.Cell)
	d.Finish()
	res.Drill = d
	return res, nil
}
