package drill

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/loadtest"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/release"
	"github.com/cellkit/cellkit/internal/rollout"
)

// ReleaseBake is each wave's bake in the release drill.
const ReleaseBake = 20 * time.Second

// RefusingSetting is the release drill's refusing release: one setting
// of the cell, nothing else changed, that makes it shed most of its
// users (503, Retry-After) while it stays ready and fails nothing.
const RefusingSetting = "depth-limit=1"

// PreviousCell is the cell of the release before the ledger under bin
// (make build-previous): the release drill's stack starts on it.
func PreviousCell(bin string) string { return filepath.Join(bin, "previous", "cell") }

// releaseCase is one rollout of the release drill.
type releaseCase struct {
	name string
	spec release.Spec
	good bool // it must go through every cell; else be halted in the canary wave
	// why are what the halt's reason may say (a bad release's): the
	// gates (or the readiness bound) that must catch it.
	why []string
}

// Release: under load, on a stack started on the release before the
// ledger (PreviousCell: its cells keep the records layout), eight
// rollouts in a row over the stack's cells, the drill's cell first (the
// canary) and then the rest, each wave baking ReleaseBake after its own
// cells' figures from before were read (the canary's for a bake before
// it is replaced, the rest's over the canary's bake): the upgrade to this
// tree's cell goes through every cell with no failed request beyond the
// restarting canary's refusals, and once done switches every cell to the
// ledger; then six bad releases, each halted in the canary wave — four
// real builds of the cell (make build's bin/faults/cell-failing, -slow,
// -crashing and -unstable: a fifth of the inquiries fail, every inquiry
// takes 300 ms more, the process exits at its start, one user in fifty
// crashes it), a refusing release that is a setting alone (a queue depth
// limit of 1: the canary sheds most of its users with 503) and a slow
// tail (bin/faults/cell-tailslow: one inquiry in fifty takes a second
// more) — by the failures gate, the latency gates, the readiness bound,
// the crash-restart gate, the refusals gates and the tail gate, within
// its bake; last the release before the ledger again, refused on the
// switched canary as soon as it is ready. Each bad one: the canary put
// back as it ran, the other cells never touched (their release
// unchanged, no errors for their users). Every accepted inquiry ends
// final, those accepted in the records layout before the switch
// included.
// One piece: the releases run one after another on one stack under one load, and the checks read what all did.
func Release(ctx context.Context, c Config) (*loadtest.Result, error) {
	c = c.withDefaults(0)
	st := c.Stack
	cells := st.Cells()
	if !slices.Contains(cells, c.Cell) || len(cells) < 2 {
		return nil, fmt.Errorf("drill release: the canary %s must be one of two cells or more (%v)", c.Cell, cells)
	}
	faults := func(name string) string { return filepath.Join(c.Bin, "faults", "cell-"+name) }
	cases := []releaseCase{
		{"upgrade", release.Spec{Bin: filepath.Join(c.Bin, "cell")}, true, nil},
		{"failing", release.Spec{Bin: faults("failing")}, false, []string{"fail failed inquiries"}},
		{"slow", release.Spec{Bin: faults("slow")}, false, []string{"fail time to done", "fail edge latency"}},
		{"crashing", release.Spec{Bin: faults("crashing")}, false, []string{"not ready on the new release"}},
		{"unstable", release.Spec{Bin: faults("unstable")}, false, []string{"fail crash restarts", "fail readiness lost"}},
		{"refusing", release.Spec{Set: []string{RefusingSetting}}, false, []string{"fail intake refusals", "fail edge refusals"}},
		{"tailslow", release.Spec{Bin: faults("tailslow")}, false, []string{"fail time to done tail"}},
		{"previous", release.Spec{Bin: PreviousCell(c.Bin)}, false, []string{"does not know the ledger"}},
	}
	for _, k := range cases {
		if err := k.spec.Validate("cell"); err != nil {
			return nil, fmt.Errorf("drill release %s: %w (make build makes the bad releases)", k.name, err)
		}
	}
	reg, err := registry.Open(registry.Config{URL: st.Registry}, registry.Options{})
	if err != nil {
		return nil, err
	}
	defer reg.Close()
	ctl := control.New(reg, control.Config{Holder: "loadtest drill release"}, control.Options{})
	admin := adminclient.Client{HTTP: &http.Client{Timeout: 5 * time.Second}}
	cfg := rollout.DefaultConfig()
	cfg.Scrape, cfg.WaitLimit, cfg.ReadyWithin, cfg.Settle = 2*time.Second, ReleaseBake, 20*time.Second, 0
	cfg.Gate.LatencyMargin = 0.050
	waves := []control.Wave{{Cells: []string{c.Cell}, Bake: ReleaseBake}}
	var rest []string
	for _, id := range cells {
		if id != c.Cell {
			rest = append(rest, id)
		}
	}
	waves = append(waves, control.Wave{Cells: rest, Bake: ReleaseBake})

	releases := func() (map[string]string, error) {
		out := map[string]string{}
		for _, id := range cells {
			s, err := st.Status(ctx, id)
			if err != nil {
				return nil, err
			}
			out[id] = s.Release.ID
		}
		return out, nil
	}
	r, err := c.runner(c.Baseline + 12*time.Minute)
	if err != nil {
		return nil, err
	}
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	wait := startLoad(lctx, r)
	type outcome struct {
		k             releaseCase
		from, to      time.Duration
		ro            *control.Rollout
		before, after map[string]string
		err           error
	}
	var outs []outcome
	layouts := map[string]string{} // what each cell writes at the end
	actErr := func() error {
		if err := sleepUntil(ctx, r, c.Baseline); err != nil {
			return err
		}
		for i, k := range cases {
			o := outcome{k: k, from: r.Elapsed()}
			if o.before, o.err = releases(); o.err != nil {
				return o.err
			}
			id := fmt.Sprintf("drill-%d-%s", i+1, k.name)
			run := cfg
			run.Spec = k.spec
			r.Mark("rollout " + k.name)
			c.logf("rollout %s of %s at %.1fs", id, k.name, o.from.Seconds())
			if _, err := rollout.Start(ctx, ctl, id, waves, run); err != nil {
				return err
			}
			progress := func(s string) {
				c.logf("%s: %s", k.name, s)
				if m, ok := waveMark(s); ok {
					r.Mark(k.name + ": " + m)
				}
			}
			o.ro, o.err = rollout.New(id, run, rollout.Options{Control: ctl, Admin: admin, Progress: progress,
				Deployer: devstack.Deployer{Path: devstack.StatePath(st.Dir), Grace: devstack.StopGrace},
				Routers:  func(context.Context) ([]string, error) { return []string{st.RouterAdmin}, nil }}).Run(ctx)
			o.to = r.Elapsed()
			if o.err != nil {
				return o.err
			}
			r.Mark(fmt.Sprintf("%s: %s", k.name, o.ro.State))
			if o.after, o.err = releases(); o.err != nil {
				return o.err
			}
			outs = append(outs, o)
		}
		for _, id := range cells {
			s, err := st.Status(ctx, id)
			if err != nil {
				return err
			}
			layouts[id] = "none (a release before the ledger)"
			if s.Layout != nil {
				layouts[id] = s.Layout.Writes
			}
		}
		return sleepUntil(ctx, r, r.Elapsed()+c.After)
	}()
	stopLoad()
	res, err := loadEnded("release", wait, actErr)
	if err != nil {
		return res, err
	}
	d := &loadtest.Verdict{Name: "release"}
	owner := loadtest.UserCells(res.Samples, 0, c.Baseline)
	for _, o := range outs {
		k, ro := o.k, o.ro
		in := func(cell string) func(int) bool { return func(u int) bool { return owner[u] == cell } }
		others := func(u int) bool { return owner[u] != c.Cell && owner[u] != "" }
		canary := loadtest.Window{From: o.from, To: o.to, Users: in(c.Cell)}.Stats(res.Samples)
		elsewhere := loadtest.Window{From: o.from, To: o.to, Users: others}.Stats(res.Samples)
		failed := failuresBeyondRefusals(res.Samples, o.from, o.to)
		if k.good {
			d.Check(k.name+": went through every cell", ro.State == control.RolloutDone && ro.Wave == len(waves),
				fmt.Sprintf("%s at wave %d of %d in %.1fs", ro.State, ro.Wave, len(waves), (o.to-o.from).Seconds()), "done")
			changed := 0
			for _, id := range cells {
				if o.after[id] != o.before[id] && o.after[id] == ro.Release {
					changed++
				}
			}
			d.Check(k.name+": every cell on the new release", changed == len(cells), fmt.Sprintf("%d of %d on %s", changed, len(cells), ro.Release), "all")
			d.Check(k.name+": failed requests beyond refusals", failed == 0, fmt.Sprintf("%d of %d", failed, canary.N+elsewhere.N), "0")
		} else {
			d.Check(k.name+": halted in the canary wave and rolled back", ro.State == control.RolloutRolledBack && ro.Wave == 0,
				fmt.Sprintf("%s at wave %d in %.1fs: %s", ro.State, ro.Wave+1, (o.to-o.from).Seconds(), ro.Reason), "rolled_back at wave 1")
			// The canary's figures from before (a bake), its
			// replacement, its bake.
			took := halted(ro)
			bound := 2*ReleaseBake + cfg.WarmUp + cfg.ReadyWithin + 2*cfg.Scrape
			d.Check(k.name+": halted within the canary's bake", took > 0 && took <= bound, fmt.Sprintf("%.1fs after the start", took.Seconds()), "≤ "+bound.String())
			d.Check(k.name+": halted by its gate", slices.ContainsFunc(k.why, func(w string) bool { return strings.Contains(ro.Reason, w) }),
				gateOf(ro.Reason), strings.Join(k.why, " or "))
			d.Check(k.name+": the canary back on its release", o.after[c.Cell] == o.before[c.Cell], o.after[c.Cell], o.before[c.Cell])
			touched := 0
			for _, id := range rest {
				if o.after[id] != o.before[id] {
					touched++
				}
				if _, reached := ro.Cells[id]; reached {
					touched++
				}
			}
			d.Check(k.name+": the other cells never touched", touched == 0, fmt.Sprintf("%d changed or reached of %d", touched, len(rest)), "0")
			d.Check(k.name+": the other cells' users' errors", elsewhere.Errors == 0, fmt.Sprintf("%d of %d %v", elsewhere.Errors, elsewhere.N, elsewhere.Status), "0")
			d.Note("%s: the canary's users: %d of %d requests answered otherwise than 202 %v; %s", k.name, canary.N-canary.OK, canary.N, canary.Status, ro.Reason)
		}
	}
	ledger := 0
	for _, l := range layouts {
		if l == api.LayoutLedger {
			ledger++
		}
	}
	d.Check("upgrade: every cell switched to the ledger by the rollout", ledger == len(cells), fmt.Sprintf("%v", layouts), "all ledger")
	c.logf("verifying %d accepted ids...", countAccepted(res.Samples))
	d.CheckVerification(r.Verify(ctx, res.Samples, c.VerifyWithin, c.Replays))
	d.Finish()
	res.Drill = d
	return res, nil
}

