package router

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/problem"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/testkit"
)

func TestRoutesCreateByUserAndReadByInquiryID(t *testing.T) {
	w := newWorld(t, worldOptions{})
	m := w.currentMap()
	for _, cell := range []string{"c1", "c2", "c3", "c4"} {
		t.Run(cell, func(t *testing.T) {
			user := userIn(t, m, cell, 0)
			body := inquiryBody(user)
			a := w.do("POST", "/v1/inquiries", body, "X-Request-Id", "req-"+cell, "Forwarded", "for=6.6.6.6", "X-Forwarded-For", "6.6.6.6",
				"Cellkit-Slot", "99999", "Cellkit-Client", "someone-else", "Upgrade", "websocket", "Te", "trailers")
			if a.status != http.StatusAccepted {
				t.Fatalf("POST for %s = %v, want 202", user, a)
			}
			if got := a.header.Get("Cellkit-Cell"); got != cell {
				t.Errorf("Cellkit-Cell = %q, want %q", got, cell)
			}
			if got := a.header.Get("X-Request-Id"); got != "req-"+cell {
				t.Errorf("X-Request-Id = %q, want the client's", got)
			}
			if a.header.Get("X-RateLimit-Limit") == "" || a.header.Get("X-RateLimit-Remaining") == "" {
				t.Errorf("no X-RateLimit headers: %v", a.header)
			}
			req, got := w.backends[cell].lastRequest()
			if string(got) != body {
				t.Errorf("cell got body %q, want %q unchanged", got, body)
			}
			h := req.Header
			for name, want := range map[string]string{
				"Cellkit-Map-Version": strconv.FormatInt(m.Version(), 10),
				"Cellkit-Slot":        strconv.Itoa(m.SlotOf(user)),
				"X-Request-Id":        "req-" + cell,
				"X-Forwarded-For":     "127.0.0.1",
				"X-Forwarded-Proto":   "http",
				"Cellkit-Client":      "platform-a",
				"X-Api-Key":           "",
				"Upgrade":             "",
				"Te":                  "",
				"Content-Type":        "application/json",
			} {
				if h.Get(name) != want {
					t.Errorf("cell got %s = %q, want %q", name, h.Get(name), want)
				}
			}
			if len(h.Values("Cellkit-Slot")) != 1 || len(h.Values("X-Forwarded-For")) != 1 || len(h.Values("Forwarded")) != 1 {
				t.Errorf("cell got repeated router headers: %v", h)
			}
			if fwd := h.Get("Forwarded"); !strings.HasPrefix(fwd, "for=127.0.0.1;host=") || !strings.HasSuffix(fwd, ";proto=http") {
				t.Errorf("cell got Forwarded = %q", fwd)
			}
			if req.Host != strings.TrimPrefix(w.backends[cell].srv.URL, "http://") {
				t.Errorf("cell got Host %q", req.Host)
			}

			id := cell + "-01JDZZ5Q0RC7X3"
			a = w.do("GET", "/v1/inquiries/"+id+"?verbose=1", "")
			if a.status != http.StatusOK || a.header.Get("Cellkit-Cell") != cell {
				t.Fatalf("GET %s = %v (Cellkit-Cell %q), want 200 from %s", id, a, a.header.Get("Cellkit-Cell"), cell)
			}
			req, _ = w.backends[cell].lastRequest()
			if req.URL.RequestURI() != "/v1/inquiries/"+id+"?verbose=1" || req.Header.Get("Cellkit-Slot") != "" {
				t.Errorf("cell got %s with Cellkit-Slot %q", req.URL.RequestURI(), req.Header.Get("Cellkit-Slot"))
			}
		})
	}
}

func TestRouterMakesRequestIDs(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}})
	seen := map[string]bool{}
	for range 3 {
		a := w.create("u1", "X-Request-Id", "bad id with spaces")
		rid := a.header.Get("X-Request-Id")
		req, _ := w.backends["c1"].lastRequest()
		if rid == "" || req.Header.Get("X-Request-Id") != rid || seen[rid] {
			t.Fatalf("X-Request-Id answer %q, cell got %q, seen before %v", rid, req.Header.Get("X-Request-Id"), seen[rid])
		}
		seen[rid] = true
	}
}

