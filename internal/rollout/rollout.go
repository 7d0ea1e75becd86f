// Package rollout drives a release through the cells wave by wave: within
// a cell one instance at a time (out of the routers' rotation, replaced,
// ready on the new release, back in), then a bake during which the gates
// compare the wave's cells with those still on the old release; then,
// when the release has a router part, the routers one at a time, each
// baked against the routers still on the old release. A failed gate, a
// process that does not get ready or a bake without enough samples halts
// it, and halting rolls the wave back. The state is the rollout's record
// beside the map (control.Rollout), written at every step, so that
// another cellctl resumes it.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/gate"
)

// Deployer replaces a stack's process (by name) with what run makes of
// it, and returns it as it ran before; Processes are the stack's
// processes (devstack.Deployer).
type Deployer interface {
	Replace(ctx context.Context, name string, run func(devstack.Process) devstack.Process) (before devstack.Process, c *devstack.Child, err error)
	Processes() ([]devstack.Process, error)
}

// Config is how a rollout runs.
type Config struct {
	// Spec is the cells' release: a binary and flags set (empty: the
	// cells are not changed); Router the routers' (empty: they are not).
	Spec   devstack.Spec
	Router devstack.Spec
	Gate   gate.Config
	// Prometheus, if set, is a Prometheus's base URL whose firing alerts
	// are a gate too: one firing for the wave's cells (or routers) and not
	// for the baseline's halts.
	Prometheus string
	// Scrape is how often a bake reads the cells' metrics.
	Scrape time.Duration
	// WaitLimit is how long past its bake a wave may wait for the gates'
	// samples before the rollout halts (fail closed).
	WaitLimit time.Duration
	// ReadyWithin bounds a replaced process's wait for readiness.
	ReadyWithin time.Duration
	// Settle is how long an instance taken out of rotation is left before
	// it is replaced, for the routers to follow the map.
	Settle time.Duration
}

// DefaultConfig: scrape every 5 s, no wait for samples past the bake
// (cellctl gives one more bake), a minute to get ready, 3 s for the
// routers.
func DefaultConfig() Config {
	return Config{Gate: gate.DefaultConfig(), Scrape: 5 * time.Second, ReadyWithin: time.Minute, Settle: 3 * time.Second}
}

// Options are the rollout's collaborators.
type Options struct {
	Control  *control.Controller
	Admin    adminclient.Client
	Deployer Deployer
	// Routers are the admin URLs of the routers whose figures for each
	// cell the gates of a cell's wave read too (nil: none).
	Routers func(ctx context.Context) ([]string, error)
	// Progress hears each step as a line (nil: none).
	Progress func(string)
	Now      func() time.Time
}

// Runner drives one rollout.
type Runner struct {
	cfg  Config
	opts Options
	id   string
	// held says this driver has written the record: from then on, a
	// record held by another (a resume elsewhere) stops it.
	held bool
	// reference is each wave's baseline "before": its own processes'
	// figures over a bake's length before they were replaced, with the
	// other cells' in the same window, by wave (reference.go); lastBake
	// the last bake that passed, whose window of the cells still on the
	// old release serves the next wave.
	reference map[int]ownBefore
	lastBake  *bakeEnd
}

// New is a runner of the registry's rollout id.
func New(id string, cfg Config, opts Options) *Runner {
	d := DefaultConfig()
	if cfg.Scrape <= 0 {
		cfg.Scrape = d.Scrape
	}
	if cfg.ReadyWithin <= 0 {
		cfg.ReadyWithin = d.ReadyWithin
	}
	if cfg.Gate == (gate.Config{}) {
		cfg.Gate = d.Gate
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Runner{cfg: cfg, opts: opts, id: id, reference: map[int]ownBefore{}}
}

// errTakenOver stops a driver whose rollout another cellctl drives now.
var errTakenOver = errors.New("taken over")

// stillHeld refuses a record another driver took over since this one
// last wrote it.
func (r *Runner) stillHeld(ro *control.Rollout) error {
	if r.held && ro.Holder != r.opts.Control.Holder() {
		return fmt.Errorf("rollout %s is driven by %s now: this driver stops (%w)", ro.ID, ro.Holder, errTakenOver)
	}
	return nil
}

func (r *Runner) say(format string, args ...any) {
	if r.opts.Progress != nil {
		r.opts.Progress(fmt.Sprintf(format, args...))
	}
}

// update changes the record and says what happened in it and on Progress.
func (r *Runner) update(ctx context.Context, event string, change func(*control.Rollout)) (*control.Rollout, error) {
	ro, err := r.opts.Control.UpdateRollout(ctx, r.id, func(ro *control.Rollout) error {
		if err := r.stillHeld(ro); err != nil {
			return err
		}
		change(ro)
		if event != "" {
			ro.Events = append(ro.Events, control.RolloutEvent{At: r.opts.Now(), Text: event})
		}
		return nil
	})
	if err == nil {
		r.held = true
		if event != "" {
			r.say("%s", event)
		}
	}
	return ro, err
}

// Run goes on with the rollout from where its record stands until it is
// done, halted and rolled back, paused or aborted (by another cellctl,
// seen between steps), or ctx ends.
func (r *Runner) Run(ctx context.Context) (*control.Rollout, error) {
	ro, err := r.opts.Control.Rollout(ctx)
	if err != nil {
		return nil, err
	}
	for {
		if ro.ID != r.id {
			return ro, fmt.Errorf("the registry's rollout is %s, not %s", ro.ID, r.id)
		}
		switch ro.State {
		case control.RolloutHalted:
			return r.rollBack(ctx, ro)
		case control.RolloutRunning:
		default:
			return ro, nil
		}
		if ro.Wave >= len(ro.Waves) {
			return r.update(ctx, "every wave out and baked: done", func(ro *control.Rollout) { ro.State = control.RolloutDone })
		}
		if ro, err = r.wave(ctx, ro); err != nil {
			return ro, err
		}
	}
}

// wave replaces the cells (or routers) of the wave in progress not yet
// replaced, then bakes it: the record comes back with the next wave, or
// halted.
func (r *Runner) wave(ctx context.Context, ro *control.Rollout) (*control.Rollout, error) {
	w := ro.Waves[ro.Wave]
	router := len(w.Routers) > 0
	if err := r.measureReference(ctx, ro); err != nil {
		return ro, err
	}
	for _, unit := range w.Units() {
		if p := ro.Progress(router)[unit].Phase; p == control.PhaseBaking || p == control.PhaseDone {
			continue
		}
		var err error
		if ro, err = r.replaceUnit(ctx, ro, unit, router); err != nil {
			var halt haltError
			if errors.As(err, &halt) {
				return r.update(ctx, "halted: "+halt.Error(), func(ro *control.Rollout) {
					ro.State, ro.Reason = control.RolloutHalted, halt.Error()
				})
			}
			return ro, err
		}
	}
	return r.bake(ctx, ro)
}

// haltError is a reason to halt the rollout (not a failure of cellctl).
type haltError struct{ why string }

func (h haltError) Error() string { return h.why }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
