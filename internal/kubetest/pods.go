package kubetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellkit/cellkit/internal/testkit"
)

// podsTimeout bounds MarkPodsReady's wait for a controller to make the
// pods: the StatefulSet controller makes them within a second here.
const podsTimeout = 30 * time.Second

// MarkPodReady plays the kubelet for pod: its status becomes what a kubelet
// reports for a pod whose containers have started and pass their readiness
// probes (phase Running; PodScheduled, Initialized, ContainersReady and
// Ready True; each container running and ready; podIP and podIPs ip), and
// pod is updated to the server's copy. The pod stays without a node, so
// the API server still deletes it at once, as it does an unscheduled pod:
// a deleted pod is gone, and its controller makes it again.
func MarkPodReady(t testing.TB, c client.Client, pod *corev1.Pod, ip string) {
	t.Helper()
	ctx := testkit.Context(t, podsTimeout)
	if err := markRunning(ctx, c, pod, ip, true); err != nil {
		t.Fatalf("kubetest: mark pod %s/%s ready: %v", pod.Namespace, pod.Name, err)
	}
}

// MarkPodsReady waits until n pods of namespace carry labels and are not
// being deleted, marking each as ready (MarkPodReady, with the address
// ipFor(its name)) as it appears, and returns them sorted by name. It waits
// for pods that a controller makes only once others are ready (a
// StatefulSet's OrderedReady pods, one after the other), and passes over
// pods already ready. It fails the test, saying what it saw, when there are
// not n within 30 s, and at once when the server refuses a pod's status.
func MarkPodsReady(t testing.TB, c client.Client, namespace string, labels map[string]string, n int, ipFor func(podName string) string) []corev1.Pod {
	t.Helper()
	ctx := testkit.Context(t, podsTimeout+5*time.Second)
	var (
		ready   []corev1.Pod
		last    string
		refused error
	)
	done := testkit.Poll(podsTimeout, func() bool {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels(labels)); err != nil {
			last = fmt.Sprintf("list pods: %v", err)
			return false
		}
		ready = ready[:0]
		var seen []string
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.DeletionTimestamp != nil {
				continue
			}
			seen = append(seen, p.Name)
			if !isReady(p) {
				err := markRunning(ctx, c, p, ipFor(p.Name), true)
				if apierrors.IsNotFound(err) {
					continue // deleted meanwhile; its controller may make it again
				}
				if err != nil {
					refused = fmt.Errorf("mark pod %s/%s ready: %w", namespace, p.Name, err)
					return true
				}
			}
			ready = append(ready, *p)
		}
		last = fmt.Sprintf("pods %s, %d of them ready", strings.Join(seen, ", "), len(ready))
		return len(seen) == n && len(ready) == n
	})
	if refused != nil {
		t.Fatalf("kubetest: %v", refused)
	}
	if !done {
		t.Fatalf("kubetest: %d ready pods of %s with labels %v within %v: saw %s", n, namespace, labels, podsTimeout, last)
	}
	slices.SortFunc(ready, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return ready
}

// markRunning writes a running pod's status on the server's latest copy
// of pod: its containers started, at ip, and ready or not.
func markRunning(ctx context.Context, c client.Client, pod *corev1.Pod, ip string, ready bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		now := metav1.Now()
		st := &pod.Status
		st.Phase = corev1.PodRunning
		for _, ct := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
			setCondition(st, ct, now, ready || ct == corev1.PodScheduled || ct == corev1.PodInitialized)
		}
		st.PodIP, st.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		if st.StartTime == nil {
			st.StartTime = &now
		}
		st.ContainerStatuses = make([]corev1.ContainerStatus, 0, len(pod.Spec.Containers))
		started := true
		for _, ctr := range pod.Spec.Containers {
			st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
				Name:    ctr.Name,
				Image:   ctr.Image,
				Ready:   ready,
				Started: &started,
				State:   corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: *st.StartTime}},
			})
		}
		return c.Status().Update(ctx, pod)
	})
}

// setCondition makes the condition of type ct True, since now unless it
// was True already.
func setCondition(st *corev1.PodStatus, ct corev1.PodConditionType, now metav1.Time, isTrue bool) {
	want := corev1.ConditionFalse
	if isTrue {
		want = corev1.ConditionTrue
	}
	for i := range st.Conditions {
		if st.Conditions[i].Type == ct {
			if st.Conditions[i].Status != want {
				st.Conditions[i].Status, st.Conditions[i].LastTransitionTime = want, now
			}
			return
		}
	}
	st.Conditions = append(st.Conditions, corev1.PodCondition{Type: ct, Status: want, LastTransitionTime: now})
}

// isReady says whether pod is running with its Ready condition True, as
// the StatefulSet controller counts a ready pod.
func isReady(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Kubelet plays the kubelet for namespace until the test ends: every pod
// there that is not being deleted is marked ready (MarkPodReady, at the
// address ipFor(its name)) soon after it appears, pods made again
// included — for a test whose controllers replace pods while it runs. A
// status the server refuses is tried again at the next look (every
// 50 ms); it does not fail the test.
func Kubelet(t testing.TB, c client.Client, namespace string, ipFor func(podName string) string) {
	KubeletWith(t, c, namespace, ipFor, func(*corev1.Pod) bool { return true })
}

// KubeletWith is Kubelet whose pods become ready only when ready says so
// (looked at every 50 ms): until then each runs with its containers
// started and not ready — as a program whose readiness waits on
// something else, such as a cell on the map naming it.
func KubeletWith(t testing.TB, c client.Client, namespace string, ipFor func(podName string) string, ready func(*corev1.Pod) bool) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			var pods corev1.PodList
			if err := c.List(ctx, &pods, client.InNamespace(namespace)); err == nil {
				for i := range pods.Items {
					p := &pods.Items[i]
					if !p.DeletionTimestamp.IsZero() || isReady(p) {
						continue
					}
					if r := ready(p); r || p.Status.Phase != corev1.PodRunning {
						_ = markRunning(ctx, c, p, ipFor(p.Name), r) // again at the next look
					}
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}