func TestOverridePinsUser(t *testing.T) {
	w := newWorld(t, worldOptions{})
	m := w.currentMap()
	user := userIn(t, m, "c1", 0)
	next := w.publish(func(m *slotmap.Map) (*slotmap.Plan, error) { return m.SetOverride(user, "c3") })
	testkit.WaitFor(t, time.Second, "new map in use", func() bool { return w.currentMap().Version() == next.Version() })
	if a := w.create(user); a.header.Get("Cellkit-Cell") != "c3" {
		t.Fatalf("pinned user went to %q (%v), want c3", a.header.Get("Cellkit-Cell"), a)
	}
}

// TestAnswers is the table of every answer the router gives by itself: the
// status, the problem type, and which headers come with it.
func TestAnswers(t *testing.T) {
	w := newWorld(t, worldOptions{})
	m := w.currentMap()
	user := userIn(t, m, "c2", 0)
	for _, tc := range []struct {
		name, method, path, body string
		header                   []string
		status                   int
		kind                     string
		field                    string
		rateHeaders              bool
		cell                     string
		allow                    string
	}{
		{name: "missing key", method: "POST", path: "/v1/inquiries", body: inquiryBody(user), header: []string{"X-API-Key", ""},
			status: 401, kind: "missing-api-key"},
		{name: "unknown key", method: "POST", path: "/v1/inquiries", body: inquiryBody(user), header: []string{"X-API-Key", "ck_nope"},
			status: 403, kind: "unknown-api-key"},
		{name: "huge key", method: "POST", path: "/v1/inquiries", body: inquiryBody(user), header: []string{"X-API-Key", strings.Repeat("k", 300)},
			status: 403, kind: "unknown-api-key"},
		{name: "unknown path", method: "GET", path: "/v1/other", status: 404, kind: "not-found", rateHeaders: true},
		{name: "root", method: "GET", path: "/", status: 404, kind: "not-found", rateHeaders: true},
		{name: "wrong method on create", method: "GET", path: "/v1/inquiries", status: 405, kind: "method-not-allowed", rateHeaders: true, allow: "POST"},
		{name: "wrong method on read", method: "DELETE", path: "/v1/inquiries/c1-abc", status: 405, kind: "method-not-allowed", rateHeaders: true, allow: "GET, HEAD"},
		{name: "id without cell", method: "GET", path: "/v1/inquiries/abc", status: 404, kind: "unknown-inquiry", rateHeaders: true},
		{name: "id of unknown cell", method: "GET", path: "/v1/inquiries/c9-abc", status: 404, kind: "unknown-inquiry", rateHeaders: true},
		{name: "no body", method: "POST", path: "/v1/inquiries", status: 400, kind: "invalid-field", field: "user_id", rateHeaders: true},
		{name: "not json", method: "POST", path: "/v1/inquiries", body: "user_id=u1", status: 400, kind: "invalid-field", field: "user_id", rateHeaders: true},
		{name: "no user", method: "POST", path: "/v1/inquiries", body: `{"amount":1}`, status: 400, kind: "invalid-field", field: "user_id", rateHeaders: true},
		{name: "bad user", method: "POST", path: "/v1/inquiries", body: `{"user_id":"a/b"}`, status: 400, kind: "invalid-field", field: "user_id", rateHeaders: true},
		{name: "body too large", method: "POST", path: "/v1/inquiries", body: `{"user_id":"u1","pad":"` + strings.Repeat("x", 64<<10) + `"}`,
			status: 413, kind: "body-too-large"},
		{name: "header too large", method: "POST", path: "/v1/inquiries", body: inquiryBody(user), header: []string{"X-Padding", strings.Repeat("p", 9<<10)},
			status: 431, kind: "header-too-large"},
		{name: "ok", method: "POST", path: "/v1/inquiries", body: inquiryBody(user), status: 202, rateHeaders: true, cell: "c2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := w.do(tc.method, tc.path, tc.body, tc.header...)
			if a.status != tc.status {
				t.Fatalf("%s %s = %v, want %d", tc.method, tc.path, a, tc.status)
			}
			if tc.kind != "" {
				p := problemOf(t, a)
				if p["type"] != problem.TypeBase+tc.kind {
					t.Errorf("type = %v, want %s", p["type"], problem.TypeBase+tc.kind)
				}
				if f, _ := p["field"].(string); f != tc.field {
					t.Errorf("field = %q, want %q", f, tc.field)
				}
			}
			if got := a.header.Get("X-RateLimit-Remaining") != ""; got != tc.rateHeaders {
				t.Errorf("X-RateLimit-Remaining present = %v, want %v", got, tc.rateHeaders)
			}
			if got := a.header.Get("Cellkit-Cell"); got != tc.cell {
				t.Errorf("Cellkit-Cell = %q, want %q", got, tc.cell)
			}
			if got := a.header.Get("Allow"); got != tc.allow {
				t.Errorf("Allow = %q, want %q", got, tc.allow)
			}
			if a.header.Get("X-Request-Id") == "" {
				t.Error("no X-Request-Id")
			}
		})
	}
}

