package operator_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/kubetest"
	"github.com/cellkit/cellkit/internal/operator"
	"github.com/cellkit/cellkit/internal/operator/api/v1alpha1"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/testkit"
)

// A cell's life under the operator: made (its objects, owned by it, the
// API server's defaults), in the map only once its instances run (here,
// its StatefulSet says they are ready),
// reweighted through a plan (the share moved in an event), drained by
// its spec, and deleted only after its queue has emptied.
func TestACellsLife(t *testing.T) {
	b := newBench(t)
	b.start(operator.ManagerConfig{}, b.ctl)
	ctx := context.Background()

	b.create(b.newCell("c1"))
	b.create(b.newCell("c2", func(c *v1alpha1.Cell) { c.Spec.Agencies = []v1alpha1.AgencyShare{{Name: "nice", Sessions: 30}} }))

	// Its objects, owned by the Cell, as the defaults make them.
	sts := &appsv1.StatefulSet{}
	testkit.WaitFor(t, within, "c1's StatefulSet", func() bool {
		return b.kube.Client.Get(ctx, types.NamespacedName{Namespace: b.ns, Name: "cellkit-cell-c1"}, sts) == nil
	})
	if *sts.Spec.Replicas != 3 || sts.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType {
		t.Errorf("c1's StatefulSet: %d replicas, strategy %s; want 3 (the default), OnDelete", *sts.Spec.Replicas, sts.Spec.UpdateStrategy.Type)
	}
	if o := metav1.GetControllerOf(sts); o == nil || o.Kind != "Cell" || o.Name != "c1" {
		t.Errorf("c1's StatefulSet is controlled by %+v, want Cell c1", o)
	}
	svc := &corev1.Service{}
	if err := b.kube.Client.Get(ctx, types.NamespacedName{Namespace: b.ns, Name: operator.CellsService}, svc); err != nil || !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("the headless Service %s: %v %+v", operator.CellsService, err, svc.Spec)
	}

	// Not in the map before its instances are ready.
	c := b.waitCondition("c1", v1alpha1.ConditionReady, metav1.ConditionFalse, "InstancesNotReady")
	if c.Status.Phase != v1alpha1.PhasePending {
		t.Errorf("c1 is %s before its instances are ready, want Pending", c.Status.Phase)
	}
	if _, ok, _ := b.mapCell("c1"); ok {
		t.Fatal("c1 is in the map before its instances are ready")
	}
	b.setReady("c1", 2)
	b.waitCondition("c1", v1alpha1.ConditionReady, metav1.ConditionFalse, "InstancesNotReady")
	if _, ok, _ := b.mapCell("c1"); ok {
		t.Fatal("c1 is in the map with 2 of 3 instances ready")
	}
	b.setReady("c1", 3)
	b.setReady("c2", 3)
	c = b.waitCondition("c1", v1alpha1.ConditionInMap, metav1.ConditionTrue, "InMap")
	b.waitCondition("c2", v1alpha1.ConditionInMap, metav1.ConditionTrue, "InMap")
	mc, _, m := b.mapCell("c1")
	want := operator.EndpointsOf(b.ns, "c1", 3)
	if mc.Intake != want.Intake || len(mc.Instances) != 3 || mc.Instances[2].Admin != want.Instances[2].Admin || mc.Weight != 1 {
		t.Errorf("c1 in the map: %+v, want its Service's URLs, 3 instances, weight 1", mc)
	}
	if c2, _, _ := b.mapCell("c2"); c2.FixedQuota["nice"] != 30 {
		t.Errorf("c2's quota of nice: %v, want 30 from its spec", c2.FixedQuota)
	}
	testkit.WaitFor(t, within, "c1's status with its slots and release", func() bool {
		c = b.get("c1")
		return c.Status.Phase == v1alpha1.PhaseServing && c.Status.Slots == int32(m.SlotCounts()["c1"]) && c.Status.Release == "v1@aaaa" && c.Status.Ready == "3/3"
	})

	// Reweighted: the plan's share in an event.
	b.update("c1", func(c *v1alpha1.Cell) { c.Spec.Weight = 3 })
	testkit.WaitFor(t, within, "c1 at weight 3 in the map", func() bool { mc, _, _ := b.mapCell("c1"); return mc.Weight == 3 })
	b.waitEvent("c1", "MapChanged", "weight c1 3", "slots moved", "% of users")

	// Grown to 5 instances: the StatefulSet first, the map's instances
	// once the new ones are ready.
	b.update("c1", func(c *v1alpha1.Cell) { c.Spec.Instances = 5 })
	testkit.WaitFor(t, within, "c1's StatefulSet of 5", func() bool {
		return b.kube.Client.Get(ctx, types.NamespacedName{Namespace: b.ns, Name: "cellkit-cell-c1"}, sts) == nil && *sts.Spec.Replicas == 5
	})
	if mc, _, _ := b.mapCell("c1"); len(mc.Instances) != 3 {
		t.Errorf("c1 has %d instances in the map before its new ones are ready, want 3", len(mc.Instances))
	}
	b.setReady("c1", 5)
	testkit.WaitFor(t, within, "c1's 5 instances in the map", func() bool { mc, _, _ := b.mapCell("c1"); return len(mc.Instances) == 5 })
	if !slices.Contains(sts.Spec.Template.Spec.Containers[0].Args, "--replicas=3") {
		t.Errorf("c1 of 5: its streams' replicas %v, want 3", sts.Spec.Template.Spec.Containers[0].Args)
	}

	// kubectl get cells: the printer columns.
	b.checkColumns("Phase", "Ready", "Release", "Weight", "Slots", "Queue")

	// Deleted with work in its queue: drained first, kept until empty.
	b.admins.cell("c2").set(func(c *cellAdmin) { c.depth = 5 })
	if err := b.kube.Client.Delete(ctx, b.get("c2")); err != nil {
		t.Fatal(err)
	}
	c = b.waitCondition("c2", v1alpha1.ConditionDrained, metav1.ConditionFalse, "Waiting")
	if !strings.Contains(conditionOf(c, v1alpha1.ConditionDrained).Message, "5 inquiries pending") || c.Status.Phase != v1alpha1.PhaseDeleting {
		t.Errorf("c2 deleted with 5 pending: %s, %+v", c.Status.Phase, conditionOf(c, v1alpha1.ConditionDrained))
	}
	if mc, ok, _ := b.mapCell("c2"); !ok || mc.State != slotmap.Draining {
		t.Errorf("c2 in the map while its queue empties: %v %s, want draining", ok, mc.State)
	}
	if b.admins.cell("c2").open() {
		t.Error("c2's intake is open while it drains")
	}
	b.admins.cell("c2").set(func(c *cellAdmin) { c.depth = 0 })
	// Drained (its users' inquiries moved with them), it leaves the map
	// and the cluster at once.
	testkit.WaitFor(t, within, "c2 gone from the cluster and the map", func() bool {
		_, inMap, _ := b.mapCell("c2")
		return b.get("c2") == nil && !inMap
	})

	// The last active cell is not drained: its deletion waits, saying why,
	// and the map keeps it.
	if err := b.kube.Client.Delete(ctx, b.get("c1")); err != nil {
		t.Fatal(err)
	}
	c = b.waitCondition("c1", v1alpha1.ConditionDrained, metav1.ConditionFalse, "Refused")
	if mc, ok, _ := b.mapCell("c1"); !ok || mc.State != slotmap.Active {
		t.Errorf("the last cell after its refused drain: in map %v, %s", ok, mc.State)
	}
	t.Logf("c1's deletion waits: %s", conditionOf(c, v1alpha1.ConditionDrained).Message)
}

