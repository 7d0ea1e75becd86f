package control

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/testkit"
)

// TestRolloutRecord: a rollout is recorded beside the map; a second is
// refused while it is active, naming it and its holder; an update of
// another id or a failing change is refused and changes nothing; once it
// has ended, a new one may start.
func TestRolloutRecord(t *testing.T) {
	reg := fileRegistry(t)
	ctx := testkit.Context(t, 30*time.Second)
	clk := testkit.NewClock(time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC))
	alice := New(reg, Config{Holder: "cellctl rollout start by alice@a"}, Options{Now: clk.Now})
	bob := New(reg, Config{Holder: "cellctl rollout resume by bob@b"}, Options{Now: clk.Now})
	if _, err := alice.Rollout(ctx); !errors.Is(err, ErrNoRollout) {
		t.Fatalf("before any: %v, want ErrNoRollout", err)
	}
	waves := []Wave{{Cells: []string{"c1"}, Bake: time.Minute}, {Cells: []string{"c2"}, Bake: time.Minute}}
	r, err := alice.StartRollout(ctx, Rollout{ID: "r1", Release: "cell@new", Waves: waves})
	if err != nil {
		t.Fatal(err)
	}
	if r.State != RolloutRunning || r.Holder != "cellctl rollout start by alice@a" || !r.Started.Equal(clk.Now()) {
		t.Fatalf("started: %+v", r)
	}
	_, err = bob.StartRollout(ctx, Rollout{ID: "r2", Waves: waves})
	var active *RolloutActiveError
	if !errors.As(err, &active) || active.ID != "r1" || !strings.Contains(err.Error(), "alice@a") {
		t.Fatalf("a second rollout: %v, want one naming r1 and alice", err)
	}
	clk.Advance(time.Minute)
	if _, err := bob.UpdateRollout(ctx, "r2", func(*Rollout) error { return nil }); err == nil {
		t.Error("an update of another rollout's id was taken")
	}
	boom := errors.New("boom")
	if _, err := bob.UpdateRollout(ctx, "r1", func(r *Rollout) error { r.Wave = 9; return boom }); !errors.Is(err, boom) {
		t.Fatalf("a failing change: %v", err)
	}
	if r, err := bob.UpdateRollout(ctx, "r1", func(r *Rollout) error { r.Wave = 1; return nil }); err != nil || r.Wave != 1 {
		t.Fatalf("bob's update: %+v, %v", r, err)
	}
	// An update changes what it changes: who drives the rollout is its
	// driver's to say (internal/rollout's lease), not every writer's.
	got, err := alice.Rollout(ctx)
	if err != nil || got.Wave != 1 || got.Holder != "cellctl rollout start by alice@a" || !got.Updated.Equal(clk.Now()) {
		t.Fatalf("after bob's update: %+v, %v", got, err)
	}
	if _, err := bob.UpdateRollout(ctx, "r1", func(r *Rollout) error { r.State = RolloutDone; return nil }); err != nil {
		t.Fatal(err)
	}
	if r, err = alice.StartRollout(ctx, Rollout{ID: "r2", Waves: waves}); err != nil || r.ID != "r2" {
		t.Fatalf("a new rollout once r1 is done: %+v, %v", r, err)
	}
}

// TestRolloutHeadContract: what the routers read of the record
// (api.RolloutHead) is what the record says, and api.RolloutStates are
// the record's states.
func TestRolloutHeadContract(t *testing.T) {
	at := time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC)
	r := Rollout{ID: "r1", State: RolloutHalted, Wave: 1, Updated: at,
		Waves: []Wave{{Cells: []string{"c1"}, Bake: time.Minute}, {Cells: []string{"c2"}, Bake: time.Minute}, {Routers: []string{"router1"}, Bake: time.Minute}}}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var h api.RolloutHead
	if err := json.Unmarshal(data, &h); err != nil {
		t.Fatal(err)
	}
	if h.ID != "r1" || h.State != string(RolloutHalted) || h.Wave != 1 || len(h.Waves) != 3 || !h.Updated.Equal(at) {
		t.Errorf("head %+v of %s", h, data)
	}
	states := []string{string(RolloutRunning), string(RolloutPaused), string(RolloutHalted), string(RolloutRolledBack), string(RolloutAborted), string(RolloutDone)}
	if !slices.Equal(states, api.RolloutStates) {
		t.Errorf("api.RolloutStates %v, the record's %v", api.RolloutStates, states)
	}
}

// TestCommandSame: two commands are the same when they run the same
// binary or image with the same arguments, whatever release they
// reported; an image differing alone makes them differ. The record keeps
// an image only when there is one.
func TestCommandSame(t *testing.T) {
	pod := Command{Release: "cell@1", Image: "registry.example.com/cellkit/cell:1.5.0", Args: []string{"--workers=4"}}
	for _, tc := range []struct {
		a, b Command
		same bool
	}{
		{pod, Command{Image: pod.Image, Args: []string{"--workers=4"}}, true},
		{pod, Command{Image: "registry.example.com/cellkit/cell:1.6.0", Args: pod.Args}, false},
		{pod, Command{Image: pod.Image}, false},
		{Command{Bin: "/bin/cell"}, Command{Bin: "/bin/cell", Release: "x"}, true},
		{Command{Bin: "/bin/cell"}, Command{Bin: "/bin/cell", Image: "cell:1"}, false},
	} {
		if got := tc.a.Same(tc.b); got != tc.same || tc.b.Same(tc.a) != got {
			t.Errorf("%+v same as %+v: %v, want %v", tc.a, tc.b, got, tc.same)
		}
	}
	b, err := json.Marshal(Command{Bin: "/bin/cell", Args: []string{"--x=1"}})
	if err != nil || string(b) != `{"bin":"/bin/cell","args":["--x=1"]}` {
		t.Errorf("a binary's command in the record: %s, %v", b, err)
	}
	b, err = json.Marshal(pod)
	if err != nil || string(b) != `{"release":"cell@1","bin":"","image":"registry.example.com/cellkit/cell:1.5.0","args":["--workers=4"]}` {
		t.Errorf("an image's command in the record: %s, %v", b, err)
	}
}
