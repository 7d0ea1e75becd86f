package drill

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/loadtest"
	"github.com/cellkit/cellkit/internal/operator/api/v1alpha1"
	"github.com/cellkit/cellkit/internal/release"
)

// FailingImage is the tarball of the release drill's bad cell image on
// the cluster (make cluster-images: bin/faults/cell-failing's build as
// an image, a fifth of its inquiries failed).
const FailingImage = "cell-failing.tar"

// k8sRelease is one release of K8sRelease: what the Cells were changed
// to, the operator's rollout of it and the cells' releases around it.
type k8sRelease struct {
	name          string
	from, to      time.Duration
	ro            *control.Rollout
	before, after map[string][]string
}

// K8sRelease: under load, two releases put out by the operator as a
// user puts them out, by changing the Cells' spec: a good one (a
// setting, record-ttl, of the run's own: runTTL) goes through every cell, the first by
// name alone (the canary) and then the rest, pod by pod, with no request
// failed beyond the refusals of instances leaving the rotation; then a
// bad one (FailingImage, a build that fails a fifth of its inquiries) is
// halted by the failures gate within the canary's bake and rolled back,
// the canary back on its release, the other cells never touched and
// their users served. Each Cell's image and flags are then put back as
// its pods run them after the rollbacks (no release). Every accepted
// inquiry ends final. One
// piece: the two releases run one after the other under one load, and
// the checks read what both did.
func K8sRelease(ctx context.Context, c K8sConfig) (*loadtest.Result, error) {
	c = c.withDefaults()
	n, err := newK8sRun(ctx, &c, c.Baseline+2*ReleaseWithin+c.After)
	if err != nil {
		return nil, err
	}
	defer n.close()
	bad, ok := n.rec.Image(FailingImage)
	if !ok {
		return nil, fmt.Errorf("the cluster has no image of %s (make cluster-images, then make cluster)", FailingImage)
	}
	cells, err := n.cells(ctx)
	if err != nil {
		return nil, err
	}
	ids, err := runningTheirSpec(cells)
	if err != nil {
		return nil, err
	}
	ttl := runTTL(time.Now())
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	wait := startLoad(lctx, n.r)
	var outs []k8sRelease
	actErr := func() error {
		if err := sleepUntil(ctx, n.r, c.Baseline); err != nil {
			return err
		}
		for _, k := range []struct {
			name   string
			change func(*v1alpha1.CellSpec)
		}{
			{"good", func(s *v1alpha1.CellSpec) { s.Set = setFlag(s.Set, ttl) }},
			{"failing", func(s *v1alpha1.CellSpec) { s.Image, s.Set = bad, setFlag(s.Set, ttl) }},
		} {
			o, err := n.putOut(ctx, k.name, ids, k.change)
			if err != nil {
				return err
			}
			outs = append(outs, o)
		}
		return nil
	}()
	// Each Cell's spec back to what its pods run, also after a failed
	// step: a halted release's spec left in place would hold the next run.
	if err := n.specAsRun(ctx, ids); err != nil {
		actErr = errors.Join(actErr, fmt.Errorf("putting the Cells' spec back: %w", err))
	}
	if actErr == nil {
		actErr = sleepUntil(ctx, n.r, n.r.Elapsed()+c.After)
	}
	stop()
	res, err := loadEnded("k8s-release", wait, actErr)
	if err != nil {
		return res, err
	}
	d := &loadtest.Verdict{Name: "k8s-release"}
	owner := loadtest.UserCells(res.Samples, 0, c.Baseline)
	for _, o := range outs {
		checkK8sRelease(d, res, o, ids, owner)
	}
	n.finish(ctx, d, res)
	return res, nil
}

// runningTheirSpec returns the names of cells, which must be two or
// more, each running the release its spec asks for: a drill whose first
// release finds a spec already changed (a release halted and rolled back
// before, its spec left as it was) would wait for a rollout that never
// starts. They may run different releases (a release halted in its second
// wave leaves the canary on it): both of the drill's releases set the
// same image and flags on every Cell, one rollout each.
func runningTheirSpec(cells []v1alpha1.Cell) ([]string, error) {
	if len(cells) < 2 {
		return nil, fmt.Errorf("the drill needs two Cells or more, has %d", len(cells))
	}
	var ids []string
	for _, x := range cells {
		if k := condition(&x, v1alpha1.ConditionReleased); k == nil || !k.True {
			why := "no Released condition"
			if k != nil {
				why = k.Message
			}
			return nil, fmt.Errorf("the Cell %s does not run its spec's release (%s): put its spec back as its pods run, or let its rollout end", x.Name, why)
		}
		ids = append(ids, x.Name)
	}
	return ids, nil
}

