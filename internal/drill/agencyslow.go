package drill

import (
	"context"
	"fmt"
	"github.com/cellkit/cellkit/internal/api"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/cellkit/cellkit/internal/loadtest"
)

// agencyLatency is the simulator's latency config, durations as strings.
type agencyLatency map[string]any

// AgencySlow: agency latency ×SlowFactor through the simulator's admin
// API; intake p99 stays bounded, no cell's oldest pending age passes its
// budget, shed requests get 503 + Retry-After, nothing is lost.
func AgencySlow(ctx context.Context, c Config) (*loadtest.Result, error) {
	c = c.withDefaults(20 * time.Second)
	st := c.Stack
	setLatency, err := agencyLatencyScaler(ctx, st)
	if err != nil {
		return nil, err
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
		_ = setLatency(context.WithoutCancel(ctx), 1) // best effort after a failed run: the drill's error is reported
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
	d := &loadtest.Verdict{Name: "agency-slow"}
	base := loadtest.Window{To: slowAt}.Stats(res.Samples)
	slow := loadtest.Window{From: slowAt, To: restoreAt}.Stats(res.Samples)
	d.Check("intake p99 while slow", slow.P99 <= c.IntakeP99, fmt.Sprintf("%s (baseline %s)", msf(slow.P99), msf(base.P99)), "≤ "+msf(c.IntakeP99))
	d.Check("timeouts and errors other than 503", slow.Errors-slow.Status["503"] == 0,
		fmt.Sprintf("%d of %d %v", slow.Errors-slow.Status["503"], slow.N, slow.Status), "0")
	all := loadtest.Window{To: math.MaxInt64}.Stats(res.Samples)
	d.Check("shed (503) with Retry-After", all.NoRetryAfter == 0,
		fmt.Sprintf("%d of %d 503s without", all.NoRetryAfter, all.Status["503"]), "0 without")
	c.logf("verifying %d accepted ids...", countAccepted(res.Samples))
	v := r.Verify(ctx, res.Samples, c.VerifyWithin, c.Replays)
	stopWatch()
	wg.Wait()
	for _, cell := range st.Cells() {
		d.Check(cell+" oldest pending age", oldest[cell] <= budget[cell] && budget[cell] > 0,
			fmt.Sprintf("max %.1fs", oldest[cell]), fmt.Sprintf("≤ budget %.0fs", budget[cell]))
	}
	d.CheckVerification(v)
	d.Finish()
	res.Drill = d
	return res, nil
}

// agencyLatencyScaler reads the simulator's agencies' latency configs and
// returns what sets them to f times those (1: as they were).
func agencyLatencyScaler(ctx context.Context, st *Stack) (func(ctx context.Context, f float64) error, error) {
	agencies := []string{"nice", "kcb"}
	orig := map[string]agencyLatency{}
	for _, a := range agencies {
		var cfg struct {
			Latency agencyLatency `json:"latency"`
		}
		if err := getJSON(ctx, st.AgencyAdmin+api.PathAgencies+"/"+a+"/config", &cfg); err != nil {
			return nil, err
		}
		orig[a] = cfg.Latency
	}
	return func(ctx context.Context, f float64) error {
		for _, a := range agencies {
			l, err := scaleLatency(orig[a], f)
			if err != nil {
				return err
			}
			if err := doJSON(ctx, http.MethodPatch, st.AgencyAdmin+api.PathAgencies+"/"+a+"/config", map[string]any{"latency": l}, nil); err != nil {
				return err
			}
		}
		return nil
	}, nil
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
