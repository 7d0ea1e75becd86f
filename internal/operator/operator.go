// Package operator is cellkit's Kubernetes controller: it reconciles each
// Cell resource (api/v1alpha1) into the cell's objects (render.go: its
// StatefulSet, Services, disruption budget and network policy, owned by
// the Cell), puts the cell in the map once its instances run and
// keeps it as the spec says (mapsync.go: weight, capacity, the agencies'
// shares, drained or not, through internal/control's plans), drains it
// before it goes (finalize.go), puts a new image or settings out cell by
// cell through the rollout with the Kubernetes deployer (releases.go,
// deployer.go), and reports it in the Cell's status and events
// (status.go).
//
// The map stays in the registry the operator is given (Consul on a
// cluster, as every router and cell reads it); the operator is one more
// writer, through the same transaction as cellctl's
// (docs/decisions/kubernetes-operator.md).
package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/operator/api/v1alpha1"
)

// Finalizer holds a Cell until it is drained and out of the map.
const Finalizer = "cellkit.io/drain"

// FieldOwner is the operator's name as the field manager of the objects
// it applies.
const FieldOwner = "cellkit-operator"

// Config is how the operator reconciles.
type Config struct {
	// Workers is how many cells are reconciled at once [4].
	Workers int
	// DrainStep bounds one reconcile's wait for a draining cell's queue;
	// the drain goes on at the next [10s].
	DrainStep time.Duration
	// Recheck is how often a cell is looked at again without a change
	// (its queue depth and slots in the status) [30s].
	Recheck time.Duration
}

// DefaultConfig: 4 workers, 10 s drain steps, a recheck every 30 s.
func DefaultConfig() Config {
	return Config{Workers: 4, DrainStep: 10 * time.Second, Recheck: 30 * time.Second}
}

// Options are the operator's collaborators.
type Options struct {
	// Client reads and writes the cluster (the manager's).
	Client client.Client
	// Control changes the map.
	Control *control.Controller
	// Admin calls the cells' admin APIs.
	Admin adminclient.Client
	// Events records the steps on each Cell.
	Events events.EventRecorder
	Log    *slog.Logger
}

// Reconciler reconciles Cells.
type Reconciler struct {
	cfg  Config
	opts Options
	// locks holds a mutex per cell (namespace/name): a reconcile's objects
	// and the deployer's moves of a cell's release take turns.
	locks sync.Map
}

// lock takes cell's mutex; the function returned gives it back.
func (r *Reconciler) lock(cell *v1alpha1.Cell) func() {
	m, _ := r.locks.LoadOrStore(cell.Namespace+"/"+cell.Name, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// withDefaults fills the zero fields of c from DefaultConfig, field by
// field.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Workers <= 0 {
		c.Workers = d.Workers
	}
	if c.DrainStep <= 0 {
		c.DrainStep = d.DrainStep
	}
	if c.Recheck <= 0 {
		c.Recheck = d.Recheck
	}
	return c
}

// withDefaults fills the nil collaborators that have a default: Log
// (none).
func (o Options) withDefaults() Options {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// New is a reconciler; SetupWithManager starts it.
func New(cfg Config, opts Options) *Reconciler {
	cfg, opts = cfg.withDefaults(), opts.withDefaults()
	return &Reconciler{cfg: cfg, opts: opts}
}

// SetupWithManager watches Cells and the objects they own.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.Cell{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.Service{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&networkingv1.NetworkPolicy{}).
		// A pod's start changes nothing its StatefulSet's status counts,
		// and the map waits for it: its cell hears of it by the label.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podsCell)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.cfg.Workers}).
		Complete(r)
}

// podsCell is the Cell a pod of a cell belongs to, by its labels.
func podsCell(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if l[LabelName] != "cell" || l[LabelCell] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: l[LabelCell]}}}
}

// +kubebuilder:rbac:groups=cellkit.io,resources=cells,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=cellkit.io,resources=cells/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=cellkit.io,resources=cells/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=services;configmaps,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete

// Reconcile brings one cell to its spec: objects, then the map, then
// the status; a cell being deleted is drained and taken out of the map
// first.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cell := &v1alpha1.Cell{}
	if err := r.opts.Client.Get(ctx, req.NamespacedName, cell); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	st := newStatus(cell)
	if !cell.DeletionTimestamp.IsZero() {
		res, err := r.finalize(ctx, cell, st)
		return res, r.report(ctx, cell, st, err)
	}
	if controllerutil.AddFinalizer(cell, Finalizer) {
		if err := r.opts.Client.Update(ctx, cell); err != nil {
			return ctrl.Result{}, err
		}
	}
	unlock := r.lock(cell)
	ready, err := r.applyObjects(ctx, cell, st)
	unlock()
	if err != nil {
		return ctrl.Result{}, r.report(ctx, cell, st, err)
	}
	if !ready {
		// The StatefulSet's changes bring the cell back.
		return ctrl.Result{}, r.report(ctx, cell, st, nil)
	}
	res, err := r.syncMap(ctx, cell, st)
	if err == nil && res.IsZero() {
		res.RequeueAfter = r.cfg.Recheck
	}
	return res, r.report(ctx, cell, st, err)
}

// report writes the status the reconcile came to, and returns err (the
// reconcile's) or the status write's.
func (r *Reconciler) report(ctx context.Context, cell *v1alpha1.Cell, st *status, err error) error {
	if werr := r.writeStatus(ctx, cell, st); werr != nil && !apierrors.IsNotFound(werr) && !apierrors.IsConflict(werr) {
		return errors.Join(err, fmt.Errorf("write the status of cell %s: %w", cell.Name, werr))
	}
	return err
}
