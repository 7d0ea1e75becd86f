package cellctl

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/gate"
	"github.com/cellkit/cellkit/internal/release"
	"github.com/cellkit/cellkit/internal/rollout"
)

// Releases going out cell by cell: the rollout commands. The record lives
// beside the map; the processes are replaced by the deployer of --stack
// DIR, which the program gives (Extensions.Deployer: the cellctl
// program's replaces those of a stack of this machine, the local stack's
// DIR/dev.json or the lab's DIR/net.json).

const secRollout = "Release cell by cell"

func rolloutPlanCommand() *command {
	var f rolloutFlags
	c := &command{
		name: "rollout plan", section: secRollout,
		summary: "show the waves a rollout would take",
		help: `Shows the waves of --waves over the map's active cells, each with its bake
time, and with --router-bin or --router-set the stack's routers after them,
one per wave; nothing changes.

With --kustomize DIR it writes, for Kubernetes, one kustomize Component per
wave (DIR/wave-N): the image --image for the cells of that wave and the
waves before it, and with --router-image a last wave for the routers'
Deployment. Apply them one by one, each followed by 'cellctl rollout gate'
over its cells (docs/kubernetes.md, "Upgrade").`,
		examples: `cellctl rollout plan --waves 'c1;25%;rest' --bake 10m
cellctl rollout plan --bin ./bin/cell --router-bin ./bin/router --stack /tmp/stack
cellctl rollout plan --waves-file waves.txt --kustomize deploy/kubernetes/overlays/prod/rollout \
  --image registry.example.com/cellkit/cell:1.5.0 --router-image registry.example.com/cellkit/router:1.5.0`,
		flags: func(fs *flag.FlagSet) {
			f.register(fs, false)
			fs.StringVar(&f.kustomize, "kustomize", "", "`DIR` to write one kustomize Component per wave into (Kubernetes)")
			fs.StringVar(&f.image, "image", "", "with --kustomize: the cells' new image `REF`")
			fs.StringVar(&f.routerImage, "router-image", "", "with --kustomize: the routers' new image `REF` (a last wave)")
		},
	}
	c.run = func(ctx context.Context, x *inv, _ []string) error {
		if f.kustomize == "" && (f.image != "" || f.routerImage != "") {
			return usagef("--image and --router-image go with --kustomize DIR")
		}
		reg, waves, err := f.load(ctx, x)
		if err != nil {
			return err
		}
		defer reg.Close()
		if f.kustomize != "" {
			paths, err := writeKustomize(f.kustomize, f.image, f.routerImage, waves)
			if err != nil {
				return usagef("--kustomize: %v", err)
			}
			writeWaves(x, waves, nil)
			fmt.Fprintln(x.out)
			for _, p := range paths {
				fmt.Fprintf(x.out, "Wrote %s\n", p)
			}
			return nil
		}
		if x.g.json {
			return writeJSON(x.out, waves)
		}
		writeWaves(x, waves, nil)
		return nil
	}
	return c
}

// deployer is the deployer of --stack, the extensions' (the cellctl
// program's: DIR/dev.json, else DIR/net.json).
func (f *rolloutFlags) deployer(x *inv) (release.Deployer, error) {
	d, err := x.cli.deployer(f.stack)
	if err != nil {
		return nil, fmt.Errorf("%w: pass --stack DIR", err)
	}
	return d, nil
}

// rolloutOptions are a rollout's collaborators from cellctl: the admin
// client, the routers announced (or --routers), progress on stdout.
func (x *inv) rolloutOptions(ctl *control.Controller, d release.Deployer) rollout.Options {
	return rollout.Options{Control: ctl, Admin: x.admin(), Deployer: d, Routers: x.routerURLs,
		Progress: func(s string) { fmt.Fprintf(x.out, "%s  %s\n", x.cli.now().Format("15:04:05"), s) }}
}

