package kubetest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellkit/cellkit/internal/testkit"
)

// TestControllers: with the StatefulSet controller and the garbage
// collector running, a StatefulSet's pods are made from its template, its
// status counts the pods the test marks ready, a pod deleted under OnDelete
// comes back at the new template's revision while the other keeps the old
// one, and the dependents of a deleted owner (a core object, a custom
// resource, the StatefulSet itself) are deleted.
func TestControllers(t *testing.T) {
	crds := t.TempDir()
	if err := os.WriteFile(filepath.Join(crds, "widget.yaml"), []byte(widgetCRD), 0o644); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	c := Start(t, WithCRDs(crds), WithControllers(StatefulSetController, GarbageCollector))
	t.Logf("Start with the controller manager took %v", time.Since(began).Round(10*time.Millisecond))
	ctx := t.Context()
	const ns = "default"
	labels := map[string]string{"app": "web"}
	ipFor := func(pod string) string { return "10.1.0.1" + strings.TrimPrefix(pod, "web-") }

	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:       ptr.To[int32](2),
			ServiceName:    "web",
			Selector:       &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.example/web:1"}}},
			},
		},
	}
	if err := c.Client.Create(ctx, sts); err != nil {
		t.Fatalf("create StatefulSet: %v", err)
	}

	// OrderedReady (the default): web-1 is made once web-0 is ready.
	pods := MarkPodsReady(t, c.Client, ns, labels, 2, ipFor)
	for _, p := range pods {
		if p.Spec.Containers[0].Image != "registry.example/web:1" || p.Status.PodIP != ipFor(p.Name) || !isReady(&p) {
			t.Errorf("pod %s: image %s, IP %s, phase %s; want the template's image, %s, ready",
				p.Name, p.Spec.Containers[0].Image, p.Status.PodIP, p.Status.Phase, ipFor(p.Name))
		}
	}
	first := waitStatus(t, c, sts, "2 ready pods at one revision", func(s appsv1.StatefulSetStatus) bool {
		return s.ReadyReplicas == 2 && s.CurrentReplicas == 2 && s.CurrentRevision != "" && s.UpdateRevision == s.CurrentRevision
	})
	web0 := pods[0]
	if got := web0.Labels[appsv1.ControllerRevisionHashLabelKey]; got != first.CurrentRevision {
		t.Errorf("web-0 at revision %q, want the StatefulSet's %q", got, first.CurrentRevision)
	}

	// A new template: under OnDelete no pod changes until it is deleted.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(sts), sts); err != nil {
			return err
		}
		sts.Spec.Template.Spec.Containers[0].Image = "registry.example/web:2"
		return c.Client.Update(ctx, sts)
	})
	if err != nil {
		t.Fatalf("update the StatefulSet's template: %v", err)
	}
	waitStatus(t, c, sts, "a new update revision", func(s appsv1.StatefulSetStatus) bool {
		return s.UpdateRevision != first.CurrentRevision && s.CurrentRevision == first.CurrentRevision
	})
	web1 := pods[1]
	if err := c.Client.Delete(ctx, &web1); err != nil {
		t.Fatalf("delete web-1: %v", err)
	}
	pods = MarkPodsReady(t, c.Client, ns, labels, 2, ipFor)
	if pods[1].Name != "web-1" || pods[1].UID == web1.UID {
		t.Fatalf("pod %s (UID %s), want web-1 made again (it was %s)", pods[1].Name, pods[1].UID, web1.UID)
	}
	status := waitStatus(t, c, sts, "web-0 current, web-1 updated, both ready", func(s appsv1.StatefulSetStatus) bool {
		return s.ReadyReplicas == 2 && s.CurrentReplicas == 1 && s.UpdatedReplicas == 1
	})
	for _, p := range []struct {
		pod             corev1.Pod
		revision, image string
	}{
		{pods[0], status.CurrentRevision, "registry.example/web:1"},
		{pods[1], status.UpdateRevision, "registry.example/web:2"},
	} {
		if got := p.pod.Labels[appsv1.ControllerRevisionHashLabelKey]; got != p.revision || p.pod.Spec.Containers[0].Image != p.image {
			t.Errorf("%s at revision %q running %s, want %q running %s", p.pod.Name, got, p.pod.Spec.Containers[0].Image, p.revision, p.image)
		}
	}
	if pods[0].UID != web0.UID {
		t.Errorf("web-0 was made again (UID %s, was %s); OnDelete leaves it", pods[0].UID, web0.UID)
	}

	t.Run("garbage collection", func(t *testing.T) {
		for _, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationBackground, metav1.DeletePropagationForeground} {
			owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owner-" + strings.ToLower(string(policy))}}
			if err := c.Client.Create(ctx, owner); err != nil {
				t.Fatalf("create %s: %v", owner.Name, err)
			}
			dependent := ownedConfigMap(owner, "v1", "ConfigMap")
			if err := c.Client.Create(ctx, dependent); err != nil {
				t.Fatalf("create %s: %v", dependent.Name, err)
			}
			if err := c.Client.Delete(ctx, owner, client.PropagationPolicy(policy)); err != nil {
				t.Fatalf("delete %s: %v", owner.Name, err)
			}
			// In the foreground the owner waits for its dependents: without
			// the garbage collector it would stay, with its finalizer.
			waitGone(t, c, dependent, owner)
		}

		owner := widget(ns, "owner", 1)
		if err := c.Client.Create(ctx, owner); err != nil {
			t.Fatalf("create Widget: %v", err)
		}
		dependent := ownedConfigMap(owner, widgetGVK.GroupVersion().String(), widgetGVK.Kind)
		if err := c.Client.Create(ctx, dependent); err != nil {
			t.Fatalf("create %s: %v", dependent.Name, err)
		}
		if err := c.Client.Delete(ctx, owner); err != nil {
			t.Fatalf("delete Widget: %v", err)
		}
		waitGone(t, c, dependent)

		if err := c.Client.Delete(ctx, sts); err != nil {
			t.Fatalf("delete StatefulSet: %v", err)
		}
		waitGone(t, c, &pods[0], &pods[1])
		testkit.WaitFor(t, 30*time.Second, "the StatefulSet's revisions to be deleted", func() bool {
			var revs appsv1.ControllerRevisionList
			return c.Client.List(ctx, &revs, client.InNamespace(ns), client.MatchingLabels(labels)) == nil && len(revs.Items) == 0
		})
	})
}