// checkK8sRelease checks one release of K8sRelease: the good one went
// through every cell with nothing failed beyond refusals; a bad one was
// halted by the failures gate in the canary wave and rolled back, the
// other cells untouched. owner maps each user to its cell before the
// releases.
func checkK8sRelease(d *loadtest.Verdict, res *loadtest.Result, o k8sRelease, ids []string, owner map[int]string) {
	ro := o.ro
	took := fmt.Sprintf("%.1fs", (o.to - o.from).Seconds())
	if o.name == "good" {
		var reached []string
		for _, w := range ro.Waves {
			reached = append(reached, w.Cells...)
		}
		slices.Sort(reached)
		d.Check("good: went through every cell", ro.State == control.RolloutDone && ro.Wave == len(ro.Waves) && slices.Equal(reached, ids),
			fmt.Sprintf("%s at wave %d of %d over %v in %s", ro.State, ro.Wave, len(ro.Waves), reached, took), fmt.Sprintf("done over %v", ids))
		on := 0
		for _, id := range ids {
			if len(o.after[id]) == 1 && !slices.Equal(o.after[id], o.before[id]) {
				on++
			}
		}
		d.Check("good: every cell's pods on the new release", on == len(ids), fmt.Sprintf("%d of %d: %v", on, len(ids), o.after), "all")
		failed := failuresBeyondRefusals(res.Samples, o.from, o.to)
		all := loadtest.Window{From: o.from, To: o.to}.Stats(res.Samples)
		d.Check("good: failed requests beyond refusals", failed == 0, fmt.Sprintf("%d of %d %v", failed, all.N, all.Status), "0")
		return
	}
	if len(ro.Waves) == 0 || len(ro.Waves[0].Cells) == 0 {
		d.Check(o.name+": halted in the canary wave and rolled back", false, "a rollout of no wave", "rolled_back at wave 1")
		return
	}
	canary := ro.Waves[0].Cells[0]
	d.Check(o.name+": halted in the canary wave and rolled back", ro.State == control.RolloutRolledBack && ro.Wave == 0,
		fmt.Sprintf("%s at wave %d in %s: %s", ro.State, ro.Wave+1, took, ro.Reason), "rolled_back at wave 1")
	// The canary's figures from before, its three pods replaced one by
	// one, its bake.
	bound := 2*ro.Waves[0].Bake + 3*time.Minute
	h := halted(ro)
	d.Check(o.name+": halted within the canary's bake", h > 0 && h <= bound, fmt.Sprintf("%.1fs after the start", h.Seconds()), "≤ "+bound.String())
	d.Check(o.name+": halted by the failures gate", strings.Contains(ro.Reason, "fail failed inquiries"), gateOf(ro.Reason), "fail failed inquiries")
	d.Check(o.name+": the canary back on its release", slices.Equal(o.after[canary], o.before[canary]),
		fmt.Sprint(o.after[canary]), fmt.Sprint(o.before[canary]))
	touched := 0
	for _, id := range ids {
		if id == canary {
			return
		}
		if !slices.Equal(o.after[id], o.before[id]) {
			touched++
		}
		if _, reached := ro.Cells[id]; reached {
			touched++
		}
	}
	d.Check(o.name+": the other cells never touched", touched == 0, fmt.Sprintf("%d changed or reached of %d", touched, len(ids)-1), "0")
	others := func(u int) bool { return owner[u] != canary && owner[u] != "" }
	elsewhere := loadtest.Window{From: o.from, To: o.to, Users: others}.Stats(res.Samples)
	d.Check(o.name+": the other cells' users' errors", elsewhere.N > 0 && elsewhere.Errors == 0,
		fmt.Sprintf("%d of %d %v", elsewhere.Errors, elsewhere.N, elsewhere.Status), "0")
	mine := loadtest.Window{From: o.from, To: o.to, Users: func(u int) bool { return owner[u] == canary }}.Stats(res.Samples)
	d.Note("%s: the canary %s's users: %d of %d requests answered otherwise than 202 %v", o.name, canary, mine.N-mine.OK, mine.N, mine.Status)
}

// runTTL is the good release's record-ttl, one of its own for each run
// (hours from 25 up, by the minute the run starts): the operator does not
// put out again a release it rolled back before, so a run after one whose
// good release was halted must ask for another.
func runTTL(at time.Time) string {
	return fmt.Sprintf("record-ttl=%dh", 25+at.Unix()/60%1000)
}

// setFlag is set with name=value in place of any name=… it holds, or
// added; set itself untouched.
func setFlag(set []string, flag string) []string {
	name, _, _ := strings.Cut(flag, "=")
	out := slices.DeleteFunc(slices.Clone(set), func(f string) bool {
		n, _, _ := strings.Cut(f, "=")
		return n == name
	})
	return append(out, flag)
}

