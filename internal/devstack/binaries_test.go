package devstack

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/testkit"
)

// The first directory that holds every program wins; a file that is not
// executable does not count; the error names what is missing and how to
// get it.
func TestFindBinaries(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	put := func(dir, name string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	put(a, "cell", 0o755)
	put(a, "router", 0o644) // not executable
	put(b, "cell", 0o755)
	put(b, "router", 0o755)
	got, err := FindBinaries([]string{a, b}, "cell", "router")
	if err != nil || got["cell"] != filepath.Join(b, "cell") || got["router"] != filepath.Join(b, "router") {
		t.Fatalf("FindBinaries = %v, %v; want both from %s", got, err, b)
	}
	_, err = FindBinaries([]string{a}, "cell", "router", "consul")
	if err == nil || !strings.Contains(err.Error(), "no router, consul in "+a) || !strings.Contains(err.Error(), "'make tools' for consul") {
		t.Fatalf("missing programs: %v", err)
	}
	if _, err := FindBinaries([]string{b}, "cell", "nats-server"); err == nil || strings.Contains(err.Error(), "make tools") {
		t.Fatalf("missing nats-server: %v, want no word of make tools", err)
	}
}

// TestAPIKey, with the real router program: a key is made and kept; with
// keep it is used again, without it (and once its client has lost a lane)
// the keys file is made anew, holding the new key alone.
func TestAPIKey(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the router")
	}
	ctx := testkit.Context(t, 2*time.Minute)
	// Built: the router's main is in package main, which this package's
	// tests cannot import to run as it (testkit.RunAsProgram).
	bin := filepath.Join(t.TempDir(), "router")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/cellkit/cellkit/router")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./router: %v\n%s", err, out)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "router"), 0o755); err != nil {
		t.Fatal(err)
	}
	keysFile := filepath.Join(dir, "router", "keys.json")
	entries := func() []api.KeyEntry {
		t.Helper()
		var es []api.KeyEntry
		b, err := os.ReadFile(keysFile)
		if err == nil {
			err = json.Unmarshal(b, &es)
		}
		if err != nil {
			t.Fatal(err)
		}
		return es
	}
	k1, err := APIKey(ctx, bin, dir, "dev", true)
	if err != nil {
		t.Fatal(err)
	}
	if k2, err := APIKey(ctx, bin, dir, "dev", true); err != nil || k2 != k1 {
		t.Fatalf("kept: %q, %v; want %q", k2, err, k1)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "router", "dev-key")); strings.TrimSpace(string(b)) != k1 {
		t.Errorf("dev-key holds %q, want %q", b, k1)
	}
	k3, err := APIKey(ctx, bin, dir, "dev", false)
	if err != nil || k3 == k1 {
		t.Fatalf("fresh: %q, %v; want a new key", k3, err)
	}
	if es := entries(); len(es) != 1 || es[0].Client != "dev" || !slices.Equal(es[0].Lanes, []string{"high", "normal"}) {
		t.Errorf("keys file %+v, want the new key alone, both lanes", es)
	}
	// A keys file from before lanes: made anew, even with keep.
	es := entries()
	es[0].Lanes = nil
	b, _ := json.Marshal(es)
	if err := os.WriteFile(keysFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if k4, err := APIKey(ctx, bin, dir, "dev", true); err != nil || k4 == k3 {
		t.Fatalf("a key without lanes: %q, %v; want a new key", k4, err)
	}
	if es := entries(); len(es) != 1 || len(es[0].Lanes) != 2 {
		t.Errorf("keys file %+v, want the new key alone, both lanes", es)
	}
}
