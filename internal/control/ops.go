package control

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// The operations on the map, as planners for Controller.Apply: each checks
// what it is given against the map it is planned on and refuses an invalid
// change with an error wrapping slotmap.ErrInvalid (a *RefusedError once
// Apply returns it). The names of the URL fields in refusals ("--intake")
// are those of cellctl's flags; the Terraform provider's attributes have the
// same names without the dashes.

// Provision plans adding cell as an active cell; it takes slots only from
// the other cells.
func Provision(cell slotmap.Cell) Planner {
	return func(m *slotmap.Map) (*slotmap.Plan, error) {
		if !api.ValidCellID(cell.ID) {
			return nil, fmt.Errorf("%w: cell id %q must be 1-32 of [a-z0-9-], starting and ending with a letter or digit", slotmap.ErrInvalid, cell.ID)
		}
		if cell.Weight <= 0 || cell.Weight > slotmap.MaxWeight {
			return nil, fmt.Errorf("%w: weight %d must be in 1..%d", slotmap.ErrInvalid, cell.Weight, slotmap.MaxWeight)
		}
		if err := checkURLs(cell.Intake, cell.Admin); err != nil {
			return nil, err
		}
		return m.AddCell(cell)
	}
}

// Undrain plans making a draining or drained cell active again: it takes
// back the slots it had before its drain.
func Undrain(id string) Planner {
	return onCell(id, func(m *slotmap.Map) (*slotmap.Plan, error) { return m.Undrain(id) })
}

// Drain plans moving a cell's slots to the other active cells (it becomes
// draining); last allows it for the last active cell, whose slots then
// have no owner.
func Drain(id string, last bool) Planner {
	return onCell(id, func(m *slotmap.Map) (*slotmap.Plan, error) {
		if last && len(m.ActiveCells()) == 1 {
			return m.DrainLast(id)
		}
		return m.Drain(id)
	})
}

// MarkDrained plans marking a draining cell drained, which hands its
// session quota to the others.
func MarkDrained(id string) Planner {
	return onCell(id, func(m *slotmap.Map) (*slotmap.Plan, error) { return m.MarkDrained(id) })
}

// SetWeight plans a cell's new weight; only slots to or from it move.
func SetWeight(id string, w int) Planner {
	return onCell(id, func(m *slotmap.Map) (*slotmap.Plan, error) { return m.SetWeight(id, w) })
}

// SetCapacity plans a cell's declared request rate (0 clears it).
func SetCapacity(id string, perSecond int) Planner {
	return onCell(id, func(m *slotmap.Map) (*slotmap.Plan, error) { return m.SetCapacity(id, perSecond) })
}

// Remove plans deleting a drained cell.
func Remove(id string) Planner {
	return onCell(id, func(m *slotmap.Map) (*slotmap.Plan, error) { return m.RemoveCell(id) })
}

// SetEndpoints plans a cell's new intake and/or admin URL ("" keeps the
// one it has).
func SetEndpoints(id, intake, admin string) Planner {
	return onCell(id, func(m *slotmap.Map) (*slotmap.Plan, error) {
		cell, _ := m.Cell(id)
		in, ad := cell.Intake, cell.Admin
		if intake != "" {
			in = intake
		}
		if admin != "" {
			ad = admin
		}
		if err := checkURLs(in, ad); err != nil {
			return nil, err
		}
		return m.SetEndpoints(id, in, ad)
	})
}

// Rebalance plans moving every slot to its target owner.
func Rebalance() Planner {
	return func(m *slotmap.Map) (*slotmap.Plan, error) { return m.Rebalance() }
}

// BalanceByTraffic plans new weights for the active cells that even out
// the traffic tr measured (per slot of a map of m's slots), asked for once
// the map is known.
func BalanceByTraffic(traffic func(slots int) (*slotmap.Traffic, error)) Planner {
	return func(m *slotmap.Map) (*slotmap.Plan, error) {
		tr, err := traffic(m.Slots())
		if err != nil {
			return nil, err
		}
		return m.BalanceByTraffic(*tr)
	}
}

// SetFormat plans writing the map in document format f from now on.
func SetFormat(f int) Planner {
	return func(m *slotmap.Map) (*slotmap.Plan, error) { return m.SetFormat(f) }
}

// SetOverride plans pinning user to cell.
func SetOverride(user, cell string) Planner {
	return onCell(cell, func(m *slotmap.Map) (*slotmap.Plan, error) { return m.SetOverride(user, cell) })
}

// ClearOverride plans unpinning user.
func ClearOverride(user string) Planner {
	return func(m *slotmap.Map) (*slotmap.Plan, error) { return m.ClearOverride(user) }
}

// SetQuota plans fixing a cell's session quota of agency at n.
func SetQuota(agency, cell string, n int) Planner {
	return onCell(cell, func(m *slotmap.Map) (*slotmap.Plan, error) { return m.SetQuota(agency, cell, n) })
}

// ClearQuota plans deriving a cell's quota of agency from its weight again.
func ClearQuota(agency, cell string) Planner {
	return onCell(cell, func(m *slotmap.Map) (*slotmap.Plan, error) { return m.ClearQuota(agency, cell) })
}

