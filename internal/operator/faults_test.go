package operator_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/cellkit/cellkit/internal/consultest"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/operator"
	"github.com/cellkit/cellkit/internal/operator/api/v1alpha1"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/testkit"
)

// A spec the CRD's validation refuses never reaches the operator: the API
// server names the field. What a spec leaves empty the API server fills
// as Cell.Default does (which `operator render` uses).
func TestTheAPIServerValidatesAndDefaults(t *testing.T) {
	b := newBench(t)
	ctx := context.Background()
	cases := []struct {
		name  string
		spec  map[string]any
		field string
	}{
		{"a-cell-id-longer-than-thirty-two-chars", map[string]any{"image": "x"}, "metadata.name"},
		{"c1", map[string]any{}, "spec.image"},
		{"c1", map[string]any{"image": "x", "instances": int64(0)}, "spec.instances"},
		{"c1", map[string]any{"image": "x", "instances": int64(2)}, "spec.instances"},
		{"c1", map[string]any{"image": "x", "weight": int64(0)}, "spec.weight"},
		{"c1", map[string]any{"image": "x", "weight": int64(1_000_001)}, "spec.weight"},
		{"c1", map[string]any{"image": "x", "agencies": []any{map[string]any{"name": "Nice", "sessions": int64(3)}}}, "spec.agencies[0].name"},
		{"c1", map[string]any{"image": "x", "agencies": []any{map[string]any{"name": "nice", "sessions": int64(-1)}}}, "spec.agencies[0].sessions"},
		{"c1", map[string]any{"image": "x", "set": []any{"--workers=3"}}, "spec.set[0]"},
		{"c1", map[string]any{"image": "x", "antiAffinity": "Sometimes"}, "spec.antiAffinity"},
	}
	for _, c := range cases {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "cellkit.io/v1alpha1", "kind": "Cell",
			"metadata": map[string]any{"name": c.name, "namespace": b.ns}, "spec": c.spec,
		}}
		err := b.kube.Client.Create(ctx, u)
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("cell %s %v: %v, want a refusal naming %s", c.name, c.spec, err, c.field)
		}
	}
	b.create(b.newCell("c0"))
	got, want := b.get("c0"), b.newCell("c0")
	want.Default()
	if !equality.Semantic.DeepEqual(got.Spec, want.Spec) {
		t.Errorf("the API server's defaults:\n%+v\nCell.Default's:\n%+v", got.Spec, want.Spec)
	}
	// A share over the agency's limit, once the operator has written the
	// map's limits beside the Cells.
	installAdmission(t, b)
	over := b.newCell("c9", func(c *v1alpha1.Cell) { c.Spec.Agencies = []v1alpha1.AgencyShare{{Name: "nice", Sessions: 81}} })
	var err error
	testkit.WaitFor(t, within, "the admission policy in force", func() bool {
		if err = b.kube.Client.Create(ctx, over.DeepCopy()); err == nil {
			// Not yet in force: out again, and another try.
			_ = b.kube.Client.Delete(ctx, over.DeepCopy())
			return false
		}
		return true
	})
	if !strings.Contains(err.Error(), "spec.agencies: nice 81 is over the agency's limit of 80") {
		t.Errorf("a share over the limit: %v", err)
	}
	b.create(b.newCell("c8", func(c *v1alpha1.Cell) {
		c.Spec.Agencies = []v1alpha1.AgencyShare{{Name: "nice", Sessions: 80}, {Name: "other", Sessions: 500}}
	}))

	// A cell does not shrink.
	b.create(b.newCell("c5", func(c *v1alpha1.Cell) { c.Spec.Instances = 5 }))
	c := b.get("c5")
	c.Spec.Instances = 3
	if err := b.kube.Client.Update(ctx, c); err == nil || !strings.Contains(err.Error(), "spec.instances") || !strings.Contains(err.Error(), "cannot shrink") {
		t.Errorf("5 → 3 instances: %v, want refused naming spec.instances", err)
	}
}

// A change the map's plans refuse — a share over the agency's limit — is
// the InMap condition with the plan's reason, and the map is unchanged.
func TestAPlanRefusedIsACondition(t *testing.T) {
	b := newBench(t)
	b.start(operator.ManagerConfig{}, b.ctl)
	b.create(b.newCell("c1"))
	b.setReady("c1", 3)
	b.waitCondition("c1", v1alpha1.ConditionInMap, metav1.ConditionTrue, "InMap")
	_, _, before := b.mapCell("c1")
	b.update("c1", func(c *v1alpha1.Cell) { c.Spec.Agencies = []v1alpha1.AgencyShare{{Name: "nice", Sessions: 200}} })
	c := b.waitCondition("c1", v1alpha1.ConditionInMap, metav1.ConditionFalse, "Refused")
	if msg := conditionOf(c, v1alpha1.ConditionInMap).Message; !strings.Contains(msg, "0..80") {
		t.Errorf("refusal %q, want the agency's limit named", msg)
	}
	if _, _, after := b.mapCell("c1"); after.Version() != before.Version() {
		t.Errorf("the map went from version %d to %d", before.Version(), after.Version())
	}
	b.update("c1", func(c *v1alpha1.Cell) { c.Spec.Agencies = []v1alpha1.AgencyShare{{Name: "nice", Sessions: 20}} })
	b.waitCondition("c1", v1alpha1.ConditionInMap, metav1.ConditionTrue, "InMap")
	if mc, _, _ := b.mapCell("c1"); mc.FixedQuota["nice"] != 20 {
		t.Errorf("quota after the fix: %v", mc.FixedQuota)
	}
}

