package slotmap

import (
	"fmt"
	"slices"

	"github.com/cellkit/cellkit/internal/api"
)

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
