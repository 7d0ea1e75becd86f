package control

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/testkit"
)

// TestEnsure: an empty registry gets a map and the stack's cells; the same
// stack again changes nothing; a cell that moved gets its new endpoints,
// an instance its new URLs, and nothing else changes.
func TestEnsure(t *testing.T) {
	ctx := testkit.Context(t, 30*time.Second)
	reg, err := registry.Open(registry.Config{URL: "file:" + filepath.Join(t.TempDir(), "map.json")}, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	c := New(reg, Config{Holder: "test"}, Options{})
	u := func(port string) string { return "http://127.0.0.1:" + port }
	stack := []StackCell{
		{ID: "c1", Intake: u("9101"), Admin: u("9201")},
		{ID: "c2", Intake: u("9102"), Admin: u("9202"), Instances: []slotmap.Instance{
			{ID: "i1", Intake: u("9102"), Admin: u("9202")}, {ID: "i2", Intake: u("9112"), Admin: u("9212")}}},
	}
	ensure := func() []string {
		t.Helper()
		var steps []string
		if err := c.Ensure(ctx, EnsureChange{Agencies: map[string]int{"nice": 80}, Cells: stack,
			Step: func(s Step) { steps = append(steps, s.What) }}); err != nil {
			t.Fatal(err)
		}
		return steps
	}
	want := []string{"init", "provision c1", "provision c2", "instance set c2 i1", "instance set c2 i2"}
	if got := ensure(); !slices.Equal(got, want) {
		t.Fatalf("steps %q, want %q", got, want)
	}
	m, err := c.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v := m.Version()
	if got := ensure(); len(got) != 0 {
		t.Errorf("the same stack again: steps %q, want none", got)
	}
	if m, _ := c.Load(ctx); m.Version() != v {
		t.Errorf("the same stack again made version %d of %d", m.Version(), v)
	}
	stack[0].Intake = u("9301")
	stack[1].Instances[1].Admin = u("9312")
	if got, want := ensure(), []string{"endpoints c1", "instance set c2 i2"}; !slices.Equal(got, want) {
		t.Fatalf("moved: steps %q, want %q", got, want)
	}
	m, _ = c.Load(ctx)
	c1, _ := m.Cell("c1")
	c2, _ := m.Cell("c2")
	if c1.Intake != u("9301") || c1.Admin != u("9201") || len(c2.Instances) != 2 || c2.Instances[1].Admin != u("9312") {
		t.Errorf("after the move: c1 %+v, c2 instances %+v", c1, c2.Instances)
	}
}