// specAsRun sets each Cell's image and flags to the release its pods run
// (a release halted in its second wave leaves the canary on it, the rest
// rolled back): no rollout follows. A Cell whose pods still run two
// releases (a rollback under way when a step gave up waiting) is waited
// for, up to specSettle.
func (n *k8sRun) specAsRun(ctx context.Context, ids []string) error {
	for _, id := range ids {
		var runs []release.Spec
		err := until(ctx, specSettle, "the pods of "+id+" to run one release", func(ctx context.Context) (bool, error) {
			pods, err := n.cellPods(ctx, id)
			if err != nil {
				return false, err
			}
			runs = runs[:0]
			for i := range pods {
				s, err := podRelease(&pods[i])
				if err != nil {
					return false, err
				}
				if !slices.ContainsFunc(runs, func(r release.Spec) bool { return releaseText(r) == releaseText(s) }) {
					runs = append(runs, s)
				}
			}
			if len(runs) != 1 {
				return false, fmt.Errorf("they run %d releases", len(runs))
			}
			return true, nil
		})
		if err != nil {
			return err
		}
		if err := n.patchCells(ctx, []string{id}, func(s *v1alpha1.CellSpec) { s.Image, s.Set = runs[0].Image, runs[0].Set }); err != nil {
			return err
		}
	}
	return nil
}

// specSettle bounds the wait for a Cell's pods to run one release: a
// rollback of three pods on the one-node cluster takes about two minutes.
const specSettle = 5 * time.Minute

// patchCells changes the spec of the Cells ids, one patch each, back to
// back: the operator's releaser takes the cells that ask for one release
// together (it looks every 10 s).
func (n *k8sRun) patchCells(ctx context.Context, ids []string, change func(*v1alpha1.CellSpec)) error {
	for _, id := range ids {
		x, err := n.cell(ctx, id)
		if err != nil {
			return err
		}
		old := x.DeepCopy()
		change(&x.Spec)
		if err := n.kc.Patch(ctx, x, client.MergeFrom(old)); err != nil {
			return fmt.Errorf("the Cell %s: %w", id, err)
		}
	}
	return nil
}

// putOut changes the Cells' spec as change says and waits until the
// operator's rollout of it has ended (done, rolled back or aborted) and
// every cell is ready again, marking its steps on the load's chart.
func (n *k8sRun) putOut(ctx context.Context, name string, ids []string, change func(*v1alpha1.CellSpec)) (k8sRelease, error) {
	o := k8sRelease{name: name}
	prev, err := n.ctl.Rollout(ctx)
	if err != nil && !errors.Is(err, control.ErrNoRollout) {
		return o, err
	}
	if prev != nil && prev.State.Active() {
		return o, fmt.Errorf("rollout %s is %s: a drill starts from no release in progress", prev.ID, prev.State)
	}
	if o.before, err = n.cellReleases(ctx, ids); err != nil {
		return o, err
	}
	o.from = n.r.Elapsed()
	n.r.Mark("release " + name)
	n.c.logf("release %s at %.1fs", name, o.from.Seconds())
	if err := n.patchCells(ctx, ids, change); err != nil {
		return o, err
	}
	marked := 0
	err = until(ctx, ReleaseWithin, "the operator's rollout of "+name, func(ctx context.Context) (bool, error) {
		ro, err := n.ctl.Rollout(ctx)
		switch {
		case errors.Is(err, control.ErrNoRollout):
			return false, nil
		case err != nil:
			return false, err
		case prev != nil && ro.ID == prev.ID:
			return false, nil
		}
		if marked > len(ro.Events) {
			marked = 0
		}
		for _, e := range ro.Events[marked:] {
			n.c.logf("%s: %s", name, e.Text)
			if m, ok := waveMark(e.Text); ok {
				n.r.Mark(name + ": " + m)
			}
		}
		marked = len(ro.Events)
		o.ro = ro
		return !ro.State.Active(), nil
	})
	if err != nil {
		return o, err
	}
	if err := until(ctx, n.c.Within, "every cell ready after the release "+name, func(ctx context.Context) (bool, error) {
		for _, id := range ids {
			x, err := n.cell(ctx, id)
			if err != nil {
				return false, err
			}
			if k := condition(x, v1alpha1.ConditionReady); k == nil || !k.True {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return o, err
	}
	o.to = n.r.Elapsed()
	n.r.Mark(fmt.Sprintf("%s: %s", name, o.ro.State))
	n.c.logf("release %s %s at %.1fs: %s", name, o.ro.State, o.to.Seconds(), o.ro.Reason)
	o.after, err = n.cellReleases(ctx, ids)
	return o, err
}
