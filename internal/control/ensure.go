package control

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// StackCell is a cell as a stack declares it (the local stack, the
// network lab, a test): where it listens, as one process or as several
// instances.
type StackCell struct {
	ID string
	// Intake and Admin are the cell's base URLs (a cell of instances:
	// those of its first).
	Intake, Admin string
	// Instances are its instances; none for a cell of one process.
	Instances []slotmap.Instance
}

// StepKind is what one step of Ensure did.
type StepKind uint8

// The steps of Ensure.
const (
	StepInit      StepKind = iota // made the map
	StepProvision                 // provisioned a cell
	StepEndpoints                 // moved a cell's endpoints
	StepInstance                  // set an instance
)

// Step is one change Ensure made.
type Step struct {
	Kind StepKind
	// What says it as the cellctl command that makes it: "init",
	// "provision c1", "endpoints c1", "instance set c1 i1".
	What string
	Cell StackCell
	// Instance is the instance a StepInstance set.
	Instance slotmap.Instance
	// Result is the change's (nil for StepInit).
	Result *Result
}

// EnsureChange asks for a map that holds a stack's cells.
type EnsureChange struct {
	// Agencies are the agencies' session limits of a map made anew.
	Agencies map[string]int
	Cells    []StackCell
	// Planned, if set, sees each plan before it is committed, with the
	// step's What.
	Planned func(what string, p *slotmap.Plan)
	// Step, if set, hears of each change made.
	Step func(Step)
	// Failed, if set, hears of a step that failed, before Ensure returns
	// its error.
	Failed func(what string, err error)
}

// Ensure makes the registry's map hold ch.Cells, the way the init,
// provision, endpoints and instance set commands would: a map with
// ch.Agencies if there is none, each missing cell provisioned (weight 1),
// the endpoints and instances of a cell set where they differ. A stack
// that is already in the map changes nothing (no new version), so a stack
// started again keeps its map, its slots and its history.
func (c *Controller) Ensure(ctx context.Context, ch EnsureChange) error {
	step := func(s Step) {
		if ch.Step != nil {
			ch.Step(s)
		}
	}
	fail := func(what string, err error) error {
		if ch.Failed != nil {
			ch.Failed(what, err)
		}
		return fmt.Errorf("cellctl %s: %w", what, err)
	}
	m, err := c.reg.Load(ctx)
	switch {
	case errors.Is(err, registry.ErrNoMap):
		fresh, err := slotmap.New(slotmap.DefaultSlots, ch.Agencies)
		if err != nil {
			return err
		}
		if _, err := c.Init(ctx, InitChange{Map: fresh}); err != nil {
			return fail("init", err)
		}
		m = nil
		step(Step{Kind: StepInit, What: "init"})
	case err != nil:
		return Explain(c.reg, err)
	}
	apply := func(s Step, plan Planner) error {
		r, err := c.Apply(ctx, Change{Plan: plan, Planned: func(p *slotmap.Plan) {
			if ch.Planned != nil {
				ch.Planned(s.What, p)
			}
		}})
		if err != nil {
			return fail(s.What, err)
		}
		s.Result = r
		step(s)
		return nil
	}
	for _, want := range ch.Cells {
		var cur slotmap.Cell
		found := false
		if m != nil {
			cur, found = m.Cell(want.ID)
		}
		switch {
		case !found:
			err = apply(Step{Kind: StepProvision, What: "provision " + want.ID, Cell: want},
				Provision(slotmap.Cell{ID: want.ID, Weight: 1, Intake: want.Intake, Admin: want.Admin}))
		case cur.Intake != want.Intake || cur.Admin != want.Admin:
			err = apply(Step{Kind: StepEndpoints, What: "endpoints " + want.ID, Cell: want},
				SetEndpoints(want.ID, want.Intake, want.Admin))
		}
		if err != nil {
			return err
		}
		for _, in := range want.Instances {
			i := slices.IndexFunc(cur.Instances, func(x slotmap.Instance) bool { return x.ID == in.ID })
			if i >= 0 && cur.Instances[i].Intake == in.Intake && cur.Instances[i].Admin == in.Admin {
				continue
			}
			if err := apply(Step{Kind: StepInstance, What: "instance set " + want.ID + " " + in.ID, Cell: want, Instance: in},
				SetInstance(want.ID, in.ID, in.Intake, in.Admin)); err != nil {
				return err
			}
		}
	}
	return nil
}