// failuresBeyondRefusals counts the requests sent in [from, to) answered
// neither 2xx nor 503 with Retry-After (a refusal the client retries).
func failuresBeyondRefusals(samples []loadtest.Sample, from, to time.Duration) int {
	n := 0
	for _, s := range samples {
		if s.At < from || s.At >= to {
			continue
		}
		if s.Status/100 != 2 && (s.Status != http.StatusServiceUnavailable || !s.RetryAfter) {
			n++
		}
	}
	return n
}

// waveMark is the plot's mark of a rollout's step: a wave's cells
// replaced (its bake begins), a wave baked, a halt.
func waveMark(step string) (string, bool) {
	switch {
	case strings.HasSuffix(step, " runs the new release: baking"):
		return strings.TrimSuffix(step, " runs the new release: baking") + " baking", true
	case strings.HasPrefix(step, "wave ") && strings.Contains(step, " baked "):
		wave, _, _ := strings.Cut(step, " baked ")
		return wave + " baked", true
	case strings.HasPrefix(step, "halted: "):
		return "halted", true
	}
	return "", false
}

// gateOf is what in a halt's reason failed: its failed verdicts, or the
// reason itself when no gate decided.
func gateOf(reason string) string {
	var out []string
	for _, part := range strings.Split(reason, "; ") {
		if i := strings.Index(part, "fail "); i >= 0 {
			out = append(out, part[i:])
		}
	}
	if len(out) == 0 {
		return reason
	}
	return strings.Join(out, "; ")
}

// halted is how long after its start the rollout halted (its event), 0
// if it did not.
func halted(ro *control.Rollout) time.Duration {
	for _, e := range ro.Events {
		if strings.HasPrefix(e.Text, "halted: ") {
			return e.At.Sub(ro.Started)
		}
	}
	return 0
}