// drive runs the registry's rollout id to its end and says how it ended:
// an error (exit 1) unless it is done, paused or aborted.
func (x *inv) drive(ctx context.Context, ctl *control.Controller, id string, d release.Deployer) error {
	ro, err := ctl.Rollout(ctx)
	if err != nil {
		return err
	}
	cfg, err := rollout.ConfigOf(ro)
	if err != nil {
		return err
	}
	// The release read back is checked as it was at start: the record
	// is not trusted more than the command line.
	if err := cfg.ValidateRelease(); err != nil {
		return fmt.Errorf("rollout %s: its release in the record: %w", id, err)
	}
	ro, err = rollout.New(id, cfg, x.rolloutOptions(ctl, d)).Run(ctx)
	var driven *rollout.DrivenError
	if errors.As(err, &driven) && ro != nil && ro.State == control.RolloutHalted {
		fmt.Fprintf(x.out, "Rollout %s halted: its driver, %s, rolls it back ('cellctl rollout status' follows it).\n", id, driven.Driver)
		return nil
	}
	if err != nil {
		return fmt.Errorf("rollout %s: %w (its record keeps where it stands: 'cellctl rollout resume')", id, err)
	}
	fmt.Fprintf(x.out, "Rollout %s: %s.\n", ro.ID, strings.ReplaceAll(string(ro.State), "_", " "))
	switch ro.State {
	case control.RolloutDone, control.RolloutPaused, control.RolloutAborted:
		return nil
	}
	return fmt.Errorf("rollout %s %s: %s", ro.ID, strings.ReplaceAll(string(ro.State), "_", " "), ro.Reason)
}

func rolloutStartCommand() *command {
	var f rolloutFlags
	c := &command{
		name: "rollout start", section: secRollout,
		summary: "release to the cells wave by wave, gated, rolled back on a halt",
		help: `Records a rollout beside the map and drives it: wave by wave, within a cell one
process at a time (an instance of several out of the routers' rotation
first), replaced by --bin and/or the flags of --set, ready on the new release,
back in rotation; then the wave bakes while its gates compare its cells with
the cells still on the old release, from the cells' and the routers' own
metrics (failures by Fisher's exact test, latency by Mann-Whitney, crash
restarts and readiness lost against the baseline's worst process:
docs/decisions/rollout-gates.md). With --router-bin or --router-set the
stack's routers follow, one per wave, each baked against the routers still
on the old release (the last: against those already baked; a single
router: against its own figures before). A failed gate, a process
that does not get ready within --ready-within, or a bake without enough
samples halts the rollout and puts the wave's processes back. Another
rollout is refused while one is active. Interrupted, the rollout stays in
the record: 'rollout resume' goes on from there, from any machine that runs
the stack.`,
		examples: `cellctl rollout start --set workers=32 --waves 'c1;rest' --bake 10m
cellctl rollout start --bin ./bin/cell --router-bin ./bin/router --stack /tmp/stack`,
		mutates:   false,
		unbounded: func() bool { return true },
		flags:     func(fs *flag.FlagSet) { f.register(fs, true) },
	}
	c.run = func(ctx context.Context, x *inv, _ []string) error {
		cfg, err := f.gateConfig()
		if err != nil {
			return err
		}
		if f.readyWithin <= 0 {
			return usagef("--ready-within %v: want a positive duration", f.readyWithin)
		}
		cfg.Spec, cfg.Router, cfg.ReadyWithin = f.spec, f.router, f.readyWithin
		if err := cfg.ValidateRelease(); err != nil {
			return usagef("%v (give --bin PATH, --set NAME=VALUE, --router-bin or --router-set)", err)
		}
		d, err := f.deployer(x)
		if err != nil {
			return err
		}
		reg, waves, err := f.load(ctx, x)
		if err != nil {
			return err
		}
		defer reg.Close()
		id := f.id
		if id == "" {
			id = "r-" + x.cli.now().UTC().Format("20060102-150405")
		}
		if err := cfg.ValidateWaves(waves); err != nil {
			return usagef("%v", err)
		}
		ctl := x.controller(reg, nil)
		// A second rollout is refused first, naming the one in the way
		// (Start refuses it too, under the writer lock).
		if cur, err := ctl.Rollout(ctx); err == nil && cur.State.Active() {
			return &control.RolloutActiveError{ID: cur.ID, Holder: cur.Holder, State: cur.State}
		}
		if err := rollout.Preflight(ctx, cfg, x.rolloutOptions(ctl, d)); err != nil {
			return fmt.Errorf("%w: no rollout started", err)
		}
		if _, err := rollout.Start(ctx, ctl, id, waves, cfg); err != nil {
			return err
		}
		writeWaves(x, waves, nil)
		fmt.Fprintf(x.out, "\nRollout %s started.\n", id)
		return x.drive(ctx, ctl, id, d)
	}
	return c
}