// SetLimit plans an agency's global session limit (a new agency, or a new
// limit for one the map has).
func SetLimit(agency string, n int) Planner {
	return func(m *slotmap.Map) (*slotmap.Plan, error) { return m.SetAgency(agency, n) }
}

// SetInstance plans adding instance inst to cell id, or changing the URLs
// of one it has ("" keeps the one it has; a new instance needs both). A
// new instance is in rotation.
func SetInstance(id, inst, intake, admin string) Planner {
	return onCell(id, func(m *slotmap.Map) (*slotmap.Plan, error) {
		cell, _ := m.Cell(id)
		in := slotmap.Instance{ID: inst}
		if i := slices.IndexFunc(cell.Instances, func(x slotmap.Instance) bool { return x.ID == inst }); i >= 0 {
			in = cell.Instances[i]
		} else if intake == "" || admin == "" {
			return nil, fmt.Errorf("%w: a new instance needs --intake and --admin", slotmap.ErrInvalid)
		}
		if intake != "" {
			in.Intake = intake
		}
		if admin != "" {
			in.Admin = admin
		}
		if err := checkURLs(in.Intake, in.Admin); err != nil {
			return nil, err
		}
		if !api.ValidCellID(inst) {
			return nil, fmt.Errorf("%w: instance id %q must be 1-32 of [a-z0-9-], starting and ending with a letter or digit", slotmap.ErrInvalid, inst)
		}
		return m.SetInstance(id, in)
	})
}

// SetInstanceRotation plans taking an instance out of the routers'
// rotation (drain) or putting a drained one back; a cell's last instance
// in rotation cannot be taken out.
func SetInstanceRotation(id, inst string, drain bool) Planner {
	return func(m *slotmap.Map) (*slotmap.Plan, error) {
		in, err := KnownInstance(m, id, inst)
		if err != nil {
			return nil, err
		}
		if drain {
			cell, _ := m.Cell(id)
			if in.Drained {
				return nil, fmt.Errorf("%w: instance %s/%s is drained already", slotmap.ErrInvalid, id, inst)
			}
			if len(cell.Intakes()) == 1 {
				return nil, fmt.Errorf("%w: %s is cell %s's last instance in rotation: drain the cell instead", slotmap.ErrInvalid, inst, id)
			}
		} else if !in.Drained {
			return nil, fmt.Errorf("%w: instance %s/%s is in rotation already", slotmap.ErrInvalid, id, inst)
		}
		in.Drained = drain
		return m.SetInstance(id, in)
	}
}

// RemoveInstance plans removing a drained instance from its cell.
func RemoveInstance(id, inst string) Planner {
	return func(m *slotmap.Map) (*slotmap.Plan, error) {
		in, err := KnownInstance(m, id, inst)
		if err != nil {
			return nil, err
		}
		if !in.Drained {
			return nil, fmt.Errorf("%w: instance %s/%s is in rotation: 'cellctl instance drain %s %s' first", slotmap.ErrInvalid, id, inst, id, inst)
		}
		return m.RemoveInstance(id, inst)
	}
}

// onCell is plan, refused first when m has no cell id.
func onCell(id string, plan Planner) Planner {
	return func(m *slotmap.Map) (*slotmap.Plan, error) {
		if err := KnownCell(m, id); err != nil {
			return nil, err
		}
		return plan(m)
	}
}

// KnownCell refuses an unknown cell id with the list of cells.
func KnownCell(m *slotmap.Map, id string) error {
	if _, ok := m.Cell(id); ok {
		return nil
	}
	var ids []string
	for _, c := range m.Cells() {
		ids = append(ids, c.ID)
	}
	if len(ids) == 0 {
		return fmt.Errorf("%w: unknown cell %q (the map has no cells)", slotmap.ErrInvalid, id)
	}
	return fmt.Errorf("%w: unknown cell %q (cells: %s)", slotmap.ErrInvalid, id, strings.Join(ids, ", "))
}

// KnownInstance finds instance inst of cell id, or refuses.
func KnownInstance(m *slotmap.Map, id, inst string) (slotmap.Instance, error) {
	if err := KnownCell(m, id); err != nil {
		return slotmap.Instance{}, err
	}
	cell, _ := m.Cell(id)
	i := slices.IndexFunc(cell.Instances, func(x slotmap.Instance) bool { return x.ID == inst })
	if i < 0 {
		return slotmap.Instance{}, fmt.Errorf("%w: cell %s has no instance %q", slotmap.ErrInvalid, id, inst)
	}
	return cell.Instances[i], nil
}

// checkURLs checks an intake and an admin URL.
func checkURLs(intake, admin string) error {
	for _, f := range [][2]string{{"--intake", intake}, {"--admin", admin}} {
		if err := slotmap.CheckURL(f[1]); err != nil {
			return fmt.Errorf("%w: %s: %s", slotmap.ErrInvalid, f[0], InvalidReason(err))
		}
	}
	return nil
}
