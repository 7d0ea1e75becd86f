package drill

import (
	"context"
	"errors"
	"fmt"
	"github.com/cellkit/cellkit/internal/api"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/loadtest"
	"github.com/cellkit/cellkit/internal/smallfs"
	"github.com/cellkit/cellkit/internal/storage"
)

// The disk-full drill's bounds. Once there is room, the cell restarts its
// embedded NATS at its next check (250 ms) and its connection follows
// within a reconnect wait (250 ms); HealBound leaves margin for the shared
// machine and the redelivery of what was in flight.
const HealBound = 5 * time.Second

// With a Prometheus, the disk-full drill first fills the disk to
// NearFullLevel of its size (past 90 % of the cell's high watermark of
// 95 %, below the watermark) for NearFullHold: CellkitStoreNearFull
// (`for: 2m`) must fire within NearFullBound of that fill, before the
// disk is filled up, while the cell goes on taking inquiries.
const (
	NearFullLevel = 0.885
	NearFullHold  = 2*time.Minute + 30*time.Second
	NearFullBound = 2*time.Minute + 15*time.Second // the rule's for, a scrape, an evaluation, a poll and margin
)

// DiskFull: the cell's store is moved onto a filesystem of its own
// (Config.Disk bytes, a tmpfs the drill mounts on the store's directory),
// then, under load, another process fills that filesystem for Fault and
// frees it. The cell must refuse new inquiries at once with 503 and
// Retry-After (never a client timeout), keep its other users' reads and
// the other cells untouched, heal by itself once the space is back (its
// store failed writes: it restarts its embedded NATS in process) and serve
// again within HealBound; every accepted inquiry ends final, none twice.
// At the end the store goes back to its directory on the machine's disk.
// One piece: a drill script on one timeline (fill, free, heal), then its checks.
func DiskFull(ctx context.Context, c Config) (_ *loadtest.Result, err error) {
	c = c.withDefaults(15 * time.Second)
	st := c.Stack
	p, err := st.Proc(c.Cell)
	if err != nil {
		return nil, err
	}
	dir := argValue(p.Args, "--store")
	if dir == "" {
		return nil, fmt.Errorf("drill disk-full: %s was started without --store", c.Cell)
	}
	c.logf("moving %s's store %s onto a %d MiB filesystem of its own...", c.Cell, dir, c.Disk>>20)
	if err := st.moveStore(ctx, c.Cell, dir, func() error { return smallfs.Mount(dir, c.Disk) }); err != nil {
		return nil, fmt.Errorf("drill disk-full: %w", err)
	}
	defer func() {
		c.logf("moving %s's store back onto the machine's disk...", c.Cell)
		if rerr := st.moveStore(context.WithoutCancel(ctx), c.Cell, dir, func() error { return smallfs.Unmount(dir) }); rerr != nil && err == nil {
			err = fmt.Errorf("drill disk-full: move the store back: %w", rerr)
		}
	}()
	failuresBefore, _ := cellCounter(ctx, st, c.Cell, api.MetricCellStoreWriteFailures.Name)
	pid := st.program(c.Cell) // healed in place: the same program at the end

	var near time.Duration // the near-full phase, with a Prometheus
	if c.Prometheus != "" {
		near = NearFullHold
	}
	end := c.Baseline + near + c.Fault + c.After
	r, prom, err := c.watchedLoad(ctx, end)
	if err != nil {
		return nil, err
	}
	defer prom.Stop()
	wait := startLoad(ctx, r)
	filler := filepath.Join(dir, "drill-filler")
	var nearAt, fillAt, fullAt, freedAt time.Duration
	actErr := func() error {
		if err := sleepUntil(ctx, r, c.Baseline); err != nil {
			return err
		}
		if near > 0 {
			u, err := storage.Stat(dir)
			if err != nil {
				return err
			}
			n, err := smallfs.Fill(dir, filepath.Base(filler), u.Size-int64(NearFullLevel*float64(u.Size)))
			nearAt = r.Elapsed()
			r.Mark(fmt.Sprintf("%s's disk filled to %.1f%%", c.Cell, 100*NearFullLevel))
			c.logf("%s's disk filled to %.1f%% at %.1fs (%d MiB written)", c.Cell, 100*NearFullLevel, nearAt.Seconds(), n>>20)
			if err != nil {
				return err
			}
			if err := sleepUntil(ctx, r, nearAt+near); err != nil {
				return err
			}
		}
		// Full from when the fill ends (writing hundreds of MiB takes a
		// second or more on a loaded machine).
		fillAt = r.Elapsed()
		n, err := smallfs.Fill(dir, filepath.Base(filler), 0)
		fullAt = r.Elapsed()
		r.Mark(c.Cell + "'s disk filled")
		c.logf("%s's disk filled at %.1fs (%d MiB written in %.1fs)", c.Cell, fullAt.Seconds(), n>>20, (fullAt - fillAt).Seconds())
		if err != nil {
			return err
		}
		err = sleepUntil(ctx, r, fullAt+c.Fault)
		if rerr := os.Remove(filler); rerr != nil && err == nil {
			err = rerr
		}
		freedAt = r.Elapsed()
		r.Mark(c.Cell + "'s disk freed")
		c.logf("%s's disk freed at %.1fs", c.Cell, freedAt.Seconds())
		return err
	}()
	res, err := loadEnded("disk-full", wait, actErr)
	if err != nil {
		return res, err
	}
	d := &loadtest.Verdict{Name: "disk-full"}
	cells := loadtest.UserCells(res.Samples, 0, fullAt)
	victim := func(u int) bool { return cells[u] == c.Cell }
	checkOtherCells(d, c, st, res.Samples, cells, fullAt, freedAt, end, "fill", "full")
	if prom != nil {
		// Until the fill to full began: a request during the fill may
		// meet the disk full already (it takes ~0.2 s).
		nearly := loadtest.Window{From: nearAt, To: fillAt, Users: victim}.Stats(res.Samples)
		d.Check(fmt.Sprintf("%s's users while its disk was %.1f%% full: still taken", c.Cell, 100*NearFullLevel), nearly.N > 0 && nearly.Errors == 0,
			fmt.Sprintf("%d errors of %d %v", nearly.Errors, nearly.N, nearly.Status), "0 errors")
		checkNearFullAlert(d, prom.Alerts(), c.Cell, nearAt, fullAt)
	}

	full := loadtest.Window{From: fullAt, To: freedAt, Users: victim}.Stats(res.Samples)
	d.Check(c.Cell+"'s users while full: timeouts", full.N > 0 && full.Timeouts == 0,
		fmt.Sprintf("%d of %d %v", full.Timeouts, full.N, full.Status), "0")
	d.Check(c.Cell+"'s users while full: Retry-After on 503", full.NoRetryAfter == 0,
		fmt.Sprintf("%d without", full.NoRetryAfter), "0 without")
	refused := loadtest.Window{From: fullAt + time.Second, To: freedAt, Users: victim}.Stats(res.Samples)
	d.Check(c.Cell+"'s users from 1s after the fill: refused at once (503)", refused.N > 0 && refused.Status["503"] == refused.N && refused.P99 < c.DownP99,
		fmt.Sprintf("%d of %d %v, p99 %s", refused.Status["503"], refused.N, refused.Status, msf(refused.P99)), "all, p99 < "+msf(c.DownP99))

	first := time.Duration(-1)
	for _, s := range res.Samples {
		if s.At >= freedAt && victim(s.User) && s.Status == http.StatusAccepted && (first < 0 || s.At+s.Latency < first) {
			first = s.At + s.Latency
		}
	}
	d.Check(c.Cell+" taking inquiries again after the space came back", first >= 0 && first-freedAt <= HealBound,
		"first 202 after "+sinceText(first, freedAt), "≤ "+HealBound.String()+", without a restart of the process")
	after := loadtest.Window{From: freedAt + HealBound, To: end, Users: victim}.Stats(res.Samples)
	d.Check(c.Cell+"'s errors from "+HealBound.String()+" after the space came back", after.N > 0 && after.Errors == 0,
		fmt.Sprintf("%d of %d %v", after.Errors, after.N, after.Status), "0")
	alive := devstack.Alive(pid) && st.program(c.Cell) == pid
	readyErr := st.WaitReady(ctx, c.Cell, 5*time.Second)
	d.Check(c.Cell+" healed in place (same process, ready)", alive && readyErr == nil,
		fmt.Sprintf("alive %v, ready: %v", alive, errText(readyErr)), "yes")
	if n, err := cellCounter(ctx, st, c.Cell, api.MetricCellStoreWriteFailures.Name); err == nil {
		d.Note("%s: the store failed writes %v times (cellkit_cell_store_write_failures_total); 0 means the watermark kept the disk from filling under the cell's own writes", c.Cell, n-failuresBefore)
	}

	c.logf("verifying %d accepted ids...", countAccepted(res.Samples))
	d.CheckVerification(r.Verify(ctx, res.Samples, c.VerifyWithin, c.Replays))
	d.Finish()
	res.Drill = d
	return res, nil
}

