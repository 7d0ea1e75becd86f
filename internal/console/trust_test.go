package console_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/console"
	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/testkit"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

// adminToken is what the console calls the admin APIs with: the secret a
// harvester wants.
const adminToken = "the-cluster-admin-token-0123456789abcdef"

// harvester records what reaches it: a server someone who can write the
// registry points an admin URL at.
type harvester struct {
	mu   sync.Mutex
	reqs []string // "METHOD PATH Authorization"
}

func (h *harvester) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.reqs = append(h.reqs, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
	h.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(cellStatus("stolen"))
}

func (h *harvester) got() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.reqs...)
}

// TestTheTokenGoesOnlyWhereTrusted: the admin URLs the console reads from
// the registry — a cell's, an instance's, a router's announcement — get
// its credentials only when trusted: configured (TrustedAdmin), or https
// verified against the cluster's CA (TrustCA). A plain-http URL that is
// not configured, an https one with another CA's certificate, and a
// redirect from a trusted endpoint to one that is not get nothing; the
// view lists what it did not ask, with why, and the cards say so.
func TestTheTokenGoesOnlyWhereTrusted(t *testing.T) {
	certs := celltest.DevCerts(t)
	plain := &harvester{}
	plainSrv := httptest.NewServer(plain)
	t.Cleanup(plainSrv.Close)
	// https with a certificate from elsewhere (httptest's own CA).
	foreign := &harvester{}
	foreignSrv := httptest.NewUnstartedServer(foreign)
	foreignSrv.Config.ErrorLog = log.New(io.Discard, "", 0)
	foreignSrv.StartTLS()
	t.Cleanup(foreignSrv.Close)
	// https with the cluster's certificate: a real cell's admin API as TLS
	// serves it (the status is the harvester's, to see what it got).
	cluster := &harvester{}
	clusterSrv := httptest.NewUnstartedServer(cluster)
	srvTLS, err := tlsconf.NewServer(tlsconf.ServerFiles{Cert: certs.Cert(pki.RoleCell), Key: certs.Key(pki.RoleCell)}, tlsconf.Options{What: "admin_tls"})
	if err != nil {
		t.Fatal(err)
	}
	clusterSrv.TLS = srvTLS.Config()
	clusterSrv.StartTLS()
	t.Cleanup(clusterSrv.Close)
	// A trusted endpoint that sends every call on to the harvester (the
	// same host, another port: the HTTP client would keep the token).
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, plainSrv.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirector.Close)

	reg := celltest.NewRegistry(t, map[string]int{"nice": 80},
		slotmap.Cell{ID: "c1", Weight: 1, Intake: "http://127.0.0.1:1", Admin: plainSrv.URL},
		slotmap.Cell{ID: "c2", Weight: 1, Intake: "http://127.0.0.1:1", Admin: clusterSrv.URL, Instances: []slotmap.Instance{
			{ID: "i1", Intake: "http://127.0.0.1:1", Admin: foreignSrv.URL}, {ID: "i2", Intake: "http://127.0.0.1:1", Admin: clusterSrv.URL}}},
		slotmap.Cell{ID: "c3", Weight: 1, Intake: "http://127.0.0.1:1", Admin: redirector.URL})
	ctx := testkit.Context(t, 30*time.Second)
	if err := reg.Reg.(registry.Announcer).Announce(ctx, registry.Announcement{ID: "rogue", Admin: plainSrv.URL}); err != nil {
		t.Fatal(err)
	}
	// The console's admin client as cellctl makes it with --tls-ca: the
	// cluster's CA only, and the operator's certificate.
	admin := adminclient.Client{HTTP: certs.TLSClient(t, pki.RoleOperator), Token: adminToken}
	view := func(cfg console.Config) *console.View {
		cfg.Token = token
		con, err := console.New(cfg, console.Options{Registry: reg.Reg, Admin: admin, Routers: console.AnnouncedRouters(reg.Reg)})
		if err != nil {
			t.Fatal(err)
		}
		return con.Collect(ctx)
	}

	v := view(console.Config{TrustCA: true, TrustedAdmin: []string{redirector.URL}})
	for name, h := range map[string]*harvester{"the plain-http harvester": plain, "the https harvester with another CA's certificate": foreign} {
		if got := h.got(); len(got) != 0 {
			t.Errorf("%s was called: %q", name, got)
		}
	}
	if got := cluster.got(); len(got) == 0 || !strings.HasSuffix(got[0], "Bearer "+adminToken) {
		t.Errorf("the cluster's https admin API (trusted by the CA) got %q, want the token", got)
	}
	c1, c2, c3 := v.Cells[0], v.Cells[1], v.Cells[2]
	if c1.Health != console.HealthDown || !c1.Untrusted || c1.Status != nil || !strings.Contains(c1.Error, "plain http and not a trusted admin endpoint") {
		t.Errorf("c1 on an untrusted plain-http URL: %+v", c1)
	}
	if c2.Health != console.HealthWarn || c2.Untrusted || !c2.Instances[1].Reachable || c2.Instances[0].Reachable ||
		!strings.Contains(c2.Instances[0].Error, "certificate") {
		t.Errorf("c2, i1 with another CA's certificate, i2 with the cluster's: %+v", c2)
	}
	if c3.Health != console.HealthDown || !strings.Contains(c3.Error, "not followed") {
		t.Errorf("c3, redirected to an untrusted endpoint: %s %q", c3.Health, c3.Error)
	}
	if len(v.Routers) != 1 || !v.Routers[0].Untrusted || v.Routers[0].Health != console.HealthDown {
		t.Errorf("the rogue router's card: %+v", v.Routers)
	}
	refused := map[string]string{}
	for _, r := range v.Refused {
		refused[r.What] = r.Admin
	}
	if len(refused) != 2 || refused["c1"] != plainSrv.URL || refused["router rogue"] != plainSrv.URL {
		t.Errorf("the view's refused endpoints: %+v", v.Refused)
	}

	// Without the cluster's CA, https is no better than http.
	before := len(cluster.got())
	v = view(console.Config{TrustedAdmin: []string{redirector.URL}})
	if got := cluster.got(); len(got) != before {
		t.Errorf("https without TrustCA was called: %q", got[before:])
	}
	if i2 := v.Cells[1].Instances[1]; !i2.Untrusted || !strings.Contains(i2.Error, "https without the cluster's CA") {
		t.Errorf("i2 on https without TrustCA: %+v", i2)
	}
	if len(plain.got())+len(foreign.got()) != 0 {
		t.Errorf("the harvesters were called: %q %q", plain.got(), foreign.got())
	}

	// Configured: the same URL is asked (its owner vouched for it).
	v = view(console.Config{TrustedAdmin: []string{plainSrv.URL + "/"}})
	if got := plain.got(); len(got) == 0 || !v.Cells[0].Reachable {
		t.Errorf("a configured plain-http endpoint was not asked: %q, %+v", got, v.Cells[0])
	}
	for _, bad := range []string{"ftp://127.0.0.1:1", "http://user@127.0.0.1:1", "http://"} {
		if _, err := console.New(console.Config{Token: token, TrustedAdmin: []string{bad}},
			console.Options{Registry: reg.Reg, Admin: admin}); err == nil {
			t.Errorf("a trusted admin endpoint %q was taken", bad)
		}
	}
}

