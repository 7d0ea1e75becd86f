package slotmap

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// Plan is one change to the map: the new version and what it moves. It is
// what cellctl prints before it applies anything.
type Plan struct {
	Op     string `json:"op"`
	Before *Map   `json:"-"`
	After  *Map   `json:"-"`
	// Moves are the slot ranges that change owner, in slot order.
	Moves []Move `json:"moves"`
	// MovedSlots counts the slots in Moves.
	MovedSlots int `json:"moved_slots"`
	// Cells has one entry per cell in either map, sorted by id.
	Cells []CellChange `json:"cells"`
	// Overrides lists the pins that were set, changed or cleared.
	Overrides []OverrideChange `json:"overrides,omitempty"`
}

// Move is a slot range [From, To] (inclusive) that changes owner. An empty
// cell name means "no owner" (a map with no active cell).
type Move struct {
	From     int    `json:"from"`
	To       int    `json:"to"`
	FromCell string `json:"from_cell"`
	ToCell   string `json:"to_cell"`
}

// CellChange is one cell before and after a plan. A cell absent on one side
// has an empty State there.
type CellChange struct {
	ID           string         `json:"id"`
	StateBefore  State          `json:"state_before,omitempty"`
	StateAfter   State          `json:"state_after,omitempty"`
	WeightBefore int            `json:"weight_before,omitempty"`
	WeightAfter  int            `json:"weight_after,omitempty"`
	SlotsBefore  int            `json:"slots_before"`
	SlotsAfter   int            `json:"slots_after"`
	QuotaBefore  map[string]int `json:"quota_before,omitempty"`
	QuotaAfter   map[string]int `json:"quota_after,omitempty"`
	// CapacityBefore and CapacityAfter are the declared capacities
	// (req/s; 0: none).
	CapacityBefore int `json:"capacity_before,omitempty"`
	CapacityAfter  int `json:"capacity_after,omitempty"`
	// RateBefore and RateAfter are the cell's measured traffic projected
	// onto the maps (req/s), when the plan was projected (Project).
	RateBefore *float64 `json:"rate_before,omitempty"`
	RateAfter  *float64 `json:"rate_after,omitempty"`
}

// OverrideChange is one user pin that changed; "" means no pin.
type OverrideChange struct {
	User string `json:"user"`
	From string `json:"from"`
	To   string `json:"to"`
}

// MovedFraction is the share of slots (and so, by uniform hashing, of users)
// that change cell.
func (p *Plan) MovedFraction() float64 {
	if p.After.slots == 0 {
		return 0
	}
	return float64(p.MovedSlots) / float64(p.After.slots)
}

// NoChange reports whether applying the plan would change nothing but the
// version number.
func (p *Plan) NoChange() bool {
	if p.MovedSlots != 0 || len(p.Overrides) != 0 {
		return false
	}
	b, a := p.Before.clone(), p.After.clone()
	b.version, b.change, b.updated = 0, "", a.updated
	a.version, a.change = 0, ""
	x, err1 := b.Encode()
	y, err2 := a.Encode()
	return err1 == nil && err2 == nil && string(x) == string(y)
}

// Compare describes what changes from before to after, as a Plan with Op
// "diff". Both maps must have the same slot count.
func Compare(before, after *Map) (*Plan, error) {
	if before.slots != after.slots {
		return nil, fmt.Errorf("%w: cannot compare maps of %d and %d slots", ErrInvalid, before.slots, after.slots)
	}
	return newPlan("diff", before, after), nil
}

func newPlan(op string, before, after *Map) *Plan {
	p := &Plan{Op: op, Before: before, After: after}
	for s := 0; s < after.slots; s++ {
		from, to := before.Owner(s), after.Owner(s)
		if from == to {
			continue
		}
		p.MovedSlots++
		if n := len(p.Moves); n > 0 {
			if last := &p.Moves[n-1]; last.To == s-1 && last.FromCell == from && last.ToCell == to {
				last.To = s
				continue
			}
		}
		p.Moves = append(p.Moves, Move{From: s, To: s, FromCell: from, ToCell: to})
	}

	countsBefore, countsAfter := before.SlotCounts(), after.SlotCounts()
	ids := map[string]bool{}
	for _, c := range before.cells {
		ids[c.ID] = true
	}
	for _, c := range after.cells {
		ids[c.ID] = true
	}
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		cc := CellChange{ID: id, SlotsBefore: countsBefore[id], SlotsAfter: countsAfter[id]}
		if c, ok := before.Cell(id); ok {
			cc.StateBefore, cc.WeightBefore, cc.QuotaBefore, cc.CapacityBefore = c.State, c.Weight, c.Quota, c.Capacity
		}
		if c, ok := after.Cell(id); ok {
			cc.StateAfter, cc.WeightAfter, cc.QuotaAfter, cc.CapacityAfter = c.State, c.Weight, c.Quota, c.Capacity
		}
		p.Cells = append(p.Cells, cc)
	}

	users := map[string]bool{}
	for u := range before.overrides {
		users[u] = true
	}
	for u := range after.overrides {
		users[u] = true
	}
	for _, u := range slices.Sorted(maps.Keys(users)) {
		if from, to := before.overrides[u], after.overrides[u]; from != to {
			p.Overrides = append(p.Overrides, OverrideChange{User: u, From: from, To: to})
		}
	}
	return p
}

// New returns version 1 of an empty map: slots slots (DefaultSlots if 0), the
// given agencies and their session limits, no cells.
func New(slots int, agencies map[string]int) (*Map, error) {
	if slots == 0 {
		slots = DefaultSlots
	}
	m := &Map{version: 1, slots: slots, change: "init", agencies: maps.Clone(agencies)}
	if m.agencies == nil {
		m.agencies = map[string]int{}
	}
	m.finish()
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// plan runs change on a copy of m stamped as the next version, recomputes the
// derived parts and validates the result. m itself is never modified.
func (m *Map) plan(op string, change func(n *Map) error) (*Plan, error) {
	n := m.clone()
	n.version++
	n.change = op
	n.updated = time.Time{}
	if err := change(n); err != nil {
		return nil, err
	}
	if err := n.recomputeQuotas(); err != nil {
		return nil, err
	}
	n.finish()
	if err := n.Validate(); err != nil {
		return nil, fmt.Errorf("plan %s: %w", op, err)
	}
	return newPlan(op, m, n), nil
}
