package operator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/operator/api/v1alpha1"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// wanted is cell as its spec puts it in the map: its Service's URLs, its
// instances' under the headless Service, its weight and capacity.
func wanted(cell *v1alpha1.Cell) slotmap.Cell {
	e := EndpointsOf(cell.Namespace, cell.Name, int(cell.Spec.Instances))
	c := slotmap.Cell{ID: cell.Name, Weight: int(cell.Spec.Weight), Intake: e.Intake, Admin: e.Admin, Capacity: int(cell.Spec.Capacity)}
	for _, in := range e.Instances {
		c.Instances = append(c.Instances, slotmap.Instance{ID: in.ID, Intake: in.Intake, Admin: in.Admin})
	}
	return c
}

// syncMap makes the map hold the cell as its spec says, one plan at a
// time through the control transaction (each applied plan an event with
// the share it moved), then reads its slots and queue into the status.
// A plan refused (the last active cell drained, a share over the
// agency's limit, the id in the map with another cell's endpoints) is the
// InMap condition with the reason, and nothing changes; an unreachable
// registry is the same condition and an error, retried with backoff.
func (r *Reconciler) syncMap(ctx context.Context, cell *v1alpha1.Cell, st *status) (ctrl.Result, error) {
	for range maxSteps {
		m, err := r.opts.Control.Load(ctx)
		if err != nil {
			st.fail(v1alpha1.ConditionInMap, "RegistryUnreachable", err.Error())
			return ctrl.Result{}, err
		}
		st.mapVersion = m.Version()
		if err := r.apply(ctx, agencyLimits(cell.Namespace, m.Agencies()), nil); err != nil {
			return ctrl.Result{}, err
		}
		what, plan, err := r.nextStep(cell, m)
		if err != nil {
			st.fail(v1alpha1.ConditionInMap, "Refused", err.Error())
			return ctrl.Result{RequeueAfter: r.cfg.Recheck}, nil
		}
		if plan == nil {
			return r.inMap(ctx, cell, st, m)
		}
		if what == "drain" {
			res, _, err := r.drain(ctx, cell, st, false)
			return res, err
		}
		if what == "undrain" && !r.intakesOpen(ctx, cell, st, m) {
			return ctrl.Result{RequeueAfter: intakesRecheck}, nil
		}
		if done, err := r.change(ctx, cell, st, what, plan); !done {
			return ctrl.Result{RequeueAfter: r.cfg.Recheck}, err
		}
	}
	return ctrl.Result{RequeueAfter: time.Second}, nil
}

// intakesRecheck is how often a cell about to take slots is looked at
// again while its instances' intakes do not open: the pods' readiness
// does not change meanwhile (a cell without slots has no sessions), so
// no watch brings it back sooner.
const intakesRecheck = time.Second

// intakesOpen opens the intake of every instance of cell (a new cell's
// opens by itself once the map names it; a drained one's was closed by
// its drain) and says whether they all are: slots move onto a cell only
// then, or its users would be refused by a process still starting. Until
// then the InMap condition says what it waits for.
func (r *Reconciler) intakesOpen(ctx context.Context, cell *v1alpha1.Cell, st *status, m *slotmap.Map) bool {
	have, _ := m.Cell(cell.Name)
	if err := r.opts.Admin.SetIntakes(ctx, have, true); err != nil {
		st.fail(v1alpha1.ConditionInMap, "IntakesNotOpen", fmt.Sprintf("%s with no slots until every instance's intake is open: %v", have.State, err))
		return false
	}
	return true
}

// AgencyLimits is the ConfigMap, in each namespace with Cells, that holds
// the map's agencies' session limits (NAME: LIMIT): the parameter of the
// admission policy that refuses a Cell's share over its agency's limit
// (deploy/kubernetes/operator/admission.yaml).
const AgencyLimits = "cellkit-agencies"

func agencyLimits(ns string, limits map[string]int) *corev1.ConfigMap {
	data := make(map[string]string, len(limits))
	for a, n := range limits {
		data[a] = strconv.Itoa(n)
	}
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: AgencyLimits, Namespace: ns, Labels: map[string]string{LabelPartOf: "cellkit"}},
		Data:       data,
	}
}

