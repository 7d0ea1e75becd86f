package adminauth_test

import (
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/adminauth"
	"github.com/cellkit/cellkit/internal/atomicfile"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/testkit"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9080":       true,
		"127.0.0.2:0":          true,
		"[::1]:9080":           true,
		"localhost:9080":       true,
		"LOCALHOST:1":          true,
		"[::ffff:127.0.0.1]:1": true,
		":9080":                false,
		"0.0.0.0:9080":         false,
		"[::]:9080":            false,
		"10.0.0.1:9080":        false,
		"192.168.1.5:0":        false,
		"[fe80::1]:9080":       false,
		"admin.example:9080":   false,
		"localhost.evil:1":     false,
		"127.0.0.1":            false, // not host:port
		"":                     false,
	} {
		if got := adminauth.Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestCheckListen(t *testing.T) {
	if err := adminauth.CheckListen("127.0.0.1:9080", false); err != nil {
		t.Errorf("loopback without authentication: %v", err)
	}
	if err := adminauth.CheckListen("0.0.0.0:9080", true); err != nil {
		t.Errorf("all interfaces with authentication: %v", err)
	}
	err := adminauth.CheckListen("0.0.0.0:9080", false)
	if err == nil || !strings.Contains(err.Error(), "0.0.0.0:9080 is not a loopback address") {
		t.Errorf("all interfaces without authentication: %v", err)
	}
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := atomicfile.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestLoadTokens(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, text string
		tokens     int
		err        string
	}{
		{"one", "s3cret-token\n", 1, ""},
		{"comments and blanks", "# ops\n\n  tok-a  \n#tok-b\ntok-c", 2, ""},
		{"empty", "", 0, "no token in it"},
		{"only comments", "# none yet\n\n", 0, "no token in it"},
		{"space inside", "tok en\n", 0, "line 1"},
		{"control character", "# x\ntok\x01en\n", 0, "line 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			write(t, path, tc.text)
			ds, err := adminauth.LoadTokens(path)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), path) {
					t.Fatalf("LoadTokens = %v, want an error naming %s and %q", err, path, tc.err)
				}
				return
			}
			if err != nil || len(ds) != tc.tokens {
				t.Fatalf("LoadTokens = %d tokens, %v; want %d", len(ds), err, tc.tokens)
			}
		})
	}
	if _, err := adminauth.LoadTokens(filepath.Join(dir, "missing")); err == nil || strings.Contains(err.Error(), "\n") {
		t.Errorf("missing file: %v", err)
	}
}

// admin is an admin handler that says which path it served.
var admin = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "served "+r.URL.Path) })

func TestBearerTokens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	write(t, path, "# the operators\ntoken-one\ntoken-two\n")
	reg := prometheus.NewRegistry()
	g, err := adminauth.New(adminauth.Config{TokenFile: path}, adminauth.Options{Logger: testkit.Logger(), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler(admin))
	t.Cleanup(srv.Close)
	get := func(path, auth string) testkit.Response {
		t.Helper()
		h := map[string]string{}
		if auth != "" {
			h["Authorization"] = auth
		}
		return testkit.Do(t, srv.Client(), "GET", srv.URL+path, nil, h)
	}
	for _, tc := range []struct {
		path, auth string
		status     int
		challenge  string // in WWW-Authenticate
	}{
		{"/healthz", "", 200, ""},
		{"/readyz", "", 200, ""},
		{"/readyz", "Bearer wrong", 200, ""},
		{"/metrics", "", 401, `Bearer realm="cellkit-admin"`},
		{"/v1/admin/cells", "", 401, "Bearer"},
		{"/debug/pprof/", "", 401, "Bearer"},
		{"/nothing-here", "", 401, "Bearer"},
		{"/healthz/", "", 401, "Bearer"},
		{"/metrics", "Bearer wrong", 401, `error="invalid_token"`},
		{"/metrics", "Bearer token-one-", 401, "invalid_token"},
		{"/metrics", "Basic dG9rZW4tb25lOg==", 401, "Bearer"},
		{"/metrics", "Bearer", 401, "Bearer"},
		{"/metrics", "Bearer token-one", 200, ""},
		{"/metrics", "bearer token-two", 200, ""},
		{"/v1/admin/cells", "Bearer token-two", 200, ""},
	} {
		a := get(tc.path, tc.auth)
		if a.Status != tc.status {
			t.Errorf("%s with %q: %d %s, want %d", tc.path, tc.auth, a.Status, a.Body, tc.status)
			continue
		}
		if tc.status == 200 {
			if string(a.Body) != "served "+tc.path {
				t.Errorf("%s: body %q", tc.path, a.Body)
			}
			continue
		}
		if p := a.Problem(t); p.Type != "https://cellkit.dev/problems/unauthorized" || p.Status != 401 {
			t.Errorf("%s with %q: problem %+v", tc.path, tc.auth, p)
		}
		if ch := a.Header.Get("WWW-Authenticate"); !strings.Contains(ch, tc.challenge) {
			t.Errorf("%s with %q: WWW-Authenticate %q, want %q in it", tc.path, tc.auth, ch, tc.challenge)
		}
	}
	if m, w := failures(t, reg, "missing"), failures(t, reg, "wrong"); m != 7 || w != 2 {
		t.Errorf("failures counted: %v missing, %v wrong; want 7 and 2", m, w)
	}

	// Rotation: token-one goes, token-three comes; a broken file keeps
	// the tokens of the last good one.
	write(t, path, "token-two\ntoken-three\n")
	if err := g.Watcher().Reload(); err != nil {
		t.Fatal(err)
	}
	if a := get("/metrics", "Bearer token-one"); a.Status != 401 {
		t.Errorf("removed token: %d", a.Status)
	}
	if a := get("/metrics", "Bearer token-three"); a.Status != 200 {
		t.Errorf("added token: %d", a.Status)
	}
	write(t, path, "# emptied by mistake\n")
	if err := g.Watcher().Reload(); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("empty token file taken: %v", err)
	}
	if a := get("/metrics", "Bearer token-three"); a.Status != 200 {
		t.Errorf("after a refused reload: %d, want the old tokens kept", a.Status)
	}
}

