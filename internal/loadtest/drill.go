package loadtest

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sync"
	"time"
)

// DrillConfig is one drill. Zero values mean the defaults in brackets (see
// DefaultDrillConfig).
type DrillConfig struct {
	Stack *Stack
	// Rate is the constant request rate [100/s].
	Rate float64
	// Users and Zipf as in Config [200 users, uniform].
	Users int
	Zipf  float64
	// Cell is the cell the drill acts on [c2].
	Cell string
	// Baseline is the load before the fault [15s].
	Baseline time.Duration
	// Fault is how long the fault lasts: kill → restart, slow → restore
	// [10s kill, 20s agency-slow]; for drain, the longest the drain may take
	// [60s].
	Fault time.Duration
	// After is the load after the fault [15s].
	After time.Duration
	// P99Factor bounds the other cells' p99 during the fault against their
	// baseline p99 [1.2].
	P99Factor float64
	// DownP99 bounds the p99 of the killed cell's users while it is down
	// [50ms].
	DownP99 time.Duration
	// SlowFactor multiplies the agencies' latency in agency-slow [10].
	SlowFactor float64
	// IntakeP99 bounds the intake p99 while the agencies are slow [250ms].
	IntakeP99 time.Duration
	// VerifyWithin bounds the polling of accepted ids [120s].
	VerifyWithin time.Duration
	// Replays is how many accepted requests are re-sent with their
	// Idempotency-Key to check they keep their id [300].
	Replays int
	// Progress gets the progress lines (nil: none).
	Progress io.Writer
}

// DefaultDrillConfig returns the defaults. Fault is left zero: its default
// depends on the drill.
func DefaultDrillConfig() DrillConfig {
	return DrillConfig{
		Rate: 100, Users: 200, Cell: "c2", Baseline: 15 * time.Second, After: 15 * time.Second,
		P99Factor: 1.2, DownP99: 50 * time.Millisecond, SlowFactor: 10, IntakeP99: 250 * time.Millisecond,
		VerifyWithin: 120 * time.Second, Replays: 300,
	}
}

func (c *DrillConfig) defaults(fault time.Duration) {
	d := DefaultDrillConfig()
	if c.Rate <= 0 {
		c.Rate = d.Rate
	}
	if c.Users <= 0 {
		c.Users = d.Users
	}
	if c.Cell == "" {
		c.Cell = d.Cell
	}
	if c.Baseline <= 0 {
		c.Baseline = d.Baseline
	}
	if c.Fault <= 0 {
		c.Fault = fault
	}
	if c.After <= 0 {
		c.After = d.After
	}
	if c.P99Factor <= 0 {
		c.P99Factor = d.P99Factor
	}
	if c.DownP99 <= 0 {
		c.DownP99 = d.DownP99
	}
	if c.SlowFactor <= 0 {
		c.SlowFactor = d.SlowFactor
	}
	if c.IntakeP99 <= 0 {
		c.IntakeP99 = d.IntakeP99
	}
	if c.VerifyWithin <= 0 {
		c.VerifyWithin = d.VerifyWithin
	}
	if c.Replays <= 0 {
		c.Replays = d.Replays
	}
}

func (c *DrillConfig) runner(total time.Duration) (*Runner, error) {
	return NewRunner(Config{
		Target: c.Stack.Router, Key: c.Stack.APIKey, Steps: []Step{{Rate: c.Rate, For: total}},
		Users: c.Users, Zipf: c.Zipf, KeepSamples: true,
	}, Options{Progress: c.Progress})
}

func (c *DrillConfig) logf(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "drill: "+format+"\n", args...)
	}
}

// startLoad runs r in the background.
func startLoad(ctx context.Context, r *Runner) func() (*Result, error) {
	var res *Result
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err = r.Run(ctx)
	}()
	return func() (*Result, error) { <-done; return res, err }
}

// sleepUntil waits until the run's clock reaches at.
func sleepUntil(ctx context.Context, r *Runner, at time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(at - r.Elapsed()):
		return nil
	}
}

