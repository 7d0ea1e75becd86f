package control_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/testkit"
)

// steps is a MoveAdmin that does what a cell would (each move one page
// of one message, digests alike) and writes down the steps asked of it.
type steps struct {
	mu  sync.Mutex
	log []string
}

func (s *steps) add(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, fmt.Sprintf(format, args...))
}

func (s *steps) PutMove(_ context.Context, _ string, cm api.CellMove) (*api.CellMove, error) {
	if cm.Fenced {
		s.add("fence %s", cm.Spec.ID)
	}
	cm.RecordTTLSeconds = 3600
	return &cm, nil
}

func (s *steps) Move(_ context.Context, _, id string) (*api.CellMove, error) {
	return &api.CellMove{Spec: api.MoveSpec{ID: id}}, nil
}

func (s *steps) DeleteMove(context.Context, string, string) error { return nil }

func (s *steps) ExportMove(_ context.Context, _, id string, after uint64, _ int, _ []int) (*api.MovePage, error) {
	if after > 0 {
		s.add("copy again %s", id)
		return &api.MovePage{Next: after, Done: true}, nil
	}
	s.add("copy %s", id)
	return &api.MovePage{Messages: []api.MovedMessage{{Seq: 1, Kind: "rec", Record: []byte(`{}`)}}, Next: 1, Done: true}, nil
}

func (s *steps) ImportMove(context.Context, string, string, *api.MovePage) error { return nil }

func (s *steps) DigestMove(context.Context, string, string, time.Time) (*api.MoveDigest, error) {
	return &api.MoveDigest{Slots: map[int]api.SlotDigest{0: {Messages: 1}}}, nil
}

func (s *steps) MoveStep(_ context.Context, _, id, action string, _ []int) (int, error) {
	s.add("%s %s", action, id)
	return 0, nil
}

func (s *steps) MoveSize(context.Context, string, api.MoveSpec) (*api.MoveSize, error) {
	return &api.MoveSize{}, nil
}

// A change's moves are copied first, all of them, and fenced after: a
// move's users are not refused while the other moves' first copies run
// (a drain of one cell into three others kept the first move's users
// fenced for a minute and a half on a busy cluster).
func TestAChangesMovesAreFencedOnceEveryFirstCopyIsDone(t *testing.T) {
	m, err := slotmap.New(64, map[string]int{"nice": 80})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c1", "c2", "c3", "c4"} {
		p, err := m.AddCell(slotmap.Cell{ID: id, Weight: 1, Intake: "http://127.0.0.1:1", Admin: "http://" + id})
		if err != nil {
			t.Fatal(err)
		}
		m = p.After
	}
	plan, err := m.Drain("c1")
	if err != nil {
		t.Fatal(err)
	}
	var reps []api.MoveProgress
	for _, s := range plan.DataMoves() {
		s.ID = "v9-" + s.From + "-" + s.To
		reps = append(reps, api.MoveProgress{Spec: s})
	}
	if len(reps) != 3 {
		t.Fatalf("%d moves, want three: c1 to each other cell", len(reps))
	}
	admin := &steps{}
	mv := control.NewMover(admin, control.MoveConfig{}, nil, nil)
	if err := mv.Prepare(testkit.Context(t, 10*time.Second), m, reps, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	lastCopy := slices.IndexFunc(admin.log, func(s string) bool { return strings.HasPrefix(s, "fence") }) - 1
	for i, step := range admin.log {
		if first := strings.HasPrefix(step, "copy v"); first && i > lastCopy {
			t.Errorf("steps %q: a first copy after a fence", admin.log)
		}
	}
	for _, r := range reps {
		if r.Step != "verified" || !r.Verified {
			t.Errorf("move %s: step %s, verified %v; want verified", r.Spec.ID, r.Step, r.Verified)
		}
		if !slices.Contains(admin.log, "fence "+r.Spec.ID) || !slices.Contains(admin.log, "hand "+r.Spec.ID) || !slices.Contains(admin.log, "copy again "+r.Spec.ID) {
			t.Errorf("steps %q: move %s not fenced, handed over and copied again", admin.log, r.Spec.ID)
		}
	}
}
