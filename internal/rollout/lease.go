package rollout

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/cellkit/cellkit/internal/control"
)

// One driver at a time: a driver takes the rollout's lease in the record
// before it acts (acquire), renews it every third of Config.Lease and at
// every write, and gives it back when it stops. While a lease lasts,
// another driver is refused; a driver whose lease was taken, or that
// could not renew it before it ran out, stops acting (its context ends).

// newDriver is a driver's identity: its holder ("cellctl rollout resume
// by alice@host") and a part drawn at random, so that two drivers of one
// user on one host are two.
func newDriver(holder string) string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand's Read does not fail
	return holder + " #" + hex.EncodeToString(b[:])
}

// Driver is the runner's identity in the record.
func (r *Runner) Driver() string { return r.driver }

// DrivenError refuses a driver while another's lease lasts.
type DrivenError struct {
	ID, Driver string
	Until      time.Time
}

func (e *DrivenError) Error() string {
	return fmt.Sprintf("rollout %s is driven by %s, whose lease lasts until %s: one driver at a time (it renews its lease while it runs; one that died is replaced once its lease ends)",
		e.ID, e.Driver, e.Until.UTC().Format(time.RFC3339))
}

// errTakenOver stops a driver whose rollout another driver holds now.
var errTakenOver = errors.New("taken over")

// stillHeld refuses a record this driver does not hold.
func (r *Runner) stillHeld(ro *control.Rollout) error {
	if ro.Driver != r.driver {
		return fmt.Errorf("rollout %s is driven by %s now: this driver stops (%w)", ro.ID, orDash(ro.Driver), errTakenOver)
	}
	return nil
}

// held reads the record and refuses to act unless this driver holds it
// and its lease lasts: asked before each action on a process or the map,
// so that a driver whose rollout another took stops before it acts.
func (r *Runner) held(ctx context.Context) error {
	ro, err := r.opts.Control.Rollout(ctx)
	if err != nil {
		return err
	}
	if err := r.stillHeld(ro); err != nil {
		return err
	}
	if !r.opts.Now().Before(ro.LeaseUntil) {
		return fmt.Errorf("rollout %s: this driver's lease ran out at %s: it stops (%w)", ro.ID, ro.LeaseUntil.UTC().Format(time.RFC3339), errTakenOver)
	}
	return nil
}

// acquire takes the lease of an active rollout: refused (*DrivenError,
// with the record as it stands) while another driver's lasts. An
// inactive one is returned as it is.
func (r *Runner) acquire(ctx context.Context) (*control.Rollout, error) {
	var seen *control.Rollout
	ro, err := r.opts.Control.UpdateRollout(ctx, r.id, func(ro *control.Rollout) error {
		seen = ro
		if !ro.State.Active() {
			return errStopped
		}
		now := r.opts.Now()
		if ro.Driver != "" && ro.Driver != r.driver && now.Before(ro.LeaseUntil) {
			return &DrivenError{ID: ro.ID, Driver: ro.Driver, Until: ro.LeaseUntil}
		}
		text := "driven by " + r.driver
		if ro.Driver != "" && ro.Driver != r.driver {
			text += ", after " + ro.Driver
		}
		ro.Events = append(ro.Events, control.RolloutEvent{At: now, Text: text})
		ro.Holder, ro.Driver, ro.LeaseUntil = r.opts.Control.Holder(), r.driver, now.Add(r.cfg.Lease)
		return nil
	})
	switch {
	case errors.Is(err, errStopped):
		return seen, nil
	case err != nil && seen != nil:
		return seen, err // refused: the record as it stands
	}
	return ro, err
}

// keepLease renews the lease every third of it until release is called;
// the context it returns ends, with the reason as its cause, when the
// lease is taken by another or could not be renewed before it ran out.
// release stops the renewal and gives the lease back.
func (r *Runner) keepLease(parent context.Context) (ctx context.Context, release func()) {
	ctx, cancel := context.WithCancelCause(parent)
	done := make(chan struct{})
	go func() {
		defer close(done)
		renewed := r.opts.Now()
		tick := time.NewTicker(r.cfg.Lease / 3)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			_, err := r.update(ctx, "", func(*control.Rollout) error { return nil })
			switch {
			case err == nil:
				renewed = r.opts.Now()
			case errors.Is(err, errTakenOver):
				cancel(err)
				return
			case ctx.Err() != nil:
				return
			case r.opts.Now().Sub(renewed) > r.cfg.Lease*5/6:
				// Stop acting before the lease runs out: another driver
				// may take it then.
				cancel(fmt.Errorf("its lease could not be renewed: %w", err))
				return
			}
		}
	}()
	return ctx, func() {
		cancel(nil)
		<-done
		gctx, stop := context.WithTimeout(context.WithoutCancel(parent), 5*time.Second)
		defer stop()
		_, _ = r.opts.Control.UpdateRollout(gctx, r.id, func(ro *control.Rollout) error {
			if ro.Driver != r.driver {
				return errTakenOver // nothing of this driver's to give back
			}
			ro.LeaseUntil = time.Time{}
			return nil
		}) // a lease not given back ends by itself
	}
}
