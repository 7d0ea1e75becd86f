package cellctl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/agencysim"
	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/telegram"
	"github.com/cellkit/cellkit/internal/testkit"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

// TestAdminCallsOverMutualTLS: a real cell whose admin API takes only
// operators' certificates; cellctl reaches it with --tls-* (or their
// variables) and fails in one line without them or with another role's
// certificate.
func TestAdminCallsOverMutualTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the cell binary")
	}
	certs := celltest.DevCerts(t)
	sim := agencysim.Config{Latency: agencysim.FixedLatency(time.Millisecond)}
	nice := celltest.StartSim(t, telegram.NICE(), sim).Addr().String()
	kcb := celltest.StartSim(t, telegram.KCB(), sim).Addr().String()
	e := newFileEnv(t)
	intakeAddr, adminAddr := testkit.FreeAddr(t), testkit.FreeAddr(t)
	e.ok("init", "--agency", "nice=4", "--agency", "kcb=4", "--slots", "4096")
	e.ok("provision", "c1", "--intake", "https://"+intakeAddr, "--admin", "https://"+adminAddr)
	startCellWith(t, "c1", e.url, intakeAddr, adminAddr, nice, kcb, &certs)

	operator := []string{"--tls-ca", certs.CA(), "--tls-cert", certs.Cert(pki.RoleOperator), "--tls-key", certs.Key(pki.RoleOperator)}
	var st statusJSON
	e.json(&st, append([]string{"status"}, operator...)...)
	if c := st.Cells[0]; !c.Reachable || c.Status == nil || !c.Status.Ready {
		t.Fatalf("status with the operator certificate: %+v", c)
	}
	r := e.ok(append([]string{"circuit", "c1", "nice", "open"}, operator...)...)
	if r.stdout != "c1 nice breaker: forced_open (open).\n" {
		t.Errorf("circuit open: %q", r.stdout)
	}

	// Without a client certificate, or with a router's: refused in the
	// handshake. status still prints its table (the cell unreachable, with
	// the reason); a command about one cell fails in one line.
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"the CA only", []string{"--tls-ca", certs.CA()}},
		{"a router's certificate", []string{"--tls-ca", certs.CA(), "--tls-cert", certs.Cert(pki.RoleRouter), "--tls-key", certs.Key(pki.RoleRouter)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.json(&st, append([]string{"status"}, tc.args...)...)
			if c := st.Cells[0]; c.Reachable || !strings.Contains(c.Error, "https://"+adminAddr) {
				t.Errorf("status: %+v, want c1 unreachable", c)
			}
			r := e.run(append([]string{"failed", "list", "c1"}, tc.args...)...)
			if r.code != ExitFailure || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "https://"+adminAddr) ||
				!strings.Contains(r.stderr, "(the admin API wants an operator's client certificate: --tls-cert and --tls-key)") {
				t.Errorf("failed list: %v, want one line naming the admin URL, with a hint at the certificate", r)
			}
		})
	}
	r = e.run("failed", "list", "c1")
	if r.code != ExitFailure || !strings.Contains(r.stderr, "unknown authority (--tls-ca names the CA") {
		t.Errorf("failed list with no TLS flags: %v, want a hint at --tls-ca", r)
	}

	// From the environment: cellctl's own variables.
	env := map[string]string{
		"CELLKIT_CELLCTL_TLS_CA": certs.CA(), "CELLKIT_CELLCTL_TLS_CERT": certs.Cert(pki.RoleOperator), "CELLKIT_CELLCTL_TLS_KEY": certs.Key(pki.RoleOperator),
	}
	e.cli.Getenv = func(k string) string { return env[k] }
	var failed []api.FailedInquiry
	e.json(&failed, "failed", "list", "c1")
	e.ok("circuit", "c1", "nice", "reset")
}

// TestAdminCallsWithToken: a real cell whose admin API takes the tokens of
// its --admin-token-file; cellctl sends one from its own --admin-token-file
// (or --admin-token, or CELLKIT_ADMIN_TOKEN) and fails in one line
// without it or with another.
func TestAdminCallsWithToken(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the cell binary")
	}
	sim := agencysim.Config{Latency: agencysim.FixedLatency(time.Millisecond)}
	nice := celltest.StartSim(t, telegram.NICE(), sim).Addr().String()
	kcb := celltest.StartSim(t, telegram.KCB(), sim).Addr().String()
	dir := t.TempDir()
	cellTokens, token := filepath.Join(dir, "cell-tokens"), filepath.Join(dir, "token")
	if err := os.WriteFile(cellTokens, []byte("# operators\ns3cret\nother-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newFileEnv(t)
	intakeAddr, adminAddr := testkit.FreeAddr(t), testkit.FreeAddr(t)
	e.ok("init", "--agency", "nice=4", "--agency", "kcb=4", "--slots", "4096")
	e.ok("provision", "c1", "--intake", "http://"+intakeAddr, "--admin", "http://"+adminAddr)
	startCellWith(t, "c1", e.url, intakeAddr, adminAddr, nice, kcb, nil, "--admin-token-file", cellTokens)

	var st statusJSON
	e.json(&st, "status", "--admin-token-file", token)
	if c := st.Cells[0]; !c.Reachable || c.Status == nil || !c.Status.Ready {
		t.Fatalf("status with the token: %+v", c)
	}
	if r := e.ok("circuit", "c1", "nice", "open", "--admin-token", "other-token"); r.stdout != "c1 nice breaker: forced_open (open).\n" {
		t.Errorf("circuit open: %q", r.stdout)
	}
	e.cli.Getenv = func(k string) string { return map[string]string{EnvAdminToken: "s3cret"}[k] }
	e.ok("circuit", "c1", "nice", "reset")
	e.cli.Getenv = func(string) string { return "" }

	for _, tc := range []struct {
		name, detail string
		args         []string
	}{
		{"no token", "the admin API needs Authorization: Bearer TOKEN", nil},
		{"a wrong token", "the bearer token is not one of the admin API's tokens", []string{"--admin-token", "wrong"}},
	} {
		r := e.run(append([]string{"failed", "list", "c1"}, tc.args...)...)
		if r.code != ExitFailure || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "answered 401 Unauthorized: "+tc.detail) {
			t.Errorf("failed list with %s: %v, want one line with 401 and %q", tc.name, r, tc.detail)
		}
		e.json(&st, append([]string{"status"}, tc.args...)...)
		if c := st.Cells[0]; !strings.Contains(c.Error, "401") {
			t.Errorf("status with %s: %+v, want the cell's 401", tc.name, c)
		}
	}
}

