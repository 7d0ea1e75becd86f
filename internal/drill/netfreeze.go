package drill

import (
	"context"
	"fmt"
	"time"

	"github.com/cellkit/cellkit/internal/loadtest"
)

// FreezeInstance: one instance of a cell of three, on its own host, is
// frozen (SIGSTOP) for Fault under load, then thawed. The routers' health
// checks take it out of rotation: the cell's users are served by the two
// others, with errors only for the requests in flight at the frozen one
// when it is found (answered 504 at once, within FoundBound of the freeze),
// none after that; no client times out; the other cells are untouched;
// nothing accepted is lost or duplicated, and the agencies never see more
// sessions than their limits (the frozen instance keeps its sessions and
// its share of the quota, which the lease grace keeps from the others).
func FreezeInstance(ctx context.Context, c NetConfig) (*loadtest.Result, error) {
	c = c.withDefaults(20 * time.Second)
	end := c.Baseline + c.Fault + c.After
	n, err := newNetRun(&c, end)
	if err != nil {
		return nil, err
	}
	in, err := n.instance()
	if err != nil {
		return nil, err
	}
	p, ok := n.st.Process(in.Proc)
	if !ok {
		return nil, fmt.Errorf("no process %q in the stack", in.Proc)
	}
	if err := n.watchSessions(ctx); err != nil {
		return nil, err
	}
	wait := startLoad(ctx, n.r)
	freezeAt, thawAt, actErr := freezeDuring(ctx, n.r, c.logf, *p, c.Baseline, c.Fault)
	res, err := loadEnded("freeze-instance", wait, actErr)
	if err != nil {
		return res, err
	}
	d := &loadtest.Verdict{Name: "freeze-instance"}
	cells := usersOf(res, freezeAt)
	victim := func(u int) bool { return cells[u] == c.Cell }
	checkOthers(d, res, cells, []string{c.Cell}, freezeAt, end)
	checkOthersP99(d, res, cells, []string{c.Cell}, freezeAt, end, c.P99Factor)
	all := loadtest.Window{From: freezeAt, To: end, Users: victim}.Stats(res.Samples)
	d.Check(c.Cell+"'s users from the freeze on: timeouts", all.N > 0 && all.Timeouts == 0,
		fmt.Sprintf("%d of %d %v", all.Timeouts, all.N, all.Status), "0")
	early := loadtest.Window{From: freezeAt, To: freezeAt + FoundBound, Users: victim}.Stats(res.Samples)
	late := loadtest.Window{From: freezeAt + FoundBound, To: end, Users: victim}.Stats(res.Samples)
	d.Check(c.Cell+" serves on its other instances: errors from "+FoundBound.String()+" after the freeze", late.N > 0 && late.Errors == 0,
		fmt.Sprintf("%d of %d %v", late.Errors, late.N, late.Status), "0")
	slowest := time.Duration(0)
	for _, s := range res.Samples {
		if s.At >= freezeAt && s.At < thawAt && victim(s.User) {
			slowest = max(slowest, s.Latency)
		}
	}
	d.Check(c.Cell+"'s users while "+in.Proc+" is frozen: the longest wait", slowest <= WaitBound, msf(slowest),
		"≤ "+msf(WaitBound)+" (the cell timeout is 5 s)")
	frozen := loadtest.Window{From: freezeAt + FoundBound, To: thawAt, Users: victim}.Stats(res.Samples)
	d.Note("%s in the first %s: %d errors of %d %v (in flight at %s when it was found)", c.Cell, FoundBound, early.Errors, early.N, early.Status, in.Proc)
	d.Note("%s while %s is frozen, from %s on: p50 %s, p99 %s", c.Cell, in.Proc, FoundBound, msf(frozen.P50), msf(frozen.P99))
	n.finishNet(ctx, d, res)
	return res, nil
}