// ours says whether the map's cell have is the one want describes: its
// URLs are want's Service's or one of want's instances' (a cell with
// instances is reached at its first in rotation), and each of its
// instances is one of want's.
func ours(have, want slotmap.Cell) bool {
	same := func(intake, admin string) bool {
		if intake == want.Intake && admin == want.Admin {
			return true
		}
		return slices.ContainsFunc(want.Instances, func(in slotmap.Instance) bool { return in.Intake == intake && in.Admin == admin })
	}
	if !same(have.Intake, have.Admin) {
		return false
	}
	for _, in := range have.Instances {
		if !slices.ContainsFunc(want.Instances, func(w slotmap.Instance) bool { return w.ID == in.ID && w.Intake == in.Intake && w.Admin == in.Admin }) {
			return false
		}
	}
	return true
}

// maxSteps bounds the plans one reconcile applies (a new cell: provision,
// a share per agency, a drain).
const maxSteps = 16

// nextStep is the next change the map needs for cell, as a planner and
// what it does ("" and nil: none); an error when the map holds the
// cell's id for another cell.
func (r *Reconciler) nextStep(cell *v1alpha1.Cell, m *slotmap.Map) (string, control.Planner, error) {
	want := wanted(cell)
	have, ok := m.Cell(want.ID)
	if !ok {
		// Drained first: its instances open their intakes once the map
		// names their cell, and only then does the undrain below move
		// slots onto it (see syncMap).
		want.State = slotmap.Drained
		return "provision", control.Provision(want), nil
	}
	if !ours(have, want) {
		return "", nil, fmt.Errorf("cell id %s is in the map with intake %s and admin %s, not this cell's %s and %s: remove it from the map, or name this cell otherwise",
			want.ID, have.Intake, have.Admin, want.Intake, want.Admin)
	}
	for _, in := range want.Instances {
		i := slices.IndexFunc(have.Instances, func(h slotmap.Instance) bool { return h.ID == in.ID })
		if i < 0 || have.Instances[i].Intake != in.Intake || have.Instances[i].Admin != in.Admin {
			return "instance " + in.ID, control.SetInstance(want.ID, in.ID, in.Intake, in.Admin), nil
		}
	}
	if have.Weight != want.Weight {
		return fmt.Sprintf("weight %d", want.Weight), control.SetWeight(want.ID, want.Weight), nil
	}
	if have.Capacity != want.Capacity {
		return fmt.Sprintf("capacity %d", want.Capacity), control.SetCapacity(want.ID, want.Capacity), nil
	}
	shares := map[string]int{}
	for _, a := range cell.Spec.Agencies {
		shares[a.Name] = int(a.Sessions)
		if q, ok := have.FixedQuota[a.Name]; !ok || q != int(a.Sessions) {
			return fmt.Sprintf("quota %s %d", a.Name, a.Sessions), control.SetQuota(a.Name, want.ID, int(a.Sessions)), nil
		}
	}
	for _, a := range slices.Sorted(maps.Keys(have.FixedQuota)) {
		if _, ok := shares[a]; !ok {
			return "quota " + a + " by weight", control.ClearQuota(a, want.ID), nil
		}
	}
	switch {
	case cell.Spec.Drained && have.State != slotmap.Drained:
		return "drain", control.Drain(want.ID, false), nil
	case !cell.Spec.Drained && have.State != slotmap.Active:
		return "undrain", control.Undrain(want.ID), nil
	}
	return "", nil, nil
}

// change applies one plan and records it; done is false when it did not
// go through (a refusal: the condition says why; or the registry's error).
func (r *Reconciler) change(ctx context.Context, cell *v1alpha1.Cell, st *status, what string, plan control.Planner) (done bool, err error) {
	res, err := r.opts.Control.Apply(ctx, control.Change{Plan: plan})
	var refused *control.RefusedError
	switch {
	case errors.As(err, &refused):
		st.fail(v1alpha1.ConditionInMap, "Refused", fmt.Sprintf("%s: %v", what, err))
		return false, nil
	case err != nil:
		st.fail(v1alpha1.ConditionInMap, "RegistryUnreachable", fmt.Sprintf("%s: %v", what, err))
		return false, err
	}
	if res.Applied {
		r.event(cell, corev1.EventTypeNormal, "MapChanged", what, describePlan(res))
	}
	return true, nil
}

