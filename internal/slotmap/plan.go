package slotmap

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/api"
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

func (m *Map) pos(id string) (int, error) {
	i, ok := m.index[id]
	if !ok {
		return 0, invalid("unknown cell %q", id)
	}
	return i, nil
}

// AddCell plans adding c as an active cell. Slots move only onto it: those
// whose rendezvous winner it becomes. c.Quota is derived; c.FixedQuota is
// kept.
func (m *Map) AddCell(c Cell) (*Plan, error) {
	if c.State == "" {
		c.State = Active
	}
	if c.State != Active {
		return nil, invalid("cell %q: a new cell starts active, not %s", c.ID, c.State)
	}
	if _, dup := m.index[c.ID]; dup {
		return nil, invalid("duplicate cell id %q", c.ID)
	}
	c = c.clone()
	c.Quota = nil
	return m.plan("add cell "+c.ID, func(n *Map) error {
		p := n.insertCell(c)
		if err := n.checkCells(); err != nil {
			return err
		}
		n.finish()
		n.claimSlots(p)
		return nil
	})
}

// insertCell puts c at its sorted position and renumbers the table.
func (m *Map) insertCell(c Cell) int {
	p := sort.Search(len(m.cells), func(i int) bool { return m.cells[i].ID >= c.ID })
	m.cells = slices.Insert(m.cells, p, c)
	for s, ci := range m.table {
		if int(ci) >= p {
			m.table[s] = ci + 1
		}
	}
	return p
}

// claimSlots gives the active cell at position p every slot it wins over the
// active cells (all slots if the table was empty).
func (m *Map) claimSlots(p int) {
	cands := m.candidates()
	if len(m.table) == 0 {
		m.table = make([]uint16, m.slots)
		for s := range m.table {
			m.table[s] = winner(cands, s)
		}
		return
	}
	for s, owner := range m.table {
		if int(owner) != p && wins(cands, uint16(p), owner, s) {
			m.table[s] = uint16(p)
		}
	}
}

// Drain plans moving every slot of an active cell to the other active cells
// (each to its rendezvous winner among them). The cell becomes draining: it
// keeps its session quota until MarkDrained. Overrides pointing at it stay in
// the map but take no effect until it is active again.
func (m *Map) Drain(id string) (*Plan, error) {
	p, err := m.pos(id)
	if err != nil {
		return nil, err
	}
	if st := m.cells[p].State; st != Active {
		return nil, invalid("cell %q is %s, not active", id, st)
	}
	if len(m.ActiveCells()) == 1 {
		return nil, invalid("cannot drain %q: it is the last active cell", id)
	}
	return m.drain(p, id)
}

// DrainLast plans draining the last active cell: its slots go to no one, so
// every user is refused (routers answer 503) until a cell is active again.
// It is for taking a whole installation down; Drain refuses it.
func (m *Map) DrainLast(id string) (*Plan, error) {
	p, err := m.pos(id)
	if err != nil {
		return nil, err
	}
	if st := m.cells[p].State; st != Active {
		return nil, invalid("cell %q is %s, not active", id, st)
	}
	if len(m.ActiveCells()) != 1 {
		return nil, invalid("cell %q is not the last active cell: drain it with the others taking its slots", id)
	}
	return m.drain(p, id)
}

func (m *Map) drain(p int, id string) (*Plan, error) {
	return m.plan("drain "+id, func(n *Map) error {
		n.cells[p].State = Draining
		cands := n.candidates()
		if len(cands) == 0 {
			n.table = nil // no active cell: no slot has an owner
			return nil
		}
		for s, owner := range n.table {
			if int(owner) == p {
				n.table[s] = winner(cands, s)
			}
		}
		return nil
	})
}

// MarkDrained plans the end of a drain: the draining cell becomes drained and
// its session quota goes to the cells that still take quota.
func (m *Map) MarkDrained(id string) (*Plan, error) {
	p, err := m.pos(id)
	if err != nil {
		return nil, err
	}
	if st := m.cells[p].State; st != Draining {
		return nil, invalid("cell %q is %s, not draining", id, st)
	}
	return m.plan("mark drained "+id, func(n *Map) error {
		n.cells[p].State = Drained
		return nil
	})
}

// Undrain plans making a draining or drained cell active again: it takes back
// the slots it wins, which after a drain are exactly the slots it had.
func (m *Map) Undrain(id string) (*Plan, error) {
	p, err := m.pos(id)
	if err != nil {
		return nil, err
	}
	if st := m.cells[p].State; st == Active {
		return nil, invalid("cell %q is already active", id)
	}
	return m.plan("undrain "+id, func(n *Map) error {
		n.cells[p].State = Active
		n.claimSlots(p)
		return nil
	})
}