// A registry that does not answer: the condition says so, nothing is half
// done, and the operator retries until it answers again.
func TestAnUnreachableRegistry(t *testing.T) {
	b := newBench(t)
	agent := consultest.Start(t)
	reg, err := registry.NewConsul(registry.ConsulConfig{Addr: agent.Addr(), Prefix: "cellkit"}, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	ctl := control.New(reg, control.Config{Holder: "cellkit-operator (test)"}, control.Options{})
	initMap := func() {
		m, err := slotmap.New(64, map[string]int{"nice": 80})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ctl.Init(context.Background(), control.InitChange{Map: m}); err != nil {
			t.Fatal(err)
		}
	}
	initMap()
	b.start(operator.ManagerConfig{}, ctl)
	b.create(b.newCell("c1"))
	b.create(b.newCell("c2"))
	b.setReady("c1", 3)
	b.setReady("c2", 3)
	b.waitCondition("c1", v1alpha1.ConditionInMap, metav1.ConditionTrue, "InMap")
	b.waitCondition("c2", v1alpha1.ConditionInMap, metav1.ConditionTrue, "InMap")

	agent.Stop(t)
	b.update("c1", func(c *v1alpha1.Cell) { c.Spec.Weight = 4 })
	c := b.waitCondition("c1", v1alpha1.ConditionInMap, metav1.ConditionFalse, "RegistryUnreachable")
	t.Logf("while the registry is down: %s", conditionOf(c, v1alpha1.ConditionInMap).Message)

	// Back, empty (a dev agent keeps nothing): the operator puts both
	// cells back, c1 at its new weight.
	agent.Restart(t)
	initMap()
	b.waitCondition("c1", v1alpha1.ConditionInMap, metav1.ConditionTrue, "InMap")
	testkit.WaitFor(t, within, "both cells back in the map, c1 at weight 4", func() bool {
		m, err := ctl.Load(context.Background())
		if err != nil {
			return false
		}
		c1, ok1 := m.Cell("c1")
		_, ok2 := m.Cell("c2")
		return ok1 && ok2 && c1.Weight == 4
	})
}

// Two operators: one leads and reconciles; when it stops, the other
// takes over.
func TestOneOperatorLeads(t *testing.T) {
	b := newBench(t)
	el := operator.ManagerConfig{LeaderElection: true, LeaderNamespace: b.ns,
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 250 * time.Millisecond}
	first := b.start(el, b.ctl)
	lease := &coordinationv1.Lease{}
	holder := func() string {
		if err := b.kube.Client.Get(context.Background(), types.NamespacedName{Namespace: b.ns, Name: operator.LeaderElectionID}, lease); err != nil || lease.Spec.HolderIdentity == nil {
			return ""
		}
		return *lease.Spec.HolderIdentity
	}
	testkit.WaitFor(t, within, "a leader", func() bool { return holder() != "" })
	leader := holder()
	b.start(el, b.ctl)
	b.create(b.newCell("c1"))
	b.setReady("c1", 3)
	b.waitCondition("c1", v1alpha1.ConditionInMap, metav1.ConditionTrue, "InMap")
	if h := holder(); h != leader {
		t.Fatalf("the lease moved from %s to %s with both running", leader, h)
	}
	first()
	testkit.WaitFor(t, within, "the second operator leading", func() bool { h := holder(); return h != "" && h != leader })
	b.update("c1", func(c *v1alpha1.Cell) { c.Spec.Weight = 2 })
	testkit.WaitFor(t, within, "c1 reweighted by the new leader", func() bool { mc, _, _ := b.mapCell("c1"); return mc.Weight == 2 })
}

// installAdmission installs the operator's admission policy and writes the
// map's agencies' limits beside the Cells, as the operator does.
func installAdmission(t *testing.T, b *bench) {
	t.Helper()
	ctx := context.Background()
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubernetes", "operator", "admission.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		if err := b.kube.Client.Create(ctx, u); err != nil {
			t.Fatalf("admission.yaml: %v", err)
		}
	}
	m, _ := b.ctl.Load(ctx)
	limits := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: operator.AgencyLimits, Namespace: b.ns}, Data: map[string]string{}}
	for a, n := range m.Agencies() {
		limits.Data[a] = strconv.Itoa(n)
	}
	if err := b.kube.Client.Create(ctx, limits); err != nil {
		t.Fatal(err)
	}
}
