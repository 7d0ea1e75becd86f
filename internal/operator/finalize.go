package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/operator/api/v1alpha1"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// drainPoll is how soon a drain waiting for its queue is looked at again.
const drainPoll = time.Second

// finalize takes a deleted cell out: drained first (its slots to the
// other cells with their users' inquiries, its intake closed, its
// in-flight work done, what it still holds swept to the users' cells,
// its sessions handed on), then removed from the map, then its finalizer
// goes and with it, by their owner references, its objects. A cell whose
// drain cannot finish keeps its finalizer and says why in its Drained
// condition.
func (r *Reconciler) finalize(ctx context.Context, cell *v1alpha1.Cell, st *status) (ctrl.Result, error) {
	st.phase = v1alpha1.PhaseDeleting
	if !controllerutil.ContainsFinalizer(cell, Finalizer) {
		return ctrl.Result{}, nil
	}
	m, err := r.opts.Control.Load(ctx)
	if err != nil {
		st.fail(v1alpha1.ConditionDrained, "RegistryUnreachable", err.Error())
		return ctrl.Result{}, err
	}
	want := wanted(cell)
	have, ok := m.Cell(cell.Name)
	if ok && !ours(have, want) {
		// Another cell's, under the same id: not this one's to drain.
		r.event(cell, corev1.EventTypeWarning, "NotInMap", "finalize", fmt.Sprintf("the map's cell %s is another's (intake %s): left as it is", cell.Name, have.Intake))
		ok = false
	}
	if ok && have.State != slotmap.Drained {
		if res, drained, err := r.drain(ctx, cell, st, true); !drained {
			return res, err
		}
	}
	if ok {
		if done, err := r.change(ctx, cell, st, "remove", control.Remove(cell.Name)); !done {
			return ctrl.Result{RequeueAfter: r.cfg.Recheck}, err
		}
	}
	controllerutil.RemoveFinalizer(cell, Finalizer)
	if err := r.opts.Client.Update(ctx, cell); err != nil {
		return ctrl.Result{}, err
	}
	r.event(cell, corev1.EventTypeNormal, "Removed", "finalize", "drained and out of the map: its objects go")
	return ctrl.Result{}, nil
}

// drain takes the cell one step along its drain, for at most DrainStep:
// control.Drain, which moves its slots away, closes its intake, waits for
// its queue and in-flight work to empty and marks it drained; a drain
// not finished goes on at the next reconcile. leaving: the cell is being
// deleted (its removal follows at once). drained says the cell is now.
func (r *Reconciler) drain(ctx context.Context, cell *v1alpha1.Cell, st *status, leaving bool) (_ ctrl.Result, drained bool, _ error) {
	if !leaving {
		st.phase = v1alpha1.PhaseDraining
	}
	// The step's clock stops while the drain's data moves run at the
	// cells: a move cut by it would be called off and begun again by the
	// next step, for ever once a copy takes longer than a step.
	step, cancel := control.WithDeadline(ctx, r.cfg.DrainStep)
	defer cancel()
	var last control.DrainEvent
	// Readings close enough that a step sees the two empty ones in a row
	// a drain ends on.
	every := min(time.Second, r.cfg.DrainStep/4)
	res, err := r.opts.Control.Drain(step, &r.opts.Admin, control.DrainRequest{Cell: cell.Name, Wait: true, Interval: every, Event: func(e control.DrainEvent) {
		switch e.Kind {
		case control.DrainProgress:
			last = e
		case control.DrainIntakeClosed:
			r.event(cell, corev1.EventTypeNormal, "IntakeClosed", "drain", "its intake is closed: the routers send it nothing new")
		}
	}})
	if res != nil && res.Drain != nil && res.Drain.Applied {
		r.event(cell, corev1.EventTypeNormal, "MapChanged", "drain", describePlan(res.Drain))
	}
	var refused *control.RefusedError
	switch {
	case errors.As(err, &refused):
		st.fail(v1alpha1.ConditionDrained, "Refused", err.Error())
		return ctrl.Result{RequeueAfter: r.cfg.Recheck}, false, nil
	case err != nil && step.Err() != nil && ctx.Err() == nil:
		st.fail(v1alpha1.ConditionDrained, "Waiting", waitingFor(last))
		if last.Status != nil {
			st.queue = last.Status.Pending()
		}
		return ctrl.Result{RequeueAfter: drainPoll}, false, nil
	case err != nil:
		st.fail(v1alpha1.ConditionDrained, "RegistryUnreachable", err.Error())
		return ctrl.Result{}, false, err
	}
	if res.MarkDrained != nil && res.MarkDrained.Applied {
		r.event(cell, corev1.EventTypeNormal, "MapChanged", "drained", describePlan(res.MarkDrained))
	}
	st.queue = 0
	st.set(v1alpha1.ConditionDrained, true, "Drained", "its queue is empty and its sessions are the other cells'")
	if !leaving {
		st.phase = v1alpha1.PhaseDrained
	}
	return ctrl.Result{}, true, nil
}

// waitingFor says what a drain still waits for, from its last reading.
func waitingFor(e control.DrainEvent) string {
	switch {
	case e.Err != nil:
		return "its queue cannot be read: " + e.Err.Error()
	case e.Status != nil:
		return fmt.Sprintf("%d inquiries pending in its queue after %s", e.Status.Pending(), control.HumanDuration(e.Elapsed))
	}
	return "its first reading of the queue"
}
