package cellctl

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/control"
)

// TestRolloutPlanAndRefusals: the waves of a plan, and the settings a
// rollout refuses with a one-line error, changing nothing.
func TestRolloutPlanAndRefusals(t *testing.T) {
	e := newFileEnv(t)
	cell := newFakeCell(t, "c1")
	e.setup([]string{"c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8"}, func(string) string { return cell.URL() })
	r := e.ok("rollout", "plan", "--waves", "c1;25%;rest", "--bake", "10m")
	for _, want := range []string{"1     c1           10m0s", "2     c2,c3        10m0s", "3     c4,c5,c6,c7,c8  10m0s"} {
		if !strings.Contains(strings.Join(strings.Fields(r.stdout), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("plan lacks %q:\n%s", want, r.stdout)
		}
	}
	if r := e.ok("rollout", "plan"); !strings.Contains(r.stdout, "c2,c3") {
		t.Errorf("the default plan (the first cell, 25%%, the rest):\n%s", r.stdout)
	}
	stack := t.TempDir()
	if err := os.WriteFile(filepath.Join(stack, "dev.json"), []byte(`{"processes":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// A stack with two routers: their waves follow the cells'.
	routed := t.TempDir()
	if err := os.WriteFile(filepath.Join(routed, "net.json"), []byte(`{"processes":[{"name":"c1"},{"name":"router1"},{"name":"router2"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// Programs that say what they are.
	program := func(name, version string) string {
		path := filepath.Join(stack, name)
		if err := os.WriteFile(path, []byte("#!/bin/sh\necho '"+version+"'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	aCell, aRouter, mute := program("cell2", "cell v2 (go)"), program("router2", "router v2 (go)"), program("mute", "")
	r = e.ok("rollout", "plan", "--stack", routed, "--bin", aCell, "--router-bin", aRouter, "--waves", "c1;rest")
	for _, want := range []string{"2 c2,c3,c4,c5,c6,c7,c8", "3 router router1", "4 router router2"} {
		if !strings.Contains(strings.Join(strings.Fields(r.stdout), " "), want) {
			t.Errorf("plan with the routers lacks %q:\n%s", want, r.stdout)
		}
	}
	if r := e.ok("rollout", "plan", "--stack", routed, "--router-set", "max-conns=5000"); strings.Contains(r.stdout, "c1") || !strings.Contains(r.stdout, "router2") {
		t.Errorf("a routers' release alone reaches no cell:\n%s", r.stdout)
	}
	// Waves from a file, one per line, as --waves has them.
	wavesFile := filepath.Join(stack, "waves.txt")
	if err := os.WriteFile(wavesFile, []byte("# the canary\nc2\n\n25%  # then a quarter\nrest\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = e.ok("rollout", "plan", "--waves-file", wavesFile)
	for _, want := range []string{"1 c2 ", "2 c1,c3 ", "3 c4,c5,c6,c7,c8 "} {
		if !strings.Contains(strings.Join(strings.Fields(r.stdout), " "), want) {
			t.Errorf("plan from a waves file lacks %q:\n%s", want, r.stdout)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rollout", "plan", "--waves", "c1;c9;rest"}, `"c9" is not an active cell`},
		{[]string{"rollout", "plan", "--waves", "c1;;rest"}, "wave 2 is empty"},
		{[]string{"rollout", "plan", "--waves", "0%;rest"}, `"0%": want a share`},
		{[]string{"rollout", "plan", "--waves", "c1;c1;rest"}, "cell c1 is in an earlier wave"},
		{[]string{"rollout", "plan", "--waves", "c1;c2"}, "are in no wave"},
		{[]string{"rollout", "plan", "--waves", "rest;c1"}, "rest must be the last wave"},
		{[]string{"rollout", "plan", "--bake", "-1s"}, "--bake -1s: want a positive duration"},
		{[]string{"rollout", "start", "--stack", stack}, "a release needs a binary or a flag to set"},
		{[]string{"rollout", "start", "--stack", stack, "--bin", filepath.Join(stack, "missing")}, "binary: "},
		{[]string{"rollout", "start", "--stack", stack, "--set", "workers"}, `flag "workers": want name=value`},
		{[]string{"rollout", "start", "--stack", t.TempDir(), "--set", "workers=3"}, "no stack in"},
		{[]string{"rollout", "start", "--stack", stack, "--bin", aRouter}, "is router, not cell"},
		{[]string{"rollout", "start", "--stack", stack, "--bin", mute}, "does not report its version"},
		{[]string{"rollout", "start", "--stack", routed, "--router-bin", aCell}, "the routers' release: binary " + aCell + " is cell, not router"},
		{[]string{"rollout", "start", "--stack", stack, "--router-set", "max-conns=5000"}, "no router in the stack"},
		{[]string{"rollout", "plan", "--stack", routed, "--router-set", "max-conns=5000", "--waves", "c1;rest"}, "--waves: the release changes no cell"},
		{[]string{"rollout", "start", "--stack", stack, "--set", "workers=3"}, "the metrics of c1"},
		{[]string{"rollout", "start", "--stack", stack, "--set", "workers=3", "--prometheus", "ftp://p:9090"}, "want a Prometheus's base URL"},
		{[]string{"rollout", "plan", "--waves", "c1;rest", "--waves-file", wavesFile}, "--waves and --waves-file: give one"},
		{[]string{"rollout", "plan", "--waves-file", filepath.Join(stack, "none.txt")}, "--waves-file: open"},
		{[]string{"rollout", "plan", "--image", "cell:2"}, "--image and --router-image go with --kustomize"},
		{[]string{"rollout", "gate", "--cells", " "}, "--cells: name the wave's cells"},
		{[]string{"rollout", "gate", "--cells", "c1", "--bake", "0s"}, "--bake 0s: want a positive duration"},
		{[]string{"rollout", "gate", "--cells", "c1"}, "the metrics of c1"},
	} {
		r := e.run(tc.args...)
		if r.code == ExitOK || !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
			t.Errorf("%q: exit %d, stderr %q; want a one-line error about %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
	if r := e.run("rollout", "status"); r.code != ExitFailure || !strings.Contains(r.stderr, "no rollout in") {
		t.Errorf("status without a rollout: %v", r)
	}
	if _, err := os.Stat(strings.TrimPrefix(e.url, "file:") + ".rollout"); !os.IsNotExist(err) {
		t.Errorf("a refused rollout left a record: %v", err)
	}
}

// TestRolloutRefusedWhileAnotherIsActive: a second rollout is refused
// with one line naming the first and its holder, before anything is read
// or changed; rollout status shows the first with each reached cell's
// release.
func TestRolloutRefusedWhileAnotherIsActive(t *testing.T) {
	e := newFileEnv(t)
	cell := newFakeCell(t, "c1")
	e.setup([]string{"c1", "c2"}, func(string) string { return cell.URL() })
	reg := e.open()
	defer reg.Close()
	ctl := control.New(reg, control.Config{Holder: "cellctl rollout start by alice@a"}, control.Options{})
	ctx := context.Background()
	waves := []control.Wave{{Cells: []string{"c1"}, Bake: time.Minute}, {Cells: []string{"c2"}, Bake: time.Minute}}
	if _, err := ctl.StartRollout(ctx, control.Rollout{ID: "first", Waves: waves, Release: "devel@new",
		Cells: map[string]control.CellRollout{"c1": {Phase: control.PhaseBaking, Processes: map[string]control.ProcessRollout{"-": {Step: control.StepServing, Release: "devel@new"}}}}}); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(strings.TrimPrefix(e.url, "file:") + ".rollout")
	if err != nil {
		t.Fatal(err)
	}
	stack := t.TempDir()
	if err := os.WriteFile(filepath.Join(stack, "dev.json"), []byte(`{"processes":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r := e.run("rollout", "start", "--stack", stack, "--set", "workers=3")
	if r.code != ExitFailure || !strings.Contains(r.stderr, "rollout first is running, held by cellctl rollout start by alice@a") ||
		strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
		t.Errorf("a second rollout: exit %d, %q", r.code, r.stderr)
	}
	if after, _ := os.ReadFile(strings.TrimPrefix(e.url, "file:") + ".rollout"); string(after) != string(before) {
		t.Error("the refused rollout changed the record")
	}
	if r := e.ok("rollout", "status"); !strings.Contains(r.stdout, "c1 (baking): serving devel@new") {
		t.Errorf("status lacks the reached cell's release:\n%s", r.stdout)
	}
}
