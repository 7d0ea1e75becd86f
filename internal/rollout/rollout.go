// Package rollout drives a release through the cells wave by wave: within
// a cell one instance at a time (out of the routers' rotation, replaced,
// ready on the new release, back in), then a bake during which the gates
// compare the wave's cells with those still on the old release; then,
// when the release has a router part, the routers one at a time, each
// baked against the routers still on the old release. A failed gate, a
// process that does not get ready or a bake without enough samples halts
// it, and halting rolls the wave back.
//
// The state is the rollout's record beside the map (control.Rollout).
// Each step is recorded before it is taken — what a process ran before
// is written, and must be, before the deployer first acts on it, and is
// never overwritten — so that a driver that stops anywhere (killed, cut
// from the registry, out of time) leaves a record from which the next
// one finishes the step or reverts it. One driver at a time holds the
// rollout by a lease in the record (lease.go); every write checks it and
// the state the step expects.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/gate"
	"github.com/cellkit/cellkit/internal/release"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// Control is what a rollout reads and writes of the map and of its own
// record (control.Controller).
type Control interface {
	Holder() string
	Load(ctx context.Context) (*slotmap.Map, error)
	Apply(ctx context.Context, ch control.Change) (*control.Result, error)
	Rollout(ctx context.Context) (*control.Rollout, error)
	UpdateRollout(ctx context.Context, id string, change func(*control.Rollout) error) (*control.Rollout, error)
}

var _ Control = (*control.Controller)(nil)

// Config is how a rollout runs. Zero values mean the defaults of
// DefaultConfig, but for WaitLimit, Settle and WarmUp, whose zero is
// none; Gate's zero fields are filled by the gates at each judgement.
type Config struct {
	// Spec is the cells' release: a binary or an image, and flags set
	// (empty: the cells are not changed); Router the routers' (empty:
	// they are not).
	Spec   release.Spec
	Router release.Spec
	Gate   gate.Config
	// Prometheus, if set, is a Prometheus's base URL whose firing alerts
	// are a gate too: one firing for the wave's cells (or routers) and not
	// for the baseline's halts.
	Prometheus string
	// Scrape is how often a bake reads the cells' metrics.
	Scrape time.Duration
	// WaitLimit is how long past its bake a wave may wait for the gates'
	// samples before the rollout halts (fail closed) [0: no wait].
	WaitLimit time.Duration
	// ReadyWithin bounds a replaced process's wait for readiness.
	ReadyWithin time.Duration
	// Settle is how long an instance taken out of rotation is left before
	// it is replaced, for the routers to follow the map. Its zero is no
	// wait, not DefaultConfig's 3 s: that is what cellctl and the
	// operator start a rollout with.
	Settle time.Duration
	// WarmUp is how long a wave's replaced processes run before its
	// bake's window opens (once the routers route to them again): a
	// restarted process's first seconds (its connections, the routers'
	// pools to it) are slower for any release, and judged they halted
	// good ones. Its crash restarts and readiness losses count from the
	// replacement. Its zero is none, not DefaultConfig's 10 s: that is
	// what cellctl and the operator start a rollout with.
	WarmUp time.Duration
	// Lease is how long a driver's hold on the rollout lasts unless it
	// renews it (every third of it, and at every write): another driver
	// is refused while it lasts [DefaultLease].
	Lease time.Duration
}

// DefaultLease is how long a driver's lease lasts unrenewed: how long a
// rollout whose driver died waits before another may drive it.
const DefaultLease = 30 * time.Second

// DefaultConfig: scrape every 5 s, no wait for samples past the bake
// (cellctl gives one more bake), a minute to get ready, 3 s for the
// routers, 10 s of warm-up, a lease of DefaultLease.
func DefaultConfig() Config {
	return Config{Gate: gate.DefaultConfig(), Scrape: 5 * time.Second, ReadyWithin: time.Minute, Settle: 3 * time.Second, WarmUp: 10 * time.Second, Lease: DefaultLease}
}

// Options are the rollout's collaborators.
type Options struct {
	Control Control
	Admin   adminclient.Client
	// Deployer replaces the processes: a stack's on hosts
	// (internal/devstack) or a cluster's. Nil for the gates alone
	// (Gate), beside a deployer of another's.
	Deployer release.Deployer
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
	// driver is this driver's identity in the record (newDriver).
	driver string
	// writing serializes the driver's own writes (its steps and its
	// lease's renewals), so that they never wait for each other's lock.
	writing sync.Mutex
	// reference is each wave's baseline "before": its own processes'
	// figures over a bake's length before they were replaced, with the
	// other cells' in the same window, by wave (reference.go); lastBake
	// the last bake that passed, whose window of the cells still on the
	// old release serves the next wave.
	reference map[int]ownBefore
	lastBake  *bakeEnd
}

// withDefaults fills the zero fields of c from DefaultConfig, field by
// field: a record written before a field existed gets its default. Gate
// is left to the gates, which fill its zero fields the same way.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Scrape <= 0 {
		c.Scrape = d.Scrape
	}
	if c.ReadyWithin <= 0 {
		c.ReadyWithin = d.ReadyWithin
	}
	if c.Lease <= 0 {
		c.Lease = d.Lease
	}
	return c
}

