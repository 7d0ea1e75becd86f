package slotmap

import (
	"strings"
	"testing"
)

// TestInstances: instances are added in id order, replaced by id, drained
// out of the intakes, removed but never the last; the cell's Intake and
// Admin follow its first instance in rotation; a map with them encodes and
// decodes to the same, and bad instances are refused.
func TestInstances(t *testing.T) {
	m, err := New(64, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustApply := func(p *Plan, err error) *Map {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return p.After
	}
	m = mustApply(m.AddCell(Cell{ID: "c1", Weight: 1, Intake: "http://h0:8081", Admin: "http://h0:9081"}))
	if got := m.cells[0].Intakes(); len(got) != 1 || got[0] != "http://h0:8081" {
		t.Fatalf("Intakes of a cell without instances = %v", got)
	}
	m = mustApply(m.SetInstance("c1", Instance{ID: "i2", Intake: "http://h2:8081", Admin: "http://h2:9081"}))
	m = mustApply(m.SetInstance("c1", Instance{ID: "i1", Intake: "http://h1:8081", Admin: "http://h1:9081"}))
	c, _ := m.Cell("c1")
	if c.Instances[0].ID != "i1" || c.Instances[1].ID != "i2" || c.Intake != "http://h1:8081" {
		t.Fatalf("after two SetInstance: %+v", c)
	}
	m = mustApply(m.SetInstance("c1", Instance{ID: "i1", Intake: "http://h1:8081", Admin: "http://h1:9081", Drained: true}))
	c, _ = m.Cell("c1")
	if got := c.Intakes(); len(got) != 1 || got[0] != "http://h2:8081" || c.Intake != "http://h2:8081" {
		t.Fatalf("with i1 drained: Intakes %v, Intake %s", got, c.Intake)
	}
	data, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if c2, _ := back.Cell("c1"); len(c2.Instances) != 2 || !c2.Instances[0].Drained {
		t.Fatalf("decoded %+v", c2)
	}
	m = mustApply(m.RemoveInstance("c1", "i1"))
	if _, err := m.RemoveInstance("c1", "i2"); err == nil || !strings.Contains(err.Error(), "last") {
		t.Fatalf("removing the last instance: %v", err)
	}
	if _, err := m.RemoveInstance("c1", "nope"); err == nil {
		t.Fatal("removing an unknown instance worked")
	}
	for _, in := range []Instance{
		{ID: "Bad", Intake: "http://h:1", Admin: "http://h:2"},
		{ID: "i3", Intake: "ftp://h:1", Admin: "http://h:2"},
		{ID: "i3", Intake: "http://h:1", Admin: ""},
	} {
		if _, err := m.SetInstance("c1", in); err == nil {
			t.Errorf("SetInstance(%+v) was taken", in)
		}
	}
}
