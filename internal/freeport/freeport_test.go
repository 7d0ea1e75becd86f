package freeport

import (
	"net"
	"strconv"
	"testing"
)

// Addr's ports are outside the kernel's ephemeral range, free now, and
// spread (two calls rarely agree).
func TestAddr(t *testing.T) {
	seen := map[string]bool{}
	for range 50 {
		a, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		_, p, _ := net.SplitHostPort(a)
		port, _ := strconv.Atoi(p)
		if port >= ephemeralLow() || port < 1024 {
			t.Fatalf("Addr() = %s: in the ephemeral range (from %d)", a, ephemeralLow())
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("Addr() = %s, but it cannot be bound: %v", a, err)
		}
		ln.Close()
		seen[a] = true
	}
	if len(seen) < 45 {
		t.Errorf("50 calls gave %d distinct addresses", len(seen))
	}
}

// TestAddrHoldsThePorts: a port Addr handed out is held (by its
// file in the temporary directory) and not handed out again, by this
// process or another, for portHold.
func TestAddrHoldsThePorts(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		a, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		if seen[a] {
			t.Fatalf("FreeAddr handed out %s twice", a)
		}
		seen[a] = true
		_, port, _ := net.SplitHostPort(a)
		n, _ := strconv.Atoi(port)
		if holdPort(n) {
			t.Fatalf("port %s taken again right after FreeAddr handed it out", port)
		}
	}
}
