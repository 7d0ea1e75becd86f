package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/agencysim"
	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/telegram"
	"github.com/cellkit/cellkit/internal/testkit"
)

func TestTLSFlags(t *testing.T) {
	noEnv := func(string) string { return "" }
	base := []string{"--cell", "c1", "--agency", "nice=x:1"}
	cfg, x, err := parseFlags(base, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if x.tls.Intake.Enabled() || x.tls.Admin.Enabled() || x.tls.Peer.Enabled() {
		t.Fatalf("TLS without flags: %+v", x.tls)
	}
	if x.tls.Intake.ClientRole != pki.RoleRouter || x.tls.Admin.ClientRole != pki.RoleOperator {
		t.Fatalf("default client roles %q and %q, want router and operator", x.tls.Intake.ClientRole, x.tls.Admin.ClientRole)
	}
	if got := cfgCIDRs(cfg.TrustedRouterCIDRs); got != "127.0.0.0/8,::1/128" {
		t.Fatalf("default trusted router CIDRs %s", got)
	}
	env := map[string]string{
		"CELLKIT_CELL_TLS_CERT":            "/c/cell.pem", // the program's own variable wins
		"CELLKIT_TLS_CERT":                 "/c/other.pem",
		"CELLKIT_TLS_KEY":                  "/c/cell-key.pem",
		"CELLKIT_TRUSTED_ROUTER_CIDRS":     "10.0.0.0/8,fd00::/8",
		"CELLKIT_CELL_ADMIN_TLS_CERT":      "/c/admin.pem",
		"CELLKIT_CELL_PEER_TLS_CA":         "/c/peers-ca.pem",
		"CELLKIT_CELL_TLS_CLIENT_ROLE":     "edge",
		"CELLKIT_CELL_ADMIN_TLS_CLIENT_CA": "/c/ops-ca.pem",
	}
	cfg, x, err = parseFlags(append(base, "--tls-client-ca", "/c/ca.pem", "--admin-tls-key", "/c/admin-key.pem"), func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	in, ad := x.tls.Intake, x.tls.Admin
	if in.Cert != "/c/cell.pem" || in.Key != "/c/cell-key.pem" || in.ClientCA != "/c/ca.pem" || in.ClientRole != "edge" ||
		ad.Cert != "/c/admin.pem" || ad.Key != "/c/admin-key.pem" || ad.ClientCA != "/c/ops-ca.pem" || ad.ClientRole != pki.RoleOperator ||
		x.tls.Peer.CA != "/c/peers-ca.pem" {
		t.Fatalf("TLS files %+v", x.tls)
	}
	if got := cfgCIDRs(cfg.TrustedRouterCIDRs); got != "10.0.0.0/8,fd00::/8" {
		t.Fatalf("trusted router CIDRs %s", got)
	}
	if _, _, err := parseFlags(append(base, "--trusted-router-cidrs", "10.0.0.0/8,nope"), noEnv, io.Discard); err == nil {
		t.Fatal("a bad trusted CIDR accepted")
	}
}

func cfgCIDRs(ps []netip.Prefix) string { return (*prefixFlag)(&ps).String() }

// TestBadCertificateStopsTheStart: a bad file is one line naming it, and
// the cell stops before it opens its store or listens.
func TestBadCertificateStopsTheStart(t *testing.T) {
	certs := celltest.DevCerts(t)
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken.pem")
	if err := os.WriteFile(broken, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"intake certificate", []string{"--tls-cert", broken, "--tls-key", certs.Key(pki.RoleCell)}, "intake listener: tls: certificate file " + broken},
		{"admin client CA", []string{"--admin-tls-cert", certs.Cert(pki.RoleCell), "--admin-tls-key", certs.Key(pki.RoleCell), "--admin-tls-client-ca", broken}, "admin listener: tls: CA file " + broken},
		{"intake key missing", []string{"--tls-cert", certs.Cert(pki.RoleCell), "--tls-key", filepath.Join(dir, "gone.pem")}, filepath.Join(dir, "gone.pem")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := filepath.Join(dir, "store-"+strings.ReplaceAll(tc.name, " ", "-"))
			args := append([]string{"--cell", "c1", "--agency", "nice=127.0.0.1:1", "--registry", "file:" + filepath.Join(dir, "map.json"),
				"--store", store, "--intake", testkit.FreeAddr(t), "--admin", testkit.FreeAddr(t)}, tc.args...)
			err := run(context.Background(), args, func(string) string { return "" }, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("run = %v, want one line containing %q", err, tc.want)
			}
			if _, err := os.Stat(store); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the store dir was made (%v): the cell started before checking its certificates", err)
			}
		})
	}
}