// TestUntrustedLooksAlike: URLs that reach the configured endpoint, or
// another, however alike they look, are not trusted: the trust is in the
// endpoint as configured, written the same.
func TestUntrustedLooksAlike(t *testing.T) {
	h := &harvester{}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	reg := celltest.NewRegistry(t, map[string]int{"nice": 80})
	ctx := testkit.Context(t, 10*time.Second)
	alike := []string{
		"https://127.0.0.1:" + port,                       // another scheme
		"http://127.0.0.1:0" + port,                       // the same port, written otherwise
		"http://localhost:" + port,                        // another name for it
		"http://[::ffff:127.0.0.1]:" + port,               // and another
		"http://127.0.0.1:" + port + "@127.0.0.2:" + port, // a user name, another host
	}
	for i, admin := range alike {
		if err := reg.Reg.(registry.Announcer).Announce(ctx, registry.Announcement{ID: fmt.Sprintf("r%d", i), Admin: admin}); err != nil {
			t.Fatal(err)
		}
	}
	con, err := console.New(console.Config{Token: token, TrustedAdmin: []string{"http://127.0.0.1:" + port}},
		console.Options{Registry: reg.Reg, Admin: adminclient.Client{HTTP: &http.Client{}, Token: adminToken}, Routers: console.AnnouncedRouters(reg.Reg)})
	if err != nil {
		t.Fatal(err)
	}
	v := con.Collect(ctx)
	if len(v.Routers) != len(alike) || len(v.Refused) != len(alike) {
		t.Errorf("%d routers, %d refused, want %d of each: %+v", len(v.Routers), len(v.Refused), len(alike), v.Refused)
	}
	for _, r := range v.Routers {
		if !r.Untrusted {
			t.Errorf("%s (%s) was trusted: %+v", r.ID, r.Admin, r)
		}
	}
	if got := h.got(); len(got) != 0 {
		t.Errorf("the endpoint was called through a look-alike: %q", got)
	}
}
