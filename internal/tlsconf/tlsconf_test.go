package tlsconf_test

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/testkit"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// handshake runs one real TLS handshake between srv and cli on loopback and
// returns the server's error (the client's if the server saw none).
func handshake(t *testing.T, srv, cli *tls.Config) error {
	t.Helper()
	ln := testkit.Listen(t)
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		tc := tls.Server(c, srv)
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		err = tc.Handshake()
		if err == nil {
			// TLS 1.3: a client certificate is checked after the client's
			// handshake ends; a read sees the verdict.
			_, err = tc.Read(make([]byte, 1))
			if errors.Is(err, os.ErrDeadlineExceeded) || err != nil && strings.Contains(err.Error(), "EOF") {
				err = nil
			}
		}
		done <- err
	}()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), cli)
	if err == nil {
		c.Write([]byte("x"))
		c.Close()
	}
	serr := <-done
	if serr != nil {
		return serr
	}
	return err
}

func client(t *testing.T, files tlsconf.ClientFiles) *tls.Config {
	t.Helper()
	c, err := tlsconf.NewClient(files, tlsconf.Options{What: "test"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.Config().Clone()
	cfg.ServerName = "localhost"
	return cfg
}

func TestMutualTLS(t *testing.T) {
	certs := celltest.DevCerts(t)
	other := celltest.DevCerts(t) // another CA
	srv, err := tlsconf.NewServer(tlsconf.ServerFiles{Cert: certs.Cert(pki.RoleCell), Key: certs.Key(pki.RoleCell),
		ClientCA: certs.CA(), ClientRole: pki.RoleRouter}, tlsconf.Options{What: "test"})
	if err != nil {
		t.Fatal(err)
	}
	expired := certs.CAObject(t)
	old, err := expired.Issue(pki.Request{Name: "old", Role: pki.RoleRouter, NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := old.Write(dir, "old"); err != nil {
		t.Fatal(err)
	}
	oldCfg := client(t, tlsconf.ClientFiles{CA: certs.CA()})
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "old.pem"), filepath.Join(dir, "old-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	oldCfg.Certificates = []tls.Certificate{pair}

	for _, tc := range []struct {
		name string
		cli  *tls.Config
		want string // "" for a handshake that succeeds
	}{
		{"router certificate", client(t, tlsconf.ClientFiles{CA: certs.CA(), Cert: certs.Cert(pki.RoleRouter), Key: certs.Key(pki.RoleRouter)}), ""},
		{"no client certificate", client(t, tlsconf.ClientFiles{CA: certs.CA()}), "certificate"},
		{"client certificate of another CA", client(t, tlsconf.ClientFiles{CA: certs.CA(), Cert: other.Cert(pki.RoleRouter), Key: other.Key(pki.RoleRouter)}), "certificate"},
		{"client certificate of another role", client(t, tlsconf.ClientFiles{CA: certs.CA(), Cert: certs.Cert(pki.RoleOperator), Key: certs.Key(pki.RoleOperator)}), "role"},
		{"expired client certificate", oldCfg, "expired"},
		{"server certificate of another CA", client(t, tlsconf.ClientFiles{CA: other.CA(), Cert: certs.Cert(pki.RoleRouter), Key: certs.Key(pki.RoleRouter)}), "certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := handshake(t, srv.Config(), tc.cli)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("handshake: %v, want success", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("handshake: %v, want an error about %q", err, tc.want)
			}
		})
	}
}

func TestBadFilesNameTheFile(t *testing.T) {
	certs := celltest.DevCerts(t)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	os.WriteFile(garbage, []byte("not a certificate\n"), 0o600)
	ca := certs.CAObject(t)
	old, _ := ca.Issue(pki.Request{Name: "old", NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	old.Write(dir, "old")
	for _, tc := range []struct {
		name      string
		cert, key string
		names     string
	}{
		{"missing certificate", filepath.Join(dir, "none.pem"), certs.Key(pki.RoleCell), "none.pem"},
		{"garbage certificate", garbage, certs.Key(pki.RoleCell), garbage},
		{"garbage key", certs.Cert(pki.RoleCell), garbage, garbage},
		{"key of another certificate", certs.Cert(pki.RoleCell), certs.Key(pki.RoleRouter), certs.Key(pki.RoleRouter)},
		{"expired certificate", filepath.Join(dir, "old.pem"), filepath.Join(dir, "old-key.pem"), "old.pem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tlsconf.NewServer(tlsconf.ServerFiles{Cert: tc.cert, Key: tc.key}, tlsconf.Options{})
			if err == nil || !strings.Contains(err.Error(), tc.names) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("NewServer: %v, want one line naming %s", err, tc.names)
			}
		})
	}
	if _, err := tlsconf.NewServer(tlsconf.ServerFiles{Cert: certs.Cert(pki.RoleCell), Key: certs.Key(pki.RoleCell), ClientCA: garbage}, tlsconf.Options{}); err == nil || !strings.Contains(err.Error(), garbage) {
		t.Fatalf("NewServer with a garbage client CA: %v, want an error naming it", err)
	}
}

// TestReloadSwapsAndRefuses: a new certificate is served after a reload;
// a broken one is refused and the one before stays in use.
func TestReloadSwapsAndRefuses(t *testing.T) {
	certs := celltest.DevCerts(t)
	dir := t.TempDir()
	ca := certs.CAObject(t)
	first, _ := ca.Issue(pki.Request{Name: "first", Hosts: []string{"localhost"}})
	first.Write(dir, "srv")
	srv, err := tlsconf.NewServer(tlsconf.ServerFiles{Cert: filepath.Join(dir, "srv.pem"), Key: filepath.Join(dir, "srv-key.pem")}, tlsconf.Options{What: "test"})
	if err != nil {
		t.Fatal(err)
	}
	served := func() string {
		var name string
		cli := client(t, tlsconf.ClientFiles{CA: certs.CA()})
		cli.VerifyConnection = func(cs tls.ConnectionState) error { name = cs.PeerCertificates[0].Subject.CommonName; return nil }
		if err := handshake(t, srv.Config(), cli); err != nil {
			t.Fatal(err)
		}
		return name
	}
	if got := served(); got != "first" {
		t.Fatalf("served %q, want first", got)
	}
	second, _ := ca.Issue(pki.Request{Name: "second", Hosts: []string{"localhost"}})
	second.Write(dir, "srv")
	if err := srv.Watcher().Reload(); err != nil {
		t.Fatal(err)
	}
	if got := served(); got != "second" {
		t.Fatalf("after a reload served %q, want second", got)
	}
	os.WriteFile(filepath.Join(dir, "srv.pem"), []byte("truncated"), 0o644)
	if err := srv.Watcher().Reload(); err == nil || !strings.Contains(err.Error(), "srv.pem") {
		t.Fatalf("reload of a broken file: %v, want an error naming srv.pem", err)
	}
	if got := served(); got != "second" {
		t.Fatalf("after a refused reload served %q, want second", got)
	}
}
