package layout

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/cellkit/cellkit/"

// planes places every package under internal/ (the path below it).
var planes = map[string]string{
	// platform: the parts every plane uses; they import only each other.
	"api": "platform", "problem": "platform", "httpx": "platform", "tlsconf": "platform", "pki": "platform",
	"reload": "platform", "flagenv": "platform", "buildinfo": "platform", "atomicfile": "platform",
	"backoff": "platform", "breaker": "platform", "adminauth": "platform", "freeport": "platform",
	"storage": "platform", "program": "platform", "handoff": "platform", "metric": "platform",
	// map: the cell map and the registries that hold it.
	"slotmap": "map", "registry": "map",
	// agency: the link to the agencies, and their simulator.
	"agency": "agency", "sessionpool": "agency", "wire": "agency", "telegram": "agency", "agencysim": "agency",
	// cell: one cell.
	"cell": "cell", "intake": "cell", "pipeline": "cell", "queue": "cell", "store": "cell", "shed": "cell",
	"inflight": "cell", "inquiry": "cell", "natsembed": "cell", "quotalease": "cell", "move": "cell",
	// edge: the router.
	"router": "edge", "apikey": "edge", "route": "edge", "guard": "edge", "h1": "edge", "hotkeys": "edge", "slotrate": "edge", "quota": "edge",
	// control: changing the map and operating cells.
	"control": "control", "gate": "control", "rollout": "control", "cellctl": "control", "tfprovider": "control", "adminclient": "control",
	"console": "control", "release": "control", "operator": "control", "operator/api/v1alpha1": "control",
	// lab: the local stack, load, drills, network labs — the test bench,
	// which the product never imports: the product's deployer interface
	// is internal/release, which devstack implements.
	"devstack": "lab", "devstack/devctl": "lab",
	"loadtest": "lab", "drill": "lab", "netlab": "lab", "netlab/netstack": "lab", "smallfs": "lab", "kubenode": "lab", "kubenode/kubestack": "lab",
	// test: what tests share.
	"testkit": "test", "celltest": "test", "consultest": "test", "netlab/netlabtest": "test", "kubetest": "test",
	// this package.
	"layout": "test",
}

// outside places every package outside internal/: a product program is
// held to its plane's rule (an image ships no lab and no test support);
// a tool — cellctl with its local stack, loadtest, the benchmarks under
// scripts/, the observability pack's checks — may import any plane but
// test support.
var outside = map[string]string{
	"agencysim": "agency", "cell": "cell", "router": "edge", "operator": "control", "terraform": "control",
	"cellctl": "tool", "loadtest": "tool", "scripts/bench-router": "tool", "scripts/bench-syscalls": "tool",
	"deploy/observability": "tool", "deploy/observability/grafana": "tool", "deploy/observability/prometheus": "tool",
	// cellkit's io_uring module, which the gnet fork imports: a module of
	// its own that imports nothing of cellkit's.
	"third_party/uring": "platform",
}

// may says which planes a plane's packages may import (besides their own).
// The edge and the cells never import each other, and neither imports
// control; nothing but the lab and tests imports test support.
var may = map[string][]string{
	"platform": {},
	"map":      {"platform"},
	"agency":   {"platform"},
	"cell":     {"agency", "map", "platform"},
	"edge":     {"map", "platform"},
	"control":  {"map", "platform"},
	"lab":      {"control", "cell", "edge", "agency", "map", "platform"},
	"test":     {"lab", "control", "cell", "edge", "agency", "map", "platform"},
	"tool":     {"lab", "control", "cell", "edge", "agency", "map", "platform"},
}

func TestPlanes(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, stderr.String())
	}
	listed := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		pkg, imports := strings.TrimPrefix(f[0], module), f[1:]
		from, placed := planeOf(pkg)
		if !placed {
			t.Errorf("%s has no plane: place it in internal/layout's planes or outside (and docs/decisions/planes.md)", pkg)
			continue
		}
		listed[pkg] = true
		for _, imp := range imports {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			to, ok := planeOf(strings.TrimPrefix(imp, module))
			if !ok {
				continue
			}
			if why := refused(pkg, from, strings.TrimPrefix(imp, module), to); why != "" {
				t.Error(why)
			}
		}
	}
	for pkg, p := range planes {
		if !listed["internal/"+pkg] {
			t.Errorf("internal/%s is placed but go list does not name it: take it out of planes", pkg)
		}
		if _, ok := may[p]; !ok {
			t.Errorf("internal/%s is in plane %q, which has no rule", pkg, p)
		}
	}
	for pkg, p := range outside {
		if !listed[pkg] {
			t.Errorf("%s is placed but go list does not name it: take it out of outside", pkg)
		}
		if _, ok := may[p]; !ok {
			t.Errorf("%s is in plane %q, which has no rule", pkg, p)
		}
	}
}

// refused says why package pkg, of plane from, may not import imp, of
// plane to; "" if it may.
func refused(pkg, from, imp, to string) string {
	switch {
	case to == from:
		return ""
	case slices.Contains(may[from], to):
		return ""
	case to == "lab":
		return fmt.Sprintf("%s (%s) imports %s (lab): the lab is the test bench, no part of the product (its deployer interface is internal/release); the %s plane may import %v",
			pkg, from, imp, from, may[from])
	}
	return fmt.Sprintf("%s (%s) imports %s (%s): the %s plane may import %v", pkg, from, imp, to, from, may[from])
}

// TestRefused holds the rule itself: the product's planes never import
// the lab (the control plane's rollout and cellctl neither), the lab may
// import the product, programs anything but test support.
func TestRefused(t *testing.T) {
	for _, tc := range []struct {
		from, to string
		want     string // "" allowed
	}{
		{"control", "lab", "internal/rollout (control) imports internal/devstack (lab): the lab is the test bench, no part of the product"},
		{"edge", "lab", "(lab): the lab is the test bench"},
		{"cell", "lab", "(lab): the lab is the test bench"},
		{"platform", "lab", "(lab): the lab is the test bench"},
		{"control", "test", "the control plane may import [map platform]"},
		{"edge", "cell", "the edge plane may import [map platform]"},
		{"lab", "control", ""},
		{"lab", "platform", ""},
		{"test", "lab", ""},
		{"control", "map", ""},
		{"control", "control", ""},
		{"tool", "lab", ""},
		{"tool", "control", ""},
		{"tool", "test", "the tool plane may import [lab control cell edge agency map platform]"},
	} {
		got := refused("internal/rollout", tc.from, "internal/devstack", tc.to)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%q importing %q: %q, want %q", tc.from, tc.to, got, tc.want)
		}
	}
	if planes["devstack"] != "lab" || planes["release"] != "control" || slices.Contains(may["control"], "lab") {
		t.Error("the local stack must be in the lab, the release in the product's control plane, and control must not import the lab")
	}
}

// planeOf is the plane of a package path below the module; ok is false
// for a package placed nowhere.
func planeOf(pkg string) (string, bool) {
	if rest, in := strings.CutPrefix(pkg, "internal/"); in {
		p, ok := planes[rest]
		return p, ok
	}
	p, ok := outside[pkg]
	return p, ok
}
