package control

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/consultest"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/testkit"
)

func TestMain(m *testing.M) {
	celltest.VerifyTestMain(m, goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

// fileRegistry is a file registry holding a map of 64 slots with cells c1
// and c2, as version v0 (3).
const v0 = 3

func fileRegistry(t *testing.T) registry.Registry {
	t.Helper()
	reg, err := registry.Open(registry.Config{URL: "file:" + filepath.Join(t.TempDir(), "map.json")}, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	m, err := slotmap.New(64, map[string]int{"nice": 80})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c1", "c2"} {
		p, err := m.AddCell(celltest.TestCell(id))
		if err != nil {
			t.Fatal(err)
		}
		m = p.After
	}
	if m.Version() != v0 {
		t.Fatalf("the test map is version %d, want %d", m.Version(), v0)
	}
	if err := reg.CompareAndSwap(testkit.Context(t, 10*time.Second), 0, m); err != nil {
		t.Fatal(err)
	}
	return reg
}

func weight(id string, w int) Planner {
	return func(m *slotmap.Map) (*slotmap.Plan, error) { return m.SetWeight(id, w) }
}

func TestApplyCommitsAndKeepsTheHistory(t *testing.T) {
	reg := fileRegistry(t)
	ctx := testkit.Context(t, 30*time.Second)
	c := New(reg, Config{Holder: "test", Origin: "tool"}, Options{Now: func() time.Time { return time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC) }})
	var events []string
	res, err := c.Apply(ctx, Change{Plan: weight("c1", 3),
		Planned: func(p *slotmap.Plan) { events = append(events, "planned "+p.Op) },
		Done:    func(r *Result) { events = append(events, "done") }})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Applied || res.NoChange || res.DryRun || res.Version != v0+1 || strings.Join(events, ", ") != "planned "+res.Plan.Op+", done" {
		t.Fatalf("result %+v, events %v", res, events)
	}
	m, err := c.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cell, _ := m.Cell("c1"); cell.Weight != 3 || !strings.HasSuffix(m.Change(), " (tool)") {
		t.Errorf("map after: c1 weight %d, change %q", cell.Weight, m.Change())
	}
	vs, err := c.History().Versions(ctx)
	if err != nil || len(vs) != 2 || vs[0] != v0 || vs[1] != v0+1 {
		t.Errorf("history versions %v, %v; want the version planned against and the new one", vs, err)
	}
}

func TestApplyDryRunNoChangeAndRefusal(t *testing.T) {
	reg := fileRegistry(t)
	ctx := testkit.Context(t, 30*time.Second)
	c := New(reg, Config{Holder: "test"}, Options{})
	res, err := c.Apply(ctx, Change{Plan: weight("c1", 3), DryRun: true})
	if err != nil || res.Applied || !res.DryRun || res.Version != v0 {
		t.Fatalf("dry run: %+v, %v", res, err)
	}
	res, err = c.Apply(ctx, Change{Plan: weight("c1", 1)}) // its weight already
	if err != nil || res.Applied || !res.NoChange {
		t.Fatalf("no change: %+v, %v", res, err)
	}
	_, err = c.Apply(ctx, Change{Plan: weight("c9", 2)})
	var refused *RefusedError
	if !errors.As(err, &refused) || refused.Version != v0 || !strings.HasPrefix(err.Error(), "refused: ") {
		t.Fatalf("unknown cell: %v, want a refusal of version %d", err, v0)
	}
	if m, _ := c.Load(ctx); m.Version() != v0 {
		t.Errorf("version %d after a dry run, no change and a refusal, want %d", m.Version(), v0)
	}
}

// A change that loses the race to another writer is planned again against
// the new map, with a note; the other writer's version is kept.
func TestApplyPlansAgainAfterALostRace(t *testing.T) {
	reg := fileRegistry(t)
	ctx := testkit.Context(t, 30*time.Second)
	var notes []Note
	c := New(reg, Config{Holder: "test"}, Options{Note: func(n Note) { notes = append(notes, n) }})
	raced := false
	res, err := c.Apply(ctx, Change{Plan: func(m *slotmap.Map) (*slotmap.Plan, error) {
		if !raced { // another writer commits between this plan and its commit
			raced = true
			p, err := m.SetWeight("c2", 2)
			if err != nil {
				return nil, err
			}
			if err := reg.CompareAndSwap(ctx, m.Version(), p.After); err != nil {
				return nil, err
			}
		}
		return m.SetWeight("c1", 3)
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Applied || res.Replans != 1 || res.Version != v0+2 {
		t.Fatalf("result %+v, want applied as version %d after one re-plan", res, v0+2)
	}
	if len(notes) != 1 || notes[0].Warning || !strings.Contains(notes[0].Text, "planning again (1 of 3)") {
		t.Errorf("notes %+v", notes)
	}
	m, _ := c.Load(ctx)
	if c1, _ := m.Cell("c1"); c1.Weight != 3 {
		t.Errorf("c1 weight %d", c1.Weight)
	}
	if c2, _ := m.Cell("c2"); c2.Weight != 2 {
		t.Errorf("c2 weight %d: the other writer's change was lost", c2.Weight)
	}
}

// The traffic projection is for the eyes: its failure is a warning, unless
// marked to end the change.
func TestApplyTraffic(t *testing.T) {
	reg := fileRegistry(t)
	ctx := testkit.Context(t, 30*time.Second)
	var notes []Note
	broken := errors.New("routers unreachable")
	c := New(reg, Config{Holder: "test"}, Options{Note: func(n Note) { notes = append(notes, n) },
		Traffic: func(context.Context, int) (*slotmap.Traffic, error) { return nil, broken }})
	if _, err := c.Apply(ctx, Change{Plan: weight("c1", 3), DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if len(notes) != 1 || !notes[0].Warning || !strings.Contains(notes[0].Text, "routers unreachable") {
		t.Errorf("notes %+v, want one warning", notes)
	}
	typo := errors.New("--routers: not a URL")
	c = New(reg, Config{Holder: "test"}, Options{Traffic: func(context.Context, int) (*slotmap.Traffic, error) { return nil, Abort(typo) }})
	if _, err := c.Apply(ctx, Change{Plan: weight("c1", 3)}); !errors.Is(err, typo) {
		t.Errorf("aborted: %v, want the traffic's error", err)
	}
}

// A change waits for the writer lock another holds, says so, and gives up
// at LockWait.
func TestApplyWaitsForTheLock(t *testing.T) {
	reg := fileRegistry(t)
	ctx := testkit.Context(t, 30*time.Second)
	held, err := reg.Lock(ctx, "another writer@host")
	if err != nil {
		t.Fatal(err)
	}
	var notes []Note
	c := New(reg, Config{Holder: "test", LockWait: LockNotice + 500*time.Millisecond}, Options{Note: func(n Note) { notes = append(notes, n) }})
	if _, err := c.Apply(ctx, Change{Plan: weight("c1", 3)}); err == nil || !strings.Contains(err.Error(), "gave up waiting for the writer lock") {
		t.Fatalf("with the lock held: %v", err)
	}
	if len(notes) != 1 || !strings.Contains(notes[0].Text, "held by another writer@host") {
		t.Errorf("notes %+v", notes)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Apply(ctx, Change{Plan: weight("c1", 3)}); err != nil || !res.Applied {
		t.Fatalf("after the unlock: %+v, %v", res, err)
	}
}

func TestInit(t *testing.T) {
	reg, err := registry.Open(registry.Config{URL: "file:" + filepath.Join(t.TempDir(), "map.json")}, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	ctx := testkit.Context(t, 30*time.Second)
	c := New(reg, Config{Holder: "test"}, Options{})
	fresh, err := slotmap.New(64, map[string]int{"nice": 80})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.Init(ctx, InitChange{Map: fresh, DryRun: true}); err != nil || r.Applied || r.Map.Version() != 1 {
		t.Fatalf("dry run: %+v, %v", r, err)
	}
	if _, err := reg.Load(ctx); !errors.Is(err, registry.ErrNoMap) {
		t.Fatalf("after a dry run the registry holds a map: %v", err)
	}
	var replaced *slotmap.Map
	r, err := c.Init(ctx, InitChange{Map: fresh, Planned: func(_, cur *slotmap.Map) { replaced = cur }})
	if err != nil || !r.Applied || r.Map.Version() != 1 || r.Replaces != 0 || replaced != nil {
		t.Fatalf("first init: %+v, %v (replaced %v)", r, err, replaced)
	}
	if _, err := c.Apply(ctx, Change{Plan: func(m *slotmap.Map) (*slotmap.Plan, error) { return m.AddCell(celltest.TestCell("c1")) }}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Init(ctx, InitChange{Map: fresh}); err == nil || !strings.Contains(err.Error(), "already holds map version 2 with 1 cell;") {
		t.Fatalf("init over a map without force: %v", err)
	}
	r, err = c.Init(ctx, InitChange{Map: fresh, Force: true, Planned: func(_, cur *slotmap.Map) { replaced = cur }})
	if err != nil || !r.Applied || r.Map.Version() != 3 || r.Replaces != 2 || replaced == nil || len(replaced.Cells()) != 1 {
		t.Fatalf("init --force: %+v, %v", r, err)
	}
	if m, _ := c.Load(ctx); m.Version() != 3 || len(m.Cells()) != 0 {
		t.Errorf("after init --force: version %d with %d cells, want 3 with none", m.Version(), len(m.Cells()))
	}
}

// The history on Consul goes with the registry's own client: a token given
// to the registry (not in the environment) keeps the versions too.
func TestConsulHistoryUsesTheRegistrysToken(t *testing.T) {
	const token = "5e0c1a1e-0000-4000-8000-00000000c312"
	agent := consultest.Start(t, consultest.WithACL(token))
	t.Setenv("CONSUL_HTTP_TOKEN", "")
	reg, err := registry.Open(registry.Config{URL: "consul://" + agent.Addr() + "/history-token", Token: token}, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	ctx := testkit.Context(t, time.Minute)
	var warnings []string
	c := New(reg, Config{Holder: "test"}, Options{Note: func(n Note) {
		if n.Warning {
			warnings = append(warnings, n.Text)
		}
	}})
	fresh, err := slotmap.New(64, map[string]int{"nice": 80})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Init(ctx, InitChange{Map: fresh}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Apply(ctx, Change{Plan: Provision(celltest.TestCell("c1"))}); err != nil {
		t.Fatal(err)
	}
	vs, err := c.History().Versions(ctx)
	if err != nil || len(vs) != 2 || len(warnings) != 0 {
		t.Fatalf("history versions %v, %v; warnings %q: want versions 1 and 2, no warning", vs, err, warnings)
	}
}
