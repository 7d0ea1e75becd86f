package devstack

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
