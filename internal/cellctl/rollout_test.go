package cellctl

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/release"
	"github.com/cellkit/cellkit/internal/rollout"
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
	// The release is checked before any stack is looked for: this
	// cellctl has no deployer (the cellctl program's is the lab's,
	// internal/devstack/devctl, whose tests run these commands on a
	// stack).
	stack := t.TempDir()
	// Programs that say what they are.
	program := func(name, version string) string {
		path := filepath.Join(stack, name)
		if err := os.WriteFile(path, []byte("#!/bin/sh\necho '"+version+"'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	aCell, aRouter, mute := program("cell2", "cell v2 (go)"), program("router2", "router v2 (go)"), program("mute", "")
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
		{[]string{"rollout", "start", "--stack", stack, "--set", "workers=3"}, "this cellctl has no deployer to replace the processes of " + stack + ": pass --stack DIR"},
		{[]string{"rollout", "resume", "--stack", stack}, "this cellctl has no deployer"},
		{[]string{"rollout", "plan", "--stack", stack, "--router-set", "max-conns=5000"}, "this cellctl has no deployer"},
		{[]string{"rollout", "start", "--stack", stack, "--bin", aRouter}, "is router, not cell"},
		{[]string{"rollout", "start", "--stack", stack, "--bin", mute}, "does not report its version"},
		{[]string{"rollout", "start", "--stack", stack, "--router-bin", aCell}, "the routers' release: binary " + aCell + " is cell, not router"},
		{[]string{"rollout", "plan", "--stack", stack, "--router-set", "max-conns=5000", "--waves", "c1;rest"}, "--waves: the release changes no cell"},
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

// TestARolloutTheOperatorDrives: a release of images (the Kubernetes
// operator's) is paused, resumed and rolled back from a cellctl without
// a deployer: the record's state changes, and the operator, its driver,
// goes on from it.
func TestARolloutTheOperatorDrives(t *testing.T) {
	e := newFileEnv(t)
	cell := newFakeCell(t, "c1")
	e.setup([]string{"c1", "c2"}, func(string) string { return cell.URL() })
	reg := e.open()
	defer reg.Close()
	ctl := control.New(reg, control.Config{Holder: "cellkit-operator"}, control.Options{})
	cfg := rollout.DefaultConfig()
	cfg.Spec = release.Spec{Image: "registry.example.com/cellkit/cell:1.1.0"}
	if _, err := rollout.Start(context.Background(), ctl, "k-1", []control.Wave{{Cells: []string{"c1"}, Bake: time.Minute}, {Cells: []string{"c2"}, Bake: time.Minute}}, cfg); err != nil {
		t.Fatal(err)
	}
	state := func() control.RolloutState {
		ro, err := ctl.Rollout(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return ro.State
	}
	e.ok("rollout", "pause")
	if s := state(); s != control.RolloutPaused {
		t.Fatalf("after pause: %s", s)
	}
	if r := e.ok("rollout", "resume"); !strings.Contains(r.stdout, "the operator that drives it goes on") {
		t.Errorf("resume said %q", r.stdout)
	}
	if s := state(); s != control.RolloutRunning {
		t.Errorf("after resume: %s, want running", s)
	}
	e.ok("rollout", "rollback")
	if s := state(); s != control.RolloutHalted {
		t.Errorf("after rollback: %s, want halted (the operator rolls the wave back)", s)
	}
}
