package drill

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/kubenode"
	"github.com/cellkit/cellkit/internal/kubenode/kubestack"
	"github.com/cellkit/cellkit/internal/loadtest"
	"github.com/cellkit/cellkit/internal/operator"
	"github.com/cellkit/cellkit/internal/operator/api/v1alpha1"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/release"
)

// The Kubernetes drills run on the one-node cluster of this machine with
// cellkit installed on it (make cluster-stack; internal/kubenode and its
// kubestack): every cell instance a pod of its Cell's StatefulSet, beside
// its JetStream node; the routers a Deployment behind a Service. The load
// comes from this host through that Service's cluster IP over TLS, as a
// client outside the cluster's pods would send it; the faults are what
// happens to pods on Kubernetes (a pod deleted, a container killed, a
// Cell created or deleted, a release), made through the API server, or
// through the node's containerd for a container's death. Each drill
// checks, besides its own promises, that every accepted inquiry ends
// final and none is duplicated.

// K8sConfig is one drill on the cluster. Zero values mean the defaults
// in brackets (DefaultK8sConfig).
type K8sConfig struct {
	// Dir is the cluster's directory, with its stack [make cluster's:
	// /var/lib/cellkit-cluster].
	Dir string
	// Rate is the constant request rate through the routers' Service
	// [25/s: the one-node cluster's nine cell instances, nine JetStream
	// nodes and three routers share a 2-core machine with the control
	// plane; at 50/s it is saturated, the routers' 250 ms health checks
	// miss and instances leave the rotation with no fault (docs/drills.md)].
	Rate float64
	// Users as in loadtest.Config [200].
	Users int
	// Cell is the cell the fault hits [c2]; Instance the ordinal of its
	// pod (k8s-pod-delete, k8s-nats-kill) [0]; for k8s-release, Cell is
	// not used: the operator's canary is the first cell by name.
	Cell     string
	Instance int
	// NewCell is the Cell k8s-cell-add creates (as a copy of the first
	// cell's spec) and k8s-cell-delete deletes [c4].
	NewCell string
	// Baseline is the load before the fault [15s]; After the load once the
	// fault is over (the pod back, the cell in or out of the map, the
	// release ended) [20s].
	Baseline, After time.Duration
	// ErrorWindow bounds, from the fault, when the hit cell's users may
	// still see errors: requests in flight on the instance that went [15s].
	ErrorWindow time.Duration
	// Within bounds each act's wait: a pod back and ready, a cell in or
	// out of the map, the routers available again [3m]; a release
	// [ReleaseWithin].
	Within time.Duration
	// VerifyWithin bounds the polling of accepted ids [120s].
	VerifyWithin time.Duration
	// Replays is how many accepted requests are re-sent with their
	// Idempotency-Key [300].
	Replays int
	// Progress gets the progress lines (nil: none).
	Progress io.Writer
}

// ReleaseWithin bounds a release in k8s-release: the operator's waves of
// three pods each, replaced one at a time, each wave baked (the one-node
// overlay's --bake).
const ReleaseWithin = 12 * time.Minute

// DefaultK8sConfig returns the defaults.
func DefaultK8sConfig() K8sConfig {
	return K8sConfig{
		Dir: kubenode.DefaultConfig().Dir, Rate: 25, Users: 200, Cell: "c2", NewCell: "c4",
		Baseline: 15 * time.Second, After: 20 * time.Second, ErrorWindow: 15 * time.Second, Within: 3 * time.Minute,
		VerifyWithin: 120 * time.Second, Replays: 300,
	}
}

// withDefaults fills the zero fields of c from DefaultK8sConfig, field
// by field.
func (c K8sConfig) withDefaults() K8sConfig {
	d := DefaultK8sConfig()
	or(&c.Dir, d.Dir)
	or(&c.Rate, d.Rate)
	or(&c.Users, d.Users)
	or(&c.Cell, d.Cell)
	or(&c.NewCell, d.NewCell)
	or(&c.Baseline, d.Baseline)
	or(&c.After, d.After)
	or(&c.ErrorWindow, d.ErrorWindow)
	or(&c.Within, d.Within)
	or(&c.VerifyWithin, d.VerifyWithin)
	or(&c.Replays, d.Replays)
	return c
}

func (c *K8sConfig) logf(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "drill: "+format+"\n", args...)
	}
}