// SetWeight plans a new weight for a cell. For an active cell only slots
// whose winner changes to or from this cell move.
func (m *Map) SetWeight(id string, weight int) (*Plan, error) {
	p, err := m.pos(id)
	if err != nil {
		return nil, err
	}
	if weight <= 0 || weight > MaxWeight {
		return nil, invalid("cell %q: weight %d must be in 1..%d", id, weight, MaxWeight)
	}
	return m.plan(fmt.Sprintf("weight %s %d", id, weight), func(n *Map) error {
		n.cells[p].Weight = weight
		if n.cells[p].State != Active {
			return nil
		}
		cands := n.candidates()
		for s, owner := range n.table {
			w := winner(cands, s)
			if (int(owner) == p) != (int(w) == p) {
				n.table[s] = w
			}
		}
		return nil
	})
}

// Rebalance plans moving every slot to its target, undoing any drift.
func (m *Map) Rebalance() (*Plan, error) {
	return m.plan("rebalance", func(n *Map) error {
		cands := n.candidates()
		for s := range n.table {
			n.table[s] = winner(cands, s)
		}
		return nil
	})
}

// RemoveCell plans deleting a drained cell from the map. Overrides pointing
// at it must be cleared first.
func (m *Map) RemoveCell(id string) (*Plan, error) {
	p, err := m.pos(id)
	if err != nil {
		return nil, err
	}
	if st := m.cells[p].State; st != Drained {
		return nil, invalid("cell %q is %s: drain it before removing it", id, st)
	}
	for user, c := range m.overrides {
		if c == id {
			return nil, invalid("cell %q still has overrides (user %q): clear them first", id, user)
		}
	}
	return m.plan("remove cell "+id, func(n *Map) error {
		n.cells = slices.Delete(n.cells, p, p+1)
		for s, ci := range n.table {
			if int(ci) > p {
				n.table[s] = ci - 1
			}
		}
		return nil
	})
}

// SetEndpoints plans new intake and admin URLs for a cell.
func (m *Map) SetEndpoints(id, intake, admin string) (*Plan, error) {
	p, err := m.pos(id)
	if err != nil {
		return nil, err
	}
	return m.plan("endpoints "+id, func(n *Map) error {
		n.cells[p].Intake, n.cells[p].Admin = intake, admin
		return nil
	})
}

// SetInstance plans adding an instance to a cell, or replacing the one of
// the same id. The cell's Intake and Admin follow its first instance in
// rotation, for readers that know no instances.
func (m *Map) SetInstance(id string, in Instance) (*Plan, error) {
	p, err := m.pos(id)
	if err != nil {
		return nil, err
	}
	return m.plan("instance "+id+"/"+in.ID, func(n *Map) error {
		c := &n.cells[p]
		i, found := slices.BinarySearchFunc(c.Instances, in.ID, func(x Instance, id string) int { return strings.Compare(x.ID, id) })
		if found {
			c.Instances[i] = in
		} else {
			c.Instances = slices.Insert(c.Instances, i, in)
		}
		c.followInstances()
		return nil
	})
}

// RemoveInstance plans removing an instance from a cell; its last
// instance cannot be removed (remove the cell).
func (m *Map) RemoveInstance(id, instance string) (*Plan, error) {
	p, err := m.pos(id)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(m.cells[p].Instances, func(x Instance) bool { return x.ID == instance })
	switch {
	case i < 0:
		return nil, invalid("cell %q has no instance %q", id, instance)
	case len(m.cells[p].Instances) == 1:
		return nil, invalid("instance %q is cell %q's last: remove the cell instead", instance, id)
	}
	return m.plan("remove instance "+id+"/"+instance, func(n *Map) error {
		c := &n.cells[p]
		c.Instances = slices.Delete(c.Instances, i, i+1)
		c.followInstances()
		return nil
	})
}

// followInstances points Intake and Admin at the first instance in
// rotation (the first instance if all are drained).
func (c *Cell) followInstances() {
	if len(c.Instances) == 0 {
		return
	}
	first := c.Instances[0]
	for _, in := range c.Instances {
		if !in.Drained {
			first = in
			break
		}
	}
	c.Intake, c.Admin = first.Intake, first.Admin
}

// SetOverride plans pinning a user to an active cell.
func (m *Map) SetOverride(user, id string) (*Plan, error) {
	if !api.ValidUserID(user) {
		return nil, invalid("user id %q must be 1-%d of [A-Za-z0-9_-]", user, api.MaxUserID)
	}
	p, err := m.pos(id)
	if err != nil {
		return nil, err
	}
	if st := m.cells[p].State; st != Active {
		return nil, invalid("cannot pin user %q to %s cell %q", user, st, id)
	}
	if _, exists := m.overrides[user]; !exists && len(m.overrides) >= MaxOverrides {
		return nil, invalid("already %d overrides, at most %d", len(m.overrides), MaxOverrides)
	}
	return m.plan(fmt.Sprintf("override %s %s", user, id), func(n *Map) error {
		if n.overrides == nil {
			n.overrides = map[string]string{}
		}
		n.overrides[user] = id
		return nil
	})
}

// ClearOverride plans removing a user's pin.
func (m *Map) ClearOverride(user string) (*Plan, error) {
	if _, ok := m.overrides[user]; !ok {
		return nil, invalid("no override for user %q", user)
	}
	return m.plan("clear override "+user, func(n *Map) error {
		delete(n.overrides, user)
		if len(n.overrides) == 0 {
			n.overrides = nil
		}
		return nil
	})
}

