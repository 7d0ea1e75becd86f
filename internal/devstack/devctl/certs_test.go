package devctl

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/cellctl"
	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

// TestDevCerts: dev certs writes a CA and a certificate per role that
// tlsconf loads, valid for the hosts given; a second run keeps the CA.
func TestDevCerts(t *testing.T) {
	dir := t.TempDir()
	r := run("dev", "certs", "--dir", dir, "--hosts", "localhost,127.0.0.1,cell9.internal")
	if r.code != cellctl.ExitOK {
		t.Fatalf("%v", r)
	}
	certs := filepath.Join(dir, "certs")
	for _, f := range devstack.DevFiles(certs) {
		if !strings.Contains(r.stdout, f+"\n") {
			t.Errorf("dev certs does not print %s:\n%s", f, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "CELLKIT_CELLCTL_TLS_CERT="+filepath.Join(certs, "operator.pem")) {
		t.Errorf("dev certs does not say how to point cellctl at the cells:\n%s", r.stdout)
	}
	file := func(name string) string { return filepath.Join(certs, name) }
	srv, err := tlsconf.NewServer(tlsconf.ServerFiles{Cert: file("cell.pem"), Key: file("cell-key.pem"), ClientCA: file("ca.pem"), ClientRole: pki.RoleOperator}, tlsconf.Options{What: "test"})
	if err != nil {
		t.Fatal(err)
	}
	leaf := srv.Current().Certificates[0].Leaf
	if !slices.Contains(leaf.DNSNames, "cell9.internal") || !tlsconf.HasRole(leaf, pki.RoleCell) {
		t.Errorf("cell certificate: names %v, OU %v", leaf.DNSNames, leaf.Subject.OrganizationalUnit)
	}
	for _, role := range []string{pki.RoleRouter, pki.RoleOperator} {
		pair, err := tlsconf.LoadKeyPair(file(role+".pem"), file(role+"-key.pem"), time.Now())
		if err != nil || !tlsconf.HasRole(pair.Leaf, role) {
			t.Errorf("%s certificate: %v", role, err)
		}
	}
	if _, err := tlsconf.NewClient(tlsconf.ClientFiles{CA: file("ca.pem"), Cert: file("operator.pem"), Key: file("operator-key.pem")}, tlsconf.Options{What: "test"}); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(file("operator-key.pem")); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("operator key mode: %v %v", info, err)
	}

	ca, _ := os.ReadFile(file("ca.pem"))
	cell, _ := os.ReadFile(file("cell.pem"))
	if r := run("dev", "certs", "--dir", dir); r.code != cellctl.ExitOK {
		t.Fatalf("%v", r)
	}
	ca2, _ := os.ReadFile(file("ca.pem"))
	cell2, _ := os.ReadFile(file("cell.pem"))
	if string(ca2) != string(ca) || string(cell2) == string(cell) {
		t.Fatal("a second dev certs made a new CA, or kept the old role certificates")
	}
	pair, err := tls.LoadX509KeyPair(file("cell.pem"), file("cell-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if pool, err := tlsconf.LoadPool(file("ca.pem")); err != nil {
		t.Fatal(err)
	} else if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: pool}); err != nil {
		t.Fatalf("the new cell certificate does not verify with the kept CA: %v", err)
	}
	if r := run("dev", "certs", "--dir", dir, "--hosts", " , "); r.code != cellctl.ExitUsage {
		t.Errorf("no hosts: %v", r)
	}
}
