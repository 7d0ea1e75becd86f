package drill

import (
	"context"
	"fmt"
	"net/http"
	"syscall"
	"time"

	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/loadtest"
)

// The freeze drill's bounds. The routers check each instance every 200 ms
// within 250 ms and take it out at the second miss, so a hung cell is
// found within 0.7 s; FoundBound leaves margin for this shared machine.
const (
	FoundBound  = time.Second             // from the freeze: the cell's users answered fast from then on
	WaitBound   = 1500 * time.Millisecond // the longest any request of the frozen cell waits
	ThawedBound = 2 * time.Second         // from the thaw to the cell serving again
)

// Freeze: baseline, SIGSTOP one cell for Fault (the process runs nothing:
// the kernel still takes its connections and nobody answers them, as with
// a hung process), SIGCONT, load on, then verify every accepted id. The
// routers' health checks must find it: its users get 503 with Retry-After
// in < DownP99 from FoundBound after the freeze, none waits more than
// WaitBound (never the cell timeout, never a client timeout), the other
// cells see nothing, and it serves again within ThawedBound of the thaw.
func Freeze(ctx context.Context, c Config) (*loadtest.Result, error) {
	c = c.withDefaults(20 * time.Second)
	st := c.Stack
	p, err := st.Proc(c.Cell)
	if err != nil {
		return nil, err
	}
	end := c.Baseline + c.Fault + c.After
	r, err := c.runner(end)
	if err != nil {
		return nil, err
	}
	wait := startLoad(ctx, r)
	freezeAt, thawAt, actErr := freezeDuring(ctx, r, c.logf, *p, c.Baseline, c.Fault)
	res, err := loadEnded("freeze", wait, actErr)
	if err != nil {
		return res, err
	}
	d := &loadtest.Verdict{Name: "freeze"}
	cells := loadtest.UserCells(res.Samples, 0, freezeAt)
	victim := func(u int) bool { return cells[u] == c.Cell }
	checkOtherCells(d, c, st, res.Samples, cells, freezeAt, thawAt, end, "freeze", "frozen")

	// The frozen cell's users: every request answered, none after long.
	frozen := loadtest.Window{From: freezeAt, To: thawAt, Users: victim}.Stats(res.Samples)
	d.Check(c.Cell+"'s users while frozen: timeouts", frozen.N > 0 && frozen.Timeouts == 0,
		fmt.Sprintf("%d of %d %v", frozen.Timeouts, frozen.N, frozen.Status), "0")
	slowest := time.Duration(0)
	for _, s := range res.Samples {
		if s.At >= freezeAt && s.At < thawAt && victim(s.User) {
			slowest = max(slowest, s.Latency)
		}
	}
	d.Check(c.Cell+"'s users while frozen: the longest wait", slowest <= WaitBound, msf(slowest),
		"≤ "+msf(WaitBound)+" (the cell timeout is 5 s)")
	found := loadtest.Window{From: freezeAt + FoundBound, To: thawAt, Users: victim}.Stats(res.Samples)
	d.Check(c.Cell+"'s users from "+FoundBound.String()+" after the freeze: 503", found.N > 0 && found.Status["503"] == found.N,
		fmt.Sprintf("%d of %d %v", found.Status["503"], found.N, found.Status), "all")
	d.Check(c.Cell+"'s users from "+FoundBound.String()+" after the freeze: p99", found.P99 < c.DownP99, msf(found.P99), "< "+msf(c.DownP99))
	d.Check(c.Cell+"'s users while frozen: Retry-After on 503", frozen.NoRetryAfter == 0,
		fmt.Sprintf("%d without", frozen.NoRetryAfter), "0 without")

	// Thawed: served again within ThawedBound, no error after that.
	first := time.Duration(-1)
	for _, s := range res.Samples {
		if s.At >= thawAt && victim(s.User) && s.Status == http.StatusAccepted && (first < 0 || s.At+s.Latency < first) {
			first = s.At + s.Latency
		}
	}
	d.Check(c.Cell+" serving again after the thaw", first >= 0 && first-thawAt <= ThawedBound,
		"first 202 after "+sinceText(first, thawAt), "≤ "+ThawedBound.String())
	after := loadtest.Window{From: thawAt + ThawedBound, To: end, Users: victim}.Stats(res.Samples)
	d.Check(c.Cell+"'s errors from "+ThawedBound.String()+" after the thaw", after.Errors == 0 && after.N > 0,
		fmt.Sprintf("%d of %d %v", after.Errors, after.N, after.Status), "0")

	c.logf("verifying %d accepted ids...", countAccepted(res.Samples))
	d.CheckVerification(r.Verify(ctx, res.Samples, c.VerifyWithin, c.Replays))
	d.Finish()
	res.Drill = d
	return res, nil
}

