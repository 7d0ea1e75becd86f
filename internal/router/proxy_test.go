package router

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/apikey"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/testkit"
)

// TestMisdirectedRefreshesAndRetriesOnce: the follower is too slow to see
// a move (it polls hourly here), the old owner answers 421, and the router
// reads the registry itself and retries once on the new owner.
func TestMisdirectedRefreshesAndRetriesOnce(t *testing.T) {
	w := newWorld(t, worldOptions{
		regOpts: registry.FileConfig{PollInterval: time.Hour},
		cfg:     Config{RefreshInterval: time.Millisecond},
	})
	m1 := w.currentMap()

	t.Run("moved", func(t *testing.T) {
		user := userIn(t, m1, "c1", 0)
		m2 := w.publish(func(m *slotmap.Map) (*slotmap.Plan, error) { return m.SetOverride(user, "c2") })
		w.backends["c1"].minVersion.Store(m2.Version())
		a := w.create(user)
		if a.status != http.StatusAccepted || a.header.Get("Cellkit-Cell") != "c2" {
			t.Fatalf("moved user: %v from %q, want 202 from c2", a, a.header.Get("Cellkit-Cell"))
		}
		if c1, c2 := w.backends["c1"].calls.Load(), w.backends["c2"].calls.Load(); c1 != 1 || c2 != 1 {
			t.Errorf("calls c1 %d, c2 %d; want one each", c1, c2)
		}
		req, body := w.backends["c2"].lastRequest()
		if req.Header.Get("Cellkit-Map-Version") != strconv.FormatInt(m2.Version(), 10) || string(body) != inquiryBody(user) {
			t.Errorf("retry carried map version %s and body %q", req.Header.Get("Cellkit-Map-Version"), body)
		}
		if w.follower.Map().Version() != m1.Version() || w.currentMap().Version() != m2.Version() {
			t.Errorf("follower at %d, router at %d; want the router ahead", w.follower.Map().Version(), w.currentMap().Version())
		}
		// The next request goes straight to the new owner.
		if a := w.create(user); a.header.Get("Cellkit-Cell") != "c2" || w.backends["c1"].calls.Load() != 1 {
			t.Errorf("second request: %v from %q", a, a.header.Get("Cellkit-Cell"))
		}
	})

	t.Run("no newer map", func(t *testing.T) {
		user := userIn(t, m1, "c3", 0)
		w.backends["c3"].minVersion.Store(1 << 40)
		before := w.backends["c3"].calls.Load()
		a := w.create(user)
		if a.status != http.StatusServiceUnavailable || a.header.Get("Cellkit-Cell") != "c3" || a.header.Get("Retry-After") != "1" {
			t.Fatalf("%v %v, want 503 with Retry-After", a, a.header)
		}
		if p := problemOf(t, a); p["type"] != "https://cellkit.dev/problems/map-moving" {
			t.Errorf("type %v", p["type"])
		}
		if n := w.backends["c3"].calls.Load() - before; n != 1 {
			t.Errorf("c3 got %d calls, want 1", n)
		}
		w.backends["c3"].minVersion.Store(0)
	})

	t.Run("retried once only", func(t *testing.T) {
		user := userIn(t, w.currentMap(), "c3", 100)
		m3 := w.publish(func(m *slotmap.Map) (*slotmap.Plan, error) { return m.SetOverride(user, "c4") })
		w.backends["c3"].minVersion.Store(m3.Version())
		w.backends["c4"].minVersion.Store(1 << 40)
		c3, c4 := w.backends["c3"].calls.Load(), w.backends["c4"].calls.Load()
		a := w.create(user)
		if a.status != http.StatusServiceUnavailable || a.header.Get("Cellkit-Cell") != "c4" {
			t.Fatalf("%v from %q, want 503 naming c4", a, a.header.Get("Cellkit-Cell"))
		}
		if d3, d4 := w.backends["c3"].calls.Load()-c3, w.backends["c4"].calls.Load()-c4; d3 != 1 || d4 != 1 {
			t.Errorf("calls c3 +%d, c4 +%d; want one each", d3, d4)
		}
	})
	assertMetric(t, w, `cellkit_router_map_refreshes_total{result="newer"} 2`)
	assertMetric(t, w, `cellkit_router_misdirected_total{cell="c1"} 1`)
}

