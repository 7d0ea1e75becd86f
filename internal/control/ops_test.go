package control

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/testkit"
)

// Every operation refuses what it must with an error wrapping
// slotmap.ErrInvalid, which Apply returns as a *RefusedError with the map
// unchanged.
func TestOperationsRefuse(t *testing.T) {
	reg := fileRegistry(t)
	ctx := testkit.Context(t, 30*time.Second)
	c := New(reg, Config{Holder: "test"}, Options{})
	good := "http://127.0.0.1:8081"
	for _, tc := range []struct {
		name string
		plan Planner
		want string
	}{
		{"provision: bad id", Provision(slotmap.Cell{ID: "C_1", Weight: 1, Intake: good, Admin: good}), `cell id "C_1" must be`},
		{"provision: weight 0", Provision(slotmap.Cell{ID: "c9", Weight: 0, Intake: good, Admin: good}), "weight 0 must be in 1.."},
		{"provision: bad intake", Provision(slotmap.Cell{ID: "c9", Weight: 1, Intake: "ftp://x", Admin: good}), "--intake: "},
		{"provision: bad admin", Provision(slotmap.Cell{ID: "c9", Weight: 1, Intake: good, Admin: "nope"}), "--admin: "},
		{"provision: taken id", Provision(slotmap.Cell{ID: "c1", Weight: 1, Intake: good, Admin: good}), "c1"},
		{"weight: unknown cell", SetWeight("c9", 2), `unknown cell "c9" (cells: c1, c2)`},
		{"capacity: unknown cell", SetCapacity("c9", 2), `unknown cell "c9"`},
		{"remove: active cell", Remove("c1"), "c1"},
		{"endpoints: bad admin", SetEndpoints("c1", "", "x"), "--admin: "},
		{"undrain: active cell", Undrain("c1"), "c1"},
		{"mark drained: active cell", MarkDrained("c1"), "c1"},
		{"override: unknown cell", SetOverride("u1", "c9"), `unknown cell "c9"`},
		{"quota: unknown cell", SetQuota("nice", "c9", 3), `unknown cell "c9"`},
		{"quota clear: unknown cell", ClearQuota("nice", "c9"), `unknown cell "c9"`},
		{"format 3", SetFormat(3), "3"},
		{"instance: new without URLs", SetInstance("c1", "i2", good, ""), "a new instance needs --intake and --admin"},
		{"instance: bad id", SetInstance("c1", "I 2", good, good), `instance id "I 2" must be`},
		{"instance: unknown", SetInstanceRotation("c1", "i9", true), `cell c1 has no instance "i9"`},
		{"instance remove: unknown cell", RemoveInstance("c9", "i1"), `unknown cell "c9"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Apply(ctx, Change{Plan: tc.plan})
			var refused *RefusedError
			if !errors.As(err, &refused) || !errors.Is(err, slotmap.ErrInvalid) || refused.Version != v0 {
				t.Fatalf("err = %v (%T), want a refusal of version %d", err, err, v0)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %q, want it to say %q", err, tc.want)
			}
		})
	}
	m, err := c.Load(ctx)
	if err != nil || m.Version() != v0 {
		t.Fatalf("after the refusals: version %v, %v; want %d", m.Version(), err, v0)
	}
}

// A cell's life through the operations: provision, a second instance
// rotated out and removed, drain, mark drained, undrain, drain again and
// remove.
func TestOperationsCellLife(t *testing.T) {
	reg := fileRegistry(t)
	ctx := testkit.Context(t, 30*time.Second)
	c := New(reg, Config{Holder: "test"}, Options{})
	const u1, a1 = "http://127.0.0.1:8131", "http://127.0.0.1:9131"
	steps := []struct {
		name string
		plan Planner
	}{
		{"provision", Provision(slotmap.Cell{ID: "c3", Weight: 2, Intake: u1, Admin: a1})},
		{"instance i1", SetInstance("c3", "i1", u1, a1)},
		{"instance i2", SetInstance("c3", "i2", "http://127.0.0.1:8132", "http://127.0.0.1:9132")},
		{"instance i2 out", SetInstanceRotation("c3", "i2", true)},
		{"instance i2 removed", RemoveInstance("c3", "i2")},
		{"capacity", SetCapacity("c3", 400)},
		{"endpoints", SetEndpoints("c3", "", "http://127.0.0.1:9133")},
		{"quota", SetQuota("nice", "c3", 10)},
		{"override", SetOverride("vip", "c3")},
		{"override cleared", ClearOverride("vip")},
		{"drain", Drain("c3", false)},
		{"mark drained", MarkDrained("c3")},
		{"undrain", Undrain("c3")},
		{"drain again", Drain("c3", false)},
		{"drained again", MarkDrained("c3")},
		{"remove", Remove("c3")},
		{"rebalance", Rebalance()},
		{"format 1", SetFormat(1)},
		{"limit", SetLimit("kcb", 40)},
	}
	for _, s := range steps {
		res, err := c.Apply(ctx, Change{Plan: s.plan})
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if !res.Applied && !res.NoChange {
			t.Fatalf("%s: %+v", s.name, res)
		}
		m := res.Plan.After
		switch s.name {
		case "instance i2 removed":
			if cell, _ := m.Cell("c3"); len(cell.Instances) != 1 || cell.Instances[0].ID != "i1" {
				t.Errorf("%s: instances %+v", s.name, cell.Instances)
			}
		case "endpoints":
			if cell, _ := m.Cell("c3"); cell.Admin != "http://127.0.0.1:9133" || cell.Intake != u1 {
				t.Errorf("%s: %s %s", s.name, cell.Intake, cell.Admin)
			}
		case "mark drained":
			if cell, _ := m.Cell("c3"); cell.State != slotmap.Drained {
				t.Errorf("%s: state %s", s.name, cell.State)
			}
		case "remove":
			if _, ok := m.Cell("c3"); ok {
				t.Errorf("%s: c3 still in the map", s.name)
			}
		case "limit":
			if m.Agencies()["kcb"] != 40 || m.Format() != 1 {
				t.Errorf("%s: agencies %v, format %d", s.name, m.Agencies(), m.Format())
			}
		}
	}
	// The last active cell drains only when asked to.
	if _, err := c.Apply(ctx, Change{Plan: Drain("c1", false)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Apply(ctx, Change{Plan: Drain("c2", false)}); err == nil {
		t.Fatal("drained the last active cell without last")
	}
	if res, err := c.Apply(ctx, Change{Plan: Drain("c2", true)}); err != nil || !res.Applied {
		t.Fatalf("drain the last with last: %+v, %v", res, err)
	}
}