// waitStatus waits until the StatefulSet's status, for its latest
// generation, holds cond, and returns it.
func waitStatus(t *testing.T, c *Cluster, sts *appsv1.StatefulSet, what string, cond func(appsv1.StatefulSetStatus) bool) appsv1.StatefulSetStatus {
	t.Helper()
	var got appsv1.StatefulSet
	ok := testkit.Poll(30*time.Second, func() bool {
		return c.Client.Get(t.Context(), client.ObjectKeyFromObject(sts), &got) == nil &&
			got.Status.ObservedGeneration == got.Generation && cond(got.Status)
	})
	if !ok {
		t.Fatalf("StatefulSet %s: waiting for %s, status %+v at generation %d", sts.Name, what, got.Status, got.Generation)
	}
	return got.Status
}

// ownedConfigMap is a ConfigMap that owner (of apiVersion and kind) owns
// and controls, blocking its owner's deletion in the foreground.
func ownedConfigMap(owner client.Object, apiVersion, kind string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: owner.GetNamespace(),
		Name:      "of-" + owner.GetName(),
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: apiVersion, Kind: kind, Name: owner.GetName(), UID: owner.GetUID(),
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
		}},
	}}
}

// waitGone waits until each of objs is deleted.
func waitGone(t *testing.T, c *Cluster, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("%T %s to be deleted", o, o.GetName()), func() bool {
			return apierrors.IsNotFound(c.Client.Get(t.Context(), client.ObjectKeyFromObject(o), o.DeepCopyObject().(client.Object)))
		})
	}
}
