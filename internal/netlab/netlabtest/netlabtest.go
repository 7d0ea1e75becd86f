// Package netlabtest gives a test a network lab (internal/netlab) that is
// gone when the test ends, and sweeps what crashed runs of the tests left.
package netlabtest

import (
	"testing"

	"github.com/cellkit/cellkit/internal/netlab"
	"github.com/cellkit/cellkit/internal/testkit"
)

// Family is the prefix family of the tests' labs (ckt1a2b-...), apart from
// the labs of `loadtest net up` (ckn...).
const Family = "ckt"

// Require skips the test, saying why, when this machine cannot run a lab
// (not root, no ip command or network namespaces), and otherwise sweeps the
// tests' labs whose test process has died (netlab.SweepStale): labs of
// tests that run now, in this process or another, are left alone.
func Require(t testing.TB) {
	t.Helper()
	if err := netlab.Available(); err != nil {
		t.Skipf("no network lab here: %v", err)
	}
	sw, err := netlab.SweepStale(Family, netlab.DefaultStateDir)
	if !sw.Empty() {
		t.Logf("swept stale labs %v of earlier runs: %d processes, namespaces %v, links %v", sw.Prefixes, len(sw.Killed), sw.Namespaces, sw.Links)
	}
	if err != nil {
		t.Fatalf("sweep stale labs: %v", err)
	}
}

// New returns a new lab of Family, after Require. t.Cleanup closes it and
// fails the test if a namespace or a link of it is left.
func New(t testing.TB) *netlab.Lab {
	t.Helper()
	Require(t)
	lab, err := netlab.New(netlab.Config{Family: Family}, netlab.Options{Logger: testkit.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Close(t, lab) })
	return lab
}

// Close closes the lab and fails the test if anything of it is left.
func Close(t testing.TB, lab *netlab.Lab) {
	t.Helper()
	if err := lab.Close(); err != nil {
		t.Errorf("close lab %s: %v", lab.Prefix(), err)
	}
	AssertGone(t, lab.Prefix())
}

// AssertGone fails the test if a namespace or a root namespace link named
// PREFIX-* exists.
func AssertGone(t testing.TB, prefix string) {
	t.Helper()
	ns, links, err := netlab.Leftovers(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(ns)+len(links) > 0 {
		t.Errorf("lab %s left namespaces %v and links %v", prefix, ns, links)
	}
}
