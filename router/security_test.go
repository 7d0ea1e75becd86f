package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/atomicfile"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/testkit"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

// running is the program serving in the test, from run().
type running struct {
	t          *testing.T
	keys       string // the keys file
	public     string // http://host:port
	admin      string // http(s)://host:port
	logs       *testkit.Buffer
	client     *http.Client // keeps its connections alive
	adminHTTP  *http.Client
	adminToken string
}

// okCell is a cell that accepts every inquiry.
func okCell(t *testing.T) *httptest.Server {
	cell := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"id":"c1-1"}`)
	}))
	t.Cleanup(cell.Close)
	return cell
}

// publishMap writes a map of one cell, c1 at intake, into a file registry.
func publishMap(t *testing.T, regPath, intake string) {
	t.Helper()
	m, err := slotmap.New(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.AddCell(slotmap.Cell{ID: "c1", Weight: 1, Intake: intake, Admin: intake})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.NewFile(registry.FileConfig{Path: regPath}, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.CompareAndSwap(context.Background(), 0, p.After); err != nil {
		t.Fatal(err)
	}
}

// startRouter runs the program with a map sending every user to the cell
// at intake, the keys file keys (which must exist), files checked every
// 20 ms, and args; it stops at the end of the test and must stop cleanly.
func startRouter(t *testing.T, intake, keys string, args ...string) *running {
	t.Helper()
	regPath := filepath.Join(t.TempDir(), "map.json")
	publishMap(t, regPath, intake)
	return startRouterOn(t, regPath, keys, args...)
}

// startRouterOn is startRouter with the map of the file registry at
// regPath, which routers started on it share.
func startRouterOn(t *testing.T, regPath, keys string, args ...string) *running {
	t.Helper()
	r := &running{t: t, keys: keys, logs: &testkit.Buffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	readyCh := make(chan addrs, 1)
	done := make(chan error, 1)
	all := append([]string{"-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0", "-registry", "file:" + regPath,
		"-keys", keys, "-reload-interval", "20ms", "-shutdown-timeout", "5s"}, args...)
	go func() { done <- run(ctx, all, io.Discard, r.logs, func(a addrs) { readyCh <- a }) }()
	var a addrs
	select {
	case a = <-readyCh:
	case err := <-done:
		cancel()
		t.Fatalf("run: %v\n%s", err, r.logs)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatalf("not serving after 10 s\n%s", r.logs)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run after cancel: %v\n%s", err, r.logs)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("run did not return after cancel")
		}
	})
	// It serves once it holds its share of each client's quota, in an
	// empty bucket: the default keys' 100 a second fill 5 tokens in 50 ms.
	time.Sleep(50 * time.Millisecond)
	r.public = "http://" + a.Public.String()
	r.admin = "http://" + a.Admin.String()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	r.client = &http.Client{Transport: tr, Timeout: 5 * time.Second}
	r.adminHTTP = r.client
	return r
}

// post sends an inquiry with key and returns the status.
func (r *running) post(key string) int {
	r.t.Helper()
	return testkit.Do(r.t, r.client, "POST", r.public+"/v1/inquiries", `{"user_id":"u1"}`, map[string]string{"X-API-Key": key}).Status
}

// reloads is cellkit_reloads_total{what,result} from /metrics.
func (r *running) reloads(what, result string) int {
	r.t.Helper()
	h := map[string]string{}
	if r.adminToken != "" {
		h["Authorization"] = "Bearer " + r.adminToken
	}
	resp := testkit.Do(r.t, r.adminHTTP, "GET", r.admin+"/metrics", nil, h)
	want := fmt.Sprintf(`cellkit_reloads_total{result=%q,what=%q} `, result, what)
	for line := range strings.SplitSeq(string(resp.Body), "\n") {
		if v, ok := strings.CutPrefix(line, want); ok {
			var n int
			fmt.Sscan(v, &n)
			return n
		}
	}
	r.t.Fatalf("no %s in /metrics (%d)", want, resp.Status)
	return 0
}

// edit runs the keys command args on the keys file and waits until the
// router has reloaded it (result ok or refused) once more.
func (r *running) edit(result string, change func()) {
	r.t.Helper()
	n := r.reloads("keys", result)
	change()
	testkit.WaitFor(r.t, 5*time.Second, "the keys file to be reloaded ("+result+")", func() bool { return r.reloads("keys", result) > n })
}

func (r *running) keysCmd(args ...string) string {
	r.t.Helper()
	out, errOut, err := cli(r.t, append([]string{"keys", args[0], "--keys", r.keys}, args[1:]...)...)
	if err != nil {
		r.t.Fatalf("keys %v: %v (%s)", args, err, errOut)
	}
	return strings.TrimSpace(out)
}

// TestKeyRotationThroughTheRunningRouter: keys added and revoked with
// `router keys` while the router runs take effect with the reload that
// follows, on connections kept alive; a broken file is refused and the
// keys loaded before stay in use.
func TestKeyRotationThroughTheRunningRouter(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.json")
	old := mustAddKey(t, keys, "platform-a")
	other := mustAddKey(t, keys, "platform-b")
	r := startRouter(t, okCell(t).URL, keys)
	if s := r.post(old); s != 202 {
		t.Fatalf("old key at start: %d", s)
	}

	// Overlap: a second key for the client; both work.
	var fresh string
	r.edit("ok", func() { fresh = r.keysCmd("add", "--client", "platform-a") })
	if s1, s2 := r.post(old), r.post(fresh); s1 != 202 || s2 != 202 {
		t.Fatalf("during the overlap: old %d, new %d; want both 202", s1, s2)
	}
	// The platform moved: the old key is revoked. The very next request
	// after the reload is refused, on the connection it has kept alive.
	r.edit("ok", func() {
		if out := r.keysCmd("revoke", "--key", old); !strings.HasPrefix(out, "revoked 1 key") {
			t.Errorf("revoke said %q", out)
		}
	})
	if s := r.post(old); s != 403 {
		t.Errorf("revoked key: %d, want 403", s)
	}
	if s := r.post(fresh); s != 202 {
		t.Errorf("new key after the revocation: %d", s)
	}

	// A broken file (a hand edit gone wrong) is refused, with one log line
	// naming the file; every key keeps working.
	r.edit("refused", func() {
		if err := atomicfile.WriteFile(keys, []byte(`[{"client":"platform-a",`), 0o600); err != nil {
			t.Fatal(err)
		}
	})
	if s1, s2, s3 := r.post(fresh), r.post(other), r.post(old); s1 != 202 || s2 != 202 || s3 != 403 {
		t.Errorf("after a refused reload: new %d, other %d, revoked %d; want 202, 202, 403", s1, s2, s3)
	}
	refused := 0
	for line := range strings.SplitSeq(r.logs.String(), "\n") {
		if strings.Contains(line, "refused the new files") {
			refused++
			if !strings.Contains(line, keys) || !strings.Contains(line, `"what":"keys"`) || !strings.Contains(line, "line 1: ") {
				t.Errorf("the refusal does not name the keys file and the line: %s", line)
			}
		}
	}
	if refused != 1 {
		t.Errorf("%d log lines about the refused file, want 1:\n%s", refused, r.logs)
	}
}

// TestRateLimitKeptAcrossReload: reloading the keys file does not refill
// a client's bucket.
func TestRateLimitKeptAcrossReload(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.json")
	key := mustAddKey(t, keys, "slow", "--rate", "0.5", "--burst", "1") // a token per 2 s
	r := startRouter(t, okCell(t).URL, keys)
	time.Sleep(2100 * time.Millisecond) // a router starts with an empty bucket: it fills
	for i, want := range []int{202, 429} {
		if s := r.post(key); s != want {
			t.Fatalf("request %d: %d, want %d", i, s, want)
		}
	}
	r.edit("ok", func() { r.keysCmd("add", "--client", "someone-else") })
	if s := r.post(key); s != 429 {
		t.Errorf("after a reload: %d, want 429 (the bucket kept)", s)
	}
}

// TestSIGHUPReloadsEveryFile: with files checked once an hour, SIGHUP
// reloads the keys and the admin tokens at once.
func TestSIGHUPReloadsEveryFile(t *testing.T) {
	// The test's own interest in SIGHUP keeps the signal from ending the
	// test binary before run() has asked for it.
	hup := make(chan os.Signal, 16)
	signal.Notify(hup, syscall.SIGHUP)
	t.Cleanup(func() { signal.Stop(hup) })

	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.json")
	key := mustAddKey(t, keys, "platform-a")
	mustAddKey(t, keys, "platform-b")
	tokens := filepath.Join(dir, "tokens")
	if err := atomicfile.WriteFile(tokens, []byte("token-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startRouter(t, okCell(t).URL, keys, "-admin-token-file", tokens, "-reload-interval", "1h")
	r.adminToken = "token-1"
	if s := r.post(key); s != 202 {
		t.Fatalf("at start: %d", s)
	}
	cli(t, "keys", "revoke", "--keys", keys, "--key", key)
	// Not before the signal (the next look at the file is an hour away).
	time.Sleep(100 * time.Millisecond) // lets time pass to show nothing happens
	if s := r.post(key); s != 202 {
		t.Fatalf("revoked key before SIGHUP: %d, want 202 still", s)
	}
	tokensBefore := r.reloads("admin_tokens", "ok")
	testkit.WaitFor(t, 5*time.Second, "SIGHUP to reload the keys", func() bool {
		syscall.Kill(os.Getpid(), syscall.SIGHUP)
		return r.post(key) == 403
	})
	if n := r.reloads("admin_tokens", "ok"); n <= tokensBefore {
		t.Errorf("admin tokens reloaded %d times, %d before SIGHUP: want more", n, tokensBefore)
	}
}

// TestAdminBearerToken: every admin path but the probes needs a token
// from the token file.
func TestAdminBearerToken(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.json")
	mustAddKey(t, keys, "platform-a")
	tokens := filepath.Join(dir, "tokens")
	if err := atomicfile.WriteFile(tokens, []byte("# ops\nright-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startRouter(t, okCell(t).URL, keys, "-admin-token-file", tokens, "-pprof")
	for _, tc := range []struct {
		path, token string
		status      int
	}{
		{"/healthz", "", 200},
		{"/readyz", "", 200},
		{"/metrics", "", 401},
		{"/v1/admin/cells", "", 401},
		{"/v1/admin/hotkeys", "", 401},
		{"/debug/pprof/", "", 401},
		{"/metrics", "wrong-token", 401},
		{"/v1/admin/cells", "wrong-token", 401},
		{"/metrics", "right-token", 200},
		{"/v1/admin/cells", "right-token", 200},
		{"/debug/pprof/", "right-token", 200},
	} {
		h := map[string]string{}
		if tc.token != "" {
			h["Authorization"] = "Bearer " + tc.token
		}
		a := testkit.Do(t, r.adminHTTP, "GET", r.admin+tc.path, nil, h)
		if a.Status != tc.status {
			t.Errorf("%s with token %q: %d, want %d", tc.path, tc.token, a.Status, tc.status)
			continue
		}
		if tc.status == 401 {
			if p := a.Problem(t); p.Type != "https://cellkit.dev/problems/unauthorized" {
				t.Errorf("%s: problem %+v", tc.path, p)
			}
			if !strings.HasPrefix(a.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s: WWW-Authenticate %q", tc.path, a.Header.Get("WWW-Authenticate"))
			}
		}
	}
	if a := testkit.Do(t, r.adminHTTP, "GET", r.admin+"/metrics", nil, map[string]string{"Authorization": "Bearer right-token"}); !strings.Contains(string(a.Body), `cellkit_admin_auth_failures_total{reason="wrong"} 2`) {
		t.Errorf("/metrics lacks the two wrong tokens:\n%s", a.Body)
	}
}

// TestAdminMutualTLS: with a client CA, the admin listener serves only
// clients with an operator's certificate, without a token.
func TestAdminMutualTLS(t *testing.T) {
	certs := celltest.DevCerts(t)
	keys := filepath.Join(t.TempDir(), "keys.json")
	mustAddKey(t, keys, "platform-a")
	r := startRouter(t, okCell(t).URL, keys, "-admin-tls-cert", certs.Cert(pki.RoleRouter), "-admin-tls-key", certs.Key(pki.RoleRouter),
		"-admin-tls-client-ca", certs.CA())
	r.admin = strings.Replace(r.admin, "http://", "https://", 1)
	clientAs := func(role string) *http.Client { return certs.TLSClient(t, role) }
	op := clientAs(pki.RoleOperator)
	for _, path := range []string{"/metrics", "/v1/admin/cells", "/healthz"} {
		if a := testkit.Do(t, op, "GET", r.admin+path, nil, nil); a.Status != 200 {
			t.Errorf("operator certificate, %s: %d %s", path, a.Status, a.Body)
		}
	}
	for role, c := range map[string]*http.Client{"no": clientAs(""), "a router's": clientAs(pki.RoleRouter)} {
		resp, err := c.Get(r.admin + "/healthz")
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s certificate: %d, want the handshake refused", role, resp.StatusCode)
		}
	}
	// Plain HTTP to the TLS listener gets nothing of the API.
	resp, err := http.Get(strings.Replace(r.admin, "https://", "http://", 1) + "/metrics")
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 || strings.Contains(string(body), "cellkit_") {
			t.Errorf("plain HTTP to the admin TLS listener: %d %s", resp.StatusCode, body)
		}
	}
}

// TestAdminOffLoopbackNeedsAuthentication: the router refuses to start
// with an admin API open to the network.
func TestAdminOffLoopbackNeedsAuthentication(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.json")
	mustAddKey(t, keys, "platform-a")
	err := run(context.Background(), []string{"-registry", "file:" + filepath.Join(dir, "map.json"), "-keys", keys, "-admin-listen", "0.0.0.0:0"}, io.Discard, io.Discard, nil)
	want := "--admin-listen 0.0.0.0:0 is not a loopback address and the admin API would be open to other hosts without authentication: set --admin-token-file or --admin-tls-client-ca"
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("run: %v\nwant one line with %q", err, want)
	}
	for _, tc := range []struct {
		listen string
		extra  []string
		ok     bool
	}{
		{":9080", nil, false},
		{"0.0.0.0:9080", nil, false},
		{"[::]:9080", nil, false},
		{"10.1.2.3:9080", nil, false},
		{"router-admin.internal:9080", nil, false},
		{"127.0.0.1:9080", nil, true},
		{"[::1]:9080", nil, true},
		{"localhost:9080", nil, true},
		{"0.0.0.0:9080", []string{"-admin-token-file", "/some/tokens"}, true},
		{":9080", []string{"-admin-tls-cert", "c", "-admin-tls-key", "k", "-admin-tls-client-ca", "ca"}, true},
		{":9080", []string{"-admin-tls-cert", "c", "-admin-tls-key", "k"}, false}, // TLS alone authenticates nobody
	} {
		_, err := parseFlags(append([]string{"-keys", keys, "-admin-listen", tc.listen}, tc.extra...), func(string) string { return "" }, io.Discard)
		if (err == nil) != tc.ok {
			t.Errorf("--admin-listen %s %v: %v, want ok %v", tc.listen, tc.extra, err, tc.ok)
		}
	}
}

// TestTLSFlagsRefuseBadFiles: a bad certificate file stops the start with
// one line naming it.
func TestTLSFlagsRefuseBadFiles(t *testing.T) {
	certs := celltest.DevCerts(t)
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.json")
	mustAddKey(t, keys, "platform-a")
	garbage := filepath.Join(dir, "garbage.pem")
	os.WriteFile(garbage, []byte("not a certificate\n"), 0o600)
	missing := filepath.Join(dir, "missing.pem")
	cert, key := certs.Cert(pki.RoleRouter), certs.Key(pki.RoleRouter)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-tls-cert", garbage, "-tls-key", key}, garbage},
		{[]string{"-tls-cert", cert, "-tls-key", certs.Key(pki.RoleCell)}, cert},
		{[]string{"-tls-cert", cert}, "both a certificate and a key"},
		{[]string{"-tls-client-ca", certs.CA()}, "--tls-client-ca needs --tls-cert"},
		{[]string{"-tls-cert", cert, "-tls-key", key, "-tls-client-ca", garbage}, garbage},
		{[]string{"-admin-tls-cert", missing, "-admin-tls-key", key}, missing},
		{[]string{"-admin-tls-client-role", "operator"}, "--admin-tls-client-role needs --admin-tls-client-ca"},
		{[]string{"-cell-tls-ca", garbage}, garbage},
		{[]string{"-cell-tls-ca", certs.CA(), "-cell-tls-cert", garbage, "-cell-tls-key", key}, garbage},
		{[]string{"-cell-tls-cert", cert}, "both a certificate and a key"},
		{[]string{"-admin-token-file", missing}, missing},
	} {
		args := append([]string{"-registry", "file:" + filepath.Join(dir, "map.json"), "-keys", keys, "-map-wait", "1ms"}, tc.args...)
		err := run(context.Background(), args, io.Discard, io.Discard, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v, want one line with %q", tc.args, err, tc.want)
		}
	}
	// Good files start (the public listener's TLS is wired, whether or not
	// the loops serve it yet: nothing here speaks to it).
	r := startRouter(t, okCell(t).URL, keys, "-tls-cert", cert, "-tls-key", key)
	if a := testkit.Do(t, r.adminHTTP, "GET", r.admin+"/readyz", nil, nil); a.Status != 200 {
		t.Errorf("readyz with TLS files: %d", a.Status)
	}
}

// TestRouterToCellOverMutualTLS: an https cell that takes only routers'
// certificates gets the request with the router's certificate; without
// one, the router answers 502 or 503.
func TestRouterToCellOverMutualTLS(t *testing.T) {
	certs := celltest.DevCerts(t)
	srvTLS, err := tlsconf.NewServer(tlsconf.ServerFiles{Cert: certs.Cert(pki.RoleCell), Key: certs.Key(pki.RoleCell),
		ClientCA: certs.CA(), ClientRole: pki.RoleRouter}, tlsconf.Options{What: "cell_intake"})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	var peer atomic.Value
	cell := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/health" {
			return // the router's health checks: 200, not counted
		}
		calls.Add(1)
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			peer.Store(r.TLS.PeerCertificates[0].Subject.String())
		}
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"id":"c1-1"}`)
	}))
	cell.TLS = srvTLS.Config()
	cell.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake refused below
	cell.StartTLS()
	t.Cleanup(cell.Close)
	intake := cell.URL

	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.json")
	key := mustAddKey(t, keys, "platform-a")
	r := startRouter(t, intake, keys, "-cell-tls-ca", certs.CA(), "-cell-tls-cert", certs.Cert(pki.RoleRouter), "-cell-tls-key", certs.Key(pki.RoleRouter))
	if s := r.post(key); s != 202 {
		t.Fatalf("through the router with its certificate: %d", s)
	}
	if calls.Load() != 1 || !strings.Contains(fmt.Sprint(peer.Load()), "OU=router") {
		t.Errorf("the cell had %d calls from %v, want 1 from a router", calls.Load(), peer.Load())
	}

	// The CA alone: the cell refuses the handshake, the router says 502/503.
	r2 := startRouter(t, intake, keys, "-cell-tls-ca", certs.CA())
	if s := r2.post(key); s != 502 && s != 503 {
		t.Errorf("without a client certificate: %d, want 502 or 503", s)
	}
	if calls.Load() != 1 {
		t.Errorf("the cell served %d calls, want still 1", calls.Load())
	}
}