// DrillKill: baseline, SIGKILL one cell, load on, restart it after Fault,
// load on, then verify every accepted id.
func DrillKill(ctx context.Context, c DrillConfig) (*Result, error) {
	c.defaults(10 * time.Second)
	st := c.Stack
	if _, err := st.Proc(c.Cell); err != nil {
		return nil, err
	}
	r, err := c.runner(c.Baseline + c.Fault + c.After)
	if err != nil {
		return nil, err
	}
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
	res, err := wait()
	if err != nil {
		return nil, err
	}
	if actErr != nil {
		return res, fmt.Errorf("drill kill: %w", actErr)
	}
	end := r.cfg.Steps[0].For
	d := &DrillReport{Name: "kill"}
	cells := userCells(res.Samples, 0, killAt)
	victim := func(u int) bool { return cells[u] == c.Cell }

	// Other cells: no errors from the kill on, each; p99 within the factor
	// of the baseline, over the other cells together. A 10 s window at
	// 100/s gives one cell about 250 samples, whose p99 is its third
	// slowest request: on two shared cores it moved by ±40 % between quiet
	// windows with nothing killed, so the per-cell p99s are reported as
	// notes and the check uses the three times larger pool.
	for _, cell := range st.Cells() {
		if cell == c.Cell {
			continue
		}
		mine := func(u int) bool { return cells[u] == cell }
		all := stats(res.Samples, window{killAt, end, mine})
		d.check(cell+" errors from the kill on", all.Errors == 0, fmt.Sprintf("%d of %d %v", all.Errors, all.N, all.Status), "0")
		d.note("%s p99: baseline %s, while %s is down %s, after the restart %s", cell,
			msf(stats(res.Samples, window{0, killAt, mine}).P99), c.Cell,
			msf(stats(res.Samples, window{killAt, restartAt, mine}).P99),
			msf(stats(res.Samples, window{restartAt, end, mine}).P99))
	}
	others := func(u int) bool { cell, ok := cells[u]; return ok && cell != "" && cell != c.Cell }
	base := stats(res.Samples, window{0, killAt, others})
	during := stats(res.Samples, window{killAt, restartAt, others})
	limit := time.Duration(float64(base.P99) * c.P99Factor)
	d.check("other cells' p99 while "+c.Cell+" is down", during.P99 <= limit,
		fmt.Sprintf("%s of %d (baseline %s of %d)", msf(during.P99), during.N, msf(base.P99), base.N),
		fmt.Sprintf("≤ %s (%.1f× baseline)", msf(limit), c.P99Factor))
	down := stats(res.Samples, window{killAt, restartAt, victim})
	d.check(c.Cell+"'s users while down: 503", down.N > 0 && down.Status["503"] == down.N,
		fmt.Sprintf("%d of %d %v", down.Status["503"], down.N, down.Status), "all")
	d.check(c.Cell+"'s users while down: p99", down.P99 < c.DownP99, msf(down.P99), "< "+msf(c.DownP99))
	d.check(c.Cell+"'s users while down: timeouts", down.Timeouts == 0, fmt.Sprint(down.Timeouts), "0")
	d.check(c.Cell+"'s users while down: Retry-After on 503", down.NoRetryAfter == 0,
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
	d.check("time to recover after restart", recovered,
		fmt.Sprintf("first 202 after %s, last error after %s, ready after %s",
			sinceText(first, restartAt), sinceText(lastErr, restartAt), sinceText(readyAt, restartAt)),
		"recovered before the load ends")
	c.logf("verifying %d accepted ids...", countAccepted(res.Samples))
	d.checkVerdict(verify(ctx, r.opts.Client, st.Router, st.APIKey, res.Samples, c.VerifyWithin, c.Replays, c.Progress))
	d.finish()
	res.Drill = d
	return res, nil
}

func sinceText(at, from time.Duration) string {
	if at < 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fs", max(at-from, 0).Seconds())
}

func countAccepted(samples []Sample) int {
	n := 0
	for _, s := range samples {
		if s.ID != "" {
			n++
		}
	}
	return n
}

// DrillDrain: under load, `cellctl drain CELL --wait`; the moved users see
// no errors, the drained cell's queue empties, no id is lost; then undrain.
func DrillDrain(ctx context.Context, c DrillConfig) (*Result, error) {
	c.defaults(60 * time.Second)
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
	var queue CellStatus
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
	res, err := wait()
	if err != nil {
		return nil, err
	}
	if actErr != nil {
		return res, fmt.Errorf("drill drain: %w", actErr)
	}
	end := r.Elapsed()
	d := &DrillReport{Name: "drain"}
	cells := userCells(res.Samples, 0, drainAt)
	moved := stats(res.Samples, window{drainAt, end, func(u int) bool { return cells[u] == c.Cell }})
	others := stats(res.Samples, window{drainAt, end, func(u int) bool { return cells[u] != c.Cell }})
	d.check("moved users' errors", moved.N > 0 && moved.Errors == 0, fmt.Sprintf("%d of %d %v", moved.Errors, moved.N, moved.Status), "0")
	d.check("other users' errors", others.Errors == 0, fmt.Sprintf("%d of %d %v", others.Errors, others.N, others.Status), "0")
	after := userCells(res.Samples, drainedAt, end)
	still := 0
	for _, cell := range after {
		if cell == c.Cell {
			still++
		}
	}
	d.check(c.Cell+" answers no one after the drain", still == 0, fmt.Sprintf("%d users", still), "0")
	d.check(c.Cell+"'s queue after drain --wait", queue.Queue.Messages == 0 && queue.Inflight == 0,
		fmt.Sprintf("%d queued, %d in flight", queue.Queue.Messages, queue.Inflight), "0, 0")
	d.note("drain --wait took %.1fs", (drainedAt - drainAt).Seconds())
	c.logf("verifying %d accepted ids...", countAccepted(res.Samples))
	d.checkVerdict(verify(ctx, r.opts.Client, st.Router, st.APIKey, res.Samples, c.VerifyWithin, c.Replays, c.Progress))
	// Restore.
	if _, err := st.Cellctl(ctx, "undrain", c.Cell); err != nil {
		return res, err
	}
	if err := st.WaitReady(ctx, c.Cell, 30*time.Second); err != nil {
		return res, err
	}
	res.Events = append(res.Events, Event{At: r.Elapsed(), Name: "undrain " + c.Cell})
	c.logf("undrained %s", c.Cell)
	d.finish()
	res.Drill = d
	return res, nil
}

// agencyLatency is the simulator's latency config, durations as strings.
type agencyLatency map[string]any

// DrillAgencySlow: agency latency ×SlowFactor through the simulator's admin
// API; intake p99 stays bounded, no cell's oldest pending age passes its
// budget, shed requests get 503 + Retry-After, nothing is lost.
func DrillAgencySlow(ctx context.Context, c DrillConfig) (*Result, error) {
	c.defaults(20 * time.Second)
	st := c.Stack
	agencies := []string{"nice", "kcb"}
	orig := map[string]agencyLatency{}
	for _, a := range agencies {
		var cfg struct {
			Latency agencyLatency `json:"latency"`
		}
		if err := getJSON(ctx, st.AgencyAdmin+"/v1/agencies/"+a+"/config", &cfg); err != nil {
			return nil, err
		}
		orig[a] = cfg.Latency
	}
	setLatency := func(ctx context.Context, f float64) error {
		for _, a := range agencies {
			l, err := scaleLatency(orig[a], f)
			if err != nil {
				return err
			}
			if err := doJSON(ctx, http.MethodPatch, st.AgencyAdmin+"/v1/agencies/"+a+"/config", map[string]any{"latency": l}, nil); err != nil {
				return err
			}
		}
		return nil
	}
	r, err := c.runner(c.Baseline + c.Fault + c.After)
	if err != nil {
		return nil, err
	}
	wait := startLoad(ctx, r)
	var slowAt, restoreAt time.Duration
	var actErr error
	// Cells' oldest pending age, sampled every 500 ms while the load runs.
	var mu sync.Mutex
	oldest, budget := map[string]float64{}, map[string]float64{}
	watchCtx, stopWatch := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for watchCtx.Err() == nil {
			for _, cell := range st.Cells() {
				if cs, err := st.Status(watchCtx, cell); err == nil {
					mu.Lock()
					oldest[cell] = max(oldest[cell], cs.Queue.OldestAgeSeconds)
					budget[cell] = cs.Queue.AgeBudgetSeconds
					mu.Unlock()
				}
			}
			select {
			case <-watchCtx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	func() {
		if actErr = sleepUntil(ctx, r, c.Baseline); actErr != nil {
			return
		}
		if actErr = setLatency(ctx, c.SlowFactor); actErr != nil {
			return
		}
		slowAt = r.Elapsed()
		r.Mark(fmt.Sprintf("agencies ×%g", c.SlowFactor))
		c.logf("agency latency ×%g at %.1fs", c.SlowFactor, slowAt.Seconds())
		if actErr = sleepUntil(ctx, r, slowAt+c.Fault); actErr != nil {
			return
		}
		restoreAt = r.Elapsed()
		actErr = setLatency(ctx, 1)
		r.Mark("agencies restored")
		c.logf("agency latency restored at %.1fs", restoreAt.Seconds())
	}()
	res, err := wait()
	if restoreAt == 0 && slowAt != 0 {
		setLatency(context.WithoutCancel(ctx), 1)
	}
	if err != nil {
		stopWatch()
		wg.Wait()
		return nil, err
	}
	if actErr != nil {
		stopWatch()
		wg.Wait()
		return res, fmt.Errorf("drill agency-slow: %w", actErr)
	}
	d := &DrillReport{Name: "agency-slow"}
	base := stats(res.Samples, window{0, slowAt, nil})
	slow := stats(res.Samples, window{slowAt, restoreAt, nil})
	d.check("intake p99 while slow", slow.P99 <= c.IntakeP99, fmt.Sprintf("%s (baseline %s)", msf(slow.P99), msf(base.P99)), "≤ "+msf(c.IntakeP99))
	d.check("timeouts and errors other than 503", slow.Errors-slow.Status["503"] == 0,
		fmt.Sprintf("%d of %d %v", slow.Errors-slow.Status["503"], slow.N, slow.Status), "0")
	all := stats(res.Samples, window{0, math.MaxInt64, nil})
	d.check("shed (503) with Retry-After", all.NoRetryAfter == 0,
		fmt.Sprintf("%d of %d 503s without", all.NoRetryAfter, all.Status["503"]), "0 without")
	c.logf("verifying %d accepted ids...", countAccepted(res.Samples))
	v := verify(ctx, r.opts.Client, st.Router, st.APIKey, res.Samples, c.VerifyWithin, c.Replays, c.Progress)
	stopWatch()
	wg.Wait()
	for _, cell := range st.Cells() {
		d.check(cell+" oldest pending age", oldest[cell] <= budget[cell] && budget[cell] > 0,
			fmt.Sprintf("max %.1fs", oldest[cell]), fmt.Sprintf("≤ budget %.0fs", budget[cell]))
	}
	d.checkVerdict(v)
	d.finish()
	res.Drill = d
	return res, nil
}

// scaleLatency multiplies every duration of a latency config by f.
func scaleLatency(l agencyLatency, f float64) (agencyLatency, error) {
	out := agencyLatency{}
	for k, v := range l {
		s, ok := v.(string)
		if !ok || k == "dist" {
			out[k] = v
			continue
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, fmt.Errorf("latency %s %q: %w", k, s, err)
		}
		out[k] = time.Duration(float64(d) * f).String()
	}
	return out, nil
}