// TestAdminTLSAndTokenFlags: bad files are one line naming them, before
// anything is done; the token file is sent as a bearer token.
func TestAdminTLSAndTokenFlags(t *testing.T) {
	e := newFileEnv(t)
	cells := statusEnv(t, e)
	c2 := cells["c2"]
	c2.set(func(f *fakeCell) { f.token = "s3cret" })
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.ok("failed", "list", "c2", "--admin-token-file", tokenFile)
	if got := c2.called("GET /v1/admin/failed"); len(got) != 1 {
		t.Errorf("calls %v", got)
	}
	// The command line's wins over the environment's; both on the command
	// line are refused.
	e.cli.Getenv = func(k string) string { return map[string]string{EnvAdminToken: "wrong"}[k] }
	e.ok("failed", "list", "c2", "--admin-token-file", tokenFile)
	e.cli.Getenv = func(k string) string { return map[string]string{"CELLKIT_ADMIN_TOKEN_FILE": tokenFile}[k] }
	e.ok("failed", "list", "c2")
	if r := e.run("failed", "list", "c2", "--admin-token", "wrong"); r.code != ExitFailure || !strings.Contains(r.stderr, "401") {
		t.Errorf("--admin-token on the command line over CELLKIT_ADMIN_TOKEN_FILE: %v", r)
	}
	e.cli.Getenv = func(string) string { return "" }
	if r := e.run("failed", "list", "c2", "--admin-token", "s3cret", "--admin-token-file", tokenFile); r.code != ExitUsage {
		t.Errorf("both token flags: %v", r)
	}

	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte(" \n"), 0o600)
	certs := celltest.DevCerts(t)
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--admin-token-file", missing}, missing},
		{[]string{"--admin-token-file", empty}, empty + " is empty"},
		{[]string{"--tls-ca", missing}, missing},
		{[]string{"--tls-ca", certs.CA(), "--tls-cert", certs.Cert(pki.RoleOperator), "--tls-key", certs.Key(pki.RoleRouter)}, certs.Cert(pki.RoleOperator)},
		{[]string{"--tls-cert", certs.Cert(pki.RoleOperator)}, "both a certificate and a key"},
	} {
		r := e.run(append([]string{"map", "show"}, tc.args...)...)
		if r.code == ExitOK || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("map show %q: %v, want one line containing %q", tc.args, r, tc.want)
		}
	}
}

// TestTLSHintWhenTheServerRefusesTheCertificate: a server that refuses a
// client certificate after the handshake (TLS 1.3): each call names its
// alert, with the hint (internal/adminclient records the alert on the
// connection, for when the transport reports something else).
func TestTLSHintWhenTheServerRefusesTheCertificate(t *testing.T) {
	const want = "remote error: tls: bad certificate (the admin API wants an operator's client certificate: --tls-cert and --tls-key)"
	certs := celltest.DevCerts(t)
	srv := certs.OperatorOnlyAdmin(t)

	e := newFileEnv(t)
	e.ok("init", "--agency", "nice=4", "--slots", "64")
	e.ok("provision", "c1", "--intake", "https://"+testkit.FreeAddr(t), "--admin", srv.URL)
	operator := []string{"--tls-ca", certs.CA(), "--tls-cert", certs.Cert(pki.RoleOperator), "--tls-key", certs.Key(pki.RoleOperator)}
	e.ok(append([]string{"failed", "list", "c1"}, operator...)...)
	router := tlsconf.ClientFiles{CA: certs.CA(), Cert: certs.Cert(pki.RoleRouter), Key: certs.Key(pki.RoleRouter)}
	for i := range 20 {
		r := e.run("failed", "list", "c1", "--tls-ca", router.CA, "--tls-cert", router.Cert, "--tls-key", router.Key)
		if r.code != ExitFailure || !strings.Contains(r.stderr, want) {
			t.Fatalf("call %d with a router's certificate: %v, want the server's alert and the hint", i, r)
		}
	}

}
