package release

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The images of the release TestRolloutComponents puts out, and those the
// overlay runs before it.
const (
	oldCellImage   = "registry.example.com/cellkit/cell:0.1.0"
	oldRouterImage = "registry.example.com/cellkit/router:0.1.0"
	newCellImage   = "registry.example.com/cellkit/cell:1.5.0"
	newRouterImage = "registry.example.com/cellkit/router:1.5.0"
)

// builtBin is a program as `make build` leaves it in bin/ (or in
// $CELLKIT_BIN); the test is skipped without it.
func builtBin(t *testing.T, program string) string {
	t.Helper()
	dir := os.Getenv("CELLKIT_BIN")
	if dir == "" {
		dir = filepath.Join(root, "bin")
	}
	p, err := filepath.Abs(filepath.Join(dir, program))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("%v: run make build (or set CELLKIT_BIN to the programs' directory)", err)
	}
	return p
}

// TestRolloutComponents follows docs/kubernetes.md's "Upgrade": 'cellctl
// rollout plan --kustomize' over a map of the overlay's cells writes one
// component per wave, and the overlay with wave N's component runs the new
// image in the cells of waves 1 to N alone, then in the routers too; every
// other field of every object stays as the overlay has it. The images then
// named in the overlay's images: without a component render the same.
func TestRolloutComponents(t *testing.T) {
	cellctl := builtBin(t, "cellctl")
	tmp := t.TempDir()
	registry := "file:" + filepath.Join(tmp, "map.json")
	run := func(args ...string) (string, string, error) {
		t.Helper()
		cmd := exec.Command(cellctl, append([]string{"--registry", registry}, args...)...)
		cmd.Env = []string{"HOME=" + tmp} // none of the caller's CELLKIT_ variables
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	ok := func(args ...string) string {
		t.Helper()
		stdout, stderr, err := run(args...)
		if err != nil {
			t.Fatalf("cellctl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout, stderr)
		}
		return stdout
	}
	// The map of docs/kubernetes.md's "Install" (no cell needs to run).
	ok("init", "--agency", "nice=80", "--agency", "kcb=40")
	for _, c := range cellIDs {
		svc := "https://cellkit-cell-" + c + ".cellkit.svc"
		ok("provision", c, "--intake", svc+":8081", "--admin", svc+":9081", "--leave-data")
	}

	k := copyDeploy(t)
	overlay := filepath.Join(k, "overlays", "four-cells")
	dir := filepath.Join(overlay, "rollout")
	out := ok("rollout", "plan", "--waves", "c1;c2,c3;rest", "--bake", "10m", "--kustomize", dir,
		"--image", newCellImage, "--router-image", newRouterImage)
	waves := [][]string{{"c1"}, {"c1", "c2", "c3"}, cellIDs, cellIDs} // the cells each wave leaves on the new image
	for n := 1; n <= len(waves); n++ {
		if path := filepath.Join(dir, "wave-"+strconv.Itoa(n), "kustomization.yaml"); !strings.Contains(out, path) {
			t.Errorf("rollout plan --kustomize does not name %s:\n%s", path, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "wave-5")); err == nil {
		t.Errorf("a fifth wave written:\n%s", out)
	}

	kustomization := filepath.Join(overlay, "kustomization.yaml")
	orig, err := os.ReadFile(kustomization)
	if err != nil {
		t.Fatal(err)
	}
	withComponent := func(component string) {
		t.Helper()
		last := "  - ../../components/prometheus-operator\n"
		if !bytes.Contains(orig, []byte(last)) {
			t.Fatalf("%s: no %q to list the component after", kustomization, last)
		}
		changed := strings.Replace(string(orig), last, last+"  - "+component+"\n", 1)
		if err := os.WriteFile(kustomization, []byte(changed), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := renderFourCells(t)
	for i, moved := range waves {
		n := i + 1
		t.Run("wave-"+strconv.Itoa(n), func(t *testing.T) {
			withComponent("rollout/wave-" + strconv.Itoa(n))
			o := render(t, overlay)
			for _, s := range o.statefulSets {
				want := oldCellImage
				if slices.Contains(moved, strings.TrimPrefix(s.Name, "cellkit-cell-")) {
					want = newCellImage
				}
				checkImage(t, "StatefulSet "+s.Name, &s.Spec.Template, "cell", want, oldCellImage)
			}
			for _, d := range o.deployments {
				if d.Name != "cellkit-router" {
					continue
				}
				want := oldRouterImage
				if n == len(waves) {
					want = newRouterImage
				}
				checkImage(t, "Deployment "+d.Name, &d.Spec.Template, "router", want, oldRouterImage)
			}
			// With the images put back (above), nothing else differs.
			sameObjects(t, before, o)
		})
	}

	t.Run("the images then in the overlay", func(t *testing.T) {
		withComponent("rollout/wave-" + strconv.Itoa(len(waves)))
		last := render(t, overlay)
		released := strings.NewReplacer(
			"  - name: cellkit/router\n    newName: registry.example.com/cellkit/router\n    newTag: 0.1.0\n",
			"  - name: cellkit/router\n    newName: registry.example.com/cellkit/router\n    newTag: 1.5.0\n",
			"  - name: cellkit/cell\n    newName: registry.example.com/cellkit/cell\n    newTag: 0.1.0\n",
			"  - name: cellkit/cell\n    newName: registry.example.com/cellkit/cell\n    newTag: 1.5.0\n",
		).Replace(string(orig))
		if strings.Count(released, "newTag: 1.5.0") != 2 {
			t.Fatalf("%s: the images: entries of the cell and the router are not as the test expects", kustomization)
		}
		if err := os.WriteFile(kustomization, []byte(released), 0o644); err != nil {
			t.Fatal(err)
		}
		sameObjects(t, last, render(t, overlay))
	})

	t.Run("the base's image name", func(t *testing.T) {
		// Why cellctl refuses cellkit/cell: the overlay's images: entry
		// rewrites it after the components, tag included, so that the
		// component would change nothing.
		if _, stderr, err := run("rollout", "plan", "--waves", "c1;rest", "--kustomize", filepath.Join(tmp, "bare"),
			"--image", "cellkit/cell:1.5.0"); err == nil || !strings.Contains(stderr, "cellkit/cell") || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("--image cellkit/cell:1.5.0: %v, stderr %q; want a one-line refusal", err, stderr)
		}
		if err := os.WriteFile(kustomization, orig, 0o644); err != nil {
			t.Fatal(err)
		}
		edit(t, filepath.Join(dir, "wave-1", "kustomization.yaml"), func(s string) string {
			return strings.ReplaceAll(s, newCellImage, "cellkit/cell:1.5.0")
		})
		withComponent("rollout/wave-1")
		for _, s := range render(t, overlay).statefulSets {
			checkImage(t, "StatefulSet "+s.Name, &s.Spec.Template, "cell", oldCellImage, oldCellImage)
		}
	})
}

// checkImage fails unless the container name of tpl runs want; it then
// puts old back in it, so that sameObjects finds any other change.
func checkImage(t *testing.T, where string, tpl *corev1.PodTemplateSpec, name, want, old string) {
	t.Helper()
	found := false
	for _, c := range containers(tpl) {
		if c.Name != name {
			continue
		}
		found = true
		if c.Image != want {
			t.Errorf("%s: container %s runs %s, want %s", where, name, c.Image, want)
		}
		c.Image = old
	}
	if !found {
		t.Errorf("%s: no container %s", where, name)
	}
}

// sameObjects fails unless got holds the objects of want, field for
// field, in the same order.
func sameObjects(t *testing.T, want, got *objects) {
	t.Helper()
	if len(got.all) != len(want.all) {
		t.Fatalf("%d objects, want %d", len(got.all), len(want.all))
	}
	for i := range want.all {
		if !equality.Semantic.DeepEqual(want.all[i], got.all[i]) {
			t.Errorf("%s differs from the overlay's beyond the image", describe(got.all[i]))
		}
	}
}

func describe(obj runtime.Object) string {
	if m, ok := obj.(metav1.Object); ok {
		return fmt.Sprintf("%T %s", obj, m.GetName())
	}
	return fmt.Sprintf("%T", obj)
}