// TestProblemBytesMatchProblemPackage: the router's pre-marshalled answers
// are byte for byte what internal/problem writes for net/http.
func TestProblemBytesMatchProblemPackage(t *testing.T) {
	d := problem.New(http.StatusBadRequest, problem.InvalidField, "x").WithField("user_id")
	rec := httptest.NewRecorder()
	problem.WriteRetry(rec, d, 1500*time.Millisecond)
	p := newProb(d)
	if string(p.body) != rec.Body.String() {
		t.Errorf("body %q, problem.Write %q", p.body, rec.Body.String())
	}
	lp := &loop{e: &engine{}}
	cl := &client{}
	raw := lp.problemAnswer(nil, cl, &p, 1500*time.Millisecond, nil)
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
	if err != nil {
		t.Fatalf("%q: %v", raw, err)
	}
	body, _ := io.ReadAll(resp.Body)
	if string(body) != rec.Body.String() {
		t.Errorf("answer body %q, problem.Write %q", body, rec.Body.String())
	}
	for _, h := range []string{"Content-Type", "X-Content-Type-Options", "Retry-After"} {
		if got := resp.Header.Get(h); got != rec.Header().Get(h) {
			t.Errorf("%s = %q, problem.WriteRetry %q", h, got, rec.Header().Get(h))
		}
	}
	if resp.StatusCode != rec.Code {
		t.Errorf("status %d, want %d", resp.StatusCode, rec.Code)
	}
}

func TestSlowlorisIsCutAfterReadHeaderTimeout(t *testing.T) {
	const headerTimeout = 300 * time.Millisecond
	w := newWorld(t, worldOptions{cells: []string{"c1"}, cfg: Config{Server: ServerLimits{ReadHeaderTimeout: headerTimeout}}})
	conn, err := net.Dial("tcp", strings.TrimPrefix(w.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	closed := make(chan time.Duration, 1)
	go func() {
		io.Copy(io.Discard, conn) // returns when the router closes the connection
		closed <- time.Since(start)
	}()
	req := "POST /v1/inquiries HTTP/1.1\r\nHost: x\r\nX-API-Key: " + w.key + "\r\nX-Padding: " + strings.Repeat("a", 200) + "\r\n\r\n"
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for i := 0; i < len(req); i++ {
		select {
		case took := <-closed:
			if took < headerTimeout*8/10 || took > 5*headerTimeout {
				t.Fatalf("connection cut after %v, want about %v", took, headerTimeout)
			}
			return
		case <-tick.C:
		}
		if _, err := conn.Write([]byte{req[i]}); err != nil {
			took := time.Since(start)
			if took < headerTimeout*8/10 || took > 5*headerTimeout {
				t.Fatalf("connection cut after %v, want about %v", took, headerTimeout)
			}
			return
		}
	}
	t.Fatalf("the whole header went through in %v; the slow client was not cut", time.Since(start))
}

func TestKeepAliveAndPipelinedClientsWork(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}})
	conn, err := net.Dial("tcp", strings.TrimPrefix(w.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := inquiryBody("u1")
	one := "POST /v1/inquiries HTTP/1.1\r\nHost: x\r\nX-API-Key: " + w.key + "\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	if _, err := conn.Write([]byte(one + one + strings.Replace(one, "Host: x", "Host: x\r\nConnection: close", 1))); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	for i := range 3 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 202 || resp.Header.Get("Cellkit-Cell") != "c1" {
			t.Fatalf("response %d: %d %v", i, resp.StatusCode, resp.Header)
		}
		if i == 2 && !resp.Close {
			t.Errorf("the client asked to close; the answer should say Connection: close")
		}
	}
}