// TestStaticStability: the registry disappears, the router keeps routing
// with its last good map and says the map is stale; the registry returns
// with a new map, and the router uses it within a second.
func TestStaticStability(t *testing.T) {
	w := newWorld(t, worldOptions{staleAfter: 300 * time.Millisecond, regOpts: registry.FileConfig{PollInterval: 20 * time.Millisecond}})
	m1 := w.currentMap()
	user := userIn(t, m1, "c2", 0)
	admin := httptest.NewServer(w.router.AdminHandler(w.metrics))
	defer admin.Close()
	readyz := func() (int, api.RouterReadiness) {
		t.Helper()
		resp, err := http.Get(admin.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var rd api.RouterReadiness
		b, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(b, &rd); err != nil {
			t.Fatalf("readyz %q: %v", b, err)
		}
		return resp.StatusCode, rd
	}
	age := func() float64 {
		t.Helper()
		mfs, err := w.metrics.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "cellkit_router_map_age_seconds" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no cellkit_router_map_age_seconds")
		return 0
	}

	// The registry goes away.
	dir := filepath.Dir(w.regPath)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "the follower notices", func() bool { return w.follower.Status().LastError != "" })
	testkit.WaitFor(t, 5*time.Second, "the map turns stale", func() bool { return w.follower.Status().Stale })
	a1 := age()
	for range 10 {
		if a := w.create(user); a.status != http.StatusAccepted || a.header.Get("Cellkit-Cell") != "c2" {
			t.Fatalf("registry down: %v, want 202 from c2", a)
		}
	}
	code, rd := readyz()
	if code != 200 || !rd.Ready || !rd.Stale || rd.MapVersion != m1.Version() || rd.LastError == "" {
		t.Errorf("readyz while the registry is down = %d %+v, want ready and stale", code, rd)
	}
	testkit.WaitFor(t, 5*time.Second, "map age grows", func() bool { return age() > a1 })

	// It comes back, with a map that drains c2.
	m2 := mustPlan(t)(m1.Drain("c2"))
	reg, err := registry.NewFile(registry.FileConfig{Path: w.regPath}, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.CompareAndSwap(context.Background(), 0, m2); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	testkit.WaitFor(t, time.Second, "new map in use within 1 s", func() bool { return w.currentMap().Version() == m2.Version() })
	t.Logf("new map in use %v after the registry came back", time.Since(back))
	want := m2.Lookup(user).Cell
	if a := w.create(user); a.status != http.StatusAccepted || a.header.Get("Cellkit-Cell") != want || want == "c2" {
		t.Errorf("after the drain: %v from %q, want %q", a, a.header.Get("Cellkit-Cell"), want)
	}
	// Reads of c2's inquiries still reach it: results stay readable.
	if a := w.do("GET", "/v1/inquiries/c2-0001", ""); a.status != http.StatusOK || a.header.Get("Cellkit-Cell") != "c2" {
		t.Errorf("read from the draining cell: %v", a)
	}
	testkit.WaitFor(t, 5*time.Second, "fresh again", func() bool { _, rd := readyz(); return !rd.Stale })
}

// TestNoMapIs503: before any map the router refuses with a
// problem rather than guessing (the program waits for the map before it
// listens, so this is the library's guard).
func TestNoMapIs503(t *testing.T) {
	keys, _ := apikey.Parse([]byte(`[{"client":"a","key_sha256":"` + apikey.Hash("k") + `","rate":10,"burst":10}]`))
	r, err := New(Config{}, Options{Maps: emptySource{}, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	if r.table() != nil {
		t.Fatal("table without a map")
	}
	if rd := r.Readiness(); rd.Ready {
		t.Errorf("ready without a map: %+v", rd)
	}
}

type emptySource struct{}

func (emptySource) Map() *slotmap.Map               { return nil }
func (emptySource) Status() registry.FollowerStatus { return registry.FollowerStatus{Stale: true} }

// TestTableIsBuiltOffTheLoops: a new map's routing table is built as soon
// as the follower has the map, before any request needs it.
func TestTableIsBuiltOffTheLoops(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1", "c2"}})
	if a := w.create("u1"); a.status != 202 {
		t.Fatalf("before: %v", a)
	}
	next := w.publish(func(m *slotmap.Map) (*slotmap.Plan, error) { return m.SetWeight("c2", 3) })
	testkit.WaitFor(t, 10*time.Second, "the table of the new map, with no request", func() bool {
		tb := w.router.tbl.Load()
		return tb != nil && tb.m.Version() == next.Version()
	})
}

// TestCellBytesOutsideACallAnswerNobody: bytes a cell sends on a
// kept-alive connection that no call on it asked for (a second answer to
// one request, the late answer to a call the router answered 504, more
// than an answer's framing holds, the answer to a client that left) end
// that connection: they never become the answer to another client's
// request. The cell names each request's X-Request-Id in its answer, and
// every client must get its own. A cell that does not echo the call's
// number has each call on a connection of its own, so its late bytes
// find the connection closed.
func TestCellBytesOutsideACallAnswerNobody(t *testing.T) {
	for _, echo := range []bool{false, true} {
		t.Run(map[bool]string{false: "a cell that does not echo the call", true: "a cell that echoes the call"}[echo], func(t *testing.T) {
			cellBytesOutsideACall(t, echo)
		})
	}
}

// cellBytesOutsideACall runs the cases of TestCellBytesOutsideACallAnswerNobody
// with a cell that echoes each call's number, or one that does not.
func cellBytesOutsideACall(t *testing.T, echo bool) {
	// answer names the call (Cellkit-Call) when the cell echoes.
	answer := func(what, id, call string) string {
		if !echo {
			call = ""
		}
		return textAnswer(what+" "+id, call)
	}
	own := func(_ int, req *http.Request, _ []byte) string {
		return answer("answer to", req.Header.Get("X-Request-Id"), req.Header.Get("Cellkit-Call"))
	}
	// No health checks: the cell's connections are the calls'.
	cfg := Config{Cell: CellLimits{ProbeInterval: -1}}
	start := func(t *testing.T, f *fakeCell, cfg Config) *world {
		return newWorld(t, worldOptions{cells: []string{"c1"}, intake: map[string]string{"c1": f.url()}, cfg: cfg})
	}
	wantOwn := func(t *testing.T, w *world, ids ...string) {
		t.Helper()
		for _, id := range ids {
			if a := w.do("GET", "/v1/inquiries/c1-abc", "", "X-Request-Id", id); a.status != 200 || string(a.body) != "answer to "+id {
				t.Errorf("request %s got %v, want its own answer", id, a)
			}
		}
	}
	rawGet := func(w *world, id string) string {
		return "GET /v1/inquiries/c1-abc HTTP/1.1\r\nHost: x\r\nX-API-Key: " + w.key + "\r\nX-Request-Id: " + id + "\r\n\r\n"
	}
	// strayDone waits until the cell has written its stray bytes, or, when
	// it does not echo, until it has seen the router close the connection
	// they were for (the bytes then go nowhere).
	strayDone := func(t *testing.T, f *fakeCell) {
		t.Helper()
		testkit.WaitFor(t, 5*time.Second, "the stray answer written, or its connection closed", func() bool {
			return f.strays.Load() == 1 || !echo && f.ended.Load() >= 1
		})
	}
	// conns is how many connections the cell sees for calls calls, one of
	// which sent bytes nobody asked for (closed), when it echoes: one more
	// for the others; when it does not, one for each.
	conns := func(calls int64) int64 {
		if echo {
			return 2
		}
		return calls
	}
	wantOwnRaw := func(t *testing.T, rc *rawConn, id string) {
		t.Helper()
		if resp, body := rc.read("GET"); resp.StatusCode != 200 || body != "answer to "+id {
			t.Errorf("request %s got %d %q, want its own answer", id, resp.StatusCode, body)
		}
	}

	t.Run("a second answer 300 ms after the first", func(t *testing.T) {
		f := newFakeCell(t, own, func(n int) string {
			if n != 1 {
				return ""
			}
			time.Sleep(300 * time.Millisecond) // the cell's own pace
			return answer("stray after", "r0", "1")
		})
		w := start(t, f, cfg)
		wantOwn(t, w, "r0")
		strayDone(t, f)
		wantOwn(t, w, "r1", "r2", "r3")
		if n := f.conns.Load(); n != conns(4) {
			t.Errorf("the cell saw %d connections, want %d", n, conns(4))
		}
	})

	t.Run("a second answer the loop has not read yet", func(t *testing.T) {
		strayNow := make(chan struct{})
		f := newFakeCell(t, own, func(n int) string {
			if n != 1 {
				return ""
			}
			select {
			case <-strayNow:
				return answer("stray after", "r0", "1")
			case <-time.After(5 * time.Second):
				return ""
			}
		})
		w := start(t, f, cfg)
		rc := w.dial()
		rc.send(rawGet(w, "r0"))
		wantOwnRaw(t, rc, "r0")
		// The loops stop; the next request arrives on the same client
		// connection (its loop holds r0's connection to the cell), then the
		// stray answer on that connection. When the loop runs again it
		// reads the request first, before it has heard of the stray bytes.
		unblock := make(chan struct{})
		var once sync.Once
		resume := func() { once.Do(func() { close(unblock) }) }
		defer resume()
		var stopped sync.WaitGroup
		for _, lp := range w.router.eng.loopList() {
			stopped.Add(1)
			lp.el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
				stopped.Done()
				<-unblock
				return nil
			}))
		}
		stopped.Wait()
		rc.send(rawGet(w, "r1"))
		close(strayNow)
		strayDone(t, f)
		resume()
		wantOwnRaw(t, rc, "r1")
		wantOwn(t, w, "r2")
	})

	t.Run("a late answer after the router's 504", func(t *testing.T) {
		timedOut, next := make(chan struct{}), make(chan struct{})
		var once sync.Once
		f := newFakeCell(t, func(n int, req *http.Request, body []byte) string {
			if n > 1 {
				once.Do(func() { close(next) })
				return own(n, req, body)
			}
			// Once the router has given up on it, and the next request is
			// on its way: on this connection, were it reused, it would be
			// waiting for its answer.
			select {
			case <-timedOut:
			case <-time.After(5 * time.Second):
			}
			select {
			case <-next:
			case <-time.After(150 * time.Millisecond):
			}
			return answer("late answer to", req.Header.Get("X-Request-Id"), req.Header.Get("Cellkit-Call"))
		})
		w := start(t, f, Config{Cell: CellLimits{ProbeInterval: -1, Timeout: 500 * time.Millisecond}})
		if a := w.do("GET", "/v1/inquiries/c1-abc", "", "X-Request-Id", "r0"); a.status != 504 {
			t.Fatalf("r0: %v, want 504", a)
		}
		close(timedOut)
		wantOwn(t, w, "r1", "r2")
	})

	for _, tc := range []struct{ name, framing string }{
		{"more than a Content-Length answer holds", ""},
		{"more than a chunked answer holds", "chunked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeCell(t, func(n int, req *http.Request, body []byte) string {
				a := own(n, req, body)
				if tc.framing == "chunked" {
					id := req.Header.Get("X-Request-Id")
					call := ""
					if echo {
						call = "Cellkit-Call: " + req.Header.Get("Cellkit-Call") + "\r\n"
					}
					a = fmt.Sprintf("HTTP/1.1 200 OK\r\n%sTransfer-Encoding: chunked\r\n\r\n%x\r\nanswer to %s\r\n0\r\n\r\n", call, len("answer to "+id), id)
				}
				if n == 1 {
					a += answer("stray after", "r0", "1") // in the same write
				}
				return a
			})
			w := start(t, f, cfg)
			wantOwn(t, w, "r0", "r1", "r2")
			if n := f.conns.Load(); n != conns(3) {
				t.Errorf("the cell saw %d connections, want %d", n, conns(3))
			}
		})
	}

	t.Run("the answer to a client that left", func(t *testing.T) {
		answerNow := make(chan struct{})
		f := newFakeCell(t, func(n int, req *http.Request, body []byte) string {
			if n == 1 {
				select {
				case <-answerNow:
				case <-time.After(5 * time.Second):
				}
			}
			return own(n, req, body)
		})
		w := start(t, f, cfg)
		rc := w.dial()
		rc.send(rawGet(w, "r0"))
		testkit.WaitFor(t, 5*time.Second, "r0 at the cell", func() bool { return f.count.Load() == 1 })
		// Gone at once (a reset): a client that only ends its side still
		// gets its answer.
		if err := rc.c.(*net.TCPConn).SetLinger(0); err != nil {
			t.Fatal(err)
		}
		rc.c.Close()
		testkit.WaitFor(t, 5*time.Second, "the router to see its client leave", func() bool { return w.router.eng.conns.Load() == 0 })
		close(answerNow)
		// The answer is read and dropped, and the connection closed, not
		// kept for another client.
		testkit.WaitFor(t, 5*time.Second, "no connection to the cell left", func() bool { return cellConns(w) == 0 })
		wantOwn(t, w, "r1", "r2")
	})
}

