package rollout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/gate"
	"github.com/cellkit/cellkit/internal/release"
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
	// deployed is the deployer's name for it ("": the deployer lists no
	// process of this cell and instance, or there is no deployer).
	deployed string
}

// name is the deployer's name for it, else the cell and instance.
func (p proc) name() string {
	switch {
	case p.deployed != "":
		return p.deployed
	case p.instance == "":
		return p.unit
	}
	return p.unit + "/" + p.instance
}

// key is its entry in its unit's progress.
func (p proc) key() string { return instanceKey(p.instance) }

// program is what its binary must say it is.
func (p proc) program() string {
	if p.router {
		return "router"
	}
	return "cell"
}

func instanceKey(id string) string {
	if id == "" {
		return "-"
	}
	return id
}

// spec is the release for p's kind of process.
func (r *Runner) spec(router bool) release.Spec {
	if router {
		return r.cfg.Router
	}
	return r.cfg.Spec
}

// procs are the processes of a cell (from the map: its instances, or
// itself, as cellProcs orders them) or of a router (from the deployer).
func (r *Runner) procs(ctx context.Context, unit string, router bool) ([]proc, error) {
	listed, err := r.listed(ctx)
	if err != nil {
		return nil, err
	}
	if router {
		i := slices.IndexFunc(listed, func(p release.Process) bool { return p.Router && p.Name == unit })
		if i < 0 {
			return nil, haltError{fmt.Sprintf("router %s is no longer among the deployer's processes", unit)}
		}
		p, err := routerProc(listed[i])
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
	return cellProcs(c, listed), nil
}

// listed are the deployer's processes, in its order; none without a
// deployer (the gates alone).
func (r *Runner) listed(ctx context.Context) ([]release.Process, error) {
	if r.opts.Deployer == nil {
		return nil, nil
	}
	return r.opts.Deployer.Processes(ctx)
}

// cellProcs are cell c's processes — its instances, or itself — each
// named as the deployer lists the process of its cell and instance, in
// the order the deployer lists them (a cluster's deployer lists the
// order it replaces them in); instances it does not list follow, in the
// map's order.
func cellProcs(c slotmap.Cell, listed []release.Process) []proc {
	index := func(instance string) int {
		return slices.IndexFunc(listed, func(p release.Process) bool {
			return !p.Router && p.Cell == c.ID && p.Instance == instance
		})
	}
	if len(c.Instances) == 0 {
		p := proc{unit: c.ID, admin: c.Admin}
		if i := index(""); i >= 0 {
			p.deployed = listed[i].Name
		}
		return []proc{p}
	}
	out := make([]proc, 0, len(c.Instances))
	at := map[string]int{}
	for _, in := range c.Instances {
		p := proc{unit: c.ID, instance: in.ID, admin: in.Admin, rotate: len(c.Instances) > 1}
		i := index(in.ID)
		if i >= 0 {
			p.deployed = listed[i].Name
		} else {
			i = len(listed)
		}
		at[in.ID] = i
		out = append(out, p)
	}
	slices.SortStableFunc(out, func(a, b proc) int { return cmp.Compare(at[a.instance], at[b.instance]) })
	return out
}

// routerProc is the deployer's router p as a process to replace: its
// admin API is its readiness URL's.
func routerProc(p release.Process) (proc, error) {
	base, ok := strings.CutSuffix(p.Ready, "/readyz")
	if !ok {
		return proc{}, fmt.Errorf("router %s: its readiness URL %q is not its admin API's /readyz", p.Name, p.Ready)
	}
	return proc{unit: p.Name, router: true, admin: base, deployed: p.Name}, nil
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

// started is p's start time (process_start_time_seconds, Unix seconds;
// 0 when it cannot be read).
func (r *Runner) started(ctx context.Context, p proc) float64 {
	mfs, err := r.opts.Admin.Metrics(ctx, p.admin)
	if err != nil {
		return 0
	}
	t, _ := gate.StartedOf(mfs)
	return t
}

// command is what the deployer runs as p now (its binary or image, and
// arguments) and the release p reports.
func (r *Runner) command(ctx context.Context, p proc) (control.Command, error) {
	if p.deployed == "" {
		return control.Command{}, haltError{fmt.Sprintf("%s is not among the deployer's processes", p.name())}
	}
	listed, err := r.listed(ctx)
	if err != nil {
		return control.Command{}, err
	}
	i := slices.IndexFunc(listed, func(q release.Process) bool { return q.Name == p.deployed })
	if i < 0 {
		return control.Command{}, haltError{fmt.Sprintf("%s is no longer among the deployer's processes", p.name())}
	}
	rel, _, _ := r.release(ctx, p)
	run := listed[i].Run
	return control.Command{Release: rel, Bin: run.Bin, Image: run.Image, Args: slices.Clone(run.Args)}, nil
}

// target is what the release runs in place of before: its binary or
// image, its flags on top of before's arguments (never on top of a
// process the rollout replaced already).
func (r *Runner) target(p proc, before control.Command) control.Command {
	return r.spec(p.router).Apply(before)
}

// replace has the deployer run c as p (c's release is what p reported,
// not the deployer's to know).
func (r *Runner) replace(ctx context.Context, p proc, c control.Command) error {
	if r.opts.Deployer == nil {
		return fmt.Errorf("no deployer to replace %s", p.name())
	}
	c.Release = ""
	_, err := r.opts.Deployer.Replace(ctx, p.deployed, c)
	return err
}

// replaceUnit replaces a cell's processes, or a router, one at a time,
// each from where its record stands; it stops after the process in hand
// once the rollout is no longer running (paused, halted, aborted).
func (r *Runner) replaceUnit(ctx context.Context, ro *control.Rollout, unit string, router bool) (*control.Rollout, error) {
	ps, err := r.procs(ctx, unit, router)
	if err != nil {
		return ro, err
	}
	wave := ro.Wave
	if ro.Progress(router)[unit].Phase != control.PhaseReplacing {
		ro, err = r.update(ctx, "replacing "+unit, func(ro *control.Rollout) error {
			if err := expect(ro, control.RolloutRunning); err != nil || ro.Wave != wave {
				return errStopped
			}
			cr := ro.Progress(router)[unit]
			cr.Phase = control.PhaseReplacing
			ro.SetProgress(router, unit, cr)
			return nil
		})
		if err != nil {
			return ro, err
		}
	}
	for _, p := range ps {
		if ro, err = r.replaceProc(ctx, ro, p, ps); err != nil {
			return ro, err
		}
	}
	return r.update(ctx, unit+" runs the new release: baking", func(ro *control.Rollout) error {
		if err := expect(ro, control.RolloutRunning); err != nil || ro.Wave != wave {
			return errStopped
		}
		cr := ro.Progress(router)[unit]
		for _, p := range ps {
			if cr.Processes[p.key()].Step != control.StepServing {
				return fmt.Errorf("%s is %s, not serving the new release", p.name(), orDash(string(cr.Processes[p.key()].Step)))
			}
		}
		cr.Phase = control.PhaseBaking
		ro.SetProgress(router, unit, cr)
		return nil
	})
}

// replaceProc takes one process from where its record stands to serving
// the new release: recorded (what it runs, whether it is in rotation),
// out of rotation (an instance of several that was in it), replaced by
// the target (unless it already runs it), ready on another release than
// before, back in rotation as it was.
func (r *Runner) replaceProc(ctx context.Context, ro *control.Rollout, p proc, all []proc) (*control.Rollout, error) {
	pr, known := ro.Progress(p.router)[p.unit].Processes[p.key()]
	var err error
	if !known {
		if ro, pr, err = r.begin(ctx, ro, p, all); err != nil {
			return ro, err
		}
	}
	switch pr.Step {
	case control.StepServing:
		return ro, nil
	case control.StepReplacing:
		if ro, pr, err = r.replaceOnce(ctx, ro, p, pr); err != nil {
			return ro, err
		}
	case control.StepReady:
	default:
		return ro, fmt.Errorf("%s is %s: it is being rolled back, not out", p.name(), pr.Step)
	}
	if p.rotate && !pr.OutBefore {
		if err := r.setRotation(ctx, p, false); err != nil {
			return ro, err
		}
	}
	return r.step(ctx, ro, p, control.StepReady, control.StepServing, fmt.Sprintf("%s serves %s", p.name(), pr.Release), nil)
}

// begin records a process about to be replaced — what it runs and
// whether an operator had it out of rotation — before anything is done
// to it; the write must succeed first. Only while the rollout runs, with
// the process's cell keeping its quorum and its service without it.
func (r *Runner) begin(ctx context.Context, ro *control.Rollout, p proc, all []proc) (*control.Rollout, control.ProcessRollout, error) {
	if err := r.keepQuorum(ctx, p, all); err != nil {
		return ro, control.ProcessRollout{}, err
	}
	before, err := r.command(ctx, p)
	if err != nil {
		return ro, control.ProcessRollout{}, err
	}
	if err := r.validate(p, before); err != nil {
		return ro, control.ProcessRollout{}, haltError{err.Error()}
	}
	pr := control.ProcessRollout{Step: control.StepReplacing, Before: before}
	if p.rotate {
		if pr.OutBefore, err = r.outOfRotation(ctx, p); err != nil {
			return ro, pr, err
		}
	}
	wave := ro.Wave
	ro, err = r.update(ctx, fmt.Sprintf("replacing %s (runs %s)", p.name(), orDash(before.Release)), func(ro *control.Rollout) error {
		if err := expect(ro, control.RolloutRunning); err != nil || ro.Wave != wave {
			return errStopped
		}
		cr := ro.Progress(p.router)[p.unit]
		if _, ok := cr.Processes[p.key()]; ok {
			return fmt.Errorf("%s: recorded meanwhile by another driver", p.name())
		}
		cr.SetProcess(p.key(), pr)
		ro.SetProgress(p.router, p.unit, cr)
		ro.SetReleases(p.router, before.Release, "")
		return nil
	})
	return ro, pr, err
}

// replaceOnce does what StepReplacing records: out of rotation, the
// target run (unless the deployer runs it already and it answers on
// another release than before: a driver stopped after the replace; or
// it ran the rollout's release before it was reached: a rollout run
// again after a halt), ready on the new release. A process that answers
// on the release it ran before is ready on the new one only when that
// is the rollout's release or when it started anew since the replace
// (the release asked for is the one it ran): otherwise it is the old
// process still answering.
func (r *Runner) replaceOnce(ctx context.Context, ro *control.Rollout, p proc, pr control.ProcessRollout) (*control.Rollout, control.ProcessRollout, error) {
	if p.rotate && !pr.OutBefore {
		if err := r.setRotation(ctx, p, true); err != nil {
			return ro, pr, err
		}
		sleep(ctx, r.cfg.Settle)
	}
	target := r.target(p, pr.Before)
	cur, err := r.command(ctx, p)
	if err != nil {
		return ro, pr, err
	}
	var since time.Time // when p's cell writes the ledger from, read before p is replaced
	if !p.router {
		since = r.ledgerSince(ctx, p)
	}
	onIt := pr.Before.Release != "" && pr.Before.Release == ro.NewRelease(p.router)
	started := r.started(ctx, p)
	if !onIt && (!cur.Same(target) || cur.Release == "" || cur.Release == pr.Before.Release) {
		if err := r.held(ctx); err != nil {
			return ro, pr, err
		}
		if err := r.replace(ctx, p, target); err != nil {
			return ro, pr, haltError{fmt.Sprintf("replace %s: %v", p.name(), err)}
		}
	}
	rel, err := r.waitReady(ctx, p, "on the new release", func(rel string) string {
		switch {
		case rel != "" && (rel != pr.Before.Release || onIt):
			return ""
		case rel != "" && started != 0 && r.started(ctx, p) > started:
			return "" // a new process, on the release it ran before
		}
		return "ready on the old release " + orDash(rel)
	})
	if err != nil {
		return ro, pr, haltError{fmt.Sprintf("%s: %v", p.name(), err)}
	}
	if !p.router {
		var halt haltError
		if err := r.knowsLedger(ctx, p, since); errors.As(err, &halt) {
			return ro, pr, halt
		} else if err != nil {
			return ro, pr, haltError{fmt.Sprintf("%s: its layout cannot be read: %v", p.name(), err)}
		}
	}
	pr.Step, pr.Release = control.StepReady, rel
	ro, err = r.step(ctx, ro, p, control.StepReplacing, control.StepReady, fmt.Sprintf("%s ready on %s", p.name(), rel), func(ro *control.Rollout, q *control.ProcessRollout) {
		q.Release = rel
		ro.SetReleases(p.router, "", rel)
	})
	return ro, pr, err
}

// step moves p's record from step from to step to (refused if it is no
// longer at from), with more changes, and says event.
func (r *Runner) step(ctx context.Context, ro *control.Rollout, p proc, from, to control.ProcessStep, event string, more func(*control.Rollout, *control.ProcessRollout)) (*control.Rollout, error) {
	return r.update(ctx, event, func(ro *control.Rollout) error {
		cr := ro.Progress(p.router)[p.unit]
		q, ok := cr.Processes[p.key()]
		if !ok || q.Step != from {
			return fmt.Errorf("%s is %s, not %s: another driver moved it", p.name(), orDash(string(q.Step)), from)
		}
		q.Step = to
		if more != nil {
			more(ro, &q)
		}
		cr.SetProcess(p.key(), q)
		ro.SetProgress(p.router, p.unit, cr)
		return nil
	})
}

// validate refuses a command that is not p's program with arguments,
// as a release is refused at start: a record read back is checked like
// a release given on the command line.
func (r *Runner) validate(p proc, c control.Command) error {
	if err := (release.Spec{Bin: c.Bin, Image: c.Image}).Validate(p.program()); err != nil {
		return fmt.Errorf("%s runs %s: %w", p.name(), orDash(c.Bin+c.Image), err)
	}
	for _, a := range c.Args {
		if strings.ContainsRune(a, 0) || len(a) > maxArg {
			return fmt.Errorf("%s: an argument of %d bytes, or with a NUL, is not one a deployer gave it", p.name(), len(a))
		}
		if name, _, ok := strings.Cut(strings.TrimLeft(a, "-"), "="); ok && strings.HasPrefix(a, "-") && secretFlag(name) {
			return fmt.Errorf("%s: its flag --%s carries a secret, which the rollout's record would keep: give it as a file (--%s-file)", p.name(), name, name)
		}
	}
	if len(c.Args) > maxArgs {
		return fmt.Errorf("%s: %d arguments, more than %d", p.name(), len(c.Args), maxArgs)
	}
	return nil
}

// secretFlag says whether a flag's value is a secret itself (a token,
// a password), not a file holding one.
func secretFlag(name string) bool {
	name = strings.ToLower(name)
	return !strings.HasSuffix(name, "-file") &&
		(strings.Contains(name, "token") || strings.Contains(name, "password") || strings.Contains(name, "secret"))
}

// Bounds on a recorded process's arguments.
const (
	maxArgs = 512
	maxArg  = 4096
)

// keepQuorum, before an instance of several is taken out, waits until
// enough of its cell's other instances are ready that a majority of them
// all still serves without it — the quorum of the cell's JetStream
// cluster, whose nodes go with the instances (a pod's sidecar, an
// embedded server) — and, when it is in the routers' rotation, until
// another instance in rotation is ready: a cell's last instance in
// rotation is never replaced while it serves alone. Not within
// ReadyWithin halts the rollout. A cell of one process has no quorum to
// keep.
func (r *Runner) keepQuorum(ctx context.Context, p proc, all []proc) error {
	if !p.rotate {
		return nil
	}
	need := len(all)/2 + 1
	deadline := r.opts.Now().Add(r.cfg.ReadyWithin)
	for {
		m, err := r.opts.Control.Load(ctx)
		if err != nil {
			return err
		}
		c, _ := m.Cell(p.unit)
		inRotation := func(id string) bool {
			i := slices.IndexFunc(c.Instances, func(in slotmap.Instance) bool { return in.ID == id })
			return i >= 0 && !c.Instances[i].Drained
		}
		var down []string
		serving := 0
		for _, o := range all {
			if o.instance == p.instance {
				continue
			}
			if _, ready, why := r.release(ctx, o); !ready {
				down = append(down, o.name()+" ("+why+")")
			} else if inRotation(o.instance) {
				serving++
			}
		}
		ready := len(all) - 1 - len(down)
		alone := inRotation(p.instance) && serving == 0
		if ready >= need && !alone {
			return nil
		}
		if !r.opts.Now().Before(deadline) {
			if alone {
				return haltError{fmt.Sprintf("%s is the last instance of %s in the routers' rotation that is ready: it is not replaced while it serves alone; not ready: %s",
					p.name(), p.unit, orDash(strings.Join(down, ", ")))}
			}
			return haltError{fmt.Sprintf("taking %s out would leave %d of %d instances of %s ready, under their quorum of %d; not ready: %s",
				p.name(), ready, len(all), p.unit, need, strings.Join(down, ", "))}
		}
		if !sleep(ctx, 250*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// outOfRotation says whether the map has instance p out of the routers'
// rotation.
func (r *Runner) outOfRotation(ctx context.Context, p proc) (bool, error) {
	m, err := r.opts.Control.Load(ctx)
	if err != nil {
		return false, err
	}
	in, err := control.KnownInstance(m, p.unit, p.instance)
	if err != nil {
		return false, haltError{err.Error()}
	}
	return in.Drained, nil
}

// setRotation takes instance p out of the routers' rotation (out) or
// puts it back; one already so is left as it is. A refusal (the cell's
// last instance in rotation) halts the rollout.
func (r *Runner) setRotation(ctx context.Context, p proc, out bool) error {
	if is, err := r.outOfRotation(ctx, p); err != nil || is == out {
		return err
	}
	if err := r.held(ctx); err != nil {
		return err
	}
	_, err := r.opts.Control.Apply(ctx, control.Change{Plan: control.SetInstanceRotation(p.unit, p.instance, out)})
	if errors.Is(err, slotmap.ErrInvalid) {
		if is, lerr := r.outOfRotation(ctx, p); lerr == nil && is == out {
			return nil // set so by another meanwhile
		}
		return haltError{err.Error()}
	}
	return err
}

// waitReady polls the process until it is ready on a release wrong has
// nothing against ("" from wrong), the release it should be ready on
// said by on; one that is not within ReadyWithin halts the rollout.
func (r *Runner) waitReady(ctx context.Context, p proc, on string, wrong func(rel string) string) (string, error) {
	deadline := r.opts.Now().Add(r.cfg.ReadyWithin)
	for {
		rel, ready, why := r.release(ctx, p)
		if ready {
			if why = wrong(rel); why == "" {
				return rel, nil
			}
		}
		if !r.opts.Now().Before(deadline) {
			return "", fmt.Errorf("not ready %s within %v (%s)", on, r.cfg.ReadyWithin, why)
		}
		if !sleep(ctx, 250*time.Millisecond) {
			return "", ctx.Err()
		}
	}
}
