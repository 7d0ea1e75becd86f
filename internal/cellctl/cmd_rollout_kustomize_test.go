package cellctl

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/cellkit/cellkit/internal/control"
)

const (
	newCell   = "registry.example.com/cellkit/cell:1.5.0"
	newRouter = "registry.example.com/cellkit/router@sha256:0f3c5a4e9d2b1c8f7e6d5c4b3a29180f7e6d5c4b3a29180f7e6d5c4b3a291807"
)

// kustomizeWaves are c1;c2,c3;c4, baked 10 minutes each, and a local
// stack's router wave, which the components leave out.
var kustomizeWaves = []control.Wave{
	{Cells: []string{"c1"}, Bake: 10 * time.Minute},
	{Cells: []string{"c2", "c3"}, Bake: 10 * time.Minute},
	{Cells: []string{"c4"}, Bake: 10 * time.Minute},
	{Routers: []string{"router1"}, Bake: 10 * time.Minute},
}

// component is a kustomize Component as the tests read it back.
type component struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Patches    []struct {
		Target struct {
			Kind string `yaml:"kind"`
			Name string `yaml:"name"`
		} `yaml:"target"`
		Patch string `yaml:"patch"`
	} `yaml:"patches"`
}

// patched is what a component sets: the image of a container, by
// "KIND/NAME container".
type patched map[string]string

// readComponent parses the component at path, and each of its patches,
// into what it sets.
func readComponent(t *testing.T, path string) (patched, string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c component
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, data)
	}
	if c.APIVersion != "kustomize.config.k8s.io/v1alpha1" || c.Kind != "Component" {
		t.Errorf("%s: %s %s, want a kustomize.config.k8s.io/v1alpha1 Component", path, c.APIVersion, c.Kind)
	}
	got := patched{}
	for _, p := range c.Patches {
		var obj struct {
			APIVersion string `yaml:"apiVersion"`
			Kind       string `yaml:"kind"`
			Metadata   struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct {
							Name  string `yaml:"name"`
							Image string `yaml:"image"`
						} `yaml:"containers"`
					} `yaml:"spec"`
				} `yaml:"template"`
			} `yaml:"spec"`
		}
		if err := yaml.Unmarshal([]byte(p.Patch), &obj); err != nil {
			t.Fatalf("%s: the patch of %s: %v", path, p.Target.Name, err)
		}
		if obj.APIVersion != "apps/v1" || obj.Kind != p.Target.Kind || obj.Metadata.Name != p.Target.Name {
			t.Errorf("%s: the patch targeting %s %s is of %s %s %s", path, p.Target.Kind, p.Target.Name, obj.APIVersion, obj.Kind, obj.Metadata.Name)
		}
		for _, ctr := range obj.Spec.Template.Spec.Containers {
			got[p.Target.Kind+"/"+p.Target.Name+" "+ctr.Name] = ctr.Image
		}
	}
	return got, string(data)
}

