package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// proc is one process a wave replaces: a cell's instance (or a cell of
// one process), or a router.
type proc struct {
	unit     string // the cell's id, or the router's process name
	router   bool
	instance string // the cell's instance ("": a cell of one process, a router)
	admin    string // its admin base URL
	rotate   bool   // an instance of several: out of the routers' rotation while replaced
}

// name is its process's name in the stack.
func (p proc) name() string {
	if p.router {
		return p.unit
	}
	return devstack.InstanceName(p.unit, p.instance)
}

// key is its entry in its unit's progress.
func (p proc) key() string { return instanceKey(p.instance) }

func instanceKey(id string) string {
	if id == "" {
		return "-"
	}
	return id
}

// spec is the release for p's kind of process.
func (r *Runner) spec(router bool) devstack.Spec {
	if router {
		return r.cfg.Router
	}
	return r.cfg.Spec
}

// procs are the processes of a cell (from the map: its instances, or
// itself) or of a router (from the stack).
func (r *Runner) procs(ctx context.Context, unit string, router bool) ([]proc, error) {
	if router {
		ps, err := r.opts.Deployer.Processes()
		if err != nil {
			return nil, err
		}
		i := slices.IndexFunc(ps, func(p devstack.Process) bool { return p.Name == unit })
		if i < 0 {
			return nil, haltError{fmt.Sprintf("router %s is no longer in the stack", unit)}
		}
		p, err := routerProc(ps[i])
		return []proc{p}, err
	}
	m, err := r.opts.Control.Load(ctx)
	if err != nil {
		return nil, err
	}
	c, ok := m.Cell(unit)
	if !ok {
		return nil, haltError{fmt.Sprintf("cell %s is no longer in the map", unit)}
	}
	if len(c.Instances) == 0 {
		return []proc{{unit: unit, admin: c.Admin}}, nil
	}
	out := make([]proc, 0, len(c.Instances))
	for _, in := range c.Instances {
		out = append(out, proc{unit: unit, instance: in.ID, admin: in.Admin, rotate: len(c.Instances) > 1})
	}
	return out, nil
}

// routerProc is the stack's router p as a process to replace: its admin
// API is its readiness URL's.
func routerProc(p devstack.Process) (proc, error) {
	base, ok := strings.CutSuffix(p.Ready, "/readyz")
	if !ok {
		return proc{}, fmt.Errorf("router %s: its readiness URL %q is not its admin API's /readyz", p.Name, p.Ready)
	}
	return proc{unit: p.Name, router: true, admin: base}, nil
}

// release is the release p runs and whether it is ready ("why" says why
// not, or what did not answer).
func (r *Runner) release(ctx context.Context, p proc) (rel string, ready bool, why string) {
	if p.router {
		rd, err := r.opts.Admin.RouterReadiness(ctx, p.admin)
		if err != nil {
			return "", false, err.Error()
		}
		return rd.Release.ID, rd.Ready, rd.Detail
	}
	st, err := r.opts.Admin.Status(ctx, p.admin)
	if err != nil {
		return "", false, err.Error()
	}
	if !st.Ready {
		return st.Release.ID, false, "not ready: " + st.NotReady()
	}
	return st.Release.ID, true, ""
}

// replaceUnit replaces a cell's instances, or a router, one at a time.
func (r *Runner) replaceUnit(ctx context.Context, ro *control.Rollout, unit string, router bool) (*control.Rollout, error) {
	ps, err := r.procs(ctx, unit, router)
	if err != nil {
		return ro, err
	}
	ro, err = r.update(ctx, "replacing "+unit, func(ro *control.Rollout) {
		cr := ro.Progress(router)[unit]
		cr.Phase = control.PhaseReplacing
		ro.SetProgress(router, unit, cr)
	})
	if err != nil {
		return ro, err
	}
	for _, p := range ps {
		rel, replaced := ro.Progress(router)[unit].Instances[p.key()]
		var next *control.Rollout
		switch {
		case replaced && rel != "":
			continue // replaced and ready before a resume
		case replaced:
			// Replaced, not yet seen ready, when the last cellctl stopped:
			// its record holds what ran before; only the wait is left.
			next, err = r.finishProc(ctx, p, ro.Replaced(router))
		default:
			if err = r.keepQuorum(ctx, p, ps); err != nil {
				return ro, err
			}
			next, err = r.replaceProc(ctx, p)
		}
		if next != nil {
			ro = next
		}
		if err != nil {
			return ro, err
		}
	}
	return r.update(ctx, unit+" runs the new release: baking", func(ro *control.Rollout) {
		cr := ro.Progress(router)[unit]
		cr.Phase = control.PhaseBaking
		ro.SetProgress(router, unit, cr)
	})
}

