package release

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	sigsyaml "sigs.k8s.io/yaml"
)

// operatorCell is the overlay's cell c1 as a Cell resource: the same
// namespace and image, every other field left to the defaults.
const operatorCell = `apiVersion: cellkit.io/v1alpha1
kind: Cell
metadata:
  name: c1
  namespace: cellkit
spec:
  image: registry.example.com/cellkit/cell:0.1.0
`

// operatorDifferences are the fields where the operator's objects differ
// from the kustomize base's on purpose, with why (docs/kubernetes.md says
// the same).
var operatorDifferences = map[string]string{
	// The operator paces a release itself, one instance at a time with
	// the rollout's gates: the StatefulSet replaces a pod only when the
	// operator deletes it.
	"StatefulSet/cellkit-cell-c1 spec.updateStrategy.type": "OnDelete, not RollingUpdate",
	// What the pods run, for the operator's next reconcile.
	"StatefulSet/cellkit-cell-c1 spec.template.metadata.annotations": "cellkit.io/release",
}

// generatedName is a kustomize-generated ConfigMap's name (NAME-HASH) or
// the operator's NATS configuration's (cellkit-nats-FNV32).
var generatedName = regexp.MustCompile(`^(cellkit-(?:nats|settings))-[a-z0-9]{8,10}$`)

// TestTheOperatorRendersTheBase holds the operator's objects for a cell
// (`operator render`) to the kustomize base's for the same cell, field by
// field: anything but operatorDifferences fails. The generated
// ConfigMaps' hashed names are compared without their hash; the NATS
// configuration by content.
func TestTheOperatorRendersTheBase(t *testing.T) {
	bin := builtBin(t, "operator")
	file := filepath.Join(t.TempDir(), "c1.yaml")
	if err := os.WriteFile(file, []byte(operatorCell), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "render", file).Output()
	if err != nil {
		t.Fatalf("operator render: %v", err)
	}
	op, err := decodeAll(out)
	if err != nil {
		t.Fatalf("operator render: %v", err)
	}
	base := renderFourCells(t)

	want := map[string]runtime.Object{}
	for _, o := range base.all {
		k := key(o)
		if strings.HasSuffix(k, "-c1") || k == "Service/cellkit-cells" || strings.HasPrefix(k, "ConfigMap/cellkit-nats") {
			want[k] = o
		}
	}
	seen := map[string]bool{}
	var diffs []string
	for _, o := range op.all {
		k := key(o)
		b, ok := want[k]
		if !ok {
			t.Errorf("the operator makes %s, which the base does not have", k)
			continue
		}
		seen[k] = true
		diffs = append(diffs, compare(k, normalized(t, b), normalized(t, o))...)
	}
	for k := range want {
		if !seen[k] {
			t.Errorf("the base has %s, which the operator does not make", k)
		}
	}
	explained := map[string]bool{}
	for _, d := range diffs {
		field, _, _ := strings.Cut(d, ": ")
		if why, ok := operatorDifferences[field]; ok {
			explained[field] = true
			t.Logf("expected difference (%s): %s", why, d)
			continue
		}
		t.Errorf("the operator and the base differ: %s", d)
	}
	for f := range operatorDifferences {
		if !explained[f] {
			t.Errorf("operatorDifferences lists %s, where they no longer differ: take it out", f)
		}
	}
}

// key is an object's kind and name, generated names without their hash.
func key(o runtime.Object) string {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		panic(err)
	}
	kind := reflect.TypeOf(o).Elem().Name()
	name, _ := u["metadata"].(map[string]any)["name"].(string)
	return kind + "/" + generatedName.ReplaceAllString(name, "$1")
}

// normalized is o as a tree of maps, its generated names without their
// hash wherever they appear.
func normalized(t *testing.T, o runtime.Object) map[string]any {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		t.Fatal(err)
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				x[k] = walk(e)
			}
		case []any:
			for i, e := range x {
				x[i] = walk(e)
			}
		case string:
			return generatedName.ReplaceAllString(x, "$1")
		}
		return v
	}
	return walk(u).(map[string]any)
}

