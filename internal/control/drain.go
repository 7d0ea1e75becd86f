package control

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// Admin is what a drain asks of a cell's processes (an
// *adminclient.Client).
type Admin interface {
	Status(ctx context.Context, admin string) (*api.CellStatus, error)
	SetIntake(ctx context.Context, admin string, open bool) error
	SetIntakes(ctx context.Context, cell slotmap.Cell, open bool) error
}

// DrainRequest is a drain of one cell, in three steps: its slots move to
// the other active cells (it becomes draining and keeps its session quota),
// its intake is closed through its admin API, and, with Wait, once its
// queue and in-flight work are empty it is marked drained (its quota goes
// to the others). A cell already draining resumes at the second step; one
// already drained is left as it is.
type DrainRequest struct {
	Cell string
	// Wait waits for the queue to empty, then marks the cell drained.
	Wait bool
	// Force marks the cell drained without waiting (a dead cell whose
	// queue will never empty).
	Force bool
	// Last allows draining the last active cell.
	Last bool
	// Interval is how often Wait asks the cell [1s].
	Interval time.Duration
	// DryRun plans the map changes and does nothing.
	DryRun bool
	// Planned and Done are the hooks of each map change (see Change).
	Planned func(*slotmap.Plan)
	Done    func(*Result)
	// Event, if set, sees each step as it happens.
	Event func(DrainEvent)
}

// DrainEventKind is what happened in a drain.
type DrainEventKind int

const (
	// DrainAlready: the cell is drained already (Version: the map's).
	DrainAlready DrainEventKind = iota
	// DrainResuming: the cell is draining already; the drain goes on.
	DrainResuming
	// DrainWouldClose: in a dry run, the intake would be closed next.
	DrainWouldClose
	// DrainWouldWait, DrainWouldMark: in a dry run, the drain would then
	// wait and mark the cell drained, or mark it without waiting.
	DrainWouldWait
	DrainWouldMark
	// DrainIntakeClosed, DrainIntakeUnreachable, DrainIntakeFailed: the
	// intake closed, or not (Err), the drain going on either way.
	DrainIntakeClosed
	DrainIntakeUnreachable
	DrainIntakeFailed
	// DrainProgress: one reading of the cell while waiting (Status, or
	// Err when it could not be read; Elapsed).
	DrainProgress
	// DrainEmpty: the queue and in-flight work are empty (Elapsed).
	DrainEmpty
	// DrainForced: marked drained without waiting for the queue.
	DrainForced
	// DrainLeftDraining: neither Wait nor Force: the cell stays draining.
	DrainLeftDraining
	// DrainMarking: the cell is about to be marked drained.
	DrainMarking
)

// DrainEvent is one step of a drain.
type DrainEvent struct {
	Kind DrainEventKind
	// Cell is the cell as the drain found it.
	Cell    slotmap.Cell
	Version int64
	Status  *api.CellStatus
	Err     error
	Elapsed time.Duration
}

// DrainResult is what a drain did.
type DrainResult struct {
	Cell string
	// Drain is the change that moved the slots away (nil when the cell was
	// draining already); MarkDrained the one that marked it drained.
	Drain, MarkDrained *Result
	// Intake is "closed", "unreachable" or "error: ..." (the admin call),
	// or "" when it was not attempted.
	Intake string
	// Waited says whether the drain waited for the queue, Waiting for how
	// long, Last is the cell's last status seen while waiting.
	Waited  bool
	Waiting time.Duration
	Last    *api.CellStatus
	// State is the cell's state in the map afterwards ("" when the cell
	// was not found).
	State slotmap.State
}

// Drain drains a cell (see DrainRequest) with admin for its admin API. It
// returns what it did also with an error, when it got that far.
func (c *Controller) Drain(ctx context.Context, admin Admin, req DrainRequest) (*DrainResult, error) {
	if req.Interval <= 0 {
		req.Interval = time.Second
	}
	res := &DrainResult{Cell: req.Cell}
	d := &drain{c: c, admin: admin, req: req, res: res}
	return res, d.run(ctx)
}

type drain struct {
	c     *Controller
	admin Admin
	req   DrainRequest
	res   *DrainResult
	cell  slotmap.Cell
}

func (d *drain) event(e DrainEvent) {
	if d.req.Event != nil {
		e.Cell = d.cell
		d.req.Event(e)
	}
}

func (d *drain) apply(ctx context.Context, plan Planner) (*Result, error) {
	return d.c.Apply(ctx, Change{Plan: plan, DryRun: d.req.DryRun, Planned: d.req.Planned, Done: d.req.Done})
}