func TestAdminEndpoints(t *testing.T) {
	w := newWorld(t, worldOptions{})
	m := w.currentMap()
	heavy := userIn(t, m, "c3", 0)
	for i := range 30 {
		w.create(heavy)
		if i%3 == 0 {
			w.create(userIn(t, m, "c1", i+100))
		}
	}
	admin := httptest.NewServer(w.router.AdminHandler(w.metrics))
	defer admin.Close()
	get := func(path string, v any) int {
		t.Helper()
		resp, err := http.Get(admin.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if v != nil {
			if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
		}
		return resp.StatusCode
	}
	var hk api.HotKeys
	if code := get("/v1/admin/hotkeys?n=1", &hk); code != 200 || len(hk.Users) != 1 {
		t.Fatalf("hotkeys: %d %+v", code, hk)
	}
	if u := hk.Users[0]; u.UserID != heavy || u.Count != 30 || u.Cell != "c3" || hk.Total != 40 {
		t.Errorf("hotkeys top = %+v (total %d), want %s with 30 of 40 on c3", u, hk.Total, heavy)
	}
	if code := get("/v1/admin/hotkeys?n=0", nil); code != 400 {
		t.Errorf("hotkeys?n=0 = %d, want 400", code)
	}
	// Per-slot rates: the heavy user's slot carries three times the others'
	// together, and every routed request is counted.
	var sr api.SlotRates
	if code := get("/v1/admin/slots", &sr); code != 200 || sr.Slots != m.Slots() || sr.Version != m.Version() || len(sr.Rates) < 2 {
		t.Fatalf("slots: %d %+v, want the slots used of %d", code, sr, m.Slots())
	}
	heavyRate, sum := 0.0, 0.0
	for _, r := range sr.Rates {
		sum += r[1]
		if int(r[0]) == m.SlotOf(heavy) {
			heavyRate = r[1]
		}
	}
	if heavyRate < 2.9*(sum-heavyRate) || heavyRate > 3.1*(sum-heavyRate) || sum < sr.Total*0.999 || sum > sr.Total*1.001 {
		t.Errorf("slot rates %v (total %v): want the heavy user's slot at 3 × the rest", sr.Rates, sr.Total)
	}
	var rd api.RouterReadiness
	if code := get("/readyz", &rd); code != 200 || !rd.Ready || rd.MapVersion != m.Version() || rd.Stale {
		t.Errorf("readyz = %d %+v", code, rd)
	}
	if code := get("/healthz", nil); code != 200 {
		t.Errorf("healthz = %d", code)
	}
	var cells []api.RouterCell
	if code := get("/v1/admin/cells", &cells); code != 200 || len(cells) != 4 || cells[0].Breaker != "closed" {
		t.Errorf("cells = %d %+v", code, cells)
	}
	resp, err := http.Get(admin.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`cellkit_router_requests_total{cell="c3",code="202"} 30`,
		`cellkit_router_request_duration_seconds_count{cell="c3"} 30`,
		`cellkit_router_breaker_state{cell="c1"} 0`,
		`cellkit_router_in_flight{cell="c2"} 0`,
		`cellkit_router_bulkhead_limit{cell="c2"} 1024`,
		`cellkit_router_map_version ` + strconv.FormatInt(m.Version(), 10),
		`cellkit_router_map_age_seconds`,
	} {
		if !strings.Contains(string(text), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestABusyLoopSweepsWithoutBeingWoken: a loop serving traffic sweeps its
// deadlines in its own callbacks, and the tick wakes only loops quiet for
// a tick (a wake-up from outside is an eventfd write and an epoll return
// on the loop).
func TestABusyLoopSweepsWithoutBeingWoken(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}, cfg: Config{Cell: CellLimits{ProbeInterval: -1}}})
	type sweeps struct{ woken, inline int64 }
	read := func() map[*loop]sweeps {
		got := map[*loop]sweeps{}
		w.onLoops(func(lp *loop) { got[lp] = sweeps{lp.woken, lp.inline} })
		return got
	}
	if a := w.create("u1"); a.status != 202 {
		t.Fatalf("first request: %v", a)
	}
	before := read()
	for end := time.Now().Add(400 * time.Millisecond); time.Now().Before(end); {
		if a := w.create("u1"); a.status != 202 {
			t.Fatalf("%v", a)
		}
	}
	var busy sweeps
	for lp, s := range read() {
		if d := (sweeps{s.woken - before[lp].woken, s.inline - before[lp].inline}); d.inline > busy.inline {
			busy = d
		}
	}
	// 400 ms is 80 ticks. The busy loop sweeps in its callbacks about
	// as often and is woken for few (~5 of 80 here, a third on a machine
	// whose cores are taken, where the loop idles between requests); a
	// tick that woke every loop would leave the callbacks few sweeps
	// (~22 of 100).
	t.Logf("the busy loop: %d sweeps in its callbacks, %d woken by the tick", busy.inline, busy.woken)
	if busy.inline < 10 || float64(busy.woken) > 0.5*float64(busy.woken+busy.inline) {
		t.Errorf("the busy loop swept %d times in its callbacks and was woken %d times, want ≥ 10 and most of its sweeps in its callbacks", busy.inline, busy.woken)
	}
}

// TestALoopWaitsOncePerWakeUp: requests one at a time, each after a
// pause, wake the loop that serves them twice (the request, the cell's
// answer), besides the tick's wake-ups; it makes one epoll_wait per
// wake-up (gnet's own poller, which asked again without blocking after
// each round, made two). The loop's waits are what
// cellkit_router_loop_waits_total sums.
func TestALoopWaitsOncePerWakeUp(t *testing.T) {
	perWakeUp := func() float64 {
		w := newWorld(t, worldOptions{cells: []string{"c1"}, cfg: Config{Cell: CellLimits{ProbeInterval: -1}}})
		if a := w.create("u1"); a.status != 202 {
			t.Fatalf("first request: %v", a)
		}
		type count struct{ waits, woken int64 }
		read := func() map[*loop]count {
			got := map[*loop]count{}
			w.onLoops(func(lp *loop) { got[lp] = count{int64(lp.el.(waitCounter).Waits()), lp.woken} })
			return got
		}
		const n = 40
		total := testutil.ToFloat64(w.router.metrics.loopWaits)
		before := read()
		for range n {
			time.Sleep(2 * time.Millisecond) // the loops wait, as at a low rate
			if a := w.create("u1"); a.status != 202 {
				t.Fatalf("%v", a)
			}
		}
		var served count // the loop with the most waits serves the requests
		var sum int64
		for lp, c := range read() {
			d := count{c.waits - before[lp].waits, c.woken - before[lp].woken}
			sum += d.waits
			if d.waits > served.waits {
				served = d
			}
		}
		// The reads' own Execute wake-ups are in the waits too: one per loop.
		if got := testutil.ToFloat64(w.router.metrics.loopWaits) - total; got < float64(sum) {
			t.Errorf("cellkit_router_loop_waits_total grew by %v, the loops counted %d", got, sum)
		}
		wakeUps := float64(2*n + served.woken + 1)
		t.Logf("the serving loop waited %d times for %d requests and %d tick wake-ups: %.2f per wake-up", served.waits, n, served.woken, float64(served.waits)/wakeUps)
		return float64(served.waits) / wakeUps
	}
	if got := perWakeUp(); got > 1.3 {
		t.Errorf("%.2f epoll_wait calls per wake-up, want one", got)
	}
}