// K8sDrills are the drills on the cluster, by name, in the order make
// drill-k8s runs them (k8s-cell-delete deletes the cell k8s-cell-add
// made).
var K8sDrills = map[string]func(context.Context, K8sConfig) (*loadtest.Result, error){
	"k8s-pod-delete":     PodDelete,
	"k8s-nats-kill":      NATSKill,
	"k8s-router-replace": RouterReplace,
	"k8s-cell-add":       CellAdd,
	"k8s-cell-delete":    CellDelete,
	"k8s-release":        K8sRelease,
}

// k8sRun is a drill in progress on the cluster: its record, the stack,
// a client of the API server, the map's control and the load.
type k8sRun struct {
	c   *K8sConfig
	rec *kubenode.Record
	st  *kubestack.Stack
	kc  client.Client
	reg registry.Registry
	ctl *control.Controller
	r   *loadtest.Runner
}

// newK8sRun reads the cluster and its stack in c.Dir and makes the load
// of total through the routers' Service; close ends what it opened.
func newK8sRun(ctx context.Context, c *K8sConfig, total time.Duration) (*k8sRun, error) {
	rec, err := kubenode.ReadRecord(c.Dir)
	if err != nil {
		return nil, fmt.Errorf("%w (make cluster)", err)
	}
	st, err := kubestack.Read(c.Dir)
	if err != nil {
		return nil, fmt.Errorf("%w (make cluster-stack)", err)
	}
	kc, err := rec.Client(kubestack.Scheme())
	if err != nil {
		return nil, err
	}
	reg, err := registry.Open(registry.Config{URL: st.Registry, Token: st.ConsulToken}, registry.Options{})
	if err != nil {
		return nil, err
	}
	n := &k8sRun{c: c, rec: rec, st: st, kc: kc, reg: reg, ctl: control.New(reg, control.Config{Holder: "loadtest drill"}, control.Options{})}
	quietDisk()
	r, err := loadtest.NewRunner(loadtest.Config{
		Target: st.Router, Key: st.APIKey, CA: st.CA, ServerName: kubestack.RouterName,
		Steps: []loadtest.Step{{Rate: c.Rate, For: total}},
		// As many senders as the timeout holds at the rate, as on the
		// network lab: a cell whose users wait out an election must not
		// hold back the others'.
		Users: c.Users, KeepSamples: true, Timeout: 15 * time.Second, MaxInflight: max(128, int(15*c.Rate)),
	}, loadtest.Options{Progress: c.Progress})
	if err != nil {
		reg.Close()
		return nil, err
	}
	n.r = r
	return n, nil
}

func (n *k8sRun) close() { n.reg.Close() }

