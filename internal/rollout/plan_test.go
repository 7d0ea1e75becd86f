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