// freezeDuring stops process p with SIGSTOP at the run's time at (to its
// process group: the program and its supervisor), and continues it with
// SIGCONT fault later; it returns when each happened. The process is
// continued whatever fails: a drill never leaves one stopped.
func freezeDuring(ctx context.Context, r *loadtest.Runner, logf func(string, ...any), p devstack.Process, at, fault time.Duration) (freezeAt, thawAt time.Duration, err error) {
	if err := sleepUntil(ctx, r, at); err != nil {
		return 0, 0, err
	}
	name, pid := p.Name, devstack.Program(p)
	if err := devstack.Signal(p, syscall.SIGSTOP); err != nil {
		return 0, 0, fmt.Errorf("SIGSTOP %s (pid %d): %w", name, pid, err)
	}
	freezeAt = r.Elapsed()
	r.Mark(name + " frozen (SIGSTOP)")
	logf("%s frozen (SIGSTOP, pid %d) at %.1fs", name, pid, freezeAt.Seconds())
	err = sleepUntil(ctx, r, freezeAt+fault)
	if cerr := devstack.Signal(p, syscall.SIGCONT); cerr != nil && err == nil {
		err = fmt.Errorf("SIGCONT %s (pid %d): %w", name, pid, cerr)
	}
	thawAt = r.Elapsed()
	r.Mark(name + " thawed (SIGCONT)")
	logf("%s thawed (SIGCONT) at %.1fs", name, thawAt.Seconds())
	return freezeAt, thawAt, err
}

// checkOtherCells checks the cells other than c.Cell from the fault (the
// event, which leaves c.Cell what) on: no errors each, and their p99 during
// the fault [faultAt, faultEnd) within c.P99Factor of their baseline,
// pooled over the other cells and counted by checkTail (a 10 s window at
// 100/s gives one cell about 250 samples, whose p99 is its third slowest
// request: on two shared cores it moved by ±40 % between quiet windows
// with nothing wrong, so the per-cell p99s are notes and the check uses
// the three times larger pool).
// The baseline is the time before the fault and from quietAfter after its
// end, pooled: a reference on both sides of the fault, about as long as
// the fault, so that a quiet or a noisy spell of this shared machine
// before the fault alone does not decide the verdict.
const quietAfter = 2 * time.Second

func checkOtherCells(d *loadtest.Verdict, c Config, st *Stack, samples []loadtest.Sample, cells map[int]string, faultAt, faultEnd, end time.Duration, event, what string) {
	for _, cell := range st.Cells() {
		if cell == c.Cell {
			continue
		}
		mine := func(u int) bool { return cells[u] == cell }
		all := loadtest.Window{From: faultAt, To: end, Users: mine}.Stats(samples)
		d.Check(cell+" errors from the "+event+" on", all.Errors == 0, fmt.Sprintf("%d of %d %v", all.Errors, all.N, all.Status), "0")
		d.Note("%s p99: baseline %s, while %s is %s %s, after it %s", cell,
			msf(loadtest.Window{To: faultAt, Users: mine}.Stats(samples).P99), c.Cell, what,
			msf(loadtest.Window{From: faultAt, To: faultEnd, Users: mine}.Stats(samples).P99),
			msf(loadtest.Window{From: faultEnd, To: end, Users: mine}.Stats(samples).P99))
	}
	others := func(u int) bool { cell, ok := cells[u]; return ok && cell != "" && cell != c.Cell }
	var quiet []loadtest.Sample
	for _, s := range samples {
		if s.At < faultAt || s.At >= faultEnd+quietAfter {
			quiet = append(quiet, s)
		}
	}
	base := loadtest.Window{To: end, Users: others}.Stats(quiet)
	checkTail(d, "other cells' p99 while "+c.Cell+" is "+what, samples, base, "baseline before and after",
		loadtest.Window{From: faultAt, To: faultEnd, Users: others}, c.P99Factor)
}
