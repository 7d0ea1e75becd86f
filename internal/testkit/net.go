package testkit

import (
	"net"
	"testing"

	"github.com/cellkit/cellkit/internal/freeport"
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
// down. Its port is below the kernel's ephemeral range (see
// freeport.Addr), so no server asking for any port takes it meanwhile.
func FreeAddr(t testing.TB) string {
	t.Helper()
	a, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}