// SetFormat plans writing the map in document format f from now on: 2
// packs the table (a map of 1,000 cells fits in half the space and decodes
// in a third of the time), 1 lists it as runs, which readers older than
// format 2 need. Nothing moves.
func (m *Map) SetFormat(f int) (*Plan, error) {
	if f != 1 && f != formatPacked {
		return nil, invalid("document format %d: want 1 or %d", f, formatPacked)
	}
	return m.plan(fmt.Sprintf("format %d", f), func(n *Map) error {
		n.format1 = f == 1
		return nil
	})
}

// SetCapacity plans declaring the request rate (req/s) a cell can take; 0
// clears the declaration. Nothing moves: plans flag a cell whose projected
// traffic is over it.
func (m *Map) SetCapacity(id string, perSecond int) (*Plan, error) {
	p, err := m.pos(id)
	if err != nil {
		return nil, err
	}
	if perSecond < 0 || perSecond > MaxCapacity {
		return nil, invalid("cell %q: capacity %d req/s must be in 0..%d", id, perSecond, MaxCapacity)
	}
	return m.plan(fmt.Sprintf("capacity %s %d/s", id, perSecond), func(n *Map) error {
		n.cells[p].Capacity = perSecond
		return nil
	})
}

// SetQuota plans fixing a cell's session quota for an agency; the rest of
// the agency's limit is split over the cells without a fixed quota.
func (m *Map) SetQuota(agency, id string, sessions int) (*Plan, error) {
	p, err := m.pos(id)
	if err != nil {
		return nil, err
	}
	limit, ok := m.agencies[agency]
	if !ok {
		return nil, invalid("unknown agency %q", agency)
	}
	if sessions < 0 || sessions > limit {
		return nil, invalid("quota %d for %q must be in 0..%d (the agency's session limit)", sessions, agency, limit)
	}
	return m.plan(fmt.Sprintf("quota %s %s %d", agency, id, sessions), func(n *Map) error {
		if n.cells[p].FixedQuota == nil {
			n.cells[p].FixedQuota = map[string]int{}
		}
		n.cells[p].FixedQuota[agency] = sessions
		return nil
	})
}

// ClearQuota plans returning a cell's quota for an agency to the derived
// share.
func (m *Map) ClearQuota(agency, id string) (*Plan, error) {
	p, err := m.pos(id)
	if err != nil {
		return nil, err
	}
	if _, ok := m.cells[p].FixedQuota[agency]; !ok {
		return nil, invalid("cell %q has no fixed quota for %q", id, agency)
	}
	return m.plan(fmt.Sprintf("clear quota %s %s", agency, id), func(n *Map) error {
		delete(n.cells[p].FixedQuota, agency)
		if len(n.cells[p].FixedQuota) == 0 {
			n.cells[p].FixedQuota = nil
		}
		return nil
	})
}

// SetAgency plans adding an agency or changing its global session limit.
func (m *Map) SetAgency(name string, limit int) (*Plan, error) {
	return m.plan(fmt.Sprintf("agency %s %d", name, limit), func(n *Map) error {
		n.agencies[name] = limit
		return n.checkHeader()
	})
}

// recomputeQuotas derives every quota that is not fixed: for each agency,
// its limit minus the fixed quotas is split over the other cells that take
// quota in proportion to weight, by largest remainder (ties to the smaller
// id), so the sum never exceeds the limit.
func (m *Map) recomputeQuotas() error {
	for _, agency := range m.AgencyNames() {
		limit := m.agencies[agency]
		rest := limit
		var free []int
		for i := range m.cells {
			c := &m.cells[i]
			if !c.takesQuota() {
				delete(c.Quota, agency)
				continue
			}
			if c.Quota == nil {
				c.Quota = map[string]int{}
			}
			if n, fixed := c.FixedQuota[agency]; fixed {
				c.Quota[agency] = n
				rest -= n
				continue
			}
			free = append(free, i)
		}
		if rest < 0 {
			return invalid("agency %q: fixed quotas sum to %d, over its session limit %d", agency, limit-rest, limit)
		}
		total := 0
		for _, i := range free {
			total += m.cells[i].Weight
		}
		if total == 0 {
			continue
		}
		rem := make([]int64, len(m.cells))
		given := 0
		for _, i := range free {
			share := int64(rest) * int64(m.cells[i].Weight)
			m.cells[i].Quota[agency] = int(share / int64(total))
			rem[i] = share % int64(total)
			given += m.cells[i].Quota[agency]
		}
		slices.SortStableFunc(free, func(a, b int) int {
			switch {
			case rem[a] > rem[b]:
				return -1
			case rem[a] < rem[b]:
				return 1
			}
			return a - b
		})
		for _, i := range free[:rest-given] {
			m.cells[i].Quota[agency]++
		}
	}
	for i := range m.cells {
		if len(m.cells[i].Quota) == 0 {
			m.cells[i].Quota = nil
		}
	}
	return nil
}
