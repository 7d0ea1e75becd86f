package cellctl

import (
	"strings"
	"testing"

	"github.com/cellkit/cellkit/internal/slotmap"
)

// TestInstanceCommands: instances are added, changed, drained, undrained
// and removed through cellctl, with the refusals an operator needs: a new
// instance without both URLs, draining the last instance in rotation,
// removing one in rotation, unknown cells and instances.
func TestInstanceCommands(t *testing.T) {
	e := newFileEnv(t)
	e.setup([]string{"c1", "c2"}, nil)
	e.ok("instance", "set", "c1", "i1", "--intake", "http://10.0.1.1:8081", "--admin", "http://10.0.1.1:9081")
	e.ok("instance", "set", "c1", "i2", "--intake", "http://10.0.1.2:8081", "--admin", "http://10.0.1.2:9081")
	c, _ := e.load().Cell("c1")
	if got := c.Intakes(); len(got) != 2 || c.Intake != "http://10.0.1.1:8081" {
		t.Fatalf("after two instances: %+v", c)
	}
	before := e.load()
	e.ok("instance", "drain", "c1", "i1")
	c, _ = e.load().Cell("c1")
	if got := c.Intakes(); len(got) != 1 || got[0] != "http://10.0.1.2:8081" || c.Intake != "http://10.0.1.2:8081" {
		t.Fatalf("after drain i1: intakes %v, intake %s", c.Intakes(), c.Intake)
	}
	if p, err := slotmap.Compare(before, e.load()); err != nil || p.MovedSlots != 0 {
		t.Fatalf("draining an instance moved %v slots (%v)", p, err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"new instance without admin", []string{"instance", "set", "c1", "i3", "--intake", "http://h:1"}, "needs --intake and --admin"},
		{"bad instance id", []string{"instance", "set", "c1", "I3", "--intake", "http://h:1", "--admin", "http://h:2"}, "instance id"},
		{"bad url", []string{"instance", "set", "c1", "i3", "--intake", "h:1", "--admin", "http://h:2"}, "--intake"},
		{"drain the last in rotation", []string{"instance", "drain", "c1", "i2"}, "last instance in rotation"},
		{"drain a drained one", []string{"instance", "drain", "c1", "i1"}, "drained already"},
		{"remove one in rotation", []string{"instance", "remove", "c1", "i2"}, "is in rotation"},
		{"unknown instance", []string{"instance", "drain", "c1", "i9"}, `no instance "i9"`},
		{"unknown cell", []string{"instance", "drain", "c9", "i1"}, `unknown cell "c9"`},
		{"no flags", []string{"instance", "set", "c1", "i1"}, "give --intake"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.run(tc.args...)
			if r.code == 0 || !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
				t.Fatalf("%v\nwant a one-line error containing %q", r, tc.want)
			}
		})
	}
	e.ok("instance", "remove", "c1", "i1")
	if r := e.run("instance", "undrain", "c1", "i2"); r.code == 0 {
		t.Fatalf("undrain of an instance in rotation: %v", r)
	}
	if c, _ := e.load().Cell("c1"); len(c.Instances) != 1 || c.Instances[0].ID != "i2" {
		t.Fatalf("after remove i1: %+v", c.Instances)
	}
}

// TestStatusShowsInstances: a cell of several instances shows one row per
// instance under its own, with its health; the cell's figures come from a
// ready instance, and an unreachable instance is named in the notes.
func TestStatusShowsInstances(t *testing.T) {
	e := newFileEnv(t)
	i1, i2 := newFakeCell(t, "c1"), newFakeCell(t, "c1")
	i2.set(func(f *fakeCell) { f.intake = "closed" }) // not ready
	i1.set(func(f *fakeCell) { f.release = "1.4.0@3fa9c1e20b7d" })
	i2.set(func(f *fakeCell) { f.release = "1.5.0@77a0c2b91e04" })
	e.setup([]string{"c1"}, func(string) string { return i1.URL() })
	e.ok("instance", "set", "c1", "i1", "--intake", "http://10.0.1.1:8081", "--admin", i1.URL())
	e.ok("instance", "set", "c1", "i2", "--intake", "http://10.0.1.2:8081", "--admin", i2.URL())
	e.ok("instance", "set", "c1", "i3", "--intake", "http://10.0.1.3:8081", "--admin", "http://127.0.0.1:1")
	e.ok("instance", "drain", "c1", "i3")
	r := e.ok("status")
	for _, want := range []string{"c1/i1  in rotation", "c1/i2  in rotation", "c1/i3  drained", "c1/i3: ", "mixed",
		"c1's instances run different releases: i1 1.4.0@3fa9c1e20b7d, i2 1.5.0@77a0c2b91e04", "1.5.0@77a0c2b91e04"} {
		if !strings.Contains(strings.Join(strings.Fields(r.stdout), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("status lacks %q:\n%s", want, r.stdout)
		}
	}
	var st statusJSON
	e.json(&st, "status")
	c := st.Cells[0]
	if len(c.Instances) != 3 || !c.Instances[0].Ready || c.Instances[1].Ready || c.Instances[2].Reachable || !c.Reachable || c.Status == nil || !c.Status.Ready {
		t.Fatalf("status --json of c1: %+v", c)
	}
}

// TestDrainClosesEveryInstance: drain closes the intake of every instance
// of the cell, undrain reopens them all.
func TestDrainClosesEveryInstance(t *testing.T) {
	e := newFileEnv(t)
	i1, i2 := newFakeCell(t, "c1"), newFakeCell(t, "c1")
	e.setup([]string{"c1", "c2"}, func(string) string { return i1.URL() })
	e.ok("instance", "set", "c1", "i1", "--intake", "http://10.0.1.1:8081", "--admin", i1.URL())
	e.ok("instance", "set", "c1", "i2", "--intake", "http://10.0.1.2:8081", "--admin", i2.URL())
	e.ok("drain", "c1", "--force")
	for i, f := range []*fakeCell{i1, i2} {
		if got := f.called("POST /v1/admin/intake/close"); len(got) != 1 {
			t.Errorf("instance %d: intake close calls %v, want 1", i+1, got)
		}
	}
	e.ok("undrain", "c1")
	for i, f := range []*fakeCell{i1, i2} {
		if got := f.called("POST /v1/admin/intake/open"); len(got) != 1 {
			t.Errorf("instance %d: intake open calls %v, want 1", i+1, got)
		}
	}
}
