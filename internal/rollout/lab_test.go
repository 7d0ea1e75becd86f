package rollout_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/gate"
	"github.com/cellkit/cellkit/internal/loadtest"
	"github.com/cellkit/cellkit/internal/netlab"
	"github.com/cellkit/cellkit/internal/netlab/netlabtest"
	"github.com/cellkit/cellkit/internal/netlab/netstack"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/release"
	"github.com/cellkit/cellkit/internal/rollout"
)

// TestRolloutOnTheLab, on a network lab of two cells of three instances
// each (every instance on a host of its own, Consul as the registry, an
// admin token) and two routers, under load through both routers: a
// release of the cells and the routers goes through the same deployer as
// on the local stack — c1's instances one at a time, each out of the
// routers' rotation, on its host, ready, back in rotation; then router1
// baked against router2, and router2 against its own figures before. c2
// is never touched and no instance is left out of rotation.
func TestRolloutOnTheLab(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a network lab")
	}
	netlabtest.Require(t)
	bin, err := filepath.Abs("../../bin")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	dir := t.TempDir()
	st, err := netstack.Up(ctx, netstack.Config{Dir: dir, Bin: bin, Cells: 2, Instances: 3,
		Lab: netlab.Config{Family: netlabtest.Family, StateDir: netlab.DefaultStateDir}, ReadyWait: 45 * time.Second}, netstack.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prefix := st.Lab.Prefix
	t.Cleanup(func() {
		if _, err := netstack.Down(context.Background(), dir, nil); err != nil {
			t.Errorf("down: %v", err)
		}
		netlabtest.AssertGone(t, prefix)
	})
	token, err := os.ReadFile(st.AdminTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	admin := adminclient.Client{HTTP: &http.Client{Timeout: 5 * time.Second}, Token: strings.TrimSpace(string(token))}
	reg, err := registry.Open(registry.Config{URL: st.Registry, Token: st.ConsulToken}, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	ctl := control.New(reg, control.Config{Holder: "rollout lab test"}, control.Options{})
	deployer := devstack.Deployer{Path: netstack.StatePath(dir), Grace: 20 * time.Second}

	// Load through each router, bounded.
	for _, target := range st.Routers {
		celltest.Load(t, ctx, loadtest.Config{Target: target, Key: st.APIKey,
			Steps: []loadtest.Step{{Rate: 15, For: 3 * time.Minute}}, Users: 200})
	}

	procs, err := deployer.Processes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var routerAdmins []string
	for _, p := range procs {
		if p.Router {
			routerAdmins = append(routerAdmins, strings.TrimSuffix(p.Ready, "/readyz"))
		}
	}
	releases := func() map[string]string {
		t.Helper()
		out := map[string]string{}
		for _, p := range st.Cells() {
			s, err := admin.Status(ctx, "http://"+p.Addrs["admin"])
			if err != nil {
				t.Fatalf("%s: %v", p.Name, err)
			}
			out[p.Name] = s.Release.ID
		}
		for i, u := range routerAdmins {
			rd, err := admin.RouterReadiness(ctx, u)
			if err != nil {
				t.Fatalf("router %d: %v", i+1, err)
			}
			out["router"+string(rune('1'+i))] = rd.Release.ID
		}
		return out
	}
	before := releases()

	cfg := rollout.Config{
		Spec:   release.Spec{Set: []string{"record-ttl=2h"}},
		Router: release.Spec{Set: []string{"max-conns-per-addr=2048"}},
		Gate:   gate.Config{Alpha: 0.01, MinSamples: 60, FailureMargin: 0.005, LatencyFactor: 1.25, LatencyMargin: 0.050},
		Scrape: time.Second, WaitLimit: 30 * time.Second, ReadyWithin: 45 * time.Second, Settle: time.Second,
	}
	waves := append([]control.Wave{{Cells: []string{"c1"}, Bake: 5 * time.Second}}, rollout.RouterWaves(procs, 5*time.Second)...)
	opts := rollout.Options{Control: ctl, Admin: admin, Deployer: deployer,
		Routers:  func(context.Context) ([]string, error) { return routerAdmins, nil },
		Progress: func(s string) { t.Logf("lab: %s", s) }}
	if err := rollout.Preflight(ctx, cfg, opts); err != nil {
		t.Fatal(err)
	}
	if _, err := rollout.Start(ctx, ctl, "lab", waves, cfg); err != nil {
		t.Fatal(err)
	}
	ro, err := rollout.New("lab", cfg, opts).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ro.State != control.RolloutDone || ro.Wave != 3 {
		t.Fatalf("the lab's rollout: %s at wave %d: %s", ro.State, ro.Wave+1, ro.Reason)
	}
	after := releases()
	for name, rel := range after {
		switch {
		case strings.HasPrefix(name, "c1-") && (rel == before[name] || rel != ro.Release):
			t.Errorf("%s runs %s, want the new %s (before %s)", name, rel, ro.Release, before[name])
		case strings.HasPrefix(name, "c2-") && rel != before[name]:
			t.Errorf("%s was touched: %s, before %s", name, rel, before[name])
		case strings.HasPrefix(name, "router") && (rel == before[name] || rel != ro.RouterRelease):
			t.Errorf("%s runs %s, want the new %s (before %s)", name, rel, ro.RouterRelease, before[name])
		}
	}
	// One instance at a time: each ready and serving before the next is
	// replaced.
	var order []string
	for _, e := range ro.Events {
		f := strings.Fields(e.Text)
		switch {
		case len(f) > 1 && f[0] == "replacing" && strings.HasPrefix(f[1], "c1-"):
			order = append(order, f[1]+" replacing")
		case len(f) > 1 && strings.HasPrefix(f[0], "c1-") && (f[1] == "ready" || f[1] == "serves"):
			order = append(order, f[0]+" "+f[1])
		}
	}
	if want := []string{"c1-i1 replacing", "c1-i1 ready", "c1-i1 serves", "c1-i2 replacing", "c1-i2 ready", "c1-i2 serves",
		"c1-i3 replacing", "c1-i3 ready", "c1-i3 serves"}; !slices.Equal(order, want) {
		t.Errorf("c1's instances: %v, want %v", order, want)
	}
	// router1 judged against router2, which still ran the old release.
	baked := slices.IndexFunc(ro.Events, func(e control.RolloutEvent) bool { return strings.HasPrefix(e.Text, "wave 2 baked") })
	if baked < 0 || !regexp.MustCompile(`router 5xx: wave \d+ of \d+ \([0-9.]+%\); old release \d+ of \d+ \([0-9.]+%\), Fisher`).MatchString(ro.Events[baked].Text) {
		t.Errorf("router1's bake had no baseline router: %+v", ro.Events)
	}
	m, err := ctl.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range m.Cells() {
		for _, in := range c.Instances {
			if in.Drained {
				t.Errorf("%s/%s left out of rotation", c.ID, in.ID)
			}
		}
	}
}
