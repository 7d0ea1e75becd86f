package cellctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// drainResult is what drain did, for --json.
type drainResult struct {
	Cell string `json:"cell"`
	// Drain is the plan that moved the slots away (nil when resuming a
	// drain that had moved them already).
	Drain *applyResult `json:"drain,omitempty"`
	// Intake is "closed", "unreachable" or "error: ..." (the admin call),
	// or "" when it was not attempted.
	Intake string `json:"intake,omitempty"`
	// Waited says whether the command waited for the queue; Last is the
	// cell's last status seen while waiting.
	Waited  bool        `json:"waited"`
	Waiting string      `json:"waiting,omitempty"` // how long it waited
	Last    *CellStatus `json:"last_status,omitempty"`
	// MarkDrained is the plan that marked the cell drained and handed its
	// quota to the others.
	MarkDrained *applyResult `json:"mark_drained,omitempty"`
	// State is the cell's state in the map afterwards.
	State slotmap.State `json:"state"`
}

func drainCommand() *command {
	var wait, force, last bool
	interval := time.Second
	c := &command{
		name:      "drain",
		argsUsage: "CELL",
		section:   secMap,
		summary:   "move a cell's slots away, close its intake, wait, mark it drained",
		help: `Drains CELL in three steps:

 1. Moves its slots to the other active cells (each slot to its next-best cell:
    nothing else moves). New work goes elsewhere at once. The cell becomes
    "draining" and keeps its session quota to finish its queue.
 2. Closes its intake through its admin API. A cell whose admin API cannot be
    reached is drained anyway (cells are drained because they are broken),
    with a warning.
 3. With --wait: shows a progress line (queue depth per lane, oldest pending
    age, in flight, elapsed) until its queue and in-flight work are empty,
    then marks it "drained", which hands its session quota to the other cells.

Without --wait it stops after step 2: run 'cellctl drain CELL --wait' later to
finish (that is also how an interrupted drain resumes: the cell stays
draining, a consistent state). --force marks a draining cell drained without
waiting, for a dead cell whose queue will never empty (its pending work stays
in its store; undrain it to finish that work).

Refused for the last active cell, whose slots would have no owner, unless
--last says so: taking a whole installation down, every user is then refused
(the routers answer 503) until a cell is active again.`,
		examples: `cellctl drain c2 --dry-run
cellctl drain c2 --wait
cellctl drain c2 --wait --timeout 20m
cellctl drain c2            # move slots and close intake only; later:
cellctl drain c2 --wait     # resume: wait for the queue, then mark drained
cellctl drain c1 --wait --last   # the last active cell: nobody is served after this`,
		minArgs: 1, maxArgs: 1,
		mutates: true,
		flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&wait, "wait", false, "wait for the queue to empty, then mark the cell drained")
			fs.BoolVar(&force, "force", false, "mark the cell drained without waiting for its queue")
			fs.BoolVar(&last, "last", false, "drain even the last active cell: every user is refused (503) until a cell is active again")
			fs.DurationVar(&interval, "interval", interval, "how often --wait asks the cell")
		},
	}
	c.unbounded = func() bool { return wait && !force }
	c.run = func(ctx context.Context, x *inv, args []string) error {
		if wait && force {
			return usagef("--wait and --force exclude each other")
		}
		if interval <= 0 {
			return usagef("--interval must be positive")
		}
		return x.drain(ctx, args[0], drainOpts{wait: wait, force: force, last: last, interval: interval})
	}
	return c
}

// drainOpts are drain's flags.
type drainOpts struct {
	wait, force, last bool
	interval          time.Duration
}

func (x *inv) drain(ctx context.Context, id string, o drainOpts) error {
	reg, err := x.openRegistry()
	if err != nil {
		return err
	}
	defer reg.Close()
	res := &drainResult{Cell: id}
	err = x.drainSteps(ctx, reg, res, id, o)
	if x.g.json && res.State != "" {
		if jerr := writeJSON(x.out, res); jerr != nil && err == nil {
			err = jerr
		}
	}
	return err
}

func (x *inv) drainSteps(ctx context.Context, reg registry.Registry, res *drainResult, id string, o drainOpts) error {
	wait, force, last, interval := o.wait, o.force, o.last, o.interval
	m, err := x.load(ctx, reg)
	if err != nil {
		return err
	}
	if err := knownCell(m, id); err != nil {
		return refuse(err, m)
	}
	cell, _ := m.Cell(id)
	res.State = cell.State
	switch cell.State {
	case slotmap.Drained:
		if !x.g.json {
			fmt.Fprintf(x.out, "%s is already drained (map version %d): nothing to do.\n", id, m.Version())
		}
		return nil
	case slotmap.Draining:
		if !x.g.json {
			fmt.Fprintf(x.out, "%s is already draining (its slots moved): resuming.\n", id)
		}
	case slotmap.Active:
		r, err := x.apply(ctx, reg, control.Drain(id, last))
		if err != nil {
			return err
		}
		res.Drain = r
		if x.cmd.dryRun {
			if !x.g.json {
				fmt.Fprintf(x.out, "Then: close %s's intake (POST %s/v1/admin/intake/close).\n", id, cell.Admin)
			}
			if !wait && !force {
				return nil
			}
			if !x.g.json {
				if wait {
					fmt.Fprintf(x.out, "Then: wait for its queue to empty, and mark it drained:\n")
				} else {
					fmt.Fprintf(x.out, "Then: mark it drained:\n")
				}
			}
			return x.markDrained(ctx, reg, res, id)
		}
		res.State = slotmap.Draining
	}

	if x.cmd.dryRun && !x.g.json {
		fmt.Fprintf(x.out, "Then: close %s's intake (POST %s/v1/admin/intake/close).\n", id, cell.Admin)
	}
	if !x.cmd.dryRun {
		// Closed also when resuming: the cell may have restarted with its
		// intake open.
		res.Intake = "closed"
		if err := x.setIntakes(ctx, cell, false); err != nil {
			if unreachable(err) {
				res.Intake = "unreachable"
				x.warnf("%s's admin API cannot be reached (%v): its slots moved, but its intake could not be closed", id, err)
			} else {
				res.Intake = "error: " + err.Error()
				x.warnf("%s's intake could not be closed: %v; its slots moved anyway", id, err)
			}
		} else if !x.g.json {
			fmt.Fprintf(x.out, "Intake of %s closed.\n", id)
		}
	}

	switch {
	case wait:
		if x.cmd.dryRun {
			if !x.g.json {
				fmt.Fprintf(x.out, "Then: wait for its queue to empty, and mark it drained:\n")
			}
			return x.markDrained(ctx, reg, res, id)
		}
		if err := x.waitEmpty(ctx, res, id, cell.Admin, interval); err != nil {
			return err
		}
	case force:
		if !x.cmd.dryRun {
			x.warnf("marking %s drained without waiting for its queue (--force): work still queued there stays in its store until it is undrained", id)
		}
	default:
		if !x.g.json && !x.cmd.dryRun {
			fmt.Fprintf(x.out, "%s is draining and keeps its session quota until its queue is empty.\nFinish with: cellctl drain %s --wait\n", id, id)
		}
		return nil
	}
	return x.markDrained(ctx, reg, res, id)
}