// TestALateAnswerGoesToNoOtherRequest: behind the router, an HTTP/1.1
// server that does not echo the call's number (here a proxy in front of
// a cell, written raw) answers one request twice: at once for itself
// (504: the cell was slow), and later with the cell's own answer, when
// its next request on the connection arrives. Each request must get its
// own answer: the late one goes to nobody, and no request gets bytes sent
// for another.
func TestALateAnswerGoesToNoOtherRequest(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	plain := func(status, body string) string {
		return "HTTP/1.1 " + status + "\r\nContent-Type: text/plain\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				br := bufio.NewReader(c)
				var late string // the cell's answer to an earlier request, not yet written
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					id := req.Header.Get("X-Request-Id")
					if id == "r0" {
						late = plain("200 OK", "answer to r0")
						if _, err := io.WriteString(c, plain("504 Gateway Timeout", "the cell was slow")); err != nil {
							return
						}
						continue
					}
					if late != "" {
						if _, err := io.WriteString(c, late); err != nil {
							return
						}
						late = ""
						time.Sleep(50 * time.Millisecond) // its own answer in a read of its own
					}
					if _, err := io.WriteString(c, plain("200 OK", "answer to "+id)); err != nil {
						return
					}
				}
			})
		}
	})
	w := newWorld(t, worldOptions{cells: []string{"c1"}, intake: map[string]string{"c1": "http://" + ln.Addr().String()},
		cfg: Config{Cell: CellLimits{ProbeInterval: -1}}})
	// One client connection: its requests are served by one loop, which
	// has one pool of connections to the cell.
	rc := w.dial()
	for i, id := range []string{"r0", "r1", "r2", "r3"} {
		rc.send("GET /v1/inquiries/c1-abc HTTP/1.1\r\nHost: x\r\nX-API-Key: " + w.key + "\r\nX-Request-Id: " + id + "\r\n\r\n")
		resp, body := rc.read("GET")
		switch {
		case i == 0 && (resp.StatusCode != 504 || body != "the cell was slow"):
			t.Errorf("%s got %d %q, want the 504 answered for it", id, resp.StatusCode, body)
		case i > 0 && (resp.StatusCode != 200 || body != "answer to "+id):
			t.Errorf("%s got %d %q, want its own answer", id, resp.StatusCode, body)
		}
	}
}

