package devctl

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/cellctl"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/registry"
)

// mapOf is a file registry holding a map of cells whose admin APIs are
// closed ports, made through cellctl; its URL.
func mapOf(t *testing.T, cells ...string) string {
	t.Helper()
	url := "file:" + filepath.Join(t.TempDir(), "map.json")
	if r := run("--registry", url, "init", "--agency", "nice=80", "--agency", "kcb=40", "--slots", "4096"); r.code != cellctl.ExitOK {
		t.Fatalf("%v", r)
	}
	for _, id := range cells {
		if r := run("--registry", url, "provision", id, "--intake", "http://127.0.0.1:1", "--admin", "http://127.0.0.1:1", "--leave-data"); r.code != cellctl.ExitOK {
			t.Fatalf("%v", r)
		}
	}
	return url
}

// stackDir is a stack directory whose record (name: dev.json or
// net.json) holds procs (JSON).
func stackDir(t *testing.T, name, procs string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(`{"processes":`+procs+`}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestRolloutThroughTheStack: cellctl's rollout commands reach a stack of
// this machine through the hook the cellctl program gives them: the
// routers of a lab's net.json make waves after the cells', a directory
// with no stack or a stack with no router is refused in one line, and a
// cells' release reaches the preflight over the stack's processes.
func TestRolloutThroughTheStack(t *testing.T) {
	url := mapOf(t, "c1", "c2", "c3")
	routed := stackDir(t, "net.json", `[{"name":"c1","cell":"c1"},{"name":"router1","ready":"http://127.0.0.1:1/readyz"},{"name":"router2","ready":"http://127.0.0.1:1/readyz"}]`)
	stack := stackDir(t, "dev.json", `[]`)
	r := run("--registry", url, "rollout", "plan", "--stack", routed, "--set", "workers=8", "--router-set", "max-conns=5000", "--waves", "c1;rest")
	if flat := strings.Join(strings.Fields(r.stdout), " "); r.code != cellctl.ExitOK || !strings.Contains(flat, "1 c1 ") ||
		!strings.Contains(flat, "2 c2,c3 ") || !strings.Contains(flat, "3 router router1") || !strings.Contains(flat, "4 router router2") {
		t.Errorf("the plan of a release with the routers: %v", r)
	}
	if r := run("--registry", url, "rollout", "plan", "--stack", routed, "--router-set", "max-conns=5000"); r.code != cellctl.ExitOK ||
		strings.Contains(r.stdout, "c1") || !strings.Contains(r.stdout, "router2") {
		t.Errorf("a routers' release alone reaches no cell: %v", r)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rollout", "start", "--stack", t.TempDir(), "--set", "workers=3"}, "no stack in"},
		{[]string{"rollout", "resume", "--stack", t.TempDir()}, "no stack in"},
		{[]string{"rollout", "start", "--stack", stack, "--router-set", "max-conns=5000"}, "no router in the stack " + stack},
		{[]string{"rollout", "start", "--stack", stack, "--set", "workers=3"}, "the metrics of c1"},
	} {
		r := run(append([]string{"--registry", url}, tc.args...)...)
		if r.code == cellctl.ExitOK || !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
			t.Errorf("%q: exit %d, stderr %q; want a one-line error about %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
	if _, err := os.Stat(strings.TrimPrefix(url, "file:") + ".rollout"); !os.IsNotExist(err) {
		t.Errorf("a refused rollout left a record: %v", err)
	}
}

// TestRolloutRefusedWhileAnotherIsActive: a second rollout on a stack is
// refused with one line naming the first and its holder, before anything
// is read or changed; rollout status shows the first with each reached
// cell's release.
func TestRolloutRefusedWhileAnotherIsActive(t *testing.T) {
	url := mapOf(t, "c1", "c2")
	reg, err := registry.Open(registry.Config{URL: url}, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	ctl := control.New(reg, control.Config{Holder: "cellctl rollout start by alice@a"}, control.Options{})
	ctx := context.Background()
	waves := []control.Wave{{Cells: []string{"c1"}, Bake: time.Minute}, {Cells: []string{"c2"}, Bake: time.Minute}}
	if _, err := ctl.StartRollout(ctx, control.Rollout{ID: "first", Waves: waves, Release: "devel@new",
		Cells: map[string]control.CellRollout{"c1": {Phase: control.PhaseBaking, Processes: map[string]control.ProcessRollout{"-": {Step: control.StepServing, Release: "devel@new"}}}}}); err != nil {
		t.Fatal(err)
	}
	record := strings.TrimPrefix(url, "file:") + ".rollout"
	before, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	stack := stackDir(t, "dev.json", `[]`)
	r := run("--registry", url, "rollout", "start", "--stack", stack, "--set", "workers=3")
	if r.code != cellctl.ExitFailure || !strings.Contains(r.stderr, "rollout first is running, held by cellctl rollout start by alice@a") ||
		strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
		t.Errorf("a second rollout: exit %d, %q", r.code, r.stderr)
	}
	if after, _ := os.ReadFile(record); string(after) != string(before) {
		t.Error("the refused rollout changed the record")
	}
	if r := run("--registry", url, "rollout", "status"); r.code != cellctl.ExitOK || !strings.Contains(r.stdout, "c1 (baking): serving devel@new") {
		t.Errorf("status lacks the reached cell's release: %v", r)
	}
}