func rolloutStatusCommand() *command {
	c := &command{
		name: "rollout status", section: secRollout,
		summary: "where the rollout stands: waves, cells, decision",
		help: `Shows the registry's rollout: its state, the wave in progress, who drives it,
the release it puts out and what it replaces, each wave's cells with their
phase, the bake in progress (time left, each gate's verdict and figures as
last judged), why it halted or stopped, and its last events. --json: the
record.`,
		examples: `cellctl rollout status
cellctl rollout status --json | jq .state`,
	}
	c.run = func(ctx context.Context, x *inv, _ []string) error {
		reg, err := x.openRegistry()
		if err != nil {
			return err
		}
		defer reg.Close()
		ro, err := x.controller(reg, nil).Rollout(ctx)
		if errors.Is(err, control.ErrNoRollout) {
			return fmt.Errorf("no rollout in %s: start one with 'cellctl rollout start'", reg.Describe())
		}
		if err != nil {
			return err
		}
		if x.g.json {
			return writeJSON(x.out, ro)
		}
		driver := "no driver"
		if ro.Driver != "" && x.cli.now().Before(ro.LeaseUntil) {
			driver = fmt.Sprintf("driven by %s (lease until %s)", ro.Driver, ro.LeaseUntil.UTC().Format("15:04:05"))
		} else if ro.Driver != "" {
			driver = "no driver (the last, " + ro.Driver + ", stopped)"
		}
		fmt.Fprintf(x.out, "Rollout %s: %s, wave %d of %d, held by %s, %s\n", ro.ID, ro.State, min(ro.Wave+1, len(ro.Waves)), len(ro.Waves), ro.Holder, driver)
		fmt.Fprintf(x.out, "Release %s (from %s), started %s, updated %s\n", orNone(ro.Release), orNone(ro.From),
			ro.Started.UTC().Format(time.RFC3339), ro.Updated.UTC().Format(time.RFC3339))
		if ro.RouterRelease != "" || ro.RouterFrom != "" {
			fmt.Fprintf(x.out, "Routers' release %s (from %s)\n", orNone(ro.RouterRelease), orNone(ro.RouterFrom))
		}
		fmt.Fprintln(x.out)
		writeWaves(x, ro.Waves, ro)
		writeReached(x, ro)
		if b := ro.Bake; b != nil && b.Wave == ro.Wave && ro.State == control.RolloutRunning {
			fmt.Fprintf(x.out, "\nWave %d baking: %v of %v, %v left at %s; the gates: %s\n", b.Wave+1,
				b.Judged.Sub(b.Started).Round(time.Second), b.Bake, b.Left().Round(time.Second), b.Judged.UTC().Format("15:04:05"), b.Decision)
			for _, g := range b.Gates {
				fmt.Fprintf(x.out, "  %s\n", g)
			}
		}
		if ro.Reason != "" {
			fmt.Fprintf(x.out, "\nReason: %s\n", ro.Reason)
		}
		if n := len(ro.Events); n > 0 {
			fmt.Fprintln(x.out, "\nLast events:")
			for _, e := range ro.Events[max(0, n-8):] {
				fmt.Fprintf(x.out, "  %s  %s\n", e.At.UTC().Format("15:04:05"), e.Text)
			}
		}
		return nil
	}
	return c
}

// rolloutChangeCommand is pause, abort, resume or rollback: a change of
// the record's state, and for resume and rollback driving it on.
func rolloutChangeCommand(name, summary, help string, to control.RolloutState) *command {
	var f rolloutFlags
	drive := to == control.RolloutRunning || to == control.RolloutHalted
	c := &command{
		name: "rollout " + name, section: secRollout, summary: summary, help: help,
		examples:  "cellctl rollout " + name,
		unbounded: func() bool { return drive },
		flags: func(fs *flag.FlagSet) {
			if drive {
				fs.StringVar(&f.stack, "stack", "var", "`DIR` of the stack whose processes are replaced (its dev.json or net.json)")
			}
		},
	}
	c.run = func(ctx context.Context, x *inv, _ []string) error {
		var d release.Deployer
		var noDeployer error
		if drive {
			d, noDeployer = f.deployer(x)
		}
		// Without a deployer, its refusal is the one line said when the
		// record cannot say the operator drives the rollout.
		firstOf := func(err error) error { return cmp.Or(noDeployer, err) }
		reg, err := x.openRegistry()
		if err != nil {
			return firstOf(err)
		}
		defer reg.Close()
		ctl := x.controller(reg, nil)
		ro, err := ctl.Rollout(ctx)
		if err != nil {
			return firstOf(err)
		}
		// A release of images is driven by the Kubernetes operator that
		// started it: the record's state is all it needs to go on.
		cfg, _ := rollout.ConfigOf(ro)
		operated := cfg.Spec.Image != ""
		if noDeployer != nil && !operated {
			return noDeployer
		}
		_, err = ctl.UpdateRollout(ctx, ro.ID, func(r *control.Rollout) error {
			switch {
			case !r.State.Active():
				return fmt.Errorf("rollout %s is %s: nothing to %s", r.ID, r.State, name)
			case to == control.RolloutRunning && r.State == control.RolloutHalted:
				return fmt.Errorf("rollout %s halted (%s): roll it back ('cellctl rollout rollback') or abort it", r.ID, r.Reason)
			}
			if to != control.RolloutRunning || r.State != control.RolloutRunning {
				r.Events = append(r.Events, control.RolloutEvent{At: x.cli.now(), Text: name + " by " + x.cli.holder(x.cmd.name)})
			}
			if to == control.RolloutHalted && r.Reason == "" {
				r.Reason = "rolled back by hand (" + x.cli.holder(x.cmd.name) + ")"
			}
			if to != control.RolloutHalted || r.State != control.RolloutHalted {
				r.State = to
			}
			return nil
		})
		if err != nil {
			return err
		}
		if drive && operated {
			fmt.Fprintf(x.out, "Rollout %s is %s: the operator that drives it goes on from its record.\n", ro.ID, to)
			return nil
		}
		if !drive {
			fmt.Fprintf(x.out, "Rollout %s %s.\n", ro.ID, map[control.RolloutState]string{control.RolloutPaused: "paused: its driver stops after its current step", control.RolloutAborted: "aborted: the processes stay as they are"}[to])
			return nil
		}
		return x.drive(ctx, ctl, ro.ID, d)
	}
	return c
}