func (d *drain) run(ctx context.Context) error {
	req, res := d.req, d.res
	m, err := d.c.Load(ctx)
	if err != nil {
		return err
	}
	if err := KnownCell(m, req.Cell); err != nil {
		return Refuse(err, m)
	}
	d.cell, _ = m.Cell(req.Cell)
	res.State = d.cell.State
	switch d.cell.State {
	case slotmap.Drained:
		d.event(DrainEvent{Kind: DrainAlready, Version: m.Version()})
		return nil
	case slotmap.Draining:
		d.event(DrainEvent{Kind: DrainResuming})
	case slotmap.Active:
		r, err := d.apply(ctx, Drain(req.Cell, req.Last))
		if err != nil {
			return err
		}
		res.Drain = r
		if req.DryRun {
			d.event(DrainEvent{Kind: DrainWouldClose})
			if !req.Wait && !req.Force {
				return nil
			}
			then := DrainWouldMark
			if req.Wait {
				then = DrainWouldWait
			}
			d.event(DrainEvent{Kind: then})
			return d.markDrained(ctx)
		}
		res.State = slotmap.Draining
	}

	if req.DryRun {
		d.event(DrainEvent{Kind: DrainWouldClose})
	} else {
		// Closed also when resuming: the cell may have restarted with its
		// intake open.
		res.Intake = "closed"
		switch err := d.admin.SetIntakes(ctx, d.cell, false); {
		case err == nil:
			d.event(DrainEvent{Kind: DrainIntakeClosed})
		case adminclient.Unreachable(err):
			res.Intake = "unreachable"
			d.event(DrainEvent{Kind: DrainIntakeUnreachable, Err: err})
		default:
			res.Intake = "error: " + err.Error()
			d.event(DrainEvent{Kind: DrainIntakeFailed, Err: err})
		}
	}

	switch {
	case req.Wait:
		if req.DryRun {
			d.event(DrainEvent{Kind: DrainWouldWait})
			return d.markDrained(ctx)
		}
		if err := d.waitEmpty(ctx); err != nil {
			return err
		}
	case req.Force:
		if !req.DryRun {
			d.event(DrainEvent{Kind: DrainForced})
		}
	default:
		if !req.DryRun {
			d.event(DrainEvent{Kind: DrainLeftDraining})
		}
		return nil
	}
	return d.markDrained(ctx)
}

func (d *drain) markDrained(ctx context.Context) error {
	id, res := d.req.Cell, d.res
	d.event(DrainEvent{Kind: DrainMarking})
	if d.req.DryRun && res.Drain != nil {
		// The second plan against the map the first would make.
		after := res.Drain.Plan.After
		p, err := MarkDrained(id)(after)
		if err != nil {
			return Refuse(err, after)
		}
		if d.req.Planned != nil {
			d.req.Planned(p)
		}
		res.MarkDrained = &Result{Plan: p, DryRun: true, NoChange: p.NoChange(), Version: after.Version()}
		if d.req.Done != nil {
			d.req.Done(res.MarkDrained)
		}
		return nil
	}
	r, err := d.apply(ctx, MarkDrained(id))
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return fmt.Errorf("%v; %s is still draining with an empty queue: finish with 'cellctl drain %s --wait'", err, id, id)
		}
		return err
	}
	res.MarkDrained = r
	if r.Applied {
		res.State = slotmap.Drained
	}
	return nil
}

// waitEmpty polls the cell until its queue and in-flight work are empty
// in two readings in a row that the cell took after its intake closed.
func (d *drain) waitEmpty(ctx context.Context) error {
	id, res := d.req.Cell, d.res
	res.Waited = true
	start := d.c.opts.Now()
	empty := 0
	var first time.Time // the cell's clock: when it sampled its queue first
	var lastErr error
	for {
		st, err := d.admin.Status(ctx, d.cell.Admin)
		if err == nil && !st.Known() {
			var why []string
			for _, k := range slices.Sorted(maps.Keys(st.Errors)) {
				why = append(why, k+": "+st.Errors[k])
			}
			err = fmt.Errorf("the cell cannot read its queue: %s", strings.Join(why, "; "))
		}
		elapsed := d.c.opts.Now().Sub(start)
		res.Waiting = elapsed
		switch {
		case err != nil && ctx.Err() == nil:
			lastErr = err
			empty = 0
			d.event(DrainEvent{Kind: DrainProgress, Err: err, Elapsed: elapsed})
		case err == nil:
			lastErr, res.Last = nil, st
			if st.IntakeOpen() {
				// Someone (a restart) reopened it: close it again.
				_ = d.admin.SetIntake(ctx, d.cell.Admin, false)
			}
			d.event(DrainEvent{Kind: DrainProgress, Status: st, Elapsed: elapsed})
			// Done after two empty samples in a row that the cell took
			// after the first one seen here, that is after its intake
			// closed. (A cell that does not say when it sampled: two empty
			// answers in a row.)
			fresh := st.Sampled.IsZero() || (!first.IsZero() && st.Sampled.After(first))
			switch {
			case st.Pending() != 0:
				empty = 0
			case fresh:
				empty++
			}
			if first.IsZero() {
				first = st.Sampled
			}
		}
		if empty >= 2 {
			d.event(DrainEvent{Kind: DrainEmpty, Elapsed: elapsed})
			return nil
		}
		select {
		case <-ctx.Done():
			left := "its queue was not empty"
			if last := res.Last; last != nil && lastErr == nil {
				left = fmt.Sprintf("inquiries still queued (high %d, normal %d) or in flight (%d)", last.High(), last.Normal(), last.Inflight)
			} else if lastErr != nil {
				left = fmt.Sprintf("its status could not be read (%v); if it is dead, 'cellctl drain %s --force' marks it drained without waiting", lastErr, id)
			}
			why := "interrupted"
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				why = "timed out (--timeout)"
			}
			return fmt.Errorf("%s after %s: %s is draining (slots moved, intake closed), %s; resume with 'cellctl drain %s --wait'",
				why, HumanDuration(elapsed), id, left, id)
		case <-time.After(d.req.Interval):
		}
	}
}
