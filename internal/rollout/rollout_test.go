package rollout_test

import (
	"context"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/drill"
	"github.com/cellkit/cellkit/internal/gate"
	"github.com/cellkit/cellkit/internal/loadtest"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/release"
	"github.com/cellkit/cellkit/internal/rollout"
	"github.com/cellkit/cellkit/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// TestRolloutOnTheLocalStack, on a real local stack of three cells under
// load (30/s; make test runs it alone, after the other packages): a
// release (a flag changed) goes out in two waves and every cell runs it,
// each bake's judgement in the record, and goes out again to cells that
// run it already; a cellctl that dies mid-bake is
// resumed by another; a release that cannot start (a flag the cell
// refuses) is halted in the canary wave, the canary put back as it ran,
// the other cells never touched; the stack's router is rolled and a
// router release that cannot start rolled back; a real Prometheus whose
// alert fires for the canary alone halts a release; and the gates run
// beside another deployer pass a good release and fail a failing build.
func TestRolloutOnTheLocalStack(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the local stack")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t, 7*time.Minute)
	st, err := drill.StartStack(ctx, filepath.Join(root, "bin"), "--cells", "3")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Stop(context.Background()) })
	reg, err := registry.Open(registry.Config{URL: st.Registry}, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	ctl := control.New(reg, control.Config{Holder: "rollout test"}, control.Options{})
	admin := adminclient.Client{HTTP: &http.Client{}}

	// Load through the router the whole time, bounded.
	celltest.Load(t, ctx, loadtest.Config{Target: st.Router, Key: st.APIKey,
		Steps: []loadtest.Step{{Rate: 30, For: 5 * time.Minute}}, Users: 300})

	releases := func() map[string]string {
		t.Helper()
		out := map[string]string{}
		for _, p := range st.Stack.Cells() {
			s, err := admin.Status(ctx, "http://"+p.Addrs["admin"])
			if err != nil {
				t.Fatalf("%s: %v", p.Name, err)
			}
			out[p.Name] = s.Release.ID
		}
		return out
	}
	start := releases()
	if start["c1"] == "" || start["c1"] != start["c2"] || start["c2"] != start["c3"] {
		t.Fatalf("the stack's releases before: %v, want one release", start)
	}
	waves := []control.Wave{{Cells: []string{"c1"}, Bake: 5 * time.Second}, {Cells: []string{"c2", "c3"}, Bake: 5 * time.Second}}
	cfg := rollout.Config{
		Gate:   gate.Config{Alpha: 0.01, MinSamples: 20, FailureMargin: 0.005, LatencyFactor: 1.25, LatencyMargin: 0.050},
		Scrape: time.Second, WaitLimit: 20 * time.Second, ReadyWithin: 30 * time.Second,
	}
	deployer := devstack.Deployer{Path: devstack.StatePath(st.Dir), Grace: 20 * time.Second}
	routers := func(context.Context) ([]string, error) { return []string{st.RouterAdmin}, nil }
	// drive runs the registry's rollout id with ctl until it ends, or
	// until ctx ends (a cellctl that dies).
	drive := func(ctx context.Context, ctl *control.Controller, id string, progress func(string)) (*control.Rollout, error) {
		ro, err := ctl.Rollout(ctx)
		if err != nil {
			return nil, err
		}
		c, err := rollout.ConfigOf(ro)
		if err != nil {
			return nil, err
		}
		return rollout.New(id, c, rollout.Options{Control: ctl, Admin: admin, Deployer: deployer, Routers: routers, Progress: func(s string) {
			t.Logf("%s: %s", id, s)
			if progress != nil {
				progress(s)
			}
		}}).Run(ctx)
	}
	runWaves := func(id string, c rollout.Config, waves []control.Wave) *control.Rollout {
		t.Helper()
		if _, err := rollout.Start(ctx, ctl, id, waves, c); err != nil {
			t.Fatal(err)
		}
		ro, err := drive(ctx, ctl, id, nil)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		return ro
	}
	run := func(id string, spec release.Spec) *control.Rollout {
		t.Helper()
		c := cfg
		c.Spec = spec
		return runWaves(id, c, waves)
	}

	ro := run("good", release.Spec{Set: []string{"record-ttl=2h"}})
	if ro.State != control.RolloutDone || ro.Wave != 2 {
		t.Fatalf("a good release: %s at wave %d: %s", ro.State, ro.Wave, ro.Reason)
	}
	if b := ro.Bake; b == nil || b.Wave != 1 || b.Decision != "pass" || len(b.Gates) != 13 || len(b.Verdicts) != 13 || b.Left() != 0 {
		t.Errorf("the record's last bake: %+v, want wave 2's, passed, with its 13 gates, nothing left", b)
	} else if v := b.Verdicts[0]; v.Gate != gate.GateIntake5xx || v.WaveSamples < 20 || v.Baseline == "" || v.BaselineSamples < 20 {
		// The last wave, no cell left on the old release: judged against
		// its own cells' figures from before and the canary's.
		t.Errorf("the last wave's intake 5xx: %+v", v)
	}
	good := releases()
	for cell, rel := range good {
		if rel == start[cell] || rel != ro.Release {
			t.Errorf("%s runs %s after the rollout of %s (before: %s)", cell, rel, ro.Release, start[cell])
		}
	}

	// The same release again, as after a halt in a later wave: every cell
	// runs it already; the first reached is replaced and ready once a new
	// process answers on it, the others are left as they run.
	ro = run("again", release.Spec{Set: []string{"record-ttl=2h"}})
	if ro.State != control.RolloutDone || ro.Release != good["c1"] {
		t.Fatalf("the same release again: %s at wave %d, release %s: %s", ro.State, ro.Wave, ro.Release, ro.Reason)
	}
	if again := releases(); !maps.Equal(again, good) {
		t.Errorf("after the same release again: %v, want %v", again, good)
	}

	// A cellctl that dies while the canary bakes: the record stays
	// running, and another (another holder) resumes it to the end.
	c := cfg
	c.Spec = release.Spec{Set: []string{"record-ttl=3h"}}
	if _, err := rollout.Start(ctx, ctl, "interrupted", waves, c); err != nil {
		t.Fatal(err)
	}
	dctx, die := context.WithCancel(ctx)
	if _, err := drive(dctx, ctl, "interrupted", func(s string) {
		if strings.Contains(s, "baking") {
			die()
		}
	}); err == nil {
		t.Fatal("the interrupted driver ended without an error")
	}
	die()
	if ro, err := ctl.Rollout(ctx); err != nil || ro.State != control.RolloutRunning || ro.Cells["c1"].Phase != "baking" {
		t.Fatalf("the record after the driver died: %+v, %v", ro, err)
	}
	other := control.New(reg, control.Config{Holder: "cellctl rollout resume by another"}, control.Options{})
	ro, err = drive(ctx, other, "interrupted", nil)
	if err != nil || ro.State != control.RolloutDone || ro.Holder != "cellctl rollout resume by another" {
		t.Fatalf("resumed: %+v, %v", ro, err)
	}
	good = releases()
	for cell, rel := range good {
		if rel != ro.Release {
			t.Errorf("%s runs %s after the resumed rollout of %s", cell, rel, ro.Release)
		}
	}

	cfg.ReadyWithin = 10 * time.Second
	ro = run("crashing", release.Spec{Set: []string{"breaker-failure-rate=2"}})
	if ro.State != control.RolloutRolledBack || ro.Wave != 0 || !strings.Contains(ro.Reason, "c1: not ready on the new release") {
		t.Fatalf("a release that cannot start: %s at wave %d: %s", ro.State, ro.Wave, ro.Reason)
	}
	if _, reached := ro.Cells["c2"]; reached {
		t.Errorf("c2 was reached: %+v", ro.Cells)
	}
	if after := releases(); after["c1"] != good["c1"] || after["c2"] != good["c2"] || after["c3"] != good["c3"] {
		t.Errorf("after the rollback: %v, want %v", after, good)
	}

	// The routers: the stack's one router is baked against its own
	// figures before it was replaced (no other router runs the old
	// release); a routers' release that cannot start (more connections
	// than the open-file limit holds) is halted and the router put back.
	routerRelease := func() string {
		t.Helper()
		rd, err := admin.RouterReadiness(ctx, st.RouterAdmin)
		if err != nil {
			t.Fatalf("the router: %v", err)
		}
		return rd.Release.ID
	}
	routerBefore := routerRelease()
	procs, err := deployer.Processes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rwaves := rollout.RouterWaves(procs, 5*time.Second)
	if len(rwaves) != 1 || rwaves[0].Routers[0] != "router" {
		t.Fatalf("the stack's router waves: %+v", rwaves)
	}
	cells := releases()
	c = cfg
	c.Router = release.Spec{Set: []string{"max-conns-per-addr=2048"}}
	ro = runWaves("router", c, rwaves)
	routerGood := routerRelease()
	if ro.State != control.RolloutDone || routerGood == routerBefore || routerGood != ro.RouterRelease || ro.Release != "" {
		t.Fatalf("a routers' release: %s (%s), the router on %s (before %s), the record's %s", ro.State, ro.Reason, routerGood, routerBefore, ro.RouterRelease)
	}
	if !slices.ContainsFunc(ro.Events, func(e control.RolloutEvent) bool { return strings.Contains(e.Text, "router 5xx") }) {
		t.Errorf("the router's bake judged no router figures: %+v", ro.Events)
	}
	c.Router = release.Spec{Set: []string{"max-conns=100000000"}}
	ro = runWaves("router-crashing", c, rwaves)
	// The stack's router hands over (--handoff-socket): a successor that
	// cannot start is refused and the old router serves on.
	if ro.State != control.RolloutRolledBack || !strings.Contains(ro.Reason, "did not take over") || !strings.Contains(ro.Reason, "the old one serves on") {
		t.Fatalf("a routers' release that cannot start: %s: %s", ro.State, ro.Reason)
	}
	if got := routerRelease(); got != routerGood {
		t.Errorf("the router after the rollback runs %s, want %s", got, routerGood)
	}
	if after := releases(); !maps.Equal(after, cells) {
		t.Errorf("the cells after the routers' rollouts: %v, want %v", after, cells)
	}

	// A Prometheus's firing alerts are a gate: one firing for the canary
	// alone halts a release the other gates pass. An unreachable one is
	// refused before anything starts.
	bin := filepath.Join(root, "bin")
	if _, err := os.Stat(filepath.Join(bin, "prometheus")); err != nil {
		t.Fatalf("no prometheus in %s: make tools builds it", bin)
	}
	rules := filepath.Join(t.TempDir(), "rules.yml")
	if err := os.WriteFile(rules, []byte(`groups:
  - name: rollout-test
    rules:
      - alert: CanaryWatched
        expr: cellkit_cell_ready{cell="c1"} == 1
        labels:
          severity: ticket
`), 0o644); err != nil {
		t.Fatal(err)
	}
	prom, err := drill.StartPrometheus(ctx, filepath.Join(bin, "prometheus"), rules, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prom.Stop)
	c = cfg
	c.Prometheus = "http://127.0.0.1:1"
	opts := rollout.Options{Control: ctl, Admin: admin, Deployer: deployer, Routers: routers}
	if err := rollout.Preflight(ctx, c, opts); err == nil || !strings.Contains(err.Error(), "prometheus http://127.0.0.1:1") {
		t.Errorf("an unreachable Prometheus: %v", err)
	}
	c.Prometheus = prom.URL()
	if err := rollout.Preflight(ctx, c, opts); err != nil {
		t.Fatalf("preflight: %v", err)
	}
	cells = releases()
	c.Spec = release.Spec{Set: []string{"record-ttl=4h"}}
	ro = runWaves("alerted", c, waves)
	if ro.State != control.RolloutRolledBack || ro.Wave != 0 || !strings.Contains(ro.Reason, "fail alerts: firing for the wave CanaryWatched, for the baseline none") {
		t.Fatalf("a release whose canary has an alert of its own: %s at wave %d: %s", ro.State, ro.Wave+1, ro.Reason)
	}
	if after := releases(); !maps.Equal(after, cells) {
		t.Errorf("the cells after the alerted rollout: %v, want %v", after, cells)
	}

	// The gates beside another deployer (kubectl apply): c1 put on a
	// release by hand is judged against c2 and c3; a good one passes, a
	// build that fails a fifth of its inquiries does not.
	gateOn := func(spec release.Spec) gate.Decision {
		t.Helper()
		_, child, err := deployer.ReplaceProcess(ctx, "c1", devstack.AsRelease(spec))
		if err != nil {
			t.Fatal(err)
		}
		if err := devstack.WaitReady(ctx, &http.Client{Timeout: time.Second}, 30*time.Second, child); err != nil {
			t.Fatal(err)
		}
		c := cfg
		c.WaitLimit = 20 * time.Second
		d, vs, err := rollout.Gate(ctx, []string{"c1"}, 5*time.Second, c, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("gate on %+v: %v %+v", spec, d, vs)
		return d
	}
	if d := gateOn(release.Spec{Set: []string{"record-ttl=5h"}}); d != gate.Pass {
		t.Errorf("the gates of a good release put on by hand: %v", d)
	}
	if d := gateOn(release.Spec{Bin: filepath.Join(bin, "faults", "cell-failing")}); d != gate.Fail {
		t.Errorf("the gates of a failing build put on by hand: %v", d)
	}
}