// TestKustomizeWaves: one component per wave of cells, each moving the
// cells of its wave and keeping those of the waves before; with a
// router image, a last one moving the routers' Deployment too.
func TestKustomizeWaves(t *testing.T) {
	cells := func(image string, ids ...string) patched {
		p := patched{}
		for _, c := range ids {
			p["StatefulSet/cellkit-cell-"+c+" cell"] = image
		}
		return p
	}
	withRouter := cells(newCell, "c1", "c2", "c3", "c4")
	withRouter["Deployment/cellkit-router router"] = newRouter
	for _, tc := range []struct {
		name        string
		routerImage string
		want        []patched
		gates       []string // the gate each wave's comment names
	}{
		{"cells", "", []patched{
			cells(newCell, "c1"), cells(newCell, "c1", "c2", "c3"), cells(newCell, "c1", "c2", "c3", "c4"),
		}, []string{
			"cellctl rollout gate --cells c1 --bake 10m\n", "cellctl rollout gate --cells c2,c3 --bake 10m\n", "cellctl rollout gate --cells c4 --bake 10m\n",
		}},
		{"cells and routers", newRouter, []patched{
			cells(newCell, "c1"), cells(newCell, "c1", "c2", "c3"), cells(newCell, "c1", "c2", "c3", "c4"), withRouter,
		}, []string{
			"--cells c1 --bake 10m\n", "--cells c2,c3 --bake 10m\n", "--cells c4 --bake 10m\n", "rollout status deployment/cellkit-router\n",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "rollout")
			paths, err := writeKustomize(dir, newCell, tc.routerImage, kustomizeWaves)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for i := range tc.want {
				want = append(want, filepath.Join(dir, "wave-"+strconv.Itoa(i+1), "kustomization.yaml"))
			}
			if !slices.Equal(paths, want) {
				t.Fatalf("writeKustomize wrote %q, want %q", paths, want)
			}
			assertEntries(t, dir, waveNames(len(tc.want))...)
			for i, path := range paths {
				got, text := readComponent(t, path)
				if len(got) != len(tc.want[i]) {
					t.Errorf("wave %d sets %v, want %v", i+1, got, tc.want[i])
				}
				for k, v := range tc.want[i] {
					if got[k] != v {
						t.Errorf("wave %d: %s runs %q, want %q", i+1, k, got[k], v)
					}
				}
				if !strings.HasPrefix(text, kustomizeMark) || !strings.Contains(text, tc.gates[i]) {
					t.Errorf("wave %d's comment lacks %q:\n%s", i+1, tc.gates[i], text)
				}
				if i > 0 && !strings.Contains(text, "in place of wave-"+strconv.Itoa(i)) {
					t.Errorf("wave %d's comment does not say it replaces wave %d:\n%s", i+1, i, text)
				}
			}
		})
	}
}

func waveNames(n int) []string {
	var names []string
	for i := 1; i <= n; i++ {
		names = append(names, "wave-"+strconv.Itoa(i))
	}
	return names
}

// assertEntries fails unless dir holds exactly names.
func assertEntries(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	slices.Sort(got)
	names = slices.Sorted(slices.Values(names))
	if !slices.Equal(got, names) {
		t.Errorf("%s holds %q, want %q", dir, got, names)
	}
}

