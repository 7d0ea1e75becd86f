package rollout

import (
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/release"
)

// TestValidateWaves: a wave reaches only what the release changes, is
// cells or routers and not both, and bakes; the routers' waves are the
// stack's routers, one each, in the stack's order.
func TestValidateWaves(t *testing.T) {
	procs := []release.Process{{Name: "agencysim"}, {Name: "c1", Cell: "c1"}, {Name: "router1", Router: true}, {Name: "c2-i1", Cell: "c2", Instance: "i1"},
		{Name: "router2", Router: true}, {Name: "routerx"}}
	rw := RouterWaves(procs, time.Minute)
	if len(rw) != 2 || rw[0].Routers[0] != "router1" || rw[1].Routers[0] != "router2" || rw[0].Bake != time.Minute {
		t.Fatalf("router waves %+v", rw)
	}
	cells := Config{Spec: release.Spec{Set: []string{"workers=8"}}}
	routers := Config{Router: release.Spec{Set: []string{"max-conns-per-addr=2048"}}}
	both := Config{Spec: cells.Spec, Router: routers.Router}
	c1 := control.Wave{Cells: []string{"c1"}, Bake: time.Minute}
	for _, tc := range []struct {
		cfg   Config
		waves []control.Wave
		want  string
	}{
		{cells, []control.Wave{c1}, ""},
		{both, append([]control.Wave{c1}, rw...), ""},
		{routers, rw, ""},
		{Config{}, []control.Wave{c1}, "needs a binary or a flag"},
		{routers, []control.Wave{c1}, "the release changes no cell"},
		{cells, rw, "the release changes no router"},
		{both, []control.Wave{{Cells: []string{"c1"}, Routers: []string{"router1"}, Bake: time.Minute}}, "a wave is one or the other"},
		{cells, []control.Wave{{Bake: time.Minute}}, "wave 1 is empty"},
		{cells, []control.Wave{{Cells: []string{"c1"}, Bake: -time.Second}}, "want a positive duration"},
		{cells, nil, "no wave to roll out"},
	} {
		err := tc.cfg.Validate(tc.waves)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Validate(%+v, %+v) = %v, want %q", tc.cfg, tc.waves, err, tc.want)
		}
	}
}

// TestConfigOfAnOlderRecord: a record written before a setting existed
// (here the lease and the readiness bound, and a gate block without its
// newer thresholds) is read back with today's default for each missing
// field, and the fields it has keep their values.
func TestConfigOfAnOlderRecord(t *testing.T) {
	old := `{"Spec":{"Set":["workers=8"]},"Scrape":2000000000,"WaitLimit":60000000000,"Gate":{"MinSamples":50,"Alpha":0.05}}`
	cfg, err := ConfigOf(&control.Rollout{ID: "r1", Config: []byte(old)})
	if err != nil {
		t.Fatal(err)
	}
	d := DefaultConfig()
	if cfg.Lease != d.Lease || cfg.ReadyWithin != d.ReadyWithin {
		t.Errorf("lease %v, ready within %v: want the defaults %v, %v", cfg.Lease, cfg.ReadyWithin, d.Lease, d.ReadyWithin)
	}
	if cfg.Scrape != 2*time.Second || cfg.WaitLimit != time.Minute || cfg.Settle != 0 || cfg.Spec.Set[0] != "workers=8" {
		t.Errorf("the record's own fields changed: %+v", cfg)
	}
	if cfg.Gate.MinSamples != 50 || cfg.Gate.Alpha != 0.05 {
		t.Errorf("gate %+v: want the record's MinSamples and Alpha kept", cfg.Gate)
	}
}
