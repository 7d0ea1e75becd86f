package slotmap

import (
	"cmp"
	"maps"
	"slices"

	"github.com/cellkit/cellkit/internal/api"
)

// DataMoves are the moves of users' inquiries a change from p.Before to
// p.After needs (docs/decisions/moving-users-data.md): one per pair of
// cells, carrying the users whose route goes from the one to the other.
// A slot that changes owner carries its users but those pinned (in
// either map) elsewhere than its old and new owner, who are kept; a
// pinned user whose route changes otherwise moves alone. Slots or users
// without an owner on one side (a map with no active cell) move nothing.
// A cell that lets go of its users for good (marked drained, or removed)
// is swept: whatever it still holds of any user (inquiries a change left
// there) moves to the user's cell in p.After. The moves are sorted by
// source and destination, their ids empty for the caller to name.
func (p *Plan) DataMoves() []api.MoveSpec {
	before, after := p.Before, p.After
	if before == nil || after == nil || before.Slots() != after.Slots() {
		return nil
	}
	specs := map[[2]string]*api.MoveSpec{}
	spec := func(from, to string) *api.MoveSpec {
		k := [2]string{from, to}
		if specs[k] == nil {
			specs[k] = &api.MoveSpec{From: from, To: to}
		}
		return specs[k]
	}
	for _, mv := range p.Moves {
		if mv.FromCell == "" || mv.ToCell == "" {
			continue
		}
		s := spec(mv.FromCell, mv.ToCell)
		for slot := mv.From; slot <= mv.To; slot++ {
			s.Slots = append(s.Slots, slot)
		}
	}
	pinned := map[string]bool{}
	for u := range before.overrides {
		pinned[u] = true
	}
	for u := range after.overrides {
		pinned[u] = true
	}
	for _, u := range slices.Sorted(maps.Keys(pinned)) {
		slot := before.SlotOf(u)
		from, to := before.Lookup(u).Cell, after.Lookup(u).Cell
		slotFrom, slotTo := before.Owner(slot), after.Owner(slot)
		if slotFrom != slotTo && slotFrom != "" && slotTo != "" && (from != slotFrom || to != slotTo) {
			// The slot moves, but not this user with it.
			k := spec(slotFrom, slotTo)
			k.Keep = append(k.Keep, api.MoveUser{User: u, Slot: slot})
		}
		if from != to && from != "" && to != "" && (from != slotFrom || to != slotTo) {
			k := spec(from, to)
			k.Users = append(k.Users, api.MoveUser{User: u, Slot: slot})
		}
	}
	for _, c := range before.cells {
		if now, ok := after.Cell(c.ID); !ok || (c.State != Drained && now.State == Drained) {
			p.sweep(c.ID, spec)
		}
	}
	out := make([]api.MoveSpec, 0, len(specs))
	for _, s := range specs {
		slices.Sort(s.Slots)
		s.Slots = slices.Compact(s.Slots)
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b api.MoveSpec) int { return cmp.Or(cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To)) })
	return out
}

// sweep adds to spec the moves of everything cell from may still hold:
// every slot to its owner in p.After, a user pinned elsewhere to that
// cell alone.
func (p *Plan) sweep(from string, spec func(from, to string) *api.MoveSpec) {
	after := p.After
	for slot, owner := range after.table {
		if to := after.cells[owner].ID; to != from {
			s := spec(from, to)
			s.Slots = append(s.Slots, slot)
		}
	}
	for _, u := range slices.Sorted(maps.Keys(after.ovCell)) {
		slot, to := after.SlotOf(u), after.cells[after.ovCell[u]].ID
		if owner := after.Owner(slot); to != owner && to != from {
			if owner != from {
				k := spec(from, owner)
				k.Keep = append(k.Keep, api.MoveUser{User: u, Slot: slot})
			}
			k := spec(from, to)
			k.Users = append(k.Users, api.MoveUser{User: u, Slot: slot})
		}
	}
}