func conditionOf(c *v1alpha1.Cell, typ string) metav1.Condition {
	for _, cd := range c.Status.Conditions {
		if cd.Type == typ {
			return cd
		}
	}
	return metav1.Condition{}
}

// waitEvent waits for an event on cell id with reason whose note holds
// every one of words.
func (b *bench) waitEvent(id, reason string, words ...string) {
	b.t.Helper()
	var seen []string
	if !testkit.Poll(within, func() bool {
		var evs eventsv1.EventList
		if err := b.kube.Client.List(context.Background(), &evs, client.InNamespace(b.ns)); err != nil {
			return false
		}
		seen = seen[:0]
		for _, e := range evs.Items {
			if e.Regarding.Name != id || e.Reason != reason {
				continue
			}
			seen = append(seen, e.Note)
			all := true
			for _, w := range words {
				all = all && strings.Contains(e.Note, w)
			}
			if all {
				return true
			}
		}
		return false
	}) {
		b.t.Fatalf("no event %s on %s saying %q; seen %q", reason, id, words, seen)
	}
}

// A new cell is put in the map drained and takes slots only once every
// instance's intake is open: a process that has not yet seen the map name
// its cell refuses its users. A cell drained by its spec and made active
// again has its intakes, closed by the drain, opened before it takes its
// slots back.
func TestANewCellTakesSlotsOnceItsIntakesOpen(t *testing.T) {
	b := newBench(t)
	b.start(operator.ManagerConfig{}, b.ctl)
	b.admins.cell("c1").set(func(c *cellAdmin) { c.starting, c.intake = true, false })
	b.create(b.newCell("c1"))
	b.setReady("c1", 3)
	b.waitCondition("c1", v1alpha1.ConditionInMap, metav1.ConditionFalse, "IntakesNotOpen")
	if mc, ok, m := b.mapCell("c1"); !ok || mc.State != slotmap.Drained || m.SlotCounts()["c1"] != 0 {
		t.Fatalf("c1 while its intakes cannot open: in the map %v, %s with %d slots; want drained with none", ok, mc.State, m.SlotCounts()["c1"])
	}
	b.admins.cell("c1").set(func(c *cellAdmin) { c.starting = false })
	b.waitCondition("c1", v1alpha1.ConditionInMap, metav1.ConditionTrue, "InMap")
	if mc, _, m := b.mapCell("c1"); mc.State != slotmap.Active || m.SlotCounts()["c1"] != m.Slots() || !b.admins.cell("c1").open() {
		t.Fatalf("c1 once its intakes open: %s with %d of %d slots, intake open %v", mc.State, m.SlotCounts()["c1"], m.Slots(), b.admins.cell("c1").open())
	}

	b.create(b.newCell("c2"))
	b.setReady("c2", 3)
	b.waitCondition("c2", v1alpha1.ConditionInMap, metav1.ConditionTrue, "InMap")
	b.update("c2", func(c *v1alpha1.Cell) { c.Spec.Drained = true })
	testkit.WaitFor(t, within, "c2 drained, its intake closed", func() bool {
		mc, _, _ := b.mapCell("c2")
		return mc.State == slotmap.Drained && !b.admins.cell("c2").open()
	})
	b.update("c2", func(c *v1alpha1.Cell) { c.Spec.Drained = false })
	testkit.WaitFor(t, within, "c2 active again, its intake open", func() bool {
		mc, _, m := b.mapCell("c2")
		return mc.State == slotmap.Active && m.SlotCounts()["c2"] > 0 && b.admins.cell("c2").open()
	})
}

