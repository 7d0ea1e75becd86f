package devstack

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/release"
)

// TestDeployerReplacesAndRestores: through the rollout's interface
// (release.Deployer), a process of a stack's record is listed with its
// cell and command, replaced by another binary with a flag set on top of
// its arguments, its log, name and environment kept and the record
// updated (the record's other fields too), then put back as it was. A
// command with an image, or without a binary, is refused before the
// process is touched.
func TestDeployerReplacesAndRestores(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	// The stop of a process checks its executable, so the replacement
	// is a copy of sh.
	sh2 := filepath.Join(dir, "sh-v2")
	b, err := os.ReadFile(sh)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sh2, b, 0o755); err != nil {
		t.Fatal(err)
	}
	// The script writes its arguments and environment, then waits to be
	// stopped.
	p := Process{Name: "c1-i1", Cell: "c1", Instance: "i1", Bin: sh, Args: []string{"-c", `echo "run $0 $* env=$DEVSTACK_TEST"; sleep 60`, "c1"},
		Log: filepath.Join(dir, "c1.log"), Ready: "http://127.0.0.1:1/readyz", Env: []string{"DEVSTACK_TEST=kept"}}
	c := start(t, p)
	record := filepath.Join(dir, "net.json")
	st := map[string]any{"dir": dir, "lab": map[string]any{"prefix": "ck1"}, "processes": []Process{c.Process}}
	data, _ := json.Marshal(st)
	if err := os.WriteFile(record, data, 0o600); err != nil {
		t.Fatal(err)
	}
	var d release.Deployer = Deployer{Path: record, Grace: 5 * time.Second}
	ctx := context.Background()

	procs, err := d.Processes(ctx)
	want := release.Process{Name: "c1-i1", Cell: "c1", Instance: "i1", Ready: p.Ready, Run: control.Command{Bin: sh, Args: p.Args}}
	if err != nil || len(procs) != 1 || !reflect.DeepEqual(procs[0], want) {
		t.Fatalf("the deployer's processes: %+v, %v; want %+v", procs, err, want)
	}
	before, err := d.Replace(ctx, "c1-i1", release.Spec{Bin: sh2, Set: []string{"workers=8"}}.Apply(procs[0].Run))
	if err != nil {
		t.Fatal(err)
	}
	if !before.Same(procs[0].Run) || Alive(c.PID) {
		t.Errorf("returned %+v as what ran before, want %+v; the old process alive: %v", before, procs[0].Run, Alive(c.PID))
	}
	waitLine(t, p.Log, "run c1 --workers=8 env=kept")
	var got struct {
		Lab       map[string]string `json:"lab"`
		Processes []Process         `json:"processes"`
	}
	b, _ = os.ReadFile(record)
	if err := json.Unmarshal(b, &got); err != nil || got.Lab["prefix"] != "ck1" || len(got.Processes) != 1 || got.Processes[0].Bin != sh2 ||
		got.Processes[0].Log != p.Log || got.Processes[0].Cell != "c1" || got.Processes[0].Instance != "i1" || !Alive(got.Processes[0].PID) {
		t.Fatalf("record after the replace: %s (%v)", b, err)
	}
	second := got.Processes[0]
	t.Cleanup(func() { Stop(ctx, second, 0) })

	for _, bad := range []struct {
		run  control.Command
		want string
	}{
		{control.Command{Image: "registry.example.com/cellkit/cell:1.5.0", Args: p.Args}, "the local stack runs binaries, not images"},
		{control.Command{Bin: sh, Image: "cellkit/cell:1"}, "not images"},
		{control.Command{Args: p.Args}, "without a binary"},
	} {
		if _, err := d.Replace(ctx, "c1-i1", bad.run); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Replace(%+v): %v, want %q", bad.run, err, bad.want)
		}
	}
	if !Alive(second.PID) {
		t.Fatal("a refused command stopped the process")
	}

	if _, err := d.Replace(ctx, "c1-i1", before); err != nil {
		t.Fatal(err)
	}
	if Alive(second.PID) {
		t.Error("the replaced process still runs")
	}
	b, _ = os.ReadFile(record)
	if err := json.Unmarshal(b, &got); err != nil || got.Processes[0].Bin != sh || len(got.Processes[0].Args) != 3 {
		t.Fatalf("record after the restore: %s (%v)", b, err)
	}
	third := got.Processes[0]
	t.Cleanup(func() { Stop(ctx, third, 0) })
	if _, err := d.Replace(ctx, "c9", before); err == nil || !strings.Contains(err.Error(), `no process "c9"`) {
		t.Errorf("an unknown process: %v", err)
	}
}

// TestDeployerProcesses: the deployer lists the record's processes in
// its order, each cell's process with its cell and instance, the routers
// as routers; a local stack's record from before processes named their
// cells has the cells of their names (all but the agency simulator, the
// console and the routers), a lab's no cell it does not name.
func TestDeployerProcesses(t *testing.T) {
	ctx := context.Background()
	list := func(file string, procs []Process) []release.Process {
		t.Helper()
		path := filepath.Join(t.TempDir(), file)
		data, _ := json.Marshal(map[string]any{"processes": procs})
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := Deployer{Path: path}.Processes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	brief := func(ps []release.Process) string {
		var parts []string
		for _, p := range ps {
			parts = append(parts, fmt.Sprintf("%s:%s/%s/%v", p.Name, p.Cell, p.Instance, p.Router))
		}
		return strings.Join(parts, " ")
	}
	lab := []Process{{Name: "consul"}, {Name: "agencysim"}, {Name: "c1-n1"}, {Name: "c1-i2", Cell: "c1", Instance: "i2"},
		{Name: "c1-i1", Cell: "c1", Instance: "i1"}, {Name: "my-cell", Cell: "my-cell"}, {Name: "router1"}, {Name: "router2"}}
	for _, tc := range []struct {
		file  string
		procs []Process
		want  string
	}{
		{"net.json", lab, "consul://false agencysim://false c1-n1://false c1-i2:c1/i2/false c1-i1:c1/i1/false my-cell:my-cell//false router1://true router2://true"},
		{"dev.json", []Process{{Name: "agencysim"}, {Name: "c1"}, {Name: "c-2"}, {Name: "router"}, {Name: ConsoleName}},
			"agencysim://false c1:c1//false c-2:c-2//false router://true console://false"},
		{"dev.json", []Process{{Name: "agencysim"}, {Name: "c1", Cell: "c1"}, {Name: "extra"}, {Name: "router"}},
			"agencysim://false c1:c1//false extra://false router://true"},
		{"net.json", []Process{{Name: "c1-i1"}, {Name: "router1"}}, "c1-i1://false router1://true"},
	} {
		if got := brief(list(tc.file, tc.procs)); got != tc.want {
			t.Errorf("%s of %v:\n got %s\nwant %s", tc.file, tc.procs, got, tc.want)
		}
	}
}

// waitLine polls until the file at path holds a line with want.
func waitLine(t *testing.T, path, want string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile(path); strings.Contains(string(b), want) {
			return
		}
	}
	b, _ := os.ReadFile(path)
	t.Fatalf("%s never said %q: %s", path, want, b)
}
