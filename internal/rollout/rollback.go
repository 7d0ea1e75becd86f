package rollout

import (
	"context"
	"fmt"
	"slices"

	"github.com/cellkit/cellkit/internal/control"
)

// rollBack puts every process the rollout reached in the wave in progress
// back on what it ran before, one at a time, from where each one's record
// stands; units of earlier waves (done, baked) and processes not reached
// are left alone. It ends the rollout rolled back only once every one of
// them runs what it ran, ready, in rotation as it was.
func (r *Runner) rollBack(ctx context.Context, ro *control.Rollout) (*control.Rollout, error) {
	if ro.Wave < len(ro.Waves) {
		w := ro.Waves[ro.Wave]
		router := len(w.Routers) > 0
		for _, unit := range w.Units() {
			cr := ro.Progress(router)[unit]
			if !cr.Phase.Reached() || cr.Phase == control.PhaseRolledBack {
				continue
			}
			var err error
			if ro, err = r.restoreUnit(ctx, ro, unit, router); err != nil {
				return ro, err
			}
		}
	}
	return r.update(ctx, "rolled back: "+ro.Reason, func(ro *control.Rollout) error {
		if err := expect(ro, control.RolloutHalted); err != nil {
			return err
		}
		ro.State = control.RolloutRolledBack
		return nil
	})
}

// restoreUnit puts a cell's (or router's) processes back, in the order of
// their keys, and records the unit rolled back.
func (r *Runner) restoreUnit(ctx context.Context, ro *control.Rollout, unit string, router bool) (*control.Rollout, error) {
	cr := ro.Progress(router)[unit]
	keys := make([]string, 0, len(cr.Processes))
	for k := range cr.Processes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var ps []proc
	if len(keys) > 0 {
		var err error
		if ps, err = r.procs(ctx, unit, router); err != nil {
			return ro, fmt.Errorf("roll back %s: %w", unit, err)
		}
	}
	// The processes that are not ready go first: putting one back costs
	// the cell nothing, and the others' quorum may need it.
	var todo []proc
	for _, k := range keys {
		i := slices.IndexFunc(ps, func(p proc) bool { return p.key() == k })
		if i < 0 {
			return ro, fmt.Errorf("roll back %s/%s: no longer in the map", unit, k)
		}
		todo = append(todo, ps[i])
	}
	ready := map[string]bool{}
	for _, p := range todo {
		_, ready[p.key()], _ = r.release(ctx, p)
	}
	slices.SortStableFunc(todo, func(a, b proc) int {
		switch {
		case ready[a.key()] == ready[b.key()]:
			return 0
		case ready[b.key()]:
			return -1
		}
		return 1
	})
	for _, p := range todo {
		var err error
		if ro, err = r.restore(ctx, ro, p, ps); err != nil {
			return ro, fmt.Errorf("roll back %s: %w", p.name(), err)
		}
	}
	return r.update(ctx, unit+" rolled back", func(ro *control.Rollout) error {
		if err := expect(ro, control.RolloutHalted); err != nil {
			return err
		}
		c := ro.Progress(router)[unit]
		for k, q := range c.Processes {
			if q.Step != control.StepRestored {
				return fmt.Errorf("%s/%s is %s, not restored", unit, k, q.Step)
			}
		}
		c.Phase = control.PhaseRolledBack
		ro.SetProgress(router, unit, c)
		return nil
	})
}

// restore puts one process back on what its record says it ran: the
// restoring step recorded first; out of rotation (an instance of several
// that was in it), unless its cell would serve on it alone; replaced by
// what it ran, unless it already runs that, ready, on that release; back
// in rotation as it was before the rollout.
func (r *Runner) restore(ctx context.Context, ro *control.Rollout, p proc, all []proc) (*control.Rollout, error) {
	pr := ro.Progress(p.router)[p.unit].Processes[p.key()]
	if pr.Step == control.StepRestored {
		return ro, nil
	}
	before := pr.Before
	if err := r.validate(p, before); err != nil {
		return ro, fmt.Errorf("its record: %w", err)
	}
	var err error
	if pr.Step != control.StepRestoring {
		if ro, err = r.step(ctx, ro, p, pr.Step, control.StepRestoring, fmt.Sprintf("putting %s back on %s", p.name(), orDash(before.Release)), nil); err != nil {
			return ro, err
		}
	}
	cur, err := r.command(ctx, p)
	if err != nil {
		return ro, err
	}
	_, ready, _ := r.release(ctx, p)
	if back := cur.Same(before) && ready && cur.Release != "" && (before.Release == "" || cur.Release == before.Release); !back {
		// A process that is not ready serves no one: putting it back
		// takes nothing from its cell. One that is waits for the others.
		if ready {
			if err := r.keepQuorum(ctx, p, all); err != nil {
				return ro, err
			}
		}
		if p.rotate && !pr.OutBefore {
			if err := r.setRotation(ctx, p, true); err != nil {
				return ro, err
			}
			sleep(ctx, r.cfg.Settle)
		}
		if err := r.held(ctx); err != nil {
			return ro, err
		}
		if err := r.replace(ctx, p, before); err != nil {
			return ro, err
		}
		if _, err := r.waitReady(ctx, p, "on what it ran", func(rel string) string {
			switch {
			case before.Release != "" && rel != before.Release:
				return "ready on " + orDash(rel) + ", not on " + before.Release
			case before.Release == "" && (rel == "" || rel == pr.Release):
				return "ready on the release it was rolled to, " + orDash(rel)
			}
			return ""
		}); err != nil {
			return ro, err
		}
	}
	if p.rotate && !pr.OutBefore {
		if err := r.setRotation(ctx, p, false); err != nil {
			return ro, err
		}
	}
	return r.step(ctx, ro, p, control.StepRestoring, control.StepRestored, fmt.Sprintf("%s put back on %s", p.name(), orDash(before.Release)), nil)
}
