package intake

import (
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/slotmap"
)

func testMap(t *testing.T) *slotmap.Map {
	t.Helper()
	m, err := slotmap.New(64, map[string]int{"nice": 80})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c1", "c2", "c3"} {
		p, err := m.AddCell(slotmap.Cell{ID: id, Weight: 1, Intake: "http://127.0.0.1:1", Admin: "http://127.0.0.1:2"})
		if err != nil {
			t.Fatal(err)
		}
		m = p.After
	}
	return m
}

func TestMovesRemembersThePreviousOwnerForAWhile(t *testing.T) {
	m := testMap(t)
	p, err := m.Drain("c2")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	mv := NewMoves("c1")
	mv.Observe(m, now)
	mv.Observe(p.After, now)
	gained := 0
	for s := 0; s < m.Slots(); s++ {
		prev, ok := mv.Previous(s, now.Add(time.Minute))
		switch {
		case m.Owner(s) == "c2" && p.After.Owner(s) == "c1":
			gained++
			if !ok || prev != "c2" {
				t.Fatalf("slot %d moved c2 → c1: Previous = %q, %v", s, prev, ok)
			}
		case ok:
			t.Fatalf("slot %d (owner %s → %s) reported as moved from %s", s, m.Owner(s), p.After.Owner(s), prev)
		}
	}
	if gained == 0 {
		t.Fatal("the drain gave c1 no slots: test map too small")
	}
	for s := 0; s < m.Slots(); s++ {
		if _, ok := mv.Previous(s, now.Add(MoveWindow+time.Second)); ok {
			t.Fatalf("slot %d still remembered after the window", s)
		}
	}
	// An older map arriving late changes nothing.
	mv.Observe(m, now)
	if mv.prev.Version() != p.After.Version() {
		t.Fatal("an older map replaced the newer one")
	}
}