// TestALateAnswerFromNetHTTPGoesToNobody: a net/http server (no echo)
// answers a request after the router gave up on it (504): its answer
// reaches nobody, and the next requests get their own.
func TestALateAnswerFromNetHTTPGoesToNobody(t *testing.T) {
	gaveUp := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if id == "r0" {
			select { // answered once the router has answered 504
			case <-gaveUp:
			case <-time.After(5 * time.Second):
			}
		}
		_, _ = io.WriteString(w, "answer to "+id)
	}))
	t.Cleanup(srv.Close)
	w := newWorld(t, worldOptions{cells: []string{"c1"}, intake: map[string]string{"c1": srv.URL},
		cfg: Config{Cell: CellLimits{ProbeInterval: -1, Timeout: 300 * time.Millisecond}}})
	rc := w.dial()
	for i, id := range []string{"r0", "r1", "r2"} {
		rc.send("GET /v1/inquiries/c1-abc HTTP/1.1\r\nHost: x\r\nX-API-Key: " + w.key + "\r\nX-Request-Id: " + id + "\r\n\r\n")
		resp, body := rc.read("GET")
		switch {
		case i == 0 && resp.StatusCode != 504:
			t.Errorf("%s got %d %q, want 504", id, resp.StatusCode, body)
		case i > 0 && (resp.StatusCode != 200 || body != "answer to "+id):
			t.Errorf("%s got %d %q, want its own answer", id, resp.StatusCode, body)
		}
		if i == 0 {
			close(gaveUp)
		}
	}
}