func rolloutPauseCommand() *command {
	return rolloutChangeCommand("pause", "stop the rollout after its current step",
		`Marks the rollout paused: its driver stops after the step it is in (a process
being replaced is finished first). 'rollout resume' goes on.`, control.RolloutPaused)
}

func rolloutResumeCommand() *command {
	return rolloutChangeCommand("resume", "go on with a paused or interrupted rollout",
		`Drives the registry's rollout on from where its record stands (paused, or
left running by a cellctl that stopped), as its holder from now on.`, control.RolloutRunning)
}

func rolloutAbortCommand() *command {
	return rolloutChangeCommand("abort", "end the rollout where it stands",
		`Ends the rollout as it stands: nothing is rolled back (the processes keep the
release they run), and a new rollout may start.`, control.RolloutAborted)
}

func rolloutRollbackCommand() *command {
	return rolloutChangeCommand("rollback", "put the wave in progress back as it ran",
		`Halts the rollout and puts every process it replaced in the wave in progress
back as it ran before, instance by instance; earlier waves, baked, are left
on the new release (start a rollout of the old one to undo them).`, control.RolloutHalted)
}

func rolloutGateCommand() *command {
	var f rolloutFlags
	var cells string
	c := &command{
		name: "rollout gate", section: secRollout,
		summary: "judge cells already on a new release against the others",
		help: `Runs a rollout's gates for --bake over the cells of --cells, which a release
has reached by other means (kubectl apply of a wave's component: 'rollout
plan --kustomize'), against the active cells that run another release:
the same gates as a rollout's bake (docs/decisions/rollout-gates.md),
waiting for samples up to --wait-limit more. Exit 0: the gates passed; 1:
a gate failed, or too few samples (fail closed) — roll the wave back.
Nothing changes.`,
		examples: `cellctl rollout gate --cells c1 --bake 10m
cellctl rollout gate --cells c2,c3 --bake 10m --prometheus http://prometheus:9090`,
		unbounded: func() bool { return true },
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&cells, "cells", "", "the wave's cells, `IDS` separated by ','")
			fs.DurationVar(&f.bake, "bake", 5*time.Minute, "how long the gates watch")
			f.registerGates(fs)
		},
	}
	c.run = func(ctx context.Context, x *inv, _ []string) error {
		cfg, err := f.gateConfig()
		if err != nil {
			return err
		}
		var wave []string
		for _, id := range strings.Split(cells, ",") {
			if id = strings.TrimSpace(id); id != "" {
				wave = append(wave, id)
			}
		}
		if len(wave) == 0 {
			return usagef("--cells: name the wave's cells (c1,c2)")
		}
		reg, err := x.openRegistry()
		if err != nil {
			return err
		}
		defer reg.Close()
		opts := x.rolloutOptions(x.controller(reg, nil), nil) // the gates alone: another deploys
		if err := rollout.Preflight(ctx, cfg, opts); err != nil {
			return err
		}
		d, vs, err := rollout.Gate(ctx, wave, f.bake, cfg, opts)
		if err != nil {
			return err
		}
		fmt.Fprintf(x.out, "\nThe gates: %s\n", d)
		for _, v := range vs {
			fmt.Fprintf(x.out, "  %s %s\n", v.Decision, v.Text)
		}
		if d != gate.Pass {
			return fmt.Errorf("the gates of %s: %s (roll the wave back)", strings.Join(wave, ","), d)
		}
		return nil
	}
	return c
}
