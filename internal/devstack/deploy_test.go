package devstack

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDeployerReplacesAndRestores: a process of a stack's record is
// replaced by another binary with a flag set on top of its arguments, its
// log and name kept and the record updated (the record's other fields
// too), then put back as it was.
func TestDeployerReplacesAndRestores(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	// Programs whose --version says version (Validate's cases; the stop
	// of a process checks its executable, so the replaced process is a
	// copy of sh).
	script := func(name, version string) string {
		path := filepath.Join(dir, name)
		text := "#!" + sh + "\nif [ \"$1\" = --version ]; then echo '" + version + "'; exit 0; fi\nexec " + sh + " \"$@\"\n"
		if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	sh2 := filepath.Join(dir, "sh-v2")
	b, err := os.ReadFile(sh)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sh2, b, 0o755); err != nil {
		t.Fatal(err)
	}
	aCell := script("cell-v2", "cell v2 (go)")
	notACell := script("router-v2", "router v2 (go)")
	mute := script("mute", "")
	// The script writes its arguments, then waits to be stopped.
	p := Process{Name: "c1", Bin: sh, Args: []string{"-c", `echo "run $0 $*"; sleep 60`, "c1"}, Log: filepath.Join(dir, "c1.log")}
	c := start(t, p)
	record := filepath.Join(dir, "net.json")
	st := map[string]any{"dir": dir, "lab": map[string]any{"prefix": "ck1"}, "processes": []Process{c.Process}}
	data, _ := json.Marshal(st)
	if err := os.WriteFile(record, data, 0o600); err != nil {
		t.Fatal(err)
	}
	d := Deployer{Path: record, Grace: 5 * time.Second}
	ctx := context.Background()

	if err := (Spec{Bin: aCell, Set: []string{"workers=8"}}).Validate("cell"); err != nil {
		t.Fatal(err)
	}
	spec := Spec{Bin: sh2, Set: []string{"workers=8"}}
	before, c2, err := d.Replace(ctx, "c1", spec.Apply)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Stop(ctx, c2.Process, 0); <-c2.Exited() })
	if before.PID != c.PID || Alive(c.PID) {
		t.Errorf("the old process %d: returned %d, alive %v", c.PID, before.PID, Alive(c.PID))
	}
	waitLine(t, p.Log, "run c1 --workers=8")
	var got struct {
		Lab       map[string]string `json:"lab"`
		Processes []Process         `json:"processes"`
	}
	b, _ = os.ReadFile(record)
	if err := json.Unmarshal(b, &got); err != nil || got.Lab["prefix"] != "ck1" || len(got.Processes) != 1 ||
		got.Processes[0].Bin != sh2 || got.Processes[0].PID != c2.PID || got.Processes[0].Log != p.Log {
		t.Fatalf("record after the replace: %s (%v)", b, err)
	}

	_, c3, err := d.Replace(ctx, "c1", func(Process) Process { return before })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Stop(ctx, c3.Process, 0); <-c3.Exited() })
	if Alive(c2.PID) {
		t.Error("the replaced process still runs")
	}
	b, _ = os.ReadFile(record)
	if err := json.Unmarshal(b, &got); err != nil || got.Processes[0].Bin != sh || len(got.Processes[0].Args) != 3 {
		t.Fatalf("record after the restore: %s (%v)", b, err)
	}
	if _, _, err := d.Replace(ctx, "c9", spec.Apply); err == nil || !strings.Contains(err.Error(), `no process "c9"`) {
		t.Errorf("an unknown process: %v", err)
	}
	for _, bad := range []struct {
		spec Spec
		want string
	}{
		{Spec{}, "needs a binary or a flag"},
		{Spec{Bin: filepath.Join(dir, "missing")}, "binary: "},
		{Spec{Bin: dir}, "not an executable file"},
		{Spec{Bin: sh}, "does not report its version"},
		{Spec{Bin: mute}, "does not report its version"},
		{Spec{Bin: notACell}, "is router, not cell"},
		{Spec{Set: []string{"workers"}}, "want name=value"},
		{Spec{Set: []string{"--workers=8"}}, "want name=value"},
	} {
		if err := bad.spec.Validate("cell"); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Validate(%+v) = %v, want %q", bad.spec, err, bad.want)
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
