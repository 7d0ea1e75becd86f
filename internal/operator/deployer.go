package operator

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/operator/api/v1alpha1"
	"github.com/cellkit/cellkit/internal/release"
)

// Deployer is the rollout's deployer on Kubernetes (a release.Deployer):
// a process is a cell's pod, named NAMESPACE/POD, its instance in the map
// the pod's name; what it runs is its image and settings (the release,
// from its cellkit.io/release annotation), never the operator's own
// arguments. Replace moves the cell's pod template to the new release and
// deletes the pod, which its StatefulSet (OnDelete) makes again from the
// template; readiness on the new release is the rollout's to wait for.
type Deployer struct {
	r *Reconciler
}

var _ release.Deployer = Deployer{}

// Deployer is the reconciler's deployer.
func (r *Reconciler) Deployer() Deployer { return Deployer{r: r} }

// Processes are every Cell's pods, a cell's highest ordinal first (the
// order a StatefulSet updates in), one per ordinal the StatefulSet asks
// for: a pod being made again is listed with its template's release.
func (d Deployer) Processes(ctx context.Context) ([]release.Process, error) {
	var cells v1alpha1.CellList
	if err := d.r.opts.Client.List(ctx, &cells); err != nil {
		return nil, err
	}
	var out []release.Process
	for i := range cells.Items {
		cell := &cells.Items[i]
		sts := &appsv1.StatefulSet{}
		if err := d.r.opts.Client.Get(ctx, types.NamespacedName{Namespace: cell.Namespace, Name: ObjectName(cell.Name)}, sts); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, err
		}
		tpl, _ := releaseOf(sts.Spec.Template.Annotations)
		for ord := int(ptr.Deref(sts.Spec.Replicas, 0)) - 1; ord >= 0; ord-- {
			name := PodName(cell.Name, ord)
			run := tpl
			pod := &corev1.Pod{}
			switch err := d.r.opts.Client.Get(ctx, types.NamespacedName{Namespace: cell.Namespace, Name: name}, pod); {
			case err == nil:
				if s, ok := releaseOf(pod.Annotations); ok {
					run = s
				}
			case !apierrors.IsNotFound(err):
				return nil, err
			}
			out = append(out, release.Process{Name: cell.Namespace + "/" + name, Cell: cell.Name, Instance: name, Run: run.Apply(control.Command{})})
		}
	}
	return out, nil
}

// Replace puts pod name (NAMESPACE/POD) on run's release: the cell's pod
// template moves to it (unless it is there), and the pod is deleted
// unless it runs it already; it returns what the pod ran.
func (d Deployer) Replace(ctx context.Context, name string, run control.Command) (control.Command, error) {
	if run.Bin != "" || run.Image == "" {
		return control.Command{}, fmt.Errorf("replace %s: a cell on Kubernetes runs an image, not a binary (%s)", name, run.Bin)
	}
	ns, podName, ok := strings.Cut(name, "/")
	if !ok {
		return control.Command{}, fmt.Errorf("replace %s: want NAMESPACE/POD", name)
	}
	pod := &corev1.Pod{}
	if err := d.r.opts.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: podName}, pod); err != nil && !apierrors.IsNotFound(err) {
		return control.Command{}, err
	}
	id := pod.Labels[LabelCell]
	if id == "" {
		id = cellOfPod(podName)
	}
	cell := &v1alpha1.Cell{}
	if err := d.r.opts.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: id}, cell); err != nil {
		return control.Command{}, fmt.Errorf("replace %s: its cell %s: %w", name, id, err)
	}
	want := release.Spec{Image: run.Image, Set: release.Settings(run.Args)}
	unlock := d.r.lock(cell)
	defer unlock()
	run0, sts, err := d.r.running(ctx, cell)
	if err != nil {
		return control.Command{}, err
	}
	if sts == nil {
		return control.Command{}, fmt.Errorf("replace %s: cell %s has no StatefulSet", name, id)
	}
	before := run0.Apply(control.Command{})
	if s, ok := releaseOf(pod.Annotations); ok {
		before = s.Apply(control.Command{})
	}
	if !sameRelease(run0, want) {
		objs := cellObjects(cell, want)
		objs[0].SetResourceVersion(sts.ResourceVersion)
		if err := d.r.apply(ctx, objs[0], cell); err != nil {
			return before, fmt.Errorf("replace %s: its StatefulSet: %w", name, err)
		}
		d.r.event(cell, corev1.EventTypeNormal, "Releasing", "release", fmt.Sprintf("its pod template runs %s%s", want.Image, setSuffix(want.Set)))
	}
	if pod.UID == "" {
		return before, nil // being made again, from the template
	}
	if s, ok := releaseOf(pod.Annotations); ok && sameRelease(s, want) {
		return before, nil
	}
	if err := d.r.opts.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); err != nil && !apierrors.IsNotFound(err) {
		return before, fmt.Errorf("replace %s: %w", name, err)
	}
	d.r.event(cell, corev1.EventTypeNormal, "Replacing", "release", fmt.Sprintf("pod %s deleted, to run %s%s", podName, want.Image, setSuffix(want.Set)))
	return before, nil
}

// sameRelease says whether a and b are the same image and settings.
func sameRelease(a, b release.Spec) bool {
	return a.Image == b.Image && slices.Equal(a.Set, b.Set)
}

// cellOfPod is the cell of a pod named cellkit-cell-ID-ORDINAL.
func cellOfPod(pod string) string {
	s := strings.TrimPrefix(pod, objectPrefix)
	i := strings.LastIndexByte(s, '-')
	if i < 0 {
		return s
	}
	if _, err := strconv.Atoi(s[i+1:]); err != nil {
		return s
	}
	return s[:i]
}