// withDefaults fills the nil collaborators that have a default: Now.
func (o Options) withDefaults() Options {
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// New is a runner of the registry's rollout id.
func New(id string, cfg Config, opts Options) *Runner {
	cfg, opts = cfg.withDefaults(), opts.withDefaults()
	return &Runner{cfg: cfg, opts: opts, id: id, driver: newDriver(opts.Control.Holder()), reference: map[int]ownBefore{}}
}

func (r *Runner) say(format string, args ...any) {
	if r.opts.Progress != nil {
		r.opts.Progress(fmt.Sprintf(format, args...))
	}
}

// update changes the record, renewing this driver's lease, and says what
// happened in it and on Progress. change may refuse a record that is not
// in the state it expects (errStopped, or an error of its own): the
// record is left as it was. A record another driver holds is refused
// (errTakenOver).
func (r *Runner) update(ctx context.Context, event string, change func(*control.Rollout) error) (*control.Rollout, error) {
	r.writing.Lock()
	defer r.writing.Unlock()
	ro, err := r.opts.Control.UpdateRollout(ctx, r.id, func(ro *control.Rollout) error {
		if err := r.stillHeld(ro); err != nil {
			return err
		}
		if err := change(ro); err != nil {
			return err
		}
		ro.LeaseUntil = r.opts.Now().Add(r.cfg.Lease)
		if event != "" {
			ro.Events = append(ro.Events, control.RolloutEvent{At: r.opts.Now(), Text: event})
		}
		return nil
	})
	if err == nil && event != "" {
		r.say("%s", event)
	}
	return ro, err
}

// errStopped refuses a step whose rollout is no longer in the state the
// step expects (paused, aborted or halted by another cellctl meanwhile).
var errStopped = errors.New("stopped")

// expect refuses a record not in state s (errStopped).
func expect(ro *control.Rollout, s control.RolloutState) error {
	if ro.State != s {
		return errStopped
	}
	return nil
}

// Run drives the rollout from where its record stands until it is done,
// halted and rolled back, paused or aborted (by another cellctl, seen
// between steps), or ctx ends. It first takes the rollout's lease: while
// another driver's lasts, Run is refused (a *DrivenError) before it acts.
func (r *Runner) Run(ctx context.Context) (*control.Rollout, error) {
	ro, err := r.acquire(ctx)
	if err != nil || !ro.State.Active() {
		return ro, err
	}
	ctx, release := r.keepLease(ctx)
	defer release()
	ro, err = r.drive(ctx, ro)
	if errors.Is(err, errStopped) {
		// Paused, aborted or halted by another cellctl meanwhile: the
		// record says which, and the loop goes on from it.
		ro, err = r.drive(ctx, nil)
	}
	if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = fmt.Errorf("%w (%v)", err, cause)
	}
	return ro, err
}

// drive is Run's loop, the lease held; a nil ro is read first.
func (r *Runner) drive(ctx context.Context, ro *control.Rollout) (*control.Rollout, error) {
	var err error
	for {
		if ro == nil {
			if ro, err = r.opts.Control.Rollout(ctx); err != nil {
				return nil, err
			}
		}
		if ro.ID != r.id {
			return ro, fmt.Errorf("the registry's rollout is %s, not %s", ro.ID, r.id)
		}
		if err := r.stillHeld(ro); err != nil {
			return ro, err
		}
		switch ro.State {
		case control.RolloutHalted:
			return r.rollBack(ctx, ro)
		case control.RolloutRunning:
		default:
			return ro, nil
		}
		if ro.Wave >= len(ro.Waves) {
			wave := ro.Wave
			done, err := r.update(ctx, "every wave out and baked: done", func(ro *control.Rollout) error {
				if err := expect(ro, control.RolloutRunning); err != nil || ro.Wave != wave {
					return errStopped
				}
				ro.State = control.RolloutDone
				return nil
			})
			if err == nil {
				r.switchLayouts(ctx, done)
			}
			return done, err
		}
		next, err := r.wave(ctx, ro)
		switch {
		case errors.Is(err, errStopped):
			ro = nil // read again: paused, aborted or halted meanwhile
		case err != nil:
			return next, err
		default:
			ro = next
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
		next, err := r.replaceUnit(ctx, ro, unit, router)
		var halt haltError
		switch {
		case errors.As(err, &halt):
			return r.halt(ctx, ro.Wave, halt.Error())
		case err != nil:
			return next, err
		}
		ro = next
	}
	return r.bake(ctx, ro)
}

// halt records that the rollout halts, for why, in wave: the rollback
// follows.
func (r *Runner) halt(ctx context.Context, wave int, why string) (*control.Rollout, error) {
	return r.update(ctx, "halted: "+why, func(ro *control.Rollout) error {
		if err := expect(ro, control.RolloutRunning); err != nil || ro.Wave != wave {
			return errStopped
		}
		ro.State, ro.Reason = control.RolloutHalted, why
		return nil
	})
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
