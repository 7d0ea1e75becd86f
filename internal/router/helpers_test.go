package router

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"go.uber.org/goleak"

	"github.com/cellkit/cellkit/internal/apikey"
	"github.com/cellkit/cellkit/internal/httpx"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/testkit"
)

// TestMain also fails the run when a client connection made a move its
// state machine's table does not have, in any test.
func TestMain(m *testing.M) {
	var mu sync.Mutex
	var bad []string
	badTransition = func(from, to connState) {
		mu.Lock()
		defer mu.Unlock()
		bad = append(bad, from.String()+" → "+to.String())
	}
	testkit.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		mu.Lock()
		defer mu.Unlock()
		if len(bad) > 0 {
			fmt.Fprintf(os.Stderr, "client connections made moves their table does not have: %v\n", bad)
			code = max(code, 1)
		}
		os.Exit(code)
	}))
}

// backend is a fake cell: an httptest server on 127.0.0.1 that answers the
// cell API with a small JSON naming itself, records what it received, and
// can be made to hang, fail or answer 421.
type backend struct {
	cell string
	srv  *httptest.Server

	mode       atomic.Int32 // modeOK, modeHang, modeFail
	probes     atomic.Int64 // the router's health checks (GET /v1/health), not counted in calls
	unhealthy  atomic.Bool  // the health checks get 503: alive, cannot take work (no leader)
	minVersion atomic.Int64 // answer 421 to requests routed with an older map
	calls      atomic.Int64
	release    chan struct{} // closed at cleanup: frees hanging handlers
	delay      atomic.Int64  // nanoseconds to wait before answering
	active     atomic.Int64  // calls being served now
	maxActive  atomic.Int64  // most calls served at once (reset by tests)

	mu   sync.Mutex
	last *http.Request
	body []byte
}

const (
	modeOK int32 = iota
	modeHang
	modeFail
	modeShed // the cell's own load shedding: 503, Retry-After, Cellkit-Overloaded
)

func newBackend(t *testing.T, cell string) *backend {
	t.Helper()
	b := &backend{cell: cell, release: make(chan struct{})}
	b.srv = httptest.NewServer(b.handler())
	t.Cleanup(func() {
		close(b.release)
		b.srv.CloseClientConnections()
		b.srv.Close()
	})
	return b
}

// handler serves the cell API as a cell does: each answer echoes the
// router's call number (httpx.EchoCall), so the router keeps the
// connections alive between calls.
func (b *backend) handler() http.Handler { return httpx.EchoCall(http.HandlerFunc(b.serve)) }