// cellConns counts the connections to cells the router's loops hold.
func cellConns(w *world) int {
	n := 0
	w.onLoops(func(lp *loop) {
		for _, p := range lp.pools {
			n += p.open
		}
	})
	return n
}

// TestACellThatEchoesIsNotAskedBeforeEachCall: a connection whose cell
// echoes each call's number (Cellkit-Call) is looked at in the kernel for
// unasked bytes once, not before every call; one that does not echo,
// before every call.
// An answer naming another call, or none once the cell has echoed, fails
// its call: it is never passed off as the call's answer.
func TestACellThatEchoesIsNotAskedBeforeEachCall(t *testing.T) {
	const calls = 20
	reply := func(echo bool, call, id string) string {
		if !echo {
			call = ""
		}
		return textAnswer("answer to "+id, call)
	}
	run := func(t *testing.T, echo bool) (peeks float64, conns int64) {
		f := newFakeCell(t, func(_ int, req *http.Request, _ []byte) string {
			return reply(echo, req.Header.Get("Cellkit-Call"), req.Header.Get("X-Request-Id"))
		})
		w := newWorld(t, worldOptions{cells: []string{"c1"}, intake: map[string]string{"c1": f.url()},
			cfg: Config{Cell: CellLimits{ProbeInterval: -1}}})
		for i := range calls {
			id := "r" + strconv.Itoa(i)
			if a := w.do("GET", "/v1/inquiries/c1-abc", "", "X-Request-Id", id); a.status != 200 || string(a.body) != "answer to "+id {
				t.Fatalf("%s: %v", id, a)
			}
		}
		return testutil.ToFloat64(w.router.metrics.peeks), f.conns.Load()
	}
	if peeks, conns := run(t, true); peeks > float64(2*conns) || conns > 2 {
		t.Errorf("a cell that echoes: %v peeks on %d connections for %d calls, want at most 2 per connection", peeks, conns, calls)
	}
	if peeks, _ := run(t, false); peeks < calls {
		t.Errorf("a cell that does not echo: %v peeks for %d calls, want one per call at least", peeks, calls)
	}

	// The 3rd answer names a call never sent; the 5th names none, from a
	// cell that echoed before: both calls fail, the others get their own.
	f := newFakeCell(t, func(n int, req *http.Request, _ []byte) string {
		switch n {
		case 3:
			return reply(true, "99", req.Header.Get("X-Request-Id"))
		case 5:
			return reply(false, "", req.Header.Get("X-Request-Id"))
		}
		return reply(true, req.Header.Get("Cellkit-Call"), req.Header.Get("X-Request-Id"))
	})
	w := newWorld(t, worldOptions{cells: []string{"c1"}, intake: map[string]string{"c1": f.url()},
		cfg: Config{Cell: CellLimits{ProbeInterval: -1}}})
	for i := 1; i <= 6; i++ {
		id := "r" + strconv.Itoa(i)
		a := w.do("POST", "/v1/inquiries", `{"user_id":"u1"}`, "X-Request-Id", id)
		switch {
		case i == 3 || i == 5:
			if a.status < 500 || strings.Contains(string(a.body), "answer to") {
				t.Errorf("call %d, whose answer is not its own: %v, want a failure", i, a)
			}
		case a.status != 200 || string(a.body) != "answer to "+id:
			t.Errorf("call %d: %v, want its own answer", i, a)
		}
	}
}

// textAnswer is a cell's 200 with a text body, naming call in Cellkit-Call
// unless call is empty (a cell that does not echo).
func textAnswer(body, call string) string {
	head := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
	if call != "" {
		head += "Cellkit-Call: " + call + "\r\n"
	}
	return head + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}
