package operator_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/kubetest"
	"github.com/cellkit/cellkit/internal/operator"
	"github.com/cellkit/cellkit/internal/operator/api/v1alpha1"
	"github.com/cellkit/cellkit/internal/rollout"
	"github.com/cellkit/cellkit/internal/testkit"
)

const (
	imageV1  = "registry.example.com/cellkit/cell:1.0.0"
	imageV2  = "registry.example.com/cellkit/cell:1.1.0"
	imageBad = "registry.example.com/cellkit/cell:1.2.0-bad"
)

// A release goes out cell by cell through the operator: a new image on
// the Cells is a rollout in the registry (canary c1, then c2), each pod
// replaced in turn by the real StatefulSet controller, ready on the new
// release before the next; a bad build is halted by the gates in the
// canary and rolled back, the other cell never touched, and not tried
// again until the spec changes.
func TestReleasesGoOutCellByCell(t *testing.T) {
	b := newReleaseBench(t)
	b.create(b.newCell("c1", func(c *v1alpha1.Cell) { c.Spec.Image = imageV1 }))
	b.create(b.newCell("c2", func(c *v1alpha1.Cell) { c.Spec.Image = imageV1 }))
	b.waitCondition("c1", v1alpha1.ConditionInMap, metav1.ConditionTrue, "InMap")
	b.waitCondition("c2", v1alpha1.ConditionInMap, metav1.ConditionTrue, "InMap")

	// A good release: every pod of both cells, c1 first.
	for _, id := range []string{"c1", "c2"} {
		b.update(id, func(c *v1alpha1.Cell) { c.Spec.Image = imageV2; c.Spec.Set = []string{"workers=8"} })
	}
	ro := b.waitRollout(control.RolloutDone, 2*time.Minute)
	if len(ro.Waves) != 2 || ro.Waves[0].Cells[0] != "c1" || ro.Waves[1].Cells[0] != "c2" {
		t.Errorf("waves %+v, want c1 then c2", ro.Waves)
	}
	for _, id := range []string{"c1", "c2"} {
		b.waitCondition(id, v1alpha1.ConditionReleased, metav1.ConditionTrue, "Released")
		for _, p := range b.pods(id) {
			if img := cellImage(p); img != imageV2 || !slices.Contains(cellArgs(p), "--workers=8") {
				t.Errorf("%s runs %s %v after the release", p.Name, img, cellArgs(p))
			}
		}
	}
	b.waitEvent("c1", "Releasing", imageV2)

	// A bad build: halted in the canary, c1 rolled back, c2 untouched.
	for _, id := range []string{"c1", "c2"} {
		b.update(id, func(c *v1alpha1.Cell) { c.Spec.Image = imageBad })
	}
	ro = b.waitRollout(control.RolloutRolledBack, 2*time.Minute)
	t.Logf("the bad build's rollout: %s: %s", ro.State, ro.Reason)
	if !strings.Contains(ro.Reason, "fail") {
		t.Errorf("halted because %q, want the failures' gate", ro.Reason)
	}
	for _, id := range []string{"c1", "c2"} {
		for _, p := range b.pods(id) {
			if img := cellImage(p); img != imageV2 {
				t.Errorf("%s runs %s after the rollback, want %s", p.Name, img, imageV2)
			}
		}
		c := b.waitCondition(id, v1alpha1.ConditionReleased, metav1.ConditionFalse, "ReleaseHalted")
		for _, k := range c.Status.Conditions {
			if k.Type == v1alpha1.ConditionReleased && (!strings.Contains(k.Message, ro.ID) || !strings.Contains(k.Message, "not tried again")) {
				t.Errorf("%s's Released condition says %q, want the halted rollout %s named", id, k.Message, ro.ID)
			}
		}
	}
	b.waitEvent("c1", "ReleaseRolledBack", ro.ID, "rolled_back")
	// Not tried again: the record stays the rolled-back one.
	id := ro.ID
	time.Sleep(3 * time.Second) // the releaser looks every 500 ms: six looks
	if now, err := b.ctl.Rollout(context.Background()); err != nil || now.ID != id {
		t.Errorf("after the rollback the rollout is %v (%v), want %s left as it is", now, err, id)
	}
}

func cellImage(p corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		if c.Name == "cell" {
			return c.Image
		}
	}
	return ""
}

func cellArgs(p corev1.Pod) []string {
	for _, c := range p.Spec.Containers {
		if c.Name == "cell" {
			return c.Args
		}
	}
	return nil
}

// pods are cell id's pods.
func (b *bench) pods(id string) []corev1.Pod {
	var l corev1.PodList
	if err := b.kube.Client.List(context.Background(), &l, client.InNamespace(b.ns), client.MatchingLabels{operator.LabelCell: id}); err != nil {
		b.t.Fatal(err)
	}
	return l.Items
}

// waitRollout waits for the registry's rollout to be in state.
func (b *bench) waitRollout(state control.RolloutState, within time.Duration) *control.Rollout {
	b.t.Helper()
	var ro *control.Rollout
	if !testkit.Poll(within, func() bool {
		r, err := b.ctl.Rollout(context.Background())
		ro = r
		return err == nil && r.State == state
	}) {
		b.t.Fatalf("no rollout %s within %v: %+v", state, within, ro)
	}
	return ro
}

// releaseConfig is a release quick enough for a test: 3 s bakes read
// every 250 ms after a warm-up of 250 ms, gates on 100 samples.
func releaseConfig() operator.ReleaseConfig {
	cfg := rollout.DefaultConfig()
	cfg.Scrape, cfg.Settle, cfg.ReadyWithin, cfg.Lease, cfg.WarmUp = 250*time.Millisecond, 100*time.Millisecond, time.Minute, 5*time.Second, 250*time.Millisecond
	cfg.Gate.MinSamples = 100
	return operator.ReleaseConfig{Rollout: cfg, Bake: 3 * time.Second, Every: 500 * time.Millisecond}
}

// newReleaseBench is the bench with the StatefulSet controller and the
// garbage collector running, the test as the kubelet (every pod made
// is marked running and ready), the cells' pods answering for
// themselves (pods_test.go), and an operator with its releaser.
func newReleaseBench(t *testing.T) *bench {
	b := newBench(t, kubetest.WithControllers(kubetest.StatefulSetController, kubetest.GarbageCollector))
	b.admins.kube, b.admins.ns = b.kube.Client, b.ns
	kubetest.Kubelet(t, b.kube.Client, b.ns, func(string) string { return "127.0.0.1" })
	cfg := releaseConfig()
	b.startWith(operator.ManagerConfig{}, b.ctl, &cfg)
	return b
}
