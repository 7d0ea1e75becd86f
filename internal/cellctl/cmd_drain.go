package cellctl

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/control"
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
	Waited  bool            `json:"waited"`
	Waiting string          `json:"waiting,omitempty"` // how long it waited
	Last    *api.CellStatus `json:"last_status,omitempty"`
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
		mutates: true, moves: true,
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
	p := &progress{w: x.out, term: x.cli.terminal(x.out), quiet: x.g.json, now: x.cli.now}
	defer p.done()
	v := x.newPlanView(ctx)
	r, err := x.controller(reg, v.traffic()).Drain(ctx, x.admin(), control.DrainRequest{
		Cell: id, Wait: o.wait, Force: o.force, Last: o.last, Interval: o.interval, DryRun: x.cmd.dryRun,
		Planned: v.planned, Done: x.showDone,
		Event: func(e control.DrainEvent) {
			if e.Kind == control.DrainMarking && x.cmd.dryRun && len(v.shown) > 0 {
				// The second plan of a dry run is made on the first's
				// map, without the routers' traffic.
				v.summary = nil
			}
			x.drainEvent(p, e)
		},
	})
	if r != nil {
		res.State, res.Intake, res.Waited, res.Last = r.State, r.Intake, r.Waited, r.Last
		if r.Waited {
			res.Waiting = human(r.Waiting)
		}
		if r.Drain != nil {
			res.Drain = v.result(r.Drain)
		}
		if r.MarkDrained != nil {
			res.MarkDrained = v.result(r.MarkDrained)
		}
	}
	if x.g.json && res.State != "" {
		if jerr := writeJSON(x.out, res); jerr != nil && err == nil {
			err = jerr
		}
	}
	return err
}

// drainEvent shows one step of a drain.
func (x *inv) drainEvent(p *progress, e control.DrainEvent) {
	id := e.Cell.ID
	say := func(format string, args ...any) {
		if !x.g.json {
			fmt.Fprintf(x.out, format, args...)
		}
	}
	switch e.Kind {
	case control.DrainAlready:
		say("%s is already drained (map version %d): nothing to do.\n", id, e.Version)
	case control.DrainResuming:
		say("%s is already draining (its slots moved): resuming.\n", id)
	case control.DrainWouldClose:
		say("Then: close %s's intake (POST %s%sclose).\n", id, e.Cell.Admin, api.PathCellIntake)
	case control.DrainWouldWait:
		say("Then: wait for its queue to empty, and mark it drained:\n")
	case control.DrainWouldMark:
		say("Then: mark it drained:\n")
	case control.DrainIntakeClosed:
		say("Intake of %s closed.\n", id)
	case control.DrainIntakeUnreachable:
		x.warnf("%s's admin API cannot be reached (%v): its slots moved, but its intake could not be closed", id, e.Err)
	case control.DrainIntakeFailed:
		x.warnf("%s's intake could not be closed: %v; its slots moved anyway", id, e.Err)
	case control.DrainProgress:
		if st := e.Status; st != nil {
			p.show(fmt.Sprintf("waiting for %s: queue high %d normal %d, oldest %s, in flight %d, elapsed %s",
				id, st.High(), st.Normal(), ageStr(st.OldestPending()), st.Inflight, human(e.Elapsed)),
				fmt.Sprintf("%d/%d/%d", st.High(), st.Normal(), st.Inflight))
		} else {
			p.show(fmt.Sprintf("waiting for %s: status unavailable (%v), elapsed %s", id, e.Err, human(e.Elapsed)), "unavailable")
		}
	case control.DrainEmpty:
		p.done()
		say("%s's queue and in-flight work are empty after %s.\n", id, human(e.Elapsed))
	case control.DrainForced:
		x.warnf("marking %s drained without waiting for its queue (--force): work still queued there stays in its store until it is undrained", id)
	case control.DrainLeftDraining:
		say("%s is draining and keeps its session quota until its queue is empty.\nFinish with: cellctl drain %s --wait\n", id, id)
	case control.DrainMarking:
		p.done()
		say("\n")
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