// cell is the Cell named id.
func (n *k8sRun) cell(ctx context.Context, id string) (*v1alpha1.Cell, error) {
	var c v1alpha1.Cell
	if err := n.kc.Get(ctx, client.ObjectKey{Namespace: kubestack.Namespace, Name: id}, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

// cells are the stack's Cells, by name.
func (n *k8sRun) cells(ctx context.Context) ([]v1alpha1.Cell, error) {
	var list v1alpha1.CellList
	if err := n.kc.List(ctx, &list, client.InNamespace(kubestack.Namespace)); err != nil {
		return nil, err
	}
	slices.SortFunc(list.Items, func(a, b v1alpha1.Cell) int { return strings.Compare(a.Name, b.Name) })
	return list.Items, nil
}

// pod is the pod named name, nil if there is none.
func (n *k8sRun) pod(ctx context.Context, name string) (*corev1.Pod, error) {
	var p corev1.Pod
	err := n.kc.Get(ctx, client.ObjectKey{Namespace: kubestack.Namespace, Name: name}, &p)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// cellPods are the pods of cell id.
func (n *k8sRun) cellPods(ctx context.Context, id string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	err := n.kc.List(ctx, &pods, client.InNamespace(kubestack.Namespace), client.MatchingLabels{operator.LabelName: "cell", operator.LabelCell: id})
	return pods.Items, err
}

// podReady says whether p runs and is ready.
func podReady(p *corev1.Pod) bool {
	if p == nil || !p.DeletionTimestamp.IsZero() || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// condition is the Cell's condition typ, nil if it has none.
func condition(c *v1alpha1.Cell, typ string) *metaCondition {
	for i := range c.Status.Conditions {
		if c.Status.Conditions[i].Type == typ {
			k := c.Status.Conditions[i]
			return &metaCondition{True: k.Status == "True", Since: k.LastTransitionTime.Time, Message: k.Message}
		}
	}
	return nil
}

// metaCondition is what a drill reads of a condition.
type metaCondition struct {
	True    bool
	Since   time.Time
	Message string
}

// events are the notes of the events on the object named name since
// (its creation: an earlier object of that name had its own), oldest
// first (the operator's: each map change with the share it moved).
func (n *k8sRun) events(ctx context.Context, name string, since time.Time) ([]string, error) {
	var list corev1.EventList
	err := n.kc.List(ctx, &list, client.InNamespace(kubestack.Namespace),
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("involvedObject.name", name)})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(list.Items, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
	var out []string
	for _, e := range list.Items {
		if eventTime(e).Before(since.Truncate(time.Second)) {
			continue
		}
		out = append(out, e.Reason+": "+e.Message)
	}
	return out, nil
}

func eventTime(e corev1.Event) time.Time {
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.FirstTimestamp.Time
}

// podRelease is the release pod p runs: its cellkit.io/release
// annotation.
func podRelease(p *corev1.Pod) (release.Spec, error) {
	var s release.Spec
	raw, ok := p.Annotations[operator.AnnotationRelease]
	if !ok {
		return s, fmt.Errorf("pod %s has no %s", p.Name, operator.AnnotationRelease)
	}
	err := json.Unmarshal([]byte(raw), &s)
	return s, err
}

// releaseText is s as a line: the image and its settings.
func releaseText(s release.Spec) string {
	if len(s.Set) == 0 {
		return s.Image
	}
	return s.Image + " " + strings.Join(s.Set, ",")
}

// cellReleases is, by cell, the releases its pods run (sorted, one entry
// when all run one).
func (n *k8sRun) cellReleases(ctx context.Context, ids []string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, id := range ids {
		pods, err := n.cellPods(ctx, id)
		if err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		for i := range pods {
			s, err := podRelease(&pods[i])
			if err != nil {
				return nil, err
			}
			seen[releaseText(s)] = true
		}
		out[id] = slices.Sorted(maps.Keys(seen))
	}
	return out, nil
}

// k8sCommand is `loadtest drill NAME` of a drill on the cluster.
func k8sCommand(ctx context.Context, name string, run func(context.Context, K8sConfig) (*loadtest.Result, error), args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadtest drill "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := DefaultK8sConfig()
	var out loadtest.Outputs
	var quiet bool
	fs.StringVar(&c.Dir, "cluster-dir", c.Dir, "the `DIR` of the cluster of 'loadtest cluster up' with its stack ('loadtest cluster stack')")
	fs.Float64Var(&c.Rate, "rate", c.Rate, "requests per second, through the routers' Service")
	fs.IntVar(&c.Users, "users", c.Users, "K distinct users")
	fs.StringVar(&c.Cell, "cell", c.Cell, "k8s-pod-delete, k8s-nats-kill: the cell the fault hits")
	fs.IntVar(&c.Instance, "instance", c.Instance, "k8s-pod-delete, k8s-nats-kill: the ordinal of the cell's pod")
	fs.StringVar(&c.NewCell, "new-cell", c.NewCell, "k8s-cell-add: the Cell made (a copy of the first cell's spec); k8s-cell-delete: the Cell deleted")
	fs.DurationVar(&c.Baseline, "baseline", c.Baseline, "load before the fault")
	fs.DurationVar(&c.After, "after", c.After, "load once the fault is over")
	fs.DurationVar(&c.ErrorWindow, "error-window", c.ErrorWindow, "k8s-pod-delete, k8s-nats-kill: from the fault, how long the cell's users may see errors for requests in flight on the instance hit")
	fs.DurationVar(&c.Within, "within", c.Within, "bound of each wait: a pod back and ready, a cell in or out of the map, the routers available")
	fs.DurationVar(&c.VerifyWithin, "verify-within", c.VerifyWithin, "how long to poll accepted ids until final")
	fs.BoolVar(&quiet, "quiet", false, "no progress lines")
	if err := parseDrillFlags(fs, &out, name, args); err != nil {
		return err
	}
	if c.Instance < 0 {
		return fmt.Errorf("--instance %d: want an ordinal, 0 or more", c.Instance)
	}
	if !quiet {
		c.Progress = stderr
	}
	res, err := run(ctx, c)
	return report(stdout, out, name, res, err)
}
