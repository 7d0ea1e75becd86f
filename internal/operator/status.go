package operator

import (
	"context"
	"fmt"
	"unicode/utf8"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellkit/cellkit/internal/operator/api/v1alpha1"
	"github.com/cellkit/cellkit/internal/release"
)

// status is what one reconcile finds of a cell, written to its status at
// the end: the conditions it set (the others kept as they were), the
// instances ready, the release they run, its slots and queue.
type status struct {
	generation int64
	phase      v1alpha1.Phase
	conds      []metav1.Condition
	ready      int32
	instances  int32
	running    release.Spec
	release    string
	slots      int32
	queue      int64
	mapVersion int64
	// changed are the conditions this reconcile moved, for events.
	changed []metav1.Condition
}

func newStatus(cell *v1alpha1.Cell) *status {
	s := cell.Status
	return &status{generation: cell.Generation, phase: s.Phase, conds: append([]metav1.Condition(nil), s.Conditions...),
		ready: s.ReadyInstances, instances: cell.Spec.Instances, release: s.Release, slots: s.Slots, queue: s.QueueDepth, mapVersion: s.MapVersion}
}

// set sets condition typ, noting a change of status or reason.
func (s *status) set(typ string, ok bool, reason, msg string) {
	c := metav1.Condition{Type: typ, Status: metav1.ConditionFalse, Reason: reason, Message: msg, ObservedGeneration: s.generation}
	if ok {
		c.Status = metav1.ConditionTrue
	}
	old := meta.FindStatusCondition(s.conds, typ)
	if old == nil || old.Status != c.Status || old.Reason != c.Reason {
		s.changed = append(s.changed, c)
	}
	meta.SetStatusCondition(&s.conds, c)
}

// fail sets typ False for reason.
func (s *status) fail(typ, reason, msg string) { s.set(typ, false, reason, msg) }

// pending says the cell is not ready yet, and why.
func (s *status) pending(why string) {
	s.phase = v1alpha1.PhasePending
	s.fail(v1alpha1.ConditionReady, "InstancesNotReady", why)
}

// readiness reads the StatefulSet's readiness into the status and says
// whether every instance the spec asks for runs: its cell started (its
// startup probe passed) — which is when the map may name it. An instance
// is ready only once the map names its cell, so readiness cannot be what
// the map waits for: Ready is True once every instance is ready, and
// until then says how many run.
func (s *status) readiness(cell *v1alpha1.Cell, sts *appsv1.StatefulSet, started int32) bool {
	s.ready = sts.Status.ReadyReplicas
	n := cell.Spec.Instances
	switch {
	case sts.Status.ObservedGeneration < sts.Generation:
		s.pending("its StatefulSet's controller has not seen its last change")
		return false
	case s.ready >= n:
		s.set(v1alpha1.ConditionReady, true, "InstancesReady", fmt.Sprintf("%d of %d instances ready", s.ready, n))
		return true
	case started < n:
		s.pending(fmt.Sprintf("%d of %d instances started, %d ready", started, n, s.ready))
		return false
	default:
		s.pending(fmt.Sprintf("%d of %d instances started, %d ready: an instance is ready once the map names its cell", started, n, s.ready))
		return true
	}
}

// startedPods counts pods whose every container has started (a
// terminating one does not count).
func startedPods(pods []corev1.Pod) int32 {
	var n int32
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) == 0 {
			continue
		}
		all := true
		for _, c := range p.Status.ContainerStatuses {
			all = all && c.Started != nil && *c.Started
		}
		if all {
			n++
		}
	}
	return n
}

// writeStatus writes st to cell's status subresource and records an
// event for each condition that changed.
func (r *Reconciler) writeStatus(ctx context.Context, cell *v1alpha1.Cell, st *status) error {
	before := cell.DeepCopy()
	cell.Status = v1alpha1.CellStatus{
		ObservedGeneration: st.generation,
		Phase:              st.phase,
		Ready:              fmt.Sprintf("%d/%d", st.ready, st.instances),
		ReadyInstances:     st.ready,
		Release:            st.release,
		Image:              st.running.Image,
		Slots:              st.slots,
		QueueDepth:         st.queue,
		MapVersion:         st.mapVersion,
		Conditions:         st.conds,
	}
	for _, c := range st.changed {
		kind := corev1.EventTypeNormal
		if c.Status == metav1.ConditionFalse {
			kind = corev1.EventTypeWarning
		}
		r.event(cell, kind, c.Reason, c.Type, c.Message)
	}
	return r.opts.Client.Status().Patch(ctx, cell, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
}

// event records one step on cell (nowhere without a recorder), its note
// cut to what the API server keeps of one (maxNote; the log has it
// whole).
func (r *Reconciler) event(cell *v1alpha1.Cell, kind, reason, action, note string) {
	r.opts.Log.Info("cell "+action, "cell", cell.Name, "namespace", cell.Namespace, "reason", reason, "note", note)
	if r.opts.Events != nil {
		r.opts.Events.Eventf(cell, nil, kind, reason, action, "%s", cut(note, maxNote))
	}
}

// maxNote is the longest event note the API server takes (1 kB).
const maxNote = 1024

// cut is s cut to at most n bytes, on a rune boundary, marked "…" when
// cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const more = "…"
	i := n - len(more)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + more
}

// eventOn records a step on the Cell named id (in whichever namespace
// holds it; nowhere when none does).
func (r *Reconciler) eventOn(ctx context.Context, id, kind, reason, action, note string) {
	var list v1alpha1.CellList
	if err := r.opts.Client.List(ctx, &list); err != nil {
		r.opts.Log.Warn("cell event", "cell", id, "err", err)
		return
	}
	for i := range list.Items {
		if list.Items[i].Name == id {
			r.event(&list.Items[i], kind, reason, action, note)
		}
	}
}
