package slotmap

import (
	"strconv"
	"testing"
)

// A change's data moves: the slots that change owner carry their users,
// but a user pinned elsewhere, who is kept; a pin or unpin moves that
// user alone; every user whose route changes is carried by exactly one
// move, from the cell before to the cell after, and no other user is.
func TestAPlansDataMovesCarryExactlyTheUsersWhoseRouteChanges(t *testing.T) {
	m := buildMap(t, []int{1, 1, 1})
	var err error
	// Before: a user pinned to c02, who stays pinned.
	stay := userOfSlotOwnedBy(t, m, "c00", "stay-")
	if m, err = applied(m.SetOverride(stay, "c02")); err != nil {
		t.Fatal(err)
	}
	p, err := m.SetWeight("c01", 3)
	if err != nil {
		t.Fatal(err)
	}
	// The same plan, and two pins: one to a cell the user's slot does not
	// go to, one cleared.
	pinned := userOfSlotOwnedBy(t, m, "c00", "pin-")
	after, err := applied(p.After.SetOverride(pinned, "c02"))
	if err != nil {
		t.Fatal(err)
	}
	if after, err = applied(after.ClearOverride(stay)); err != nil {
		t.Fatal(err)
	}
	p.After = after
	specs := p.DataMoves()
	if len(specs) < 2 {
		t.Fatalf("moves %+v: want the weight's and the pins'", specs)
	}
	for u := range 20000 {
		user := "u" + strconv.Itoa(u)
		for _, extra := range []string{user, stay, pinned} {
			from, to := m.Lookup(extra).Cell, after.Lookup(extra).Cell
			carried := 0
			for _, s := range specs {
				if s.Moves(m.SlotOf(extra), extra) {
					carried++
					if s.From != from || s.To != to {
						t.Fatalf("user %s (%s → %s) carried by the move %s → %s", extra, from, to, s.From, s.To)
					}
				}
			}
			if want := map[bool]int{true: 1, false: 0}[from != to]; carried != want {
				t.Fatalf("user %s (%s → %s) carried by %d moves, want %d", extra, from, to, carried, want)
			}
		}
	}
	for _, s := range specs {
		s.ID = "m"
		if err := s.Check(m.Slots()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestACellLettingGoIsSwept: marking a cell drained, or removing it,
// carries whatever it still holds of every user to the user's cell (a
// pinned user to the pin's cell, alone), exactly once.
func TestACellLettingGoIsSwept(t *testing.T) {
	m := buildMap(t, []int{1, 1, 1})
	pinned := userOfSlotOwnedBy(t, m, "c00", "pin-")
	m, err := applied(m.SetOverride(pinned, "c02"))
	if err == nil {
		m, err = applied(m.Drain("c01"))
	}
	if err != nil {
		t.Fatal(err)
	}
	mark, err := m.MarkDrained("c01")
	if err != nil {
		t.Fatal(err)
	}
	drained := mark.After
	remove, err := drained.RemoveCell("c01")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*Plan{mark, remove} {
		specs := p.DataMoves()
		if len(specs) != 2 || specs[0].From != "c01" || specs[1].From != "c01" {
			t.Fatalf("%s: moves %+v, want c01's to each other cell", p.Op, specs)
		}
		for u := range 5000 {
			for _, user := range []string{"u" + strconv.Itoa(u), pinned} {
				carried := 0
				for _, s := range specs {
					if s.Moves(p.After.SlotOf(user), user) {
						carried++
						if to := p.After.Lookup(user).Cell; s.To != to {
							t.Fatalf("%s: user %s of %s carried to %s", p.Op, user, to, s.To)
						}
					}
				}
				if carried != 1 {
					t.Fatalf("%s: user %s carried by %d moves, want 1", p.Op, user, carried)
				}
			}
		}
		for _, s := range specs {
			s.ID = "m"
			if err := s.Check(m.Slots()); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A change that keeps the drained cell drained sweeps nothing.
	p, err := drained.SetWeight("c00", 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range p.DataMoves() {
		if s.From == "c01" {
			t.Fatalf("a weight change swept the drained cell: %+v", s)
		}
	}
}

func applied(p *Plan, err error) (*Map, error) {
	if err != nil {
		return nil, err
	}
	return p.After, nil
}

func userOfSlotOwnedBy(t *testing.T, m *Map, cell, prefix string) string {
	t.Helper()
	for i := range 100000 {
		if u := prefix + strconv.Itoa(i); m.Owner(m.SlotOf(u)) == cell {
			return u
		}
	}
	t.Fatalf("no user of %s", cell)
	return ""
}

// A slot's pinned cells: those its pinned users are pinned to, but its
// owner; none for a slot without a pinned user.
func TestPinnedCells(t *testing.T) {
	m := buildMap(t, []int{1, 1, 1})
	u := userOfSlotOwnedBy(t, m, "c00", "pin-")
	slot := m.SlotOf(u)
	if got := m.PinnedCells(slot); got != nil {
		t.Fatalf("PinnedCells before any pin = %v", got)
	}
	p, err := m.SetOverride(u, "c02")
	if err != nil {
		t.Fatal(err)
	}
	home := userOfSlotOwnedBy(t, p.After, "c00", "home-")
	if p, err = p.After.SetOverride(home, "c00"); err != nil {
		t.Fatal(err)
	}
	if got := p.After.PinnedCells(slot); len(got) != 1 || got[0] != "c02" {
		t.Fatalf("PinnedCells(%d) = %v, want [c02]", slot, got)
	}
	for other := range 3 {
		if other != slot && other != p.After.SlotOf(home) && p.After.PinnedCells(other) != nil {
			t.Fatalf("slot %d, which no pinned user is of, has pinned cells %v", other, p.After.PinnedCells(other))
		}
	}
}
