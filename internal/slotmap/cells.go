package slotmap

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

func (m *Map) pos(id string) (int, error) {
	i, ok := m.index[id]
	if !ok {
		return 0, invalid("unknown cell %q", id)
	}
	return i, nil
}

// AddCell plans adding c as an active cell, or as a drained one. An
// active cell takes its slots at once: those whose rendezvous winner it
// becomes, only from the other cells. A drained one is named in the map
// and owns nothing, holding no session quota: its processes find their
// cell in the map and open their intakes, and an Undrain then gives it
// its slots, so that none moves onto a cell that is not taking them yet.
// c.Quota is derived; c.FixedQuota is kept.
func (m *Map) AddCell(c Cell) (*Plan, error) {
	if c.State == "" {
		c.State = Active
	}
	if c.State != Active && c.State != Drained {
		return nil, invalid("cell %q: a new cell starts active or drained, not %s", c.ID, c.State)
	}
	if _, dup := m.index[c.ID]; dup {
		return nil, invalid("duplicate cell id %q", c.ID)
	}
	c = c.clone()
	c.Quota = nil
	what := "add cell " + c.ID
	if c.State == Drained {
		what += " (drained)"
	}
	return m.plan(what, func(n *Map) error {
		p := n.insertCell(c)
		if err := n.checkCells(); err != nil {
			return err
		}
		n.finish()
		if c.State == Active {
			n.claimSlots(p)
		}
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
