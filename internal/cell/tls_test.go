package cell

import (
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellkit/cellkit/internal/adminauth"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/testkit"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

// devTLS is the TLS of a cell as `cellctl dev up --tls` runs it: both
// listeners on the cell certificate, the intake for routers, the admin API
// for operators, both with the dev CA as client CA.
func devTLS(t *testing.T, certs celltest.Certs) TLS {
	t.Helper()
	cell := func(role string) tlsconf.ServerFiles {
		return tlsconf.ServerFiles{Cert: certs.Cert(pki.RoleCell), Key: certs.Key(pki.RoleCell), ClientCA: certs.CA(), ClientRole: role}
	}
	tl, err := LoadTLS(TLSFiles{Intake: cell(pki.RoleRouter), Admin: cell(pki.RoleOperator)}, tlsconf.Options{Logger: testkit.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

func withTLS(tl TLS) setup {
	return setup{
		opts:   Options{IntakeTLS: tl.Intake, AdminTLS: tl.Admin, PeerTLS: tl.Peer},
		config: func(c *Config) { c.RouterRole = tl.RouterRole },
	}
}

// TestMutualTLS runs real handshakes against a cell whose intake takes
// routers' certificates only and whose admin API takes operators' only.
func TestMutualTLS(t *testing.T) {
	certs := celltest.DevCerts(t)
	other := celltest.DevCerts(t) // another CA
	s := withTLS(devTLS(t, certs))
	// As cell/main.go guards it: a verified operator certificate is let in
	// without a token.
	guard, err := adminauth.New(adminauth.Config{ClientCerts: true, ClientRole: pki.RoleOperator}, adminauth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.opts.AdminGuard = guard
	h := start(t, s)
	if !strings.HasPrefix(h.cell.IntakeURL(), "https://") || !strings.HasPrefix(h.cell.AdminURL(), "https://") {
		t.Fatalf("URLs %s and %s, want https", h.cell.IntakeURL(), h.cell.AdminURL())
	}
	intake, admin := h.cell.IntakeURL(), h.cell.AdminURL()
	router, operator, cell := certs.TLSClient(t, pki.RoleRouter), certs.TLSClient(t, pki.RoleOperator), certs.TLSClient(t, pki.RoleCell)

	// Refused in the handshake: no answer at all.
	for _, tc := range []struct {
		name   string
		client *http.Client
		url    string
	}{
		{"intake, no client certificate", certs.TLSClient(t, ""), intake + "/v1/inquiries/c1-00000000000000000000"},
		{"intake, operator certificate", operator, intake + "/v1/inquiries"},
		{"intake, router certificate of another CA", other.TLSClient(t, pki.RoleRouter), intake + "/v1/inquiries"},
		{"admin, no client certificate", certs.TLSClient(t, ""), admin + "/readyz"},
		{"admin, router certificate", router, admin + "/v1/admin/status"},
		{"admin, operator certificate of another CA", other.TLSClient(t, pki.RoleOperator), admin + "/readyz"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r, err := testkit.Send(tc.client, http.MethodPost, tc.url, user(1), nil); err == nil {
				t.Fatalf("answered %d %s, want a failed handshake", r.Status, r.Body)
			}
		})
	}
	// Plain HTTP to a TLS listener is not served either.
	if r, err := testkit.Send(nil, http.MethodPost, strings.Replace(intake, "https", "http", 1)+"/v1/inquiries", user(1), nil); err == nil && r.Status != http.StatusBadRequest {
		t.Fatalf("plain HTTP to the TLS intake: %d %s", r.Status, r.Body)
	}

	// A router: served, and its headers believed (the client scopes reads).
	resp := testkit.Do(t, router, http.MethodPost, intake+"/v1/inquiries", user(1), map[string]string{"Cellkit-Client": "alice"})
	if resp.Status != http.StatusAccepted {
		t.Fatalf("router POST = %d %s, want 202", resp.Status, resp.Body)
	}
	var a struct{ ID string }
	resp.JSON(t, &a)
	if r := testkit.Do(t, router, http.MethodGet, intake+"/v1/inquiries/"+a.ID, nil, map[string]string{"Cellkit-Client": "alice"}); r.Status != http.StatusOK {
		t.Fatalf("alice's read through a router = %d %s", r.Status, r.Body)
	}
	if r := testkit.Do(t, router, http.MethodGet, intake+"/v1/inquiries/"+a.ID, nil, map[string]string{"Cellkit-Client": "bob"}); r.Status != http.StatusNotFound {
		t.Fatalf("bob's read of alice's inquiry through a router = %d %s, want 404", r.Status, r.Body)
	}
	// Another cell may read (a keyed retry after a move), not post.
	if r := testkit.Do(t, cell, http.MethodGet, intake+"/v1/inquiries/"+a.ID, nil, map[string]string{"Cellkit-Client": "alice"}); r.Status != http.StatusOK {
		t.Fatalf("a cell's read = %d %s, want 200", r.Status, r.Body)
	}
	r := testkit.Do(t, cell, http.MethodPost, intake+"/v1/inquiries", user(2), nil)
	if p := r.Problem(t); r.Status != http.StatusForbidden || p.Type != "https://cellkit.dev/problems/forbidden" || !strings.Contains(p.Detail, "not from a router") {
		t.Fatalf("a cell's POST = %d %+v, want 403 forbidden, not from a router", r.Status, p)
	}

	// An operator: the admin API, probes and metrics, without a token.
	for _, path := range []string{"/v1/admin/status", "/readyz", "/healthz", "/metrics"} {
		if r := testkit.Do(t, operator, http.MethodGet, admin+path, nil, nil); r.Status != http.StatusOK {
			t.Errorf("operator GET %s = %d %s", path, r.Status, r.Body)
		}
	}
	if r := testkit.Do(t, operator, http.MethodPost, admin+"/v1/admin/intake/close", nil, nil); r.Status != http.StatusOK {
		t.Fatalf("operator closing the intake = %d %s", r.Status, r.Body)
	}
}

// TestCertificateReload: a renewed certificate is served by the next
// handshake after its watcher ran; a broken file is refused and the one in
// use kept.
func TestCertificateReload(t *testing.T) {
	certs := celltest.DevCerts(t)
	tl := devTLS(t, certs)
	h := start(t, withTLS(tl))
	operator := certs.TLSClient(t, pki.RoleOperator)
	serial := func() string {
		t.Helper()
		resp, err := operator.Get(h.cell.AdminURL() + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		operator.CloseIdleConnections()
		return resp.TLS.PeerCertificates[0].SerialNumber.String()
	}
	first := serial()
	if err := pki.WriteDev(certs.Dir, []string{"localhost", "127.0.0.1", "::1"}); err != nil { // same CA, new certificates
		t.Fatal(err)
	}
	for _, w := range tl.Watchers {
		if err := w.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	second := serial()
	if second == first {
		t.Fatalf("after a reload the admin API still serves certificate %s", first)
	}
	if err := os.WriteFile(filepath.Join(certs.Dir, "cell.pem"), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := tl.Watchers[1].Reload(); err == nil || !strings.Contains(err.Error(), "cell.pem") { // the admin listener's
		t.Fatalf("reload of a broken file: %v, want an error naming cell.pem", err)
	}
	if got := serial(); got != second {
		t.Fatalf("after a refused reload: certificate %s, want %s", got, second)
	}
}

// TestIntakeServesRoutersOnly: on plain HTTP, only peers in the trusted
// CIDRs (loopback by default) are served; others get 403 and nothing is
// accepted.
func TestIntakeServesRoutersOnly(t *testing.T) {
	h := start(t, setup{})
	h.accept(user(1), map[string]string{"Cellkit-Client": "alice"}) // loopback: trusted

	far := start(t, setup{config: func(c *Config) { c.TrustedRouterCIDRs = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")} }})
	for _, tc := range []struct{ method, path string }{{http.MethodPost, "/v1/inquiries"}, {http.MethodGet, "/v1/inquiries/c1-00000000000000000000"}} {
		r := testkit.Do(t, far.client, tc.method, far.intake+tc.path, user(2), map[string]string{"Cellkit-Client": "alice", "Cellkit-Map-Version": "999"})
		if p := r.Problem(t); r.Status != http.StatusForbidden || !strings.Contains(p.Detail, "127.0.0.1 is not in the trusted router CIDRs") {
			t.Fatalf("%s %s from loopback with 10.0.0.0/8 trusted = %d %+v, want 403 naming the address", tc.method, tc.path, r.Status, p)
		}
	}
	if s := far.cell.Status(); s.Queue.Messages != 0 {
		t.Fatalf("a refused request queued something: %+v", s.Queue)
	}

	// TLS without client certificates: the address decides.
	certs := celltest.DevCerts(t)
	tl, err := LoadTLS(TLSFiles{Intake: tlsconf.ServerFiles{Cert: certs.Cert(pki.RoleCell), Key: certs.Key(pki.RoleCell), ClientRole: pki.RoleRouter}}, tlsconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := withTLS(tl)
	s.config = func(c *Config) { c.TrustedRouterCIDRs = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")} }
	tlsFar := start(t, s)
	if r := testkit.Do(t, certs.TLSClient(t, pki.RoleRouter), http.MethodPost, tlsFar.cell.IntakeURL()+"/v1/inquiries", user(3), nil); r.Status != http.StatusForbidden {
		t.Fatalf("TLS without a client CA, loopback not trusted: %d %s, want 403", r.Status, r.Body)
	}
}

func TestLoadTLSRefusesBadFiles(t *testing.T) {
	certs := celltest.DevCerts(t)
	missing := filepath.Join(t.TempDir(), "nope.pem")
	for _, tc := range []struct {
		name  string
		files TLSFiles
		want  string
	}{
		{"missing certificate", TLSFiles{Intake: tlsconf.ServerFiles{Cert: missing, Key: certs.Key(pki.RoleCell)}}, "intake listener: tls: certificate file: open " + missing},
		{"key of another certificate", TLSFiles{Admin: tlsconf.ServerFiles{Cert: certs.Cert(pki.RoleCell), Key: certs.Key(pki.RoleRouter)}}, "admin listener: tls: certificate file " + certs.Cert(pki.RoleCell)},
		{"client CA without a certificate", TLSFiles{Intake: tlsconf.ServerFiles{ClientCA: certs.CA()}}, "--tls-cert"},
		{"client CA that is no PEM", TLSFiles{Intake: tlsconf.ServerFiles{Cert: certs.Cert(pki.RoleCell), Key: certs.Key(pki.RoleCell), ClientCA: certs.Key(pki.RoleCell)}}, "CA file " + certs.Key(pki.RoleCell)},
		{"peer certificate without a key", TLSFiles{Peer: tlsconf.ClientFiles{Cert: certs.Cert(pki.RoleCell)}}, "client to the other cells"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadTLS(tc.files, tlsconf.Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("LoadTLS = %v, want one line containing %q", err, tc.want)
			}
		})
	}
}
