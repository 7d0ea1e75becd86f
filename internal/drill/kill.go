package drill

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/cellkit/cellkit/internal/loadtest"
)

// Kill: baseline, SIGKILL one cell, load on, restart it after Fault,
// load on, then verify every accepted id.
func Kill(ctx context.Context, c Config) (*loadtest.Result, error) {
	c = c.withDefaults(10 * time.Second)
	st := c.Stack
	if _, err := st.Proc(c.Cell); err != nil {
		return nil, err
	}
	if c.Prometheus != "" && (c.Fault < CellDownBound+5*time.Second || c.After < ResolveBound+5*time.Second) {
		return nil, fmt.Errorf("drill kill: with a Prometheus the fault must last at least %v and the load after it %v (the alert's bounds)",
			CellDownBound+5*time.Second, ResolveBound+5*time.Second)
	}
	end := c.Baseline + c.Fault + c.After
	r, prom, err := c.watchedLoad(ctx, end)
	if err != nil {
		return nil, err
	}
	defer prom.Stop()
	wait := startLoad(ctx, r)
	var killAt, restartAt, readyAt time.Duration
	var actErr error
	func() {
		if actErr = sleepUntil(ctx, r, c.Baseline); actErr != nil {
			return
		}
		if actErr = st.Kill(ctx, c.Cell); actErr != nil {
			return
		}
		killAt = r.Elapsed()
		r.Mark(c.Cell + " killed")
		c.logf("%s killed (SIGKILL) at %.1fs", c.Cell, killAt.Seconds())
		if actErr = sleepUntil(ctx, r, killAt+c.Fault); actErr != nil {
			return
		}
		if actErr = st.Restart(c.Cell); actErr != nil {
			return
		}
		restartAt = r.Elapsed()
		r.Mark(c.Cell + " restarted")
		c.logf("%s restarted at %.1fs", c.Cell, restartAt.Seconds())
		if actErr = st.WaitReady(ctx, c.Cell, c.After); actErr != nil {
			return
		}
		readyAt = r.Elapsed()
		r.Mark(c.Cell + " ready")
		c.logf("%s ready at %.1fs", c.Cell, readyAt.Seconds())
	}()
	res, err := loadEnded("kill", wait, actErr)
	if err != nil {
		return res, err
	}
	d := &loadtest.Verdict{Name: "kill"}
	cells := loadtest.UserCells(res.Samples, 0, killAt)
	victim := func(u int) bool { return cells[u] == c.Cell }

	checkOtherCells(d, c, st, res.Samples, cells, killAt, restartAt, end, "kill", "down")
	down := loadtest.Window{From: killAt, To: restartAt, Users: victim}.Stats(res.Samples)
	d.Check(c.Cell+"'s users while down: 503", down.N > 0 && down.Status["503"] == down.N,
		fmt.Sprintf("%d of %d %v", down.Status["503"], down.N, down.Status), "all")
	d.Check(c.Cell+"'s users while down: p99", down.P99 < c.DownP99, msf(down.P99), "< "+msf(c.DownP99))
	d.Check(c.Cell+"'s users while down: timeouts", down.Timeouts == 0, fmt.Sprint(down.Timeouts), "0")
	d.Check(c.Cell+"'s users while down: Retry-After on 503", down.NoRetryAfter == 0,
		fmt.Sprintf("%d without", down.NoRetryAfter), "0 without")

	// Recovery: from the restart to the first 202 for the cell's users, and
	// to the last error before the end.
	first, lastErr := time.Duration(-1), time.Duration(-1)
	for _, s := range res.Samples {
		if s.At < restartAt || !victim(s.User) {
			continue
		}
		doneAt := s.At + s.Latency
		if s.Status == http.StatusAccepted && (first < 0 || doneAt < first) {
			first = doneAt
		}
		if s.Status != http.StatusAccepted {
			lastErr = max(lastErr, doneAt)
		}
	}
	recovered := first >= 0 && lastErr < end-time.Second
	d.Check("time to recover after restart", recovered,
		fmt.Sprintf("first 202 after %s, last error after %s, ready after %s",
			sinceText(first, restartAt), sinceText(lastErr, restartAt), sinceText(readyAt, restartAt)),
		"recovered before the load ends")
	if prom != nil {
		checkCellDownAlert(d, prom.Alerts(), c.Cell, killAt, readyAt)
	}
	c.logf("verifying %d accepted ids...", countAccepted(res.Samples))
	d.CheckVerification(r.Verify(ctx, res.Samples, c.VerifyWithin, c.Replays))
	d.Finish()
	res.Drill = d
	return res, nil
}