// TestPublicListenerOnTLS: with --tls-cert and --tls-key the public
// listener speaks TLS only: an https client that trusts the CA is served,
// a plain HTTP one is not, and a certificate replaced on disk is served to
// the next handshake after SIGHUP.
func TestPublicListenerOnTLS(t *testing.T) {
	hup := make(chan os.Signal, 1) // the test's own interest keeps SIGHUP from ending it
	signal.Notify(hup, syscall.SIGHUP)
	t.Cleanup(func() { signal.Stop(hup) })
	certs := celltest.DevCerts(t)
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.json")
	key := mustAddKey(t, keys, "platform-a")
	cert, keyFile := filepath.Join(dir, "pub.pem"), filepath.Join(dir, "pub-key.pem")
	issue := func(name string) {
		is, err := certs.CAObject(t).Issue(pki.Request{Name: name, Hosts: []string{"127.0.0.1"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := is.Write(dir, "pub"); err != nil {
			t.Fatal(err)
		}
	}
	issue("first")
	r := startRouter(t, okCell(t).URL, keys, "-tls-cert", cert, "-tls-key", keyFile, "-reload-interval", "1h")
	pool, err := tlsconf.LoadPool(certs.CA())
	if err != nil {
		t.Fatal(err)
	}
	var served atomic.Value
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, VerifyConnection: func(cs tls.ConnectionState) error {
		served.Store(cs.PeerCertificates[0].Subject.CommonName)
		return nil
	}}, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	r.client = &http.Client{Transport: tr, Timeout: 5 * time.Second}
	plain := r.public
	r.public = strings.Replace(r.public, "http://", "https://", 1)
	if s := r.post(key); s != http.StatusAccepted || served.Load() != "first" {
		t.Fatalf("over TLS: %d with certificate %v, want 202 with first", s, served.Load())
	}
	if _, err := testkit.Send(&http.Client{Timeout: 2 * time.Second}, "POST", plain+"/v1/inquiries", `{"user_id":"u1"}`, map[string]string{"X-API-Key": key}); err == nil {
		t.Error("plain HTTP on the TLS listener got an answer")
	}
	issue("second")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	testkit.WaitFor(t, 5*time.Second, "the new certificate served after SIGHUP", func() bool {
		return r.post(key) == http.StatusAccepted && served.Load() == "second"
	})
}