// checkNearFullAlert checks that CellkitStoreNearFull fired for cell
// within NearFullBound of nearAt and before fullAt (before the watermark
// was reached), and for no other cell.
func checkNearFullAlert(d *loadtest.Verdict, seen []AlertSeen, cell string, nearAt, fullAt time.Duration) {
	fired, others := firedFor(d, seen, "CellkitStoreNearFull", cell)
	what := "never"
	if fired != nil {
		what = sinceText(fired.Firing, nearAt) + " after the fill, " + sinceText(fullAt, fired.Firing) + " before the disk was full"
	}
	d.Check("alert CellkitStoreNearFull{cell="+cell+"} fires before the watermark", fired != nil && fired.Firing-nearAt <= NearFullBound && fired.Firing < fullAt,
		what, "≤ "+NearFullBound.String()+", before the disk is full")
	d.Check("alert CellkitStoreNearFull for the other cells", len(others) == 0, fmt.Sprintf("%d %v", len(others), others), "0")
}

// argValue is the value of flag in args (--flag VALUE or --flag=VALUE).
func argValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// moveStore stops the cell, moves its store dir aside, runs swap (which
// mounts a filesystem on dir, or unmounts one), copies the store back into
// dir and starts the cell again, waiting until it is ready.
func (st *Stack) moveStore(ctx context.Context, cell, dir string, swap func() error) error {
	p, err := st.Proc(cell)
	if err != nil {
		return err
	}
	if _, err := devstack.Stop(ctx, *p, devstack.StopGrace); err != nil && !errors.Is(err, devstack.ErrNotRunning) {
		return fmt.Errorf("stop %s: %w", cell, err)
	}
	aside := dir + ".moving"
	if err := os.RemoveAll(aside); err != nil {
		return err
	}
	if err := os.Mkdir(aside, 0o755); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "cp", "-a", dir+"/.", aside+"/").CombinedOutput(); err != nil {
		return fmt.Errorf("copy the store aside: %v: %s", err, out)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	if err := swap(); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "cp", "-a", aside+"/.", dir+"/").CombinedOutput(); err != nil {
		return fmt.Errorf("copy the store back: %v: %s", err, out)
	}
	if err := os.RemoveAll(aside); err != nil {
		return err
	}
	if err := st.Restart(cell); err != nil {
		return err
	}
	return st.WaitReady(ctx, cell, 30*time.Second)
}

// program is the pid of the process's program now (devstack.Program: the
// supervised child's), 0 if it is not running: a restart changes it.
func (st *Stack) program(name string) int {
	if p, err := st.Proc(name); err == nil {
		return devstack.Program(*p)
	}
	return 0
}

// cellCounter reads one counter of a cell's metrics, summed over its
// series.
func cellCounter(ctx context.Context, st *Stack, cell, name string) (float64, error) {
	mfs, err := cellMetrics(ctx, st, cell)
	if err != nil {
		return 0, err
	}
	total := 0.0
	for _, m := range mfs[name].GetMetric() {
		total += m.GetCounter().GetValue()
	}
	return total, nil
}