// A cell the map holds under the same id with other endpoints is not
// taken over: the condition says so and the map is unchanged.
func TestAnIDTakenIsNotTakenOver(t *testing.T) {
	b := newBench(t)
	ctx := context.Background()
	if _, err := b.ctl.Apply(ctx, control.Change{Plan: control.Provision(slotmap.Cell{ID: "c1", Weight: 1, Intake: "https://elsewhere.example:8081", Admin: "https://elsewhere.example:9081"})}); err != nil {
		t.Fatal(err)
	}
	_, _, before := b.mapCell("c1")
	b.start(operator.ManagerConfig{}, b.ctl)
	b.create(b.newCell("c1"))
	b.setReady("c1", 3)
	c := b.waitCondition("c1", v1alpha1.ConditionInMap, metav1.ConditionFalse, "Refused")
	if msg := conditionOf(c, v1alpha1.ConditionInMap).Message; !strings.Contains(msg, "elsewhere.example") {
		t.Errorf("the refusal says %q, want the other cell's intake named", msg)
	}
	if _, _, after := b.mapCell("c1"); after.Version() != before.Version() {
		t.Errorf("the map went from version %d to %d", before.Version(), after.Version())
	}
}

// checkColumns holds the columns `kubectl get cells` shows (the API
// server's Table of Cells) to want.
func (b *bench) checkColumns(want ...string) {
	b.t.Helper()
	hc, err := rest.HTTPClientFor(b.kube.Config)
	if err != nil {
		b.t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, strings.TrimSuffix(b.kube.Config.Host, "/")+"/apis/cellkit.io/v1alpha1/namespaces/"+b.ns+"/cells", nil)
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		b.t.Fatalf("kubectl get cells: %v: %.300s", err, raw)
	}
	var got []string
	for _, c := range table.ColumnDefinitions {
		got = append(got, c.Name)
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			b.t.Errorf("kubectl get cells shows %v, want %s among them", got, w)
		}
	}
	if len(table.Rows) == 0 {
		b.t.Error("kubectl get cells shows no row")
	}
}

// A cell's instance is ready only once the map names its cell (its
// /readyz says so), so the operator puts the cell in the map once its
// instances run — their containers started — not once they are ready:
// on a real node, waiting for readiness left every cell Pending, in the
// map never. Here the kubelet marks each pod started and makes it ready
// only when the map names its cell, as the cell does.
func TestACellIsInTheMapOnceItsInstancesRun(t *testing.T) {
	b := newBench(t, kubetest.WithControllers(kubetest.StatefulSetController, kubetest.GarbageCollector))
	b.admins.kube, b.admins.ns = b.kube.Client, b.ns
	kubetest.KubeletWith(t, b.kube.Client, b.ns, func(string) string { return "127.0.0.1" }, func(p *corev1.Pod) bool {
		_, named, _ := b.mapCell(p.Labels[operator.LabelCell])
		return named
	})
	b.start(operator.ManagerConfig{}, b.ctl)
	b.create(b.newCell("c1"))
	c := b.waitCondition("c1", v1alpha1.ConditionInMap, metav1.ConditionTrue, "")
	t.Logf("in the map: Ready %+v", conditionOf(c, v1alpha1.ConditionReady))
	c = b.waitCondition("c1", v1alpha1.ConditionReady, metav1.ConditionTrue, "InstancesReady")
	if c.Status.ReadyInstances != 3 || c.Status.Phase != v1alpha1.PhaseServing {
		t.Errorf("c1: %s, %d ready, want Serving with 3", c.Status.Phase, c.Status.ReadyInstances)
	}
}
