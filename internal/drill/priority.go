package drill

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/cellkit/cellkit/internal/loadtest"
)

// Priority: the agencies slowed so that the cells can finish only a
// fraction of the offered load, 20 % of it asking for the high lane. The
// cells of c.LaneBlind shed both lanes alike (as before lanes were told
// apart), the others by lane; the report compares them side by side in
// the one run. On the lane-aware cells high inquiries are all accepted
// while high alone is under its share of the cell's pace, and normal ones
// take all the shedding; nothing accepted is lost anywhere.
// One piece: a drill script on one timeline (slowed, loaded by lane), then its checks.
func Priority(ctx context.Context, c Config) (*loadtest.Result, error) {
	c = c.withDefaults(40 * time.Second)
	st := c.Stack
	setLatency, err := agencyLatencyScaler(ctx, st)
	if err != nil {
		return nil, err
	}
	blind, reserve := map[string]bool{}, map[string]float64{}
	for _, cell := range st.Cells() {
		cs, err := st.Status(ctx, cell)
		if err != nil {
			return nil, err
		}
		blind[cell], reserve[cell] = cs.Queue.LaneBlind, cs.Queue.HighReserve
	}
	if err := setLatency(ctx, c.SlowFactor); err != nil {
		return nil, err
	}
	defer func() { _ = setLatency(context.WithoutCancel(ctx), 1) }()
	c.logf("agency latency ×%g for the whole run; %s of load, the first %s to settle", c.SlowFactor, c.Fault, c.Baseline)
	quietDisk()
	r, err := loadtest.NewRunner(loadtest.Config{
		Target: st.Router, Key: st.APIKey, Steps: []loadtest.Step{{Rate: c.Rate, For: c.Fault}},
		Users: c.Users, Zipf: c.Zipf, KeepSamples: true, Timeout: 5 * time.Second, HighShare: c.HighShare,
	}, loadtest.Options{Progress: c.Progress})
	if err != nil {
		return nil, err
	}
	// The cells' drain rate, sampled every second once settled: the pace
	// they finish inquiries at, against which the offered load is judged.
	drain := map[string][]float64{}
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watchCtx.Err() == nil {
			if r.Elapsed() >= c.Baseline {
				for _, cell := range st.Cells() {
					if cs, err := st.Status(watchCtx, cell); err == nil {
						drain[cell] = append(drain[cell], cs.Queue.DrainRate)
					}
				}
			}
			select {
			case <-watchCtx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	res, err := startLoad(ctx, r)()
	stopWatch()
	<-watched
	if err != nil {
		return nil, err
	}
	if err := setLatency(ctx, 1); err != nil {
		return res, err
	}
	c.logf("verifying %d accepted ids (agencies back to normal)...", countAccepted(res.Samples))
	v := r.Verify(ctx, res.Samples, c.VerifyWithin, c.Replays)

	// Per cell and lane, over the settled part of the run.
	type tally struct{ sent, accepted int }
	per := map[string]*tally{}
	for _, s := range res.Samples {
		if s.At < c.Baseline || s.Cell == "" {
			continue
		}
		k := s.Cell + "/" + map[bool]string{true: "high", false: "normal"}[s.High]
		if per[k] == nil {
			per[k] = &tally{}
		}
		per[k].sent++
		if s.Status == http.StatusAccepted {
			per[k].accepted++
		}
	}
	settled := (c.Fault - c.Baseline).Seconds()
	d := &loadtest.Verdict{Name: "priority"}
	for _, cell := range st.Cells() {
		mode := map[bool]string{true: "lane-blind", false: "by lane"}[blind[cell]]
		pace := median(drain[cell])
		hi, no := per[cell+"/high"], per[cell+"/normal"]
		if hi == nil || no == nil || hi.sent == 0 || no.sent == 0 {
			d.Check(cell+" got traffic of both lanes", false, "none", "some")
			continue
		}
		share := func(t *tally) float64 { return float64(t.accepted) / float64(t.sent) }
		offered := float64(hi.sent+no.sent) / settled
		highRate := float64(hi.sent) / settled
		d.Note("%s (%s): offered %.1f/s (high %.1f/s), finished at %.1f/s (median drain): accepted high %.3f, normal %.3f",
			cell, mode, offered, highRate, pace, share(hi), share(no))
		for _, lane := range []string{"high", "normal"} {
			if lt := v.Lanes[cell+"/"+lane]; lt != nil {
				d.Note("%s %s: %d accepted, done %.3f, failed %d, p99 age %s", cell, lane, lt.Accepted,
					float64(lt.Done)/float64(max(lt.Accepted, 1)), lt.Failed, lt.AgeP99.Round(10*time.Millisecond))
			}
		}
		if blind[cell] {
			continue
		}
		d.Check(cell+" overloaded (offered ≥ 1.5 × finished)", pace > 0 && offered >= 1.5*pace, fmt.Sprintf("%.1f/s vs %.1f/s", offered, pace), "≥ 1.5×")
		d.Check(cell+" high alone under its share", highRate < reserve[cell]*pace,
			fmt.Sprintf("%.1f/s vs %.2f × %.1f/s", highRate, reserve[cell], pace), "<")
		d.Check(cell+" high accepted", share(hi) >= 0.99, fmt.Sprintf("%.3f (%d of %d)", share(hi), hi.accepted, hi.sent), "≥ 0.99")
		d.Check(cell+" normal takes the shedding", share(no) < 0.9, fmt.Sprintf("%.3f (%d of %d)", share(no), no.accepted, no.sent), "< 0.9")
	}
	d.CheckVerification(v)
	d.Finish()
	res.Drill = d
	return res, nil
}

// median of xs, 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
