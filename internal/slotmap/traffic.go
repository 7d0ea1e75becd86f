package slotmap

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// Traffic is measured load, as routers count it: a request rate per slot
// and, for some users (the heaviest), their own rate, which is part of
// their slot's.
type Traffic struct {
	// Slots are requests per second per slot; its length is the map's slot
	// count.
	Slots []float64
	// Users are requests per second of users known by id.
	Users map[string]float64
}

// Total is the traffic's rate, requests per second.
func (t Traffic) Total() float64 {
	sum := 0.0
	for _, r := range t.Slots {
		sum += r
	}
	return sum
}

// Load projects t onto m: the requests per second each cell would take,
// by the owner of each slot, with the users of t.Users that an override
// pins elsewhere moved to their pinned cell. Cells with no traffic are
// present with 0; traffic of slots no cell owns is under "".
func (m *Map) Load(t Traffic) (map[string]float64, error) {
	if len(t.Slots) != m.slots {
		return nil, fmt.Errorf("traffic of %d slots for a map of %d", len(t.Slots), m.slots)
	}
	load := make(map[string]float64, len(m.cells))
	for _, c := range m.cells {
		load[c.ID] = 0
	}
	for s, r := range t.Slots {
		if r != 0 {
			load[m.Owner(s)] += r
		}
	}
	for u, r := range t.Users {
		rt := m.Lookup(u)
		if owner := m.Owner(rt.Slot); rt.Override && rt.Cell != owner {
			load[owner] -= min(r, t.Slots[rt.Slot])
			load[rt.Cell] += min(r, t.Slots[rt.Slot])
		}
	}
	return load, nil
}

// Project fills the plan's cells' RateBefore and RateAfter from t.
func (p *Plan) Project(t Traffic) error {
	before, err := p.Before.Load(t)
	if err != nil {
		return err
	}
	after, err := p.After.Load(t)
	if err != nil {
		return err
	}
	for i := range p.Cells {
		c := &p.Cells[i]
		rb, ra := before[c.ID], after[c.ID]
		c.RateBefore, c.RateAfter = &rb, &ra
	}
	return nil
}

// SetWeights plans new weights for several cells at once (one version):
// a slot moves only if its winner changes to or from a cell whose weight
// changed, as if each weight were set in turn.
func (m *Map) SetWeights(weights map[string]int) (*Plan, error) {
	pos := map[int]bool{}
	var parts []string
	for _, id := range slices.Sorted(maps.Keys(weights)) {
		p, err := m.pos(id)
		if err != nil {
			return nil, err
		}
		if w := weights[id]; w <= 0 || w > MaxWeight {
			return nil, invalid("cell %q: weight %d must be in 1..%d", id, w, MaxWeight)
		}
		if m.cells[p].Weight != weights[id] {
			pos[p] = true
			parts = append(parts, fmt.Sprintf("%s %d", id, weights[id]))
		}
	}
	op := "weights " + strings.Join(parts, ", ")
	if len(parts) == 0 {
		op = "weights unchanged"
	}
	return m.plan(op, func(n *Map) error {
		for p := range pos {
			n.cells[p].Weight = weights[n.cells[p].ID]
		}
		cands := n.candidates()
		for s, owner := range n.table {
			if w := winner(cands, s); w != owner && (pos[int(owner)] && n.cells[owner].State == Active || pos[int(w)]) {
				n.table[s] = w
			}
		}
		return nil
	})
}

// Imbalance is how uneven load is over the active cells: the largest
// ratio of a cell's load to its fair share (fairLoads). 1 is perfectly
// even.
func (m *Map) Imbalance(load map[string]float64) float64 {
	fair := m.fairLoads(load)
	if fair == nil {
		return 1
	}
	worst := 0.0
	for id, f := range fair {
		worst = math.Max(worst, load[id]/f)
	}
	return worst
}

// fairLoads is each active cell's fair share of load's total over the
// active cells: by declared capacity if every active cell declares one,
// else even. Nil when there is no active cell or no load.
func (m *Map) fairLoads(load map[string]float64) map[string]float64 {
	total, capSum, n, declared := 0.0, 0, 0, true
	for _, c := range m.cells {
		if c.State == Active {
			total += load[c.ID]
			capSum += c.Capacity
			n++
			declared = declared && c.Capacity > 0
		}
	}
	if n == 0 || total <= 0 {
		return nil
	}
	fair := make(map[string]float64, n)
	for _, c := range m.cells {
		if c.State != Active {
			continue
		}
		fair[c.ID] = total / float64(n)
		if declared {
			fair[c.ID] = total * float64(c.Capacity) / float64(capSum)
		}
	}
	return fair
}

// BalanceByTraffic plans weights for the active cells that even out t's
// load (see Imbalance): each round scales every weight by its cell's fair
// share over its projected load, then projects again. It keeps the round
// with the least imbalance and, among rounds within 2 % of it, the one
// that moves the fewest slots. Weights are scaled so that the smallest is
// at least 100, for resolution. Hot single slots and pinned users are
// beyond what weights can even out: the plan shows what remains.
func (m *Map) BalanceByTraffic(t Traffic) (*Plan, error) {
	load, err := m.Load(t)
	if err != nil {
		return nil, err
	}
	if t.Total() <= 0 {
		return nil, invalid("no traffic measured: nothing to balance by")
	}
	active := map[string]int{}
	minW := MaxWeight
	for _, c := range m.cells {
		if c.State == Active {
			active[c.ID] = c.Weight
			minW = min(minW, c.Weight)
		}
	}
	if len(active) < 2 {
		return nil, invalid("%d active cell: nothing to balance between", len(active))
	}
	scale := max(1, int(math.Ceil(100/float64(minW))))
	weights := map[string]int{}
	for id, w := range active {
		weights[id] = min(w*scale, MaxWeight)
	}
	type round struct {
		plan      *Plan
		imbalance float64
	}
	best := []round{{imbalance: m.Imbalance(load)}}
	for range 12 {
		// Capacities and the active cells stay those of m: only weights
		// change.
		for id, fair := range m.fairLoads(load) {
			f := 2.0 // a cell with no load: more
			if load[id] > 0 {
				f = math.Sqrt(fair / load[id]) // half steps: load is lumpy
			}
			weights[id] = min(max(1, int(math.Round(float64(weights[id])*f))), MaxWeight)
		}
		p, err := m.SetWeights(weights)
		if err != nil {
			return nil, err
		}
		p.Op = "rebalance by traffic (" + strings.TrimPrefix(p.Op, "weights ") + ")"
		if load, err = p.After.Load(t); err != nil {
			return nil, err
		}
		best = append(best, round{plan: p, imbalance: p.After.Imbalance(load)})
	}
	least := slices.MinFunc(best, func(a, b round) int { return cmp.Compare(a.imbalance, b.imbalance) })
	// Among the rounds within 2 % of the least imbalance, the one moving the
	// fewest slots; the map as it is (round 0) moves none.
	moved := func(r round) int {
		if r.plan == nil {
			return 0
		}
		return r.plan.MovedSlots
	}
	pick := 0
	for i, r := range best {
		if r.imbalance <= least.imbalance*1.02+1e-9 && (best[pick].imbalance > least.imbalance*1.02+1e-9 || moved(r) < moved(best[pick])) {
			pick = i
		}
	}
	if best[pick].plan == nil {
		return m.SetWeights(active) // no change
	}
	return best[pick].plan, nil
}
