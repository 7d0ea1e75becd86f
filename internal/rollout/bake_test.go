package rollout

import (
	"testing"

	"github.com/cellkit/cellkit/internal/gate"
)

// TestTrackerCountsRestartsAndReadinessLost: a process whose start time
// changes between two looks restarted (once, whether or not a look fell
// while it was down); ready at one look and not ready, or silent, at the
// next lost its readiness; a process that was never ready loses nothing.
func TestTrackerCountsRestartsAndReadinessLost(t *testing.T) {
	up := func(started float64, ready bool) seen { return seen{ok: true, started: started, ready: ready} }
	looks := []map[string]seen{
		{"a": up(100, true), "b": up(50, true), "c": up(70, false)},
		{"a": {}, "b": up(50, true), "c": up(70, false)},              // a down
		{"a": up(200, false), "b": up(50, false), "c": up(70, false)}, // a back, restarted; b not ready
		{"a": up(200, true), "b": up(50, true), "c": up(70, true)},
		{"a": up(300, true), "b": up(50, true), "c": up(70, true)}, // a restarted between looks
	}
	tr := tracker{}
	for _, l := range looks {
		tr.observe(look{procs: l})
	}
	for u, want := range map[string]gate.Health{"a": {Restarts: 2, Flaps: 1}, "b": {Flaps: 1}, "c": {}} {
		if got := tr[u].health; got != want {
			t.Errorf("%s: %+v, want %+v", u, got, want)
		}
	}
	procs := []proc{{admin: "a"}, {admin: "b"}}
	w := window(procs, firsts{procs: looks[0]}, look{procs: looks[4]}, tr)
	if w.Health != (gate.Health{Restarts: 2, Flaps: 1}) {
		t.Errorf("the window's health, the worst process's: %+v", w.Health)
	}
}