func (x *inv) markDrained(ctx context.Context, reg registry.Registry, res *drainResult, id string) error {
	if !x.g.json {
		fmt.Fprintln(x.out)
	}
	if x.cmd.dryRun && res.Drain != nil {
		// Show the second plan against the map the first would make.
		after := res.Drain.Plan.After
		p, err := after.MarkDrained(id)
		if err != nil {
			return refuse(err, after)
		}
		pj := toPlanJSON(p)
		res.MarkDrained = &applyResult{Plan: &pj, DryRun: true, Version: after.Version()}
		if !x.g.json {
			writePlan(x.out, p)
			fmt.Fprintf(x.out, "\nDry run: nothing applied.\n")
		}
		return nil
	}
	r, err := x.apply(ctx, reg, control.MarkDrained(id))
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
// twice in a row, printing a progress line.
func (x *inv) waitEmpty(ctx context.Context, res *drainResult, id, admin string, interval time.Duration) error {
	res.Waited = true
	start := x.cli.now()
	p := &progress{w: x.out, term: x.cli.terminal(x.out), quiet: x.g.json, now: x.cli.now}
	defer p.done()
	empty := 0
	var first time.Time // the cell's clock: when it sampled its queue first
	var last *CellStatus
	var lastErr error
	for {
		st, err := x.admin().status(ctx, admin)
		if err == nil && !st.Known() {
			err = fmt.Errorf("the cell cannot read its queue: %s", strings.Join(mapValues(st.Errors), "; "))
		}
		elapsed := x.cli.now().Sub(start)
		res.Waiting = human(elapsed)
		switch {
		case err != nil && ctx.Err() == nil:
			lastErr = err
			empty = 0
			p.show(fmt.Sprintf("waiting for %s: status unavailable (%v), elapsed %s", id, err, human(elapsed)), "unavailable")
		case err == nil:
			last, lastErr, res.Last = st, nil, st
			if st.IntakeOpen() {
				// Someone (a restart) reopened it: close it again.
				_ = x.admin().setIntake(ctx, admin, false)
			}
			key := fmt.Sprintf("%d/%d/%d", st.High(), st.Normal(), st.Inflight)
			p.show(fmt.Sprintf("waiting for %s: queue high %d normal %d, oldest %s, in flight %d, elapsed %s",
				id, st.High(), st.Normal(), ageStr(st.OldestPending()), st.Inflight, human(elapsed)), key)
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
			p.done()
			if !x.g.json {
				fmt.Fprintf(x.out, "%s's queue and in-flight work are empty after %s.\n", id, human(elapsed))
			}
			return nil
		}
		select {
		case <-ctx.Done():
			p.done()
			left := "its queue was not empty"
			if last != nil && lastErr == nil {
				left = fmt.Sprintf("inquiries still queued (high %d, normal %d) or in flight (%d)", last.High(), last.Normal(), last.Inflight)
			} else if lastErr != nil {
				left = fmt.Sprintf("its status could not be read (%v); if it is dead, 'cellctl drain %s --force' marks it drained without waiting", lastErr, id)
			}
			why := "interrupted"
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				why = "timed out (--timeout)"
			}
			return fmt.Errorf("%s after %s: %s is draining (slots moved, intake closed), %s; resume with 'cellctl drain %s --wait'",
				why, human(elapsed), id, left, id)
		case <-time.After(interval):
		}
	}
}

func ageStr(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return human(d)
}

// progress prints a line that changes: rewritten in place on a terminal,
// else printed again when its key changes or every progressEvery.
type progress struct {
	w       io.Writer
	term    bool // a terminal: rewrite the line in place
	quiet   bool // --json: print nothing
	now     func() time.Time
	lastKey string
	lastAt  time.Time
	dirty   bool
}

const progressEvery = 10 * time.Second

func (p *progress) show(line, key string) {
	if p.quiet {
		return
	}
	if p.term {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		p.dirty = true
		return
	}
	if key == p.lastKey && p.now().Sub(p.lastAt) < progressEvery {
		return
	}
	p.lastKey, p.lastAt = key, p.now()
	fmt.Fprintln(p.w, line)
}

// done ends an in-place line.
func (p *progress) done() {
	if p.term && p.dirty {
		fmt.Fprintln(p.w)
		p.dirty = false
	}
}