// keepQuorum, before an instance of several is taken out, waits until
// enough of its cell's other instances are ready that a majority of them
// all still serves without it: the quorum of the cell's JetStream
// cluster, whose nodes go with the instances (a pod's sidecar, an
// embedded server). Not within ReadyWithin halts the rollout. A cell of
// one process has no quorum to keep.
func (r *Runner) keepQuorum(ctx context.Context, p proc, all []proc) error {
	if !p.rotate {
		return nil
	}
	need := len(all)/2 + 1
	deadline := r.opts.Now().Add(r.cfg.ReadyWithin)
	for {
		var down []string
		for _, o := range all {
			if o.instance == p.instance {
				continue
			}
			if _, ready, why := r.release(ctx, o); !ready {
				down = append(down, o.name()+" ("+why+")")
			}
		}
		ready := len(all) - 1 - len(down)
		if ready >= need {
			return nil
		}
		if !r.opts.Now().Before(deadline) {
			return haltError{fmt.Sprintf("taking %s out would leave %d of %d instances of %s ready, under their quorum of %d; not ready: %s",
				p.name(), ready, len(all), p.unit, need, strings.Join(down, ", "))}
		}
		if !sleep(ctx, 250*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// replaceProc takes one process out of rotation (an instance of several),
// replaces it, waits until it is ready on another release, and puts it
// back. What it ran before is recorded first, for a rollback.
func (r *Runner) replaceProc(ctx context.Context, p proc) (*control.Rollout, error) {
	oldRelease, _, _ := r.release(ctx, p)
	if p.rotate {
		if err := r.rotation(ctx, p.unit, p.instance, true); err != nil {
			return nil, err
		}
		sleep(ctx, r.cfg.Settle)
	}
	before, _, rerr := r.opts.Deployer.Replace(ctx, p.name(), r.spec(p.router).Apply)
	if before.Name == "" {
		return nil, haltError{fmt.Sprintf("replace %s: %v", p.name(), rerr)}
	}
	// What ran before is recorded even when the new one did not start:
	// the rollback puts it back.
	prev, err := json.Marshal(before)
	if err != nil {
		return nil, err
	}
	ro, err := r.update(ctx, fmt.Sprintf("%s replaced (was %s)", p.name(), orDash(oldRelease)), func(ro *control.Rollout) {
		cr := ro.Progress(p.router)[p.unit]
		if cr.Instances == nil {
			cr.Instances, cr.Previous = map[string]string{}, map[string]string{}
		}
		cr.Previous[p.key()] = string(prev)
		cr.Instances[p.key()] = ""
		ro.SetProgress(p.router, p.unit, cr)
		ro.SetReleases(p.router, oldRelease, "")
	})
	if err != nil {
		return ro, err
	}
	if rerr != nil {
		return ro, haltError{fmt.Sprintf("replace %s: %v", p.name(), rerr)}
	}
	return r.finishProc(ctx, p, oldRelease)
}

// finishProc waits until a replaced process is ready on a release other
// than old, records it and puts it back in rotation.
func (r *Runner) finishProc(ctx context.Context, p proc, old string) (*control.Rollout, error) {
	rel, err := r.waitReady(ctx, p, old)
	if err != nil {
		return nil, haltError{fmt.Sprintf("%s: %v", p.name(), err)}
	}
	ro, err := r.update(ctx, fmt.Sprintf("%s ready on %s", p.name(), rel), func(ro *control.Rollout) {
		cr := ro.Progress(p.router)[p.unit]
		cr.Instances[p.key()] = rel
		ro.SetProgress(p.router, p.unit, cr)
		ro.SetReleases(p.router, "", rel)
	})
	if err != nil {
		return ro, err
	}
	if p.rotate {
		return ro, r.rotation(ctx, p.unit, p.instance, false)
	}
	return ro, nil
}

func (r *Runner) rotation(ctx context.Context, cell, instance string, drain bool) error {
	_, err := r.opts.Control.Apply(ctx, control.Change{Plan: control.SetInstanceRotation(cell, instance, drain)})
	if err != nil && !errors.Is(err, slotmap.ErrInvalid) {
		return err
	}
	return nil
}

// waitReady polls the process until it is ready on a release other than
// old; one that is not within ReadyWithin halts the rollout.
func (r *Runner) waitReady(ctx context.Context, p proc, old string) (string, error) {
	deadline := r.opts.Now().Add(r.cfg.ReadyWithin)
	for {
		rel, ready, why := r.release(ctx, p)
		switch {
		case !ready:
		case rel == "" || rel == old:
			why = "ready on the old release " + orDash(rel)
		default:
			return rel, nil
		}
		if !r.opts.Now().Before(deadline) {
			return "", fmt.Errorf("not ready on the new release within %v (%s)", r.cfg.ReadyWithin, why)
		}
		if !sleep(ctx, 250*time.Millisecond) {
			return "", ctx.Err()
		}
	}
}

// rollBack puts every process the rollout replaced in the wave in progress
// back as it ran before, one at a time; units of earlier waves (done,
// baked) and units not reached are left alone.
func (r *Runner) rollBack(ctx context.Context, ro *control.Rollout) (*control.Rollout, error) {
	if ro.Wave >= len(ro.Waves) {
		return ro, nil
	}
	w := ro.Waves[ro.Wave]
	router := len(w.Routers) > 0
	for _, unit := range w.Units() {
		cr := ro.Progress(router)[unit]
		if !cr.Phase.Reached() || cr.Phase == control.PhaseRolledBack {
			continue
		}
		keys := make([]string, 0, len(cr.Previous))
		for k := range cr.Previous {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			var before devstack.Process
			if err := json.Unmarshal([]byte(cr.Previous[k]), &before); err != nil {
				return ro, fmt.Errorf("the record of %s/%s: %w", unit, k, err)
			}
			if err := r.restore(ctx, unit, router, k, before, cr.Instances[k]); err != nil {
				return ro, err
			}
		}
		var err error
		if ro, err = r.update(ctx, unit+" rolled back", func(ro *control.Rollout) {
			c := ro.Progress(router)[unit]
			c.Phase = control.PhaseRolledBack
			ro.SetProgress(router, unit, c)
		}); err != nil {
			return ro, err
		}
	}
	return r.update(ctx, "rolled back: "+ro.Reason, func(ro *control.Rollout) { ro.State = control.RolloutRolledBack })
}

// restore puts one process back as it ran before: out of rotation (an
// instance of several), replaced, ready on a release other than the one
// it was rolled to (when it got that far), back in rotation.
func (r *Runner) restore(ctx context.Context, unit string, router bool, key string, before devstack.Process, rolledTo string) error {
	ps, err := r.procs(ctx, unit, router)
	if err != nil {
		return fmt.Errorf("roll back %s: %w", before.Name, err)
	}
	i := slices.IndexFunc(ps, func(p proc) bool { return p.key() == key })
	if i < 0 {
		return fmt.Errorf("roll back %s: no longer in the map", before.Name)
	}
	p := ps[i]
	if err := r.keepQuorum(ctx, p, ps); err != nil {
		return fmt.Errorf("roll back %s: %w", before.Name, err)
	}
	if p.rotate {
		if err := r.rotation(ctx, p.unit, p.instance, true); err != nil {
			return err
		}
		sleep(ctx, r.cfg.Settle)
	}
	if _, _, err := r.opts.Deployer.Replace(ctx, before.Name, func(devstack.Process) devstack.Process { return before }); err != nil {
		return fmt.Errorf("roll back %s: %w", before.Name, err)
	}
	if _, err := r.waitReady(ctx, p, rolledTo); err != nil {
		return fmt.Errorf("roll back %s: %w", before.Name, err)
	}
	r.say("%s put back as it ran before", before.Name)
	if p.rotate {
		return r.rotation(ctx, p.unit, p.instance, false)
	}
	return nil
}