// describePlan says what a committed plan moved.
func describePlan(res *control.Result) string {
	p := res.Plan
	var cells []string
	for _, c := range p.Cells {
		if c.SlotsBefore != c.SlotsAfter || c.StateBefore != c.StateAfter || c.WeightBefore != c.WeightAfter {
			cells = append(cells, fmt.Sprintf("%s %d→%d slots", c.ID, c.SlotsBefore, c.SlotsAfter))
		}
	}
	return fmt.Sprintf("map version %d: %s; %d slots moved (%.1f %% of users)%s",
		res.Version, p.Op, p.MovedSlots, 100*p.MovedFraction(), orNothing("; "+strings.Join(cells, ", "), len(cells) > 0))
}

func orNothing(s string, ok bool) string {
	if ok {
		return s
	}
	return ""
}

// inMap reads the cell's place in the map and its instances' figures
// into the status: the map holds it as the spec says.
func (r *Reconciler) inMap(ctx context.Context, cell *v1alpha1.Cell, st *status, m *slotmap.Map) (ctrl.Result, error) {
	have, _ := m.Cell(cell.Name)
	st.slots = int32(m.SlotCounts()[cell.Name])
	st.set(v1alpha1.ConditionInMap, true, "InMap", fmt.Sprintf("%s with weight %d and %d slots in map version %d", have.State, have.Weight, st.slots, m.Version()))
	switch have.State {
	case slotmap.Drained:
		st.phase = v1alpha1.PhaseDrained
		st.set(v1alpha1.ConditionDrained, true, "Drained", "its slots and sessions are the other cells'")
	case slotmap.Active:
		st.phase = v1alpha1.PhaseServing
		st.set(v1alpha1.ConditionDrained, false, "Active", "it serves its slots")
	}
	r.readFigures(ctx, have, st)
	r.released(ctx, cell, st)
	return ctrl.Result{}, nil
}

// readFigures reads the release its instances run and its queue depth
// from their admin APIs (what did not answer is left as it was).
func (r *Reconciler) readFigures(ctx context.Context, c slotmap.Cell, st *status) {
	var rels []string
	var depth int64
	admins := []string{c.Admin}
	if len(c.Instances) > 0 {
		admins = admins[:0]
		for _, in := range c.Instances {
			admins = append(admins, in.Admin)
		}
	}
	read := 0
	for _, a := range admins {
		s, err := r.opts.Admin.Status(ctx, a)
		if err != nil {
			continue
		}
		read++
		if !slices.Contains(rels, s.Release.ID) && s.Release.ID != "" {
			rels = append(rels, s.Release.ID)
		}
		// The instances share the cell's queue: its depth is the
		// deepest any of them saw.
		depth = max(depth, s.Pending())
	}
	if read > 0 {
		slices.Sort(rels)
		st.release, st.queue = strings.Join(rels, ","), depth
	}
}

// released says whether the cell's pods run the release its spec asks
// for (each pod's cellkit.io/release).
func (r *Reconciler) released(ctx context.Context, cell *v1alpha1.Cell, st *status) {
	want := specRelease(cell)
	var pods corev1.PodList
	if err := r.opts.Client.List(ctx, &pods, client.InNamespace(cell.Namespace), client.MatchingLabels{LabelName: "cell", LabelCell: cell.Name}); err != nil {
		st.fail(v1alpha1.ConditionReleased, "PodsUnread", err.Error())
		return
	}
	on := 0
	for _, p := range pods.Items {
		if s, ok := releaseOf(p.Annotations); ok && sameRelease(s, want) {
			on++
		}
	}
	if on == len(pods.Items) && sameRelease(st.running, want) {
		st.set(v1alpha1.ConditionReleased, true, "Released", fmt.Sprintf("its %d pods run %s%s", on, want.Image, setSuffix(want.Set)))
		return
	}
	msg := fmt.Sprintf("the spec asks for %s%s; %d of %d pods run it, its pod template %s%s",
		want.Image, setSuffix(want.Set), on, len(pods.Items), st.running.Image, setSuffix(st.running.Set))
	// A release whose rollout was halted waits for another spec: say so,
	// or the cell looks as if its release were about to start.
	if ro, err := r.opts.Control.Rollout(ctx); err == nil && haltedRelease(ro, want) {
		st.fail(v1alpha1.ConditionReleased, "ReleaseHalted", fmt.Sprintf("%s; rollout %s of this release was %s (%s): it is not tried again until the spec asks for another release",
			msg, ro.ID, ro.State, ro.Reason))
		return
	}
	st.fail(v1alpha1.ConditionReleased, "ReleasePending", msg)
}

func setSuffix(set []string) string {
	if len(set) == 0 {
		return ""
	}
	return " with " + strings.Join(set, " ")
}