// TestBinaryOnMutualTLS runs the cell as a process with both listeners on mutual
// TLS, as `cellctl dev up --tls` does: a router's request is served, an
// operator reads the admin API without a token (an admin token file is
// given too), and certificates renewed on disk are served
// without a restart (SIGHUP reloads them at once; the watchers would within
// a second anyway, so this does not tell the two apart).
func TestBinaryOnMutualTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the cell as a process: skipped with -short")
	}
	certs := celltest.DevCerts(t)
	sim := agencysim.Config{MaxSessions: 8, Latency: agencysim.FixedLatency(time.Millisecond)}
	nice := celltest.StartSim(t, telegram.NICE(), sim)
	reg := celltest.NewRegistry(t, map[string]int{"nice": 4}, celltest.TestCell("c1"))
	tokens := filepath.Join(t.TempDir(), "admin-tokens")
	if err := os.WriteFile(tokens, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startBinary(t, thisBinary(t), []string{
		"--cell", "c1", "--registry", reg.URL(), "--store", t.TempDir(), "--agency", "nice=" + nice.Addr().String(),
		"--intake", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--nats-port", "-1",
		"--tls-cert", certs.Cert(pki.RoleCell), "--tls-key", certs.Key(pki.RoleCell), "--tls-client-ca", certs.CA(),
		"--admin-tls-cert", certs.Cert(pki.RoleCell), "--admin-tls-key", certs.Key(pki.RoleCell), "--admin-tls-client-ca", certs.CA(),
		"--admin-token-file", tokens,
	})
	if !strings.HasPrefix(p.intake, "https://") || !strings.HasPrefix(p.admin, "https://") {
		t.Fatalf("the cell started on %s and %s, want https", p.intake, p.admin)
	}
	operator, router := certs.TLSClient(t, pki.RoleOperator), certs.TLSClient(t, pki.RoleRouter)
	p.waitReady(t, operator)
	if _, err := testkit.Send(certs.TLSClient(t, ""), http.MethodGet, p.admin+"/readyz", nil, nil); err == nil {
		t.Fatal("the admin API answered a client without a certificate")
	}
	req := inquiry.Request{UserID: "u-1", Product: "credit_loan", Amount: 1000, Priority: inquiry.High}
	if r := testkit.Do(t, router, http.MethodPost, p.intake+api.PathInquiries, req, nil); r.Status != http.StatusAccepted {
		t.Fatalf("router POST = %d %s", r.Status, r.Body)
	}
	for _, path := range []string{"/v1/admin/status", "/metrics"} {
		if r := testkit.Do(t, operator, http.MethodGet, p.admin+path, nil, nil); r.Status != http.StatusOK {
			t.Fatalf("operator GET %s without a token = %d %s", path, r.Status, r.Body)
		}
	}

	serial := func() string {
		resp, err := operator.Get(p.admin + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		operator.CloseIdleConnections()
		return resp.TLS.PeerCertificates[0].SerialNumber.String()
	}
	before := serial()
	if err := pki.WriteDev(certs.Dir, []string{"localhost", "127.0.0.1", "::1"}); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the renewed certificate to be served", func() bool { return serial() != before })

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit within 30s of SIGTERM")
	}
}