// failures is cellkit_admin_auth_failures_total{reason}.
func failures(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "cellkit_admin_auth_failures_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no cellkit_admin_auth_failures_total{reason=%q}", reason)
	return 0
}

func TestOpenWithoutTokensOrCertificates(t *testing.T) {
	g, err := adminauth.New(adminauth.Config{}, adminauth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if g.Enabled() || g.Watcher() != nil {
		t.Errorf("Enabled %v, Watcher %v: want neither", g.Enabled(), g.Watcher())
	}
	srv := httptest.NewServer(g.Handler(admin))
	t.Cleanup(srv.Close)
	if a := testkit.Do(t, srv.Client(), "GET", srv.URL+"/metrics", nil, nil); a.Status != 200 {
		t.Errorf("open admin API: %d", a.Status)
	}
}

func TestNewRefusesABadTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	write(t, path, "\n")
	if _, err := adminauth.New(adminauth.Config{TokenFile: path}, adminauth.Options{}); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("New with an empty token file: %v", err)
	}
	os.Remove(path)
	if _, err := adminauth.New(adminauth.Config{TokenFile: path}, adminauth.Options{}); err == nil {
		t.Error("New with a missing token file succeeded")
	}
}

// TestClientCertificates serves the guard over mutual TLS: a verified
// client certificate of the role is let in without a token.
func TestClientCertificates(t *testing.T) {
	certs := celltest.DevCerts(t)
	// The handshake takes any certificate of the CA; the guard wants an
	// operator's (or a token).
	srvTLS, err := tlsconf.NewServer(tlsconf.ServerFiles{Cert: certs.Cert(pki.RoleCell), Key: certs.Key(pki.RoleCell), ClientCA: certs.CA()},
		tlsconf.Options{What: "admin_tls"})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tokens")
	write(t, path, "tok\n")
	g, err := adminauth.New(adminauth.Config{TokenFile: path, ClientCerts: true, ClientRole: pki.RoleOperator}, adminauth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(g.Handler(admin))
	srv.TLS = srvTLS.Config()
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.StartTLS()
	t.Cleanup(srv.Close)

	clientFor := func(role string) *http.Client { return certs.TLSClient(t, role) }
	if a := testkit.Do(t, clientFor(pki.RoleOperator), "GET", srv.URL+"/metrics", nil, nil); a.Status != 200 {
		t.Errorf("operator certificate: %d %s", a.Status, a.Body)
	}
	router := clientFor(pki.RoleRouter)
	if a := testkit.Do(t, router, "GET", srv.URL+"/metrics", nil, nil); a.Status != 401 {
		t.Errorf("router certificate without a token: %d, want 401", a.Status)
	}
	if a := testkit.Do(t, router, "GET", srv.URL+"/metrics", nil, map[string]string{"Authorization": "Bearer tok"}); a.Status != 200 {
		t.Errorf("router certificate with a token: %d, want 200", a.Status)
	}
	// A certificate of another CA, and none: no handshake.
	other, err := pki.NewCA("other", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	is, err := other.Issue(pki.Request{Name: "intruder", Role: pki.RoleOperator})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(is.CertPEM, is.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	for name, certsOf := range map[string][]tls.Certificate{"none": nil, "another CA's": {pair}} {
		cfg := clientFor("").Transport.(*http.Transport).TLSClientConfig.Clone()
		cfg.Certificates = certsOf
		tr := &http.Transport{TLSClientConfig: cfg}
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(srv.URL + "/healthz")
		if err == nil {
			resp.Body.Close()
			t.Errorf("client certificate %s: %d, want no handshake", name, resp.StatusCode)
		}
		tr.CloseIdleConnections()
	}
}
