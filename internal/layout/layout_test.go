package layout

import (
	"bufio"
	"bytes"
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
	"storage": "platform", "devstack": "platform", "program": "platform", "handoff": "platform",
	// map: the cell map and the registries that hold it.
	"slotmap": "map", "registry": "map",
	// agency: the link to the agencies, and their simulator.
	"agency": "agency", "sessionpool": "agency", "wire": "agency", "telegram": "agency", "agencysim": "agency",
	// cell: one cell.
	"cell": "cell", "intake": "cell", "pipeline": "cell", "queue": "cell", "store": "cell", "shed": "cell",
	"inflight": "cell", "inquiry": "cell", "natsembed": "cell", "quotalease": "cell",
	// edge: the router.
	"router": "edge", "apikey": "edge", "route": "edge", "guard": "edge", "h1": "edge", "hotkeys": "edge", "slotrate": "edge",
	// control: changing the map and operating cells.
	"control": "control", "gate": "control", "rollout": "control", "cellctl": "control", "tfprovider": "control", "adminclient": "control",
	"console": "control",
	// lab: load, drills, network labs.
	"loadtest": "lab", "drill": "lab", "netlab": "lab", "netlab/netstack": "lab", "smallfs": "lab",
	// test: what tests share.
	"testkit": "test", "celltest": "test", "consultest": "test", "netlab/netlabtest": "test",
	// this package.
	"layout": "test",
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
		from, inInternal := planeOf(pkg)
		if strings.HasPrefix(pkg, "internal/") && !inInternal {
			t.Errorf("%s has no plane: place it in internal/layout's planes (and docs/decisions/planes.md)", pkg)
			continue
		}
		listed[pkg] = true
		for _, imp := range imports {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			to, ok := planeOf(strings.TrimPrefix(imp, module))
			if !ok || to == from {
				continue
			}
			if !inInternal {
				// A program may import any plane but test support.
				if to == "test" {
					t.Errorf("program %s imports test support %s", pkg, imp)
				}
				continue
			}
			if !slices.Contains(may[from], to) {
				t.Errorf("%s (%s) imports %s (%s): the %s plane may import %v", pkg, from, strings.TrimPrefix(imp, module), to, from, may[from])
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
}

// planeOf is the plane of a package path below the module; ok is false
// outside internal/ (the programs, deploy, scripts).
func planeOf(pkg string) (string, bool) {
	p, ok := planes[strings.TrimPrefix(pkg, "internal/")]
	return p, ok && strings.HasPrefix(pkg, "internal/")
}
