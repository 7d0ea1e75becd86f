package operator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/operator"
)

// The cells' pods as the test serves them, for the releases: each pod
// (by its name under the headless Service) answers its admin status —
// ready once the test's kubelet has marked the pod ready, on the release
// its image names — and its metrics: a cell that has taken 200 inquiries
// a second since the pod was made, failing a fifth of them when its image
// is a bad build (a tag ending in "-bad") and one in a thousand
// otherwise, every answer within 10 ms.

// podOfHost is the pod a host of the headless Service names ("" for
// another host).
func podOfHost(host string) string {
	name, rest, _ := strings.Cut(host, ".")
	if !strings.HasPrefix(rest, operator.CellsService+".") {
		return ""
	}
	return name
}

// pod is the pod of a host, nil when there is none (yet).
func (a *admins) pod(ctx context.Context, name string) *corev1.Pod {
	if a.kube == nil || name == "" {
		return nil
	}
	p := &corev1.Pod{}
	if err := a.kube.Get(ctx, types.NamespacedName{Namespace: a.ns, Name: name}, p); err != nil {
		return nil
	}
	return p
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podRelease is the release a pod's cell says it runs, as a cell does:
// its version (the image's tag) and a digest of what it runs.
func podRelease(p *corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		if c.Name == "cell" {
			_, tag, _ := strings.Cut(c.Image[strings.LastIndexByte(c.Image, '/')+1:], ":")
			h := fnv.New32a()
			h.Write([]byte(c.Image + " " + strings.Join(c.Args, " ")))
			return fmt.Sprintf("%s@%08x", tag, h.Sum32())
		}
	}
	return ""
}

// servePod answers for pod name; false: not a pod's host.
func (a *admins) servePod(w http.ResponseWriter, r *http.Request) bool {
	name := podOfHost(r.Host)
	if a.kube == nil || name == "" {
		return false
	}
	p := a.pod(r.Context(), name)
	if p == nil || !p.DeletionTimestamp.IsZero() {
		http.Error(w, "no such pod", http.StatusBadGateway)
		return true
	}
	cell := p.Labels[operator.LabelCell]
	switch r.URL.Path {
	case "/v1/admin/status":
		c := a.cell(cell)
		c.mu.Lock()
		depth, intake := c.depth, c.intake
		c.mu.Unlock()
		st := api.CellStatus{Cell: cell, Instance: name, Release: api.Release{ID: podRelease(p)}, Ready: podReady(p),
			Queue: api.QueueStatus{Depth: map[string]int64{"normal": depth}}, Sampled: time.Now(), Intake: "closed"}
		if intake {
			st.Intake = "open"
		}
		_ = json.NewEncoder(w).Encode(st)
	case "/metrics":
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = fmt.Fprint(w, podMetrics(p, cell, time.Now()))
	case "/v1/admin/intake/close", "/v1/admin/intake/open":
		a.cell(cell).set(func(c *cellAdmin) { c.intake = strings.HasSuffix(r.URL.Path, "open") })
		_, _ = w.Write([]byte("{}"))
	default:
		http.NotFound(w, r)
	}
	return true
}

// podMetrics are a pod's cell's metrics at now.
func podMetrics(p *corev1.Pod, cell string, now time.Time) string {
	started := p.CreationTimestamp.Time
	n := math.Floor(200 * now.Sub(started).Seconds())
	failRate := 0.001
	if strings.HasSuffix(podRelease(p)[:strings.IndexByte(podRelease(p), '@')], "-bad") {
		failRate = 0.2
	}
	failed := math.Floor(n * failRate)
	ready := 0
	if podReady(p) {
		ready = 1
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %d\n", started.Unix())
	fmt.Fprintf(&b, "# TYPE cellkit_cell_ready gauge\ncellkit_cell_ready{cell=%q} %d\n", cell, ready)
	fmt.Fprintf(&b, "# TYPE cellkit_cell_intake_requests_total counter\n")
	fmt.Fprintf(&b, "cellkit_cell_intake_requests_total{cell=%q,code=\"202\",route=\"post\"} %.0f\n", cell, n-failed)
	fmt.Fprintf(&b, "cellkit_cell_intake_requests_total{cell=%q,code=\"500\",route=\"post\"} %.0f\n", cell, failed)
	fmt.Fprintf(&b, "# TYPE cellkit_cell_deliveries_total counter\n")
	fmt.Fprintf(&b, "cellkit_cell_deliveries_total{cell=%q,outcome=\"done\"} %.0f\n", cell, n-failed)
	fmt.Fprintf(&b, "cellkit_cell_deliveries_total{cell=%q,outcome=\"failed\"} %.0f\n", cell, failed)
	for _, h := range []string{"cellkit_cell_intake_seconds", "cellkit_cell_inquiry_seconds"} {
		fmt.Fprintf(&b, "# TYPE %s histogram\n", h)
		lbl := fmt.Sprintf("cell=%q", cell)
		if h == "cellkit_cell_intake_seconds" {
			lbl += `,route="post"`
		}
		fmt.Fprintf(&b, "%s_bucket{%s,le=\"0.005\"} %.0f\n", h, lbl, math.Floor(n/2))
		fmt.Fprintf(&b, "%s_bucket{%s,le=\"0.01\"} %.0f\n", h, lbl, n)
		fmt.Fprintf(&b, "%s_bucket{%s,le=\"+Inf\"} %.0f\n", h, lbl, n)
		fmt.Fprintf(&b, "%s_sum{%s} %g\n%s_count{%s} %.0f\n", h, lbl, n*0.006, h, lbl, n)
	}
	return b.String()
}
