package intake

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/natsembed"
	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/problem"
	"github.com/cellkit/cellkit/internal/queue"
	"github.com/cellkit/cellkit/internal/shed"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/store"
	"github.com/cellkit/cellkit/internal/testkit"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// mapRef is the cell's view of the newest map, as the registry follower
// gives it to the intake in a real cell.
type mapRef struct{ p atomic.Pointer[slotmap.Map] }

func (r *mapRef) Get() *slotmap.Map  { return r.p.Load() }
func (r *mapRef) Set(m *slotmap.Map) { r.p.Store(m) }

// env is one embedded NATS server (random loopback port, temp store) shared
// by the cells of a test, with a fake clock and the current cell map.
type env struct {
	t    *testing.T
	srv  *natsembed.Server
	clk  *testkit.Clock
	maps *mapRef
	// nodes, for newClusterEnv, are a JetStream cluster the cells
	// connect to by all of its URLs (srv is its first node), with their
	// store dirs.
	nodes []*natsembed.Server
	dirs  []string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv, err := natsembed.Start(natsembed.Config{Name: "intake-test", StoreDir: t.TempDir(), Port: 0}, natsembed.Options{Logger: testkit.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	u, err := url.Parse(srv.ClientURL())
	if err != nil || u.Port() == "" || u.Port() == "0" {
		t.Fatalf("embedded NATS URL %q", srv.ClientURL())
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		t.Fatalf("embedded NATS listens on %q, want loopback", u.Hostname())
	}
	return &env{t: t, srv: srv, clk: testkit.NewClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)), maps: &mapRef{}}
}

// newClusterEnv is newEnv on a three-node JetStream cluster: the cells
// connect to its first node (srv, which the tests keep up: a connection
// that moves to another node meanwhile is answered 503 at once, not
// waited for), and their streams and records have three replicas when
// cellOpts.queue.Replicas says so.
func newClusterEnv(t *testing.T) *env {
	t.Helper()
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	nodes, err := natsembed.StartCluster(natsembed.ClusterConfig{Name: "intake", Dirs: dirs}, natsembed.Options{Logger: testkit.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, srv: nodes[0], nodes: nodes, dirs: dirs, clk: testkit.NewClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)), maps: &mapRef{}}
	t.Cleanup(func() {
		for _, n := range e.nodes {
			n.Shutdown()
		}
	})
	return e
}

