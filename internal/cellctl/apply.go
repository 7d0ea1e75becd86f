package cellctl

import (
	"context"
	"errors"
	"fmt"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// Map changes go through internal/control; what is here is how a command
// line shows them: the plan as it is made, the notes on stderr, --json.

// invalidReason strips the planner's prefixes off a refusal.
func invalidReason(err error) string { return control.InvalidReason(err) }

// applyResult is what a map change did, for --json.
type applyResult struct {
	Plan     *planJSON `json:"plan,omitempty"`
	DryRun   bool      `json:"dry_run"`
	Applied  bool      `json:"applied"`
	NoChange bool      `json:"no_change"`
	// Version is the map version in the registry afterwards.
	Version int64 `json:"version"`
	Replans int   `json:"replans"`
	// Moves are the change's data moves and what each did (copied,
	// handed over, verified); none when no user changed cells.
	Moves []api.MoveProgress `json:"moves,omitempty"`
}

// planner plans a change against the current map.
type planner = control.Planner

// note shows a change's note or warning on stderr.
func (x *inv) note(n control.Note) {
	if n.Warning {
		x.warnf("%s", n.Text)
		return
	}
	x.notef("%s", n.Text)
}

// controller is the Controller of this command on reg; traffic, if not
// nil, measures what its plans project. Its changes move the users'
// inquiries with them (mover).
func (x *inv) controller(reg registry.Registry, traffic func(ctx context.Context, slots int) (*slotmap.Traffic, error)) *control.Controller {
	return control.New(reg, control.Config{Holder: x.cli.holder(x.cmd.name), LockWait: x.g.lockWait},
		control.Options{Now: x.cli.now, Note: x.note, Traffic: traffic, Moves: x.mover()})
}

// apply plans a change, prints the plan (unless --json) and, unless this is
// a dry run, commits it (control.Controller.Apply).
func (x *inv) apply(ctx context.Context, reg registry.Registry, plan planner) (*applyResult, error) {
	v := x.newPlanView(ctx)
	r, err := x.controller(reg, v.traffic()).Apply(ctx, control.Change{
		Plan: plan, DryRun: x.cmd.dryRun, Planned: v.planned, Done: x.showDone,
	})
	if err != nil {
		return nil, err
	}
	return v.result(r), nil
}

// planView shows a command's plans as they are made and keeps their
// --json forms, each with the summary of the traffic it was projected
// with.
type planView struct {
	x       *inv
	ctx     context.Context // the command's: the plans' data is measured with it
	summary *trafficSummary
	shown   map[*slotmap.Plan]*planJSON
}

func (x *inv) newPlanView(ctx context.Context) *planView {
	return &planView{x: x, ctx: ctx, shown: map[*slotmap.Plan]*planJSON{}}
}

// traffic is the routers' traffic for the plans to project.
func (v *planView) traffic() func(ctx context.Context, slots int) (*slotmap.Traffic, error) {
	return v.x.projection(&v.summary)
}

// planned shows p, with the data its moves would carry, and keeps its
// --json form (a control.Change's Planned).
func (v *planView) planned(p *slotmap.Plan) {
	pj := toPlanJSON(p)
	pj.Traffic = v.summary
	if !p.NoChange() {
		if size, err := v.x.mover().Size(v.ctx, p); err != nil {
			pj.Data = &dataJSON{PlanSize: size, Error: err.Error()}
		} else if size.Moves > 0 {
			pj.Data = &dataJSON{PlanSize: size}
		}
	}
	v.shown[p] = &pj
	v.x.showPlan(p)
	if pj.Data != nil && !v.x.g.json {
		v.x.showData(pj.Data)
	}
}

// showData prints what a plan's data moves would carry, and how long
// the copy takes at --move-rate.
func (x *inv) showData(d *dataJSON) {
	if d.Error != "" {
		fmt.Fprintf(x.out, "\nData to move: unknown: %s; the change moves the users' inquiries only if it answers.\n", d.Error)
		return
	}
	how := "copied as fast as the cells take them (--move-rate bounds it)"
	if x.cmd.moveRate > 0 {
		how = fmt.Sprintf("about %s to copy at --move-rate %d", control.HumanDuration(d.Copy), x.cmd.moveRate)
	}
	fmt.Fprintf(x.out, "\nData to move: %d messages (%d KiB) in %d moves, %s.\n", d.Messages, (d.Bytes+1023)>>10, d.Moves, how)
}

// result is r for --json, with its plan as it was shown.
func (v *planView) result(r *control.Result) *applyResult {
	pj := v.shown[r.Plan]
	if pj == nil {
		j := toPlanJSON(r.Plan)
		pj = &j
	}
	return toApplyResult(r, pj)
}

// showPlan prints a plan as it is made (unless --json).
func (x *inv) showPlan(p *slotmap.Plan) {
	switch {
	case x.g.json:
	case p.NoChange():
		fmt.Fprintf(x.out, "Nothing to change: %s leaves map version %d as it is.\n", p.Op, p.Before.Version())
	default:
		writePlan(x.out, p)
	}
}

// showDone prints the end of a change (unless --json).
func (x *inv) showDone(r *control.Result) {
	switch {
	case x.g.json || r.NoChange:
	case r.DryRun:
		fmt.Fprintf(x.out, "\nDry run: nothing applied.\n")
	case r.Applied:
		fmt.Fprintf(x.out, "\nApplied: map version %d (%s).\n", r.Version, r.Plan.Op)
	}
}

// toApplyResult is a change's result for --json, with its plan's.
func toApplyResult(r *control.Result, plan *planJSON) *applyResult {
	return &applyResult{Plan: plan, DryRun: r.DryRun, Applied: r.Applied, NoChange: r.NoChange, Version: r.Version, Replans: r.Replans, Moves: r.Moves}
}

// projection is the traffic a change's plans project (the routers'), its
// summary kept in *summary.
func (x *inv) projection(summary **trafficSummary) func(ctx context.Context, slots int) (*slotmap.Traffic, error) {
	return func(ctx context.Context, slots int) (*slotmap.Traffic, error) {
		t, sum, err := x.traffic(ctx, slots)
		*summary = sum
		var bad usageError
		if errors.As(err, &bad) {
			return nil, control.Abort(err) // a malformed --routers: the operator's typo
		}
		return t, err
	}
}

// applyAndReport is apply for commands whose whole output is the change.
func (x *inv) applyAndReport(ctx context.Context, plan planner) error {
	reg, err := x.openRegistry()
	if err != nil {
		return err
	}
	defer reg.Close()
	res, err := x.apply(ctx, reg, plan)
	if err != nil {
		return err
	}
	if x.g.json {
		return writeJSON(x.out, res)
	}
	return nil
}