// TestKustomizeStaleWavesRemoved: writing fewer waves into a directory
// written before removes its later waves, an empty one left by a write
// that died included, and rewrites the others.
func TestKustomizeStaleWavesRemoved(t *testing.T) {
	dir := t.TempDir()
	if _, err := writeKustomize(dir, newCell, newRouter, kustomizeWaves); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "wave-7"), 0o755); err != nil {
		t.Fatal(err)
	}
	assertEntries(t, dir, "wave-1", "wave-2", "wave-3", "wave-4", "wave-7")
	newer := "registry.example.com/cellkit/cell:1.5.1"
	paths, err := writeKustomize(dir, newer, "", []control.Wave{{Cells: []string{"c1"}}, {Cells: []string{"c2", "c3", "c4"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 2 {
		t.Fatalf("wrote %q, want two waves", paths)
	}
	assertEntries(t, dir, "wave-1", "wave-2")
	assertEntries(t, filepath.Join(dir, "wave-2"), "kustomization.yaml")
	got, text := readComponent(t, paths[1])
	if len(got) != 4 || got["StatefulSet/cellkit-cell-c4 cell"] != newer || got["StatefulSet/cellkit-cell-c1 cell"] != newer {
		t.Errorf("the rewritten wave 2 sets %v, want c1 to c4 on %s", got, newer)
	}
	if strings.Contains(text, "--bake") {
		t.Errorf("a wave without a bake time names one:\n%s", text)
	}
}

// TestKustomizeRefusals: an image the components cannot carry, and a
// directory holding anything but the waves cellctl wrote, are refused
// with a one-line error, and nothing is written.
func TestKustomizeRefusals(t *testing.T) {
	written := t.TempDir()
	if _, err := writeKustomize(written, newCell, "", kustomizeWaves); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name         string
		cell, router string
		waves        []control.Wave
		prepare      func(dir string) // fills the directory first
		want         string
	}{
		{name: "no image", want: "--image is required"},
		{name: "image with a space", cell: "registry.example.com/cellkit/cell:1.5.0 ", want: "has no spaces"},
		{name: "image with a newline", cell: "registry.example.com/cellkit/cell:1.5.0\nkind: Secret", want: "has no spaces"},
		{name: "router image with a tab", cell: newCell, router: "registry.example.com/cellkit/router:\t1.5.0", want: "--router-image"},
		{name: "image with a quote", cell: `registry.example.com/cellkit/cell:"1.5.0"`, want: "is not in an image reference"},
		{name: "image without tag", cell: "registry.example.com/cellkit/cell", want: "no tag or digest"},
		{name: "image with an empty tag", cell: "registry.example.com:5000/cellkit/cell:", want: "no tag or digest"},
		{name: "image with a bad digest", cell: "registry.example.com/cellkit/cell@sha256", want: "ALGORITHM:HEX"},
		{name: "image with a short digest", cell: "registry.example.com/cellkit/cell@sha256:0f3c", want: "--image: image \"registry.example.com/cellkit/cell@sha256:0f3c\" is not an image reference"},
		{name: "image with capitals in its path", cell: "registry.example.com/CellKit/cell:1.5.0", want: "is not an image reference"},
		{name: "image with an empty path component", cell: "registry.example.com//cell:1.5.0", want: "is not an image reference"},
		{name: "image named as in the base", cell: "cellkit/cell:1.5.0", want: "images: entry for cellkit/cell"},
		{name: "router image named as in the base", cell: newCell, router: "cellkit/router:1.5.0", want: "images: entry for cellkit/router"},
		{name: "no wave of cells", cell: newCell, waves: []control.Wave{{Routers: []string{"router1"}}}, want: "no wave of cells"},
		{name: "a cell in two waves", cell: newCell, waves: []control.Wave{{Cells: []string{"c1"}}, {Cells: []string{"c1", "c2"}}}, want: "cell c1 is in two waves"},
		{name: "not a cell id", cell: newCell, waves: []control.Wave{{Cells: []string{"C1: x"}}}, want: "not a cell id"},
		{name: "an unrelated file", cell: newCell, prepare: func(dir string) { writeTestFile(t, filepath.Join(dir, "notes.txt"), "mine") }, want: "holds notes.txt, which cellctl did not write"},
		{name: "an unrelated directory", cell: newCell, prepare: func(dir string) { mkdir(t, filepath.Join(dir, "base")) }, want: "base, which cellctl did not write"},
		{name: "a wave directory by another name", cell: newCell, prepare: func(dir string) { mkdir(t, filepath.Join(dir, "wave-01")) }, want: "wave-01, which cellctl did not write"},
		{name: "more than a component in a wave", cell: newCell, prepare: func(dir string) {
			if err := os.CopyFS(dir, os.DirFS(written)); err != nil {
				t.Fatal(err)
			}
			writeTestFile(t, filepath.Join(dir, "wave-3", "patch.yaml"), "mine")
		}, want: "holds wave-3/patch.yaml, which cellctl did not write"},
		{name: "a component cellctl did not write", cell: newCell, prepare: func(dir string) {
			mkdir(t, filepath.Join(dir, "wave-1"))
			writeTestFile(t, filepath.Join(dir, "wave-1", "kustomization.yaml"), "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n")
		}, want: "holds wave-1/kustomization.yaml, which cellctl did not write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "rollout")
			if tc.prepare != nil {
				mkdir(t, dir)
				tc.prepare(dir)
			}
			before := snapshot(t, dir)
			waves := tc.waves
			if waves == nil {
				waves = kustomizeWaves
			}
			paths, err := writeKustomize(dir, tc.cell, tc.router, waves)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("writeKustomize = %q, %v; want a one-line error about %q", paths, err, tc.want)
			}
			if after := snapshot(t, dir); !slices.Equal(before, after) {
				t.Errorf("a refused write changed %s:\nbefore %q\nafter  %q", dir, before, after)
			}
		})
	}
}

// snapshot is every path under dir with its content; nil if dir does not
// exist.
func snapshot(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		entry := path
		if !d.IsDir() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			entry += "=" + string(data)
		}
		out = append(out, entry)
		return nil
	})
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
