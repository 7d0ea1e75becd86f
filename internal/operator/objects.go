package operator

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/operator/api/v1alpha1"
	"github.com/cellkit/cellkit/internal/release"
)

// natsConf is the NATS nodes' configuration, the same file as the
// kustomize base's (deploy/kubernetes/base/nats.conf; a test holds them
// equal). Its values come from the sidecar's environment.
//
//go:embed nats.conf
var natsConf string

// AnnotationRelease, on a cell's pod template (and so on each of its
// pods), is the release the template runs (a release.Spec in JSON: image
// and settings): the spec's when the cell was made, then what the
// operator's deployer moved it to.
const AnnotationRelease = "cellkit.io/release"

// NATSConfigName is the name of the ConfigMap holding natsConf: named
// for its content, so that a new configuration is a new pod template.
func NATSConfigName() string {
	h := fnv.New32a()
	h.Write([]byte(natsConf))
	return fmt.Sprintf("%s-%08x", NATSConfig, h.Sum32())
}

// shared are the objects every cell of a namespace uses, owned by none:
// the headless Service the instances are named under and the NATS
// configuration.
func shared(ns string) []client.Object {
	return []client.Object{
		&corev1.Service{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
			ObjectMeta: metav1.ObjectMeta{Name: CellsService, Namespace: ns, Labels: map[string]string{LabelName: "cell", LabelPartOf: "cellkit"}},
			Spec: corev1.ServiceSpec{
				ClusterIP: corev1.ClusterIPNone,
				// The NATS nodes of a cell must find each other before any
				// of them is ready.
				PublishNotReadyAddresses: true,
				Selector:                 map[string]string{LabelName: "cell"},
				Ports: []corev1.ServicePort{
					{Name: "intake", Port: portIntake, TargetPort: intstr.FromString("intake")},
					{Name: "admin", Port: portAdmin, TargetPort: intstr.FromString("admin")},
					{Name: "nats", Port: portNATS, TargetPort: intstr.FromInt32(portNATS)},
					{Name: "nats-route", Port: portNATSRoute, TargetPort: intstr.FromInt32(portNATSRoute)},
				},
			},
		},
		&corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: NATSConfigName(), Namespace: ns, Labels: map[string]string{LabelPartOf: "cellkit"}},
			Data:       map[string]string{"nats.conf": natsConf},
		},
	}
}

// running is the release cell's StatefulSet runs (its annotation), or
// the spec's for a cell that has none yet.
func (r *Reconciler) running(ctx context.Context, cell *v1alpha1.Cell) (release.Spec, *appsv1.StatefulSet, error) {
	sts := &appsv1.StatefulSet{}
	err := r.opts.Client.Get(ctx, types.NamespacedName{Namespace: cell.Namespace, Name: ObjectName(cell.Name)}, sts)
	switch {
	case apierrors.IsNotFound(err):
		return specRelease(cell), nil, nil
	case err != nil:
		return release.Spec{}, nil, err
	}
	s, ok := releaseOf(sts.Spec.Template.Annotations)
	if !ok {
		// Not ours, or written by hand: the spec's from now on.
		return specRelease(cell), sts, nil
	}
	return s, sts, nil
}

// specRelease is the release cell's spec asks for.
func specRelease(cell *v1alpha1.Cell) release.Spec {
	return release.Spec{Image: cell.Spec.Image, Set: cell.Spec.Set}
}