// restartNode starts node i of the cluster again after its Shutdown: the
// same name, store and route port (a clustered server is not restarted in
// process), a new client port.
func (e *env) restartNode(i int) {
	t := e.t
	t.Helper()
	u, err := url.Parse(e.nodes[i].RouteURL())
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	var routes []string
	for _, n := range e.nodes {
		routes = append(routes, n.RouteURL())
	}
	n, err := natsembed.Start(natsembed.Config{Name: fmt.Sprintf("intake-%d", i), StoreDir: e.dirs[i],
		Cluster: natsembed.Cluster{Name: "intake", Port: port, Routes: routes}}, natsembed.Options{Logger: testkit.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	e.nodes[i] = n
}

// cellOpts shape one cell under test. Zero values: cell c1, default
// budgets, the env's map, opened.
type cellOpts struct {
	id     string
	intake Config
	queue  queue.Config
	shed   shed.Config
	cmap   func() *slotmap.Map
	now    func() time.Time // the env's fake clock if nil
	closed bool             // leave the intake as New makes it (closed)
	// tls serves the intake over TLS with a cell certificate of certs,
	// client certificates of its CA required (their role is the
	// handler's to judge); requests are sent with the router's
	// certificate and the handler asks other cells with the cell's.
	tls *celltest.Certs
	// logs, if set, takes the handler's log (else testkit.Logger).
	logs *testkit.Buffer
	// cut, if set, is the dialer of the cell's NATS connection (over TCP),
	// for the test to cut it at a write.
	cut *natsCut
	// storage, if set, is the store's guard the intake watches.
	storage Storage
}

// testCell is one cell's intake wired as internal/cell wires it: its own
// NATS connection, record store, queue, shedder and handler, served over
// HTTP on a loopback httptest server.
type testCell struct {
	id  string
	e   *env
	nc  *nats.Conn
	js  jetstream.JetStream
	st  *store.Store // the records layout's bucket (nil on the ledger)
	q   *queue.Queue
	sh  *shed.Shedder
	h   *Handler
	ts  *httptest.Server
	url string
	// client sends the test's requests (with tls: a router's certificate).
	client *http.Client
}

func (e *env) cell(o cellOpts) *testCell {
	t := e.t
	t.Helper()
	if o.id == "" {
		o.id = "c1"
	}
	if o.cmap == nil {
		o.cmap = e.maps.Get
	}
	ctx := context.Background()
	if o.now == nil {
		o.now = e.clk.Now
	}
	var nc *nats.Conn
	var js jetstream.JetStream
	if o.cut != nil {
		var err error
		if nc, err = nats.Connect(e.srv.ClientURL(), nats.SetCustomDialer(o.cut), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		if js, err = jetstream.New(nc); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(o.cut.heal) // before the connection closes
	} else {
		nc, js = celltest.Connect(t, e.srv, nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	}
	o.queue.Cell = o.id
	q, err := queue.Setup(ctx, js, o.queue)
	if err != nil {
		t.Fatal(err)
	}
	var st *store.Store
	if q.Layout() == queue.LayoutRecords {
		// The bucket the queue keeps records in, for a test to write a
		// record without its message.
		if st, err = store.OpenReplicated(ctx, js, o.id, 0, o.queue.Replicas); err != nil {
			t.Fatal(err)
		}
	}
	sh := shed.New(o.shed, shed.Options{Now: o.now})
	o.intake.Cell = o.id
	logger := testkit.Logger()
	if o.logs != nil {
		logger = o.logs.Logger(slog.LevelDebug)
	}
	opts := Options{Queue: q, Shedder: sh, Map: o.cmap, Logger: logger, Now: o.now, Storage: o.storage}
	if o.tls != nil {
		opts.PeerTLS = clientTLS(t, *o.tls, pki.RoleCell)
	}
	h, err := New(o.intake, opts)
	if err != nil {
		t.Fatal(err)
	}
	settling, stopSettling := context.WithCancel(context.Background())
	settled := make(chan struct{})
	go func() { defer close(settled); h.Settle(settling) }()
	t.Cleanup(func() { stopSettling(); <-settled })
	if !o.closed {
		h.Open()
	}
	ts := httptest.NewUnstartedServer(h) // 127.0.0.1, a free port
	var client *http.Client
	if o.tls != nil {
		srv, err := tlsconf.NewServer(tlsconf.ServerFiles{Cert: o.tls.Cert(pki.RoleCell), Key: o.tls.Key(pki.RoleCell), ClientCA: o.tls.CA()}, tlsconf.Options{What: "test"})
		if err != nil {
			t.Fatal(err)
		}
		ts.TLS = srv.Config()
		ts.StartTLS()
		client = o.tls.TLSClient(t, pki.RoleRouter)
	} else {
		ts.Start()
		client = ts.Client()
	}
	t.Cleanup(func() {
		ts.Close()
		if h.peers != nil {
			h.peers.CloseIdleConnections()
		}
	})
	return &testCell{id: o.id, e: e, nc: nc, js: js, st: st, q: q, sh: sh, h: h, ts: ts, url: ts.URL, client: client}
}

// clientTLS is the client configuration of role's certificate of certs.
func clientTLS(t *testing.T, certs celltest.Certs, role string) *tls.Config {
	t.Helper()
	cl, err := tlsconf.NewClient(tlsconf.ClientFiles{CA: certs.CA(), Cert: certs.Cert(role), Key: certs.Key(role)}, tlsconf.Options{What: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return cl.Config()
}

// testMap builds a map of 64 slots over the given cells (all active). The
// intake URLs come from urls, else a placeholder.
func testMapOf(t *testing.T, urls map[string]string, cells ...string) *slotmap.Map {
	t.Helper()
	m, err := slotmap.New(64, map[string]int{"nice": 80})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range cells {
		in := urls[id]
		if in == "" {
			in = "http://127.0.0.1:1"
		}
		p, err := m.AddCell(slotmap.Cell{ID: id, Weight: 1, Intake: in, Admin: "http://127.0.0.1:2"})
		if err != nil {
			t.Fatal(err)
		}
		m = p.After
	}
	return m
}

// keyID is the id cell makes for an Idempotency-Key of user's without a
// client, in the tests' maps of 64 slots (testMapOf).
func keyID(cell, user, key string) string {
	return inquiry.KeyID(cell, int(slotmap.HashUser(user)%64), "", user, key)
}

// userOf returns the n-th (from 0) user id of the form prefix+number that m
// routes to cell.
func userOf(t *testing.T, m *slotmap.Map, cell, prefix string, n int) string {
	t.Helper()
	for i := 0; i < 100_000; i++ {
		u := fmt.Sprintf("%s%d", prefix, i)
		if m.Lookup(u).Cell == cell {
			if n == 0 {
				return u
			}
			n--
		}
	}
	t.Fatalf("no user %s* routed to %s", prefix, cell)
	return ""
}

// response is one HTTP answer, body read.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) String() string {
	return fmt.Sprintf("%d %v %s", r.status, r.header, r.body)
}

// do sends one request to the cell. body may be nil, a string, []byte, an
// io.Reader (sent as is, chunked unless it is a bytes/strings reader) or
// any other value (sent as JSON). A header given with the value "-" is not
// sent; Content-Type defaults to application/json when there is a body.
func (c *testCell) do(t testing.TB, method, path string, body any, hdr map[string]string) response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	case io.Reader:
		rd = b
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		if v == "-" {
			req.Header.Del(k)
			continue
		}
		req.Header[http.CanonicalHeaderKey(k)] = []string{v}
	}
	resp, err := c.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

func (c *testCell) post(t testing.TB, body any, hdr map[string]string) response {
	t.Helper()
	return c.do(t, http.MethodPost, api.PathInquiries, body, hdr)
}

func (c *testCell) get(t testing.TB, id string) response {
	t.Helper()
	return c.do(t, http.MethodGet, prefixByID+id, nil, nil)
}

// wantProblem checks an RFC 9457 answer to the letter and returns it.
func (c *testCell) wantProblem(t testing.TB, r response, status int, kind, field string) problem.Details {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json: %s", ct, r)
	}
	if r.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("no X-Content-Type-Options: nosniff: %v", r.header)
	}
	if got := r.header.Get(api.HeaderCell); got != c.id {
		t.Errorf("%s %q, want %q", api.HeaderCell, got, c.id)
	}
	var p problem.Details
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("problem body %s: %v", r.body, err)
	}
	want := problem.Details{Type: problem.TypeBase + kind, Title: http.StatusText(status), Status: status, Detail: p.Detail, Field: field}
	if p != want || p.Detail == "" {
		t.Fatalf("problem %+v, want %+v with a detail", p, want)
	}
	return p
}

// wantShed checks a 503 of the intake: the problem, Retry-After (exact, in
// seconds) and Cellkit-Overloaded.
func (c *testCell) wantShed(t testing.TB, r response, kind, retryAfter string) problem.Details {
	t.Helper()
	p := c.wantProblem(t, r, http.StatusServiceUnavailable, kind, "")
	if got := r.header.Get("Retry-After"); got != retryAfter {
		t.Errorf("Retry-After %q, want %q", got, retryAfter)
	}
	want := "true"
	if kind == "queue-unavailable" {
		want = "" // a failure of the instance, for the router to count
	}
	if got := r.header.Get(api.HeaderOverloaded); got != want {
		t.Errorf("%s %q, want %q", api.HeaderOverloaded, got, want)
	}
	return p
}

// wantAccepted checks a 202 to the letter and returns its body.
func (c *testCell) wantAccepted(t testing.TB, r response, status inquiry.Status, replayed bool) Accepted {
	t.Helper()
	if r.status != http.StatusAccepted {
		t.Fatalf("status %d, want 202: %s", r.status, r)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var a Accepted
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		t.Fatalf("202 body %s: %v", r.body, err)
	}
	var raw map[string]any
	if err := json.Unmarshal(r.body, &raw); err != nil || len(raw) != 4 {
		t.Fatalf("202 body %s: want exactly id, cell, status, status_url", r.body)
	}
	if cell, ok := inquiry.CellOf(a.ID); !ok || cell != a.Cell {
		t.Fatalf("202 id %q is not an id of cell %q", a.ID, a.Cell)
	}
	if a.Status != status || a.StatusURL != "/v1/inquiries/"+a.ID {
		t.Fatalf("202 body %+v, want status %q and status_url /v1/inquiries/%s", a, status, a.ID)
	}
	if loc := r.header.Get("Location"); loc != a.StatusURL {
		t.Errorf("Location %q, want %q", loc, a.StatusURL)
	}
	if got, want := r.header.Get("Idempotent-Replayed"), map[bool]string{true: "true"}[replayed]; got != want {
		t.Errorf("Idempotent-Replayed %q, want %q", got, want)
	}
	if got := r.header.Get(api.HeaderCell); got != c.id {
		t.Errorf("%s %q, want %q", api.HeaderCell, got, c.id)
	}
	return a
}

// accept posts req and requires a fresh 202 from this cell.
func (c *testCell) accept(t testing.TB, req any, hdr map[string]string) Accepted {
	t.Helper()
	a := c.wantAccepted(t, c.post(t, req, hdr), inquiry.Pending, false)
	if a.Cell != c.id {
		t.Fatalf("accepted by cell %q, want %q", a.Cell, c.id)
	}
	return a
}

// view GETs an inquiry and requires 200.
func (c *testCell) view(t testing.TB, id string) inquiry.View {
	t.Helper()
	r := c.get(t, id)
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s = %s, want 200 JSON", id, r)
	}
	var v inquiry.View
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("view %s: %v", r.body, err)
	}
	return v
}

