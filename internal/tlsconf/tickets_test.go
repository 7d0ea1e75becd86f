package tlsconf_test

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/testkit"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

// resumed makes one connection from cli to srv, exchanging a byte each
// way (a TLS 1.3 ticket comes after the handshake), and says whether the
// client resumed a session.
func resumed(t *testing.T, srv, cli *tls.Config) bool {
	t.Helper()
	ln := testkit.Listen(t)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		tc := tls.Server(c, srv)
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		if tc.Handshake() == nil {
			tc.Write([]byte("s"))
			tc.Read(make([]byte, 1))
		}
	}()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), cli)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("c"))
	return c.ConnectionState().DidResume
}

func TestSessionsResumeOnAServerGivenTheTicketKeys(t *testing.T) {
	certs := celltest.DevCerts(t)
	files := tlsconf.ServerFiles{Cert: certs.Cert(pki.RoleRouter), Key: certs.Key(pki.RoleRouter)}
	newServer := func() *tlsconf.Server {
		s, err := tlsconf.NewServer(files, tlsconf.Options{What: "test"})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		cli := client(t, tlsconf.ClientFiles{CA: certs.CA()})
		cli.MaxVersion = version
		cli.ClientSessionCache = tls.NewLRUClientSessionCache(8)
		old := newServer()
		if resumed(t, old.Config(), cli) {
			t.Fatal("the first connection resumed")
		}
		if !resumed(t, old.Config(), cli) {
			t.Fatalf("TLS %x: no resumption on the same server", version)
		}
		// A successor without the keys: a full handshake.
		if resumed(t, newServer().Config(), cli) {
			t.Fatalf("TLS %x: resumed on a server with other keys", version)
		}
		// With them: resumed.
		cli.ClientSessionCache = tls.NewLRUClientSessionCache(8)
		resumed(t, old.Config(), cli)
		next := newServer()
		if err := next.SetTicketKeys(old.TicketKeys()); err != nil {
			t.Fatal(err)
		}
		if !resumed(t, next.Config(), cli) {
			t.Fatalf("TLS %x: not resumed on a server given the keys", version)
		}
	}
	if err := newServer().SetTicketKeys(nil); err == nil {
		t.Fatal("no keys taken")
	}
}