// compare lists where a and b differ, as "KIND/NAME PATH: A ≠ B".
func compare(k string, a, b any) []string {
	var out []string
	var walk func(path string, a, b any)
	walk = func(path string, a, b any) {
		am, aok := a.(map[string]any)
		bm, bok := b.(map[string]any)
		if aok && bok {
			keys := map[string]bool{}
			for x := range am {
				keys[x] = true
			}
			for x := range bm {
				keys[x] = true
			}
			names := make([]string, 0, len(keys))
			for x := range keys {
				names = append(names, x)
			}
			sort.Strings(names)
			for _, x := range names {
				walk(strings.TrimPrefix(path+"."+x, "."), am[x], bm[x])
			}
			return
		}
		as, aok := a.([]any)
		bs, bok := b.([]any)
		if aok && bok && len(as) == len(bs) {
			for i := range as {
				walk(fmt.Sprintf("%s[%d]", path, i), as[i], bs[i])
			}
			return
		}
		if !reflect.DeepEqual(a, b) {
			out = append(out, fmt.Sprintf("%s %s: base %v ≠ operator %v", k, path, a, b))
		}
	}
	walk("", a, b)
	return slices.Clip(out)
}

// The installations whose cells the operator makes: operator-cells, and
// one-node, on the cluster of this machine (make cluster).
var (
	operatorCells = filepath.Join(kube, "overlays", "operator-cells")
	oneNode       = filepath.Join(kube, "overlays", "one-node")
)

// renderOperatorCells is the operator-cells overlay with, for each of its
// Cells, the objects `operator render` makes of it: the installation as
// it runs once the operator has reconciled it.
func renderOperatorCells(t *testing.T) *objects { return renderOperated(t, operatorCells) }

// renderOperated is the overlay in dir with, for each of its Cells, the
// objects `operator render` makes of it.
func renderOperated(t *testing.T, dir string) *objects {
	t.Helper()
	bin := builtBin(t, "operator")
	o := render(t, dir)
	if len(o.cells) == 0 {
		t.Fatalf("the overlay %s has no Cell", filepath.Base(dir))
	}
	for _, c := range o.cells {
		y, err := sigsyaml.Marshal(c.Object)
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(t.TempDir(), c.GetName()+".yaml")
		if err := os.WriteFile(file, y, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "render", file).CombinedOutput()
		if err != nil {
			t.Fatalf("operator render of Cell %s: %v: %s", c.GetName(), err, out)
		}
		made, err := decodeAll(out)
		if err != nil {
			t.Fatalf("operator render of Cell %s: %v", c.GetName(), err)
		}
		o.merge(made)
	}
	return o
}

// merge adds what m holds and o does not (by kind and name).
func (o *objects) merge(m *objects) {
	have := map[string]bool{}
	for _, x := range o.all {
		have[key(x)] = true
	}
	for _, x := range m.all {
		if have[key(x)] && !strings.HasPrefix(key(x), "ConfigMap/") {
			continue
		}
		o.all = append(o.all, x)
	}
	for name, cm := range m.configMaps {
		if _, ok := o.configMaps[name]; !ok {
			o.configMaps[name] = cm
		}
	}
	o.statefulSets = append(o.statefulSets, m.statefulSets...)
	o.pdbs = append(o.pdbs, m.pdbs...)
	o.policies = append(o.policies, m.policies...)
	for _, s := range m.services {
		if !slices.ContainsFunc(o.services, func(x *corev1.Service) bool { return x.Name == s.Name }) {
			o.services = append(o.services, s)
		}
	}
}

// forEachInstallation runs check on each installation: four-cells (made
// by kustomize alone), operator-cells and one-node (their cells made by
// the operator).
func forEachInstallation(t *testing.T, check func(t *testing.T, o *objects)) {
	t.Run("four-cells", func(t *testing.T) { check(t, renderFourCells(t)) })
	t.Run("operator-cells", func(t *testing.T) { check(t, renderOperatorCells(t)) })
	t.Run("one-node", func(t *testing.T) { check(t, renderOperated(t, oneNode)) })
}

// The one-node installation's JetStream nodes run the image make
// cluster-images builds of the nats-server go.mod requires, and its cells'
// instances may share the node.
func TestTheOneNodeCells(t *testing.T) {
	o := renderOperated(t, oneNode)
	want := "cellkit/nats:" + natsVersion(t)
	for _, s := range o.statefulSets {
		spec := s.Spec.Template.Spec
		if len(spec.InitContainers) == 0 || spec.InitContainers[0].Image != want {
			t.Errorf("StatefulSet %s: JetStream node image %v, want %s", s.Name, spec.InitContainers, want)
		}
		if a := spec.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
			t.Errorf("StatefulSet %s: anti-affinity %+v, want preferred only (one node)", s.Name, a)
		}
	}
	if len(o.statefulSets) != 3 {
		t.Errorf("%d cells, want 3", len(o.statefulSets))
	}
}
