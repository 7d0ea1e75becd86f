package testkit

import (
	"net"
	"testing"
)

// Listen returns a TCP listener on a free loopback port, closed when the
// test ends (closing it again is harmless, so a server may own it).
func Listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen on loopback: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// FreeAddr returns a loopback address (host:port) that nothing listens on
// at the moment: for a part the test starts later, or for a peer that is
// down. Another process may take the port meanwhile; tests that must bind
// it later skip when they cannot.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen on loopback: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