// keys lists the record ids in the cell's KV bucket (rolled back ones
// excluded).
func (c *testCell) keys(t testing.TB) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var keys []string
	if c.st != nil {
		kv, err := c.js.KeyValue(ctx, store.Bucket(c.id))
		if err != nil {
			t.Fatal(err)
		}
		keys, err = kv.Keys(ctx)
		if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
			t.Fatal(err)
		}
	}
	// The ledger's inquiries: the last token of its subjects.
	st, err := c.js.Stream(ctx, store.LedgerStream(c.id))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(store.LedgerKindSubjects(c.id, "*")))
	if err != nil {
		t.Fatal(err)
	}
	for subject := range info.State.Subjects {
		if id := subject[strings.LastIndexByte(subject, '.')+1:]; !slices.Contains(keys, id) {
			keys = append(keys, id)
		}
	}
	return keys
}

// stats reads the work stream.
func (c *testCell) stats(t testing.TB) queue.Stats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// wantStored checks the side effects: exactly records records and, per
// lane, exactly the given number of messages in the work stream.
func (c *testCell) wantStored(t testing.TB, records, high, normal int) {
	t.Helper()
	if keys := c.keys(t); len(keys) != records {
		t.Fatalf("%d records %v, want %d", len(keys), keys, records)
	}
	// The lanes' depths are what their consumers report, which follow
	// the stream a moment later.
	var s queue.Stats
	if !testkit.Poll(2*time.Second, func() bool { s = c.stats(t); return s.Depth[inquiry.High] == high && s.Depth[inquiry.Normal] == normal }) {
		t.Fatalf("work stream %+v, want %d high and %d normal", s, high, normal)
	}
	if s.Total != high+normal {
		t.Fatalf("work stream %+v, want %d messages", s, high+normal)
	}
}

// record reads a record from the queue; found is false if there is none.
func (c *testCell) record(t testing.TB, id string) (inquiry.Record, queue.Ref, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec, ref, err := c.q.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return rec, ref, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return rec, ref, true
}

// fetch takes the next delivery of a lane (without acking it), with the
// inquiry and job it names; ok is false if there is none within a short
// wait.
func (c *testCell) fetch(t testing.TB, lane inquiry.Priority) (*queue.Delivery, queue.Message, bool) {
	t.Helper()
	var got []*queue.Delivery
	if !testkit.Poll(500*time.Millisecond, func() bool {
		var err error
		got, err = c.q.Fetch(lane, 1)
		if err != nil {
			t.Fatal(err)
		}
		return len(got) == 1
	}) {
		return nil, queue.Message{}, false
	}
	return got[0], queue.Message{ID: got[0].ID, Job: got[0].Job}, true
}

// request is a valid request body for user.
func request(user string) map[string]any {
	return map[string]any{"user_id": user, "product": "credit_loan", "amount": 5_000_000, "priority": "high"}
}