// applyObjects applies the shared objects and the cell's (its pods on the
// release they run), and says whether all its instances run (status
// readiness).
func (r *Reconciler) applyObjects(ctx context.Context, cell *v1alpha1.Cell, st *status) (bool, error) {
	run, sts, err := r.running(ctx, cell)
	if err != nil {
		return false, err
	}
	for _, o := range shared(cell.Namespace) {
		if err := r.apply(ctx, o, nil); err != nil {
			return false, err
		}
	}
	objs := cellObjects(cell, run)
	if sts != nil {
		// Applied only over the StatefulSet read: a release moved by the
		// deployer meanwhile is not undone.
		objs[0].SetResourceVersion(sts.ResourceVersion)
	}
	for _, o := range objs {
		if err := r.apply(ctx, o, cell); err != nil {
			if !apierrors.IsConflict(err) {
				// A conflict is the deployer's move meanwhile: again, quietly.
				st.fail(v1alpha1.ConditionReady, "ApplyFailed", err.Error())
			}
			return false, err
		}
	}
	st.running = run
	if sts == nil {
		st.pending("its StatefulSet is made")
		return false, nil
	}
	var pods corev1.PodList
	if err := r.opts.Client.List(ctx, &pods, client.InNamespace(cell.Namespace), client.MatchingLabels{LabelName: "cell", LabelCell: cell.Name}); err != nil {
		return false, err
	}
	return st.readiness(cell, sts, startedPods(pods.Items)), nil
}

// apply applies o server-side as the operator's, owned by owner if set.
func (r *Reconciler) apply(ctx context.Context, o client.Object, owner *v1alpha1.Cell) error {
	if owner != nil {
		if err := controllerutil.SetControllerReference(owner, o, r.opts.Client.Scheme()); err != nil {
			return err
		}
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return err
	}
	// What the converter writes of an empty status and creation time is
	// not the operator's to own.
	delete(u, "status")
	unstructured.RemoveNestedField(u, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u, "spec", "template", "metadata", "creationTimestamp")
	if tpl, ok, _ := unstructured.NestedSlice(u, "spec", "volumeClaimTemplates"); ok {
		for _, t := range tpl {
			if m, ok := t.(map[string]any); ok {
				delete(m, "status")
				unstructured.RemoveNestedField(m, "metadata", "creationTimestamp")
			}
		}
		_ = unstructured.SetNestedSlice(u, tpl, "spec", "volumeClaimTemplates") // the slice read from u
	}
	obj := &unstructured.Unstructured{Object: u}
	if err := r.opts.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply %s %s: %w", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err)
	}
	return nil
}

// cellObjects are the objects of cell, its pods running run (the
// StatefulSet first).
func cellObjects(cell *v1alpha1.Cell, run release.Spec) []client.Object {
	objs := Render(cell, podCommand(cell, run), NATSConfigName())
	raw, _ := json.Marshal(release.Spec{Image: run.Image, Set: run.Set}) // a Spec always marshals
	objs.StatefulSet.Spec.Template.Annotations = map[string]string{AnnotationRelease: string(raw)}
	return []client.Object{objs.StatefulSet, objs.Service, objs.Budget, objs.Policy}
}

// podCommand is what a cell's container runs for release run: its image,
// the operator's arguments, then the release's settings.
func podCommand(cell *v1alpha1.Cell, run release.Spec) control.Command {
	c := run.Apply(control.Command{})
	return control.Command{Image: c.Image, Args: append(CellArgs(cell), c.Args...)}
}

// releaseOf is the release annotations name (ok false: none, or not one).
func releaseOf(annotations map[string]string) (release.Spec, bool) {
	var s release.Spec
	if err := json.Unmarshal([]byte(annotations[AnnotationRelease]), &s); err != nil || s.Image == "" || s.Bin != "" {
		return release.Spec{}, false
	}
	return s, true
}

// RenderAll are the objects the operator applies for a new cell c (a
// copy of c with its defaults filled): its namespace's shared ones, then
// its own, with its spec's release.
func RenderAll(c *v1alpha1.Cell) ([]client.Object, error) {
	c = c.DeepCopy()
	c.Default()
	if c.Name == "" || c.Namespace == "" || c.Spec.Image == "" {
		return nil, errors.New("a cell needs metadata.name, metadata.namespace and spec.image")
	}
	return append(shared(c.Namespace), cellObjects(c, specRelease(c))...), nil
}