func (b *backend) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/health" {
		// As a cell: answered unless it hangs, even while its calls fail.
		b.probes.Add(1)
		if b.mode.Load() == modeHang {
			select {
			case <-r.Context().Done():
			case <-b.release:
			}
			return
		}
		if b.unhealthy.Load() {
			http.Error(w, `{"type":"https://cellkit.dev/problems/queue-unavailable"}`, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"status":"ok","cell":%q}`, b.cell)
		return
	}
	b.calls.Add(1)
	if n := b.active.Add(1); n > b.maxActive.Load() {
		b.maxActive.Store(n) // racy max: good enough, tests read it after the calls
	}
	defer b.active.Add(-1)
	body, _ := io.ReadAll(r.Body)
	b.mu.Lock()
	b.last, b.body = r.Clone(context.Background()), body
	b.mu.Unlock()
	if d := time.Duration(b.delay.Load()); d > 0 {
		time.Sleep(d)
	}
	switch b.mode.Load() {
	case modeHang:
		select {
		case <-r.Context().Done():
		case <-b.release:
		}
		return
	case modeFail:
		http.Error(w, "boom", http.StatusInternalServerError)
		return
	case modeShed:
		w.Header().Set("Retry-After", "7")
		w.Header().Set("Cellkit-Overloaded", "true")
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, `{"type":"https://cellkit.dev/problems/overloaded","title":"cell %s is shedding load","status":503}`, b.cell)
		return
	}
	if v, _ := strconv.ParseInt(r.Header.Get("Cellkit-Map-Version"), 10, 64); v < b.minVersion.Load() {
		w.WriteHeader(http.StatusMisdirectedRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Connection", "keep-alive")
	if r.Method == http.MethodPost {
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, `{"id":"%s-0001","cell":%q}`, b.cell, b.cell)
		return
	}
	fmt.Fprintf(w, `{"id":%q,"cell":%q,"status":"pending"}`, strings.TrimPrefix(r.URL.Path, "/v1/inquiries/"), b.cell)
}

// lastRequest returns the last request the backend received and its body.
func (b *backend) lastRequest() (*http.Request, []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last, b.body
}

// world is a router in front of real backends, following a real file
// registry in a temp dir.
type world struct {
	t        *testing.T
	regPath  string
	reg      *registry.File
	follower *registry.Follower
	router   *Router
	url      string
	metrics  *prometheus.Registry
	backends map[string]*backend
	key      string
	client   *http.Client
	logs     *testkit.Buffer
	served   chan error // ListenAndServe's result, with worldOptions.failing
}

type worldOptions struct {
	cells      []string
	cfg        Config
	opts       Options             // Maps, Refresh, Keys, Registerer and Logger are filled in
	rate       float64             // the test client's rate [1e6]
	burst      int                 // and burst [1e6]
	regOpts    registry.FileConfig // of the follower's registry (Path is filled in)
	staleAfter time.Duration
	noRefresh  bool
	intake     map[string]string // cell → an intake URL other than its backend's
	wrapMaps   func(MapSource) MapSource
	failing    bool        // the test makes ListenAndServe fail: its error goes to world.served
	clientTLS  *tls.Config // with opts.TLS: how the test's client verifies the router
}

func newWorld(t *testing.T, o worldOptions) *world {
	t.Helper()
	if len(o.cells) == 0 {
		o.cells = []string{"c1", "c2", "c3", "c4"}
	}
	if o.rate == 0 {
		o.rate, o.burst = 1e6, 1_000_000
	}
	w := &world{t: t, backends: map[string]*backend{}, logs: &testkit.Buffer{}}
	m, err := slotmap.New(1024, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range o.cells {
		b := newBackend(t, id)
		w.backends[id] = b
		intake := b.srv.URL
		if u := o.intake[id]; u != "" {
			intake = u
		}
		m = mustPlan(t)(m.AddCell(slotmap.Cell{ID: id, Weight: 1, Intake: intake, Admin: b.srv.URL}))
	}
	w.regPath = filepath.Join(t.TempDir(), "registry", "map.json")
	o.regOpts.Path = w.regPath
	w.reg, err = registry.NewFile(o.regOpts, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.reg.CompareAndSwap(context.Background(), 0, m); err != nil {
		t.Fatal(err)
	}
	w.metrics = prometheus.NewRegistry()
	log := w.logs.Logger(slog.LevelDebug)
	w.follower, err = registry.NewFollower(registry.FollowerConfig{StaleAfter: o.staleAfter}, registry.FollowerOptions{
		Registry: w.reg, Logger: log, Registerer: prometheus.WrapRegistererWithPrefix("cellkit_router_", w.metrics),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	followerDone := make(chan struct{})
	go func() { defer close(followerDone); w.follower.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-followerDone })
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := w.follower.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}

	w.key = "ck_test-key-" + t.Name()
	keys, err := apikey.Parse([]byte(fmt.Sprintf(`[{"client":"platform-a","key_sha256":%q,"rate":%g,"burst":%d}]`, apikey.Hash(w.key), o.rate, o.burst)))
	if err != nil {
		t.Fatal(err)
	}
	opts := o.opts
	opts.Maps, opts.Keys, opts.Registerer, opts.Logger = w.follower, keys, w.metrics, log
	if o.wrapMaps != nil {
		opts.Maps = o.wrapMaps(w.follower)
	}
	if !o.noRefresh {
		opts.Refresh = w.reg.Load
	}
	w.router, err = New(o.cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	listening := make(chan net.Addr, 1)
	go func() { served <- w.router.ListenAndServe("127.0.0.1:0", func(a net.Addr) { listening <- a }) }()
	var addr net.Addr
	select {
	case addr = <-listening:
	case err := <-served:
		t.Fatalf("ListenAndServe: %v", err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		if err := w.router.Shutdown(sctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if o.failing {
			return
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		w.router.Close()
	})
	if o.failing {
		w.served = served
	}
	w.url = "http://" + addr.String()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	if o.opts.TLS != nil {
		w.url = "https://" + addr.String()
		tr.TLSClientConfig = o.clientTLS
	}
	w.client = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	return w
}

func mustPlan(t *testing.T) func(*slotmap.Plan, error) *slotmap.Map {
	return func(p *slotmap.Plan, err error) *slotmap.Map {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return p.After
	}
}

// publish commits a change to the registry and returns the new map.
func (w *world) publish(change func(m *slotmap.Map) (*slotmap.Plan, error)) *slotmap.Map {
	w.t.Helper()
	cur, err := w.reg.Load(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	next := mustPlan(w.t)(change(cur))
	if err := w.reg.CompareAndSwap(context.Background(), cur.Version(), next); err != nil {
		w.t.Fatal(err)
	}
	return next
}

// userIn returns a user id whose slot the map gives to cell.
func userIn(t *testing.T, m *slotmap.Map, cell string, n int) string {
	t.Helper()
	for i := n; i < n+1_000_000; i++ {
		u := fmt.Sprintf("user-%d", i)
		if m.Lookup(u).Cell == cell {
			return u
		}
	}
	t.Fatalf("no user for cell %s", cell)
	return ""
}

// usersIn returns n distinct users owned by cell.
func usersIn(t *testing.T, m *slotmap.Map, cell string, n int) []string {
	t.Helper()
	var out []string
	for i := 0; len(out) < n && i < 10_000_000; i++ {
		u := fmt.Sprintf("user-%d", i)
		if m.Lookup(u).Cell == cell {
			out = append(out, u)
		}
	}
	return out
}

// answer is a response read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
	took   time.Duration
}

func (a answer) String() string { return fmt.Sprintf("%d %s", a.status, a.body) }

// do sends one request to the router.
func (w *world) do(method, path, body string, header ...string) answer {
	w.t.Helper()
	req, err := http.NewRequest(method, w.url+path, strings.NewReader(body))
	if err != nil {
		w.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("X-API-Key", w.key)
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] == "" {
			req.Header.Del(header[i])
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	start := time.Now()
	resp, err := w.client.Do(req)
	if err != nil {
		w.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		w.t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: b, took: time.Since(start)}
}

// create posts an inquiry for user.
func (w *world) create(user string, header ...string) answer {
	w.t.Helper()
	return w.do("POST", "/v1/inquiries", inquiryBody(user), header...)
}

func inquiryBody(user string) string {
	return `{"user_id":"` + user + `","product":"credit-line","amount":5000000,"priority":"normal"}`
}

// currentMap is the map the router routes with now.
func (w *world) currentMap() *slotmap.Map { return w.router.currentMap() }

// problemOf decodes a problem answer and checks its shape.
func problemOf(t *testing.T, a answer) map[string]any {
	t.Helper()
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q, want application/problem+json (answer %v)", ct, a)
	}
	var p map[string]any
	if err := json.Unmarshal(a.body, &p); err != nil {
		t.Fatalf("problem body %q: %v", a.body, err)
	}
	if int(p["status"].(float64)) != a.status {
		t.Errorf("problem status %v, HTTP status %d", p["status"], a.status)
	}
	if typ, _ := p["type"].(string); !strings.HasPrefix(typ, "https://cellkit.dev/problems/") {
		t.Errorf("problem type %q", typ)
	}
	return p
}

// exposition renders metric families as text lines.
func exposition(mfs []*dto.MetricFamily) []string {
	var b bytes.Buffer
	for _, mf := range mfs {
		expfmt.MetricFamilyToText(&b, mf)
	}
	return strings.Split(b.String(), "\n")
}

// onLoops runs f on each of the router's event loops, on the loop's own
// goroutine (where its state may be read), one after the other.
func (w *world) onLoops(f func(lp *loop)) {
	for _, lp := range w.router.eng.loopList() {
		done := make(chan struct{})
		lp.el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			defer close(done)
			f(lp)
			return nil
		}))
		<-done
	}
}
