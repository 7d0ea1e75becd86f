package cellctl

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/problem"
)

// statusEnv is a map of four cells: c1 healthy and busy, c2 draining with
// an open breaker and failed work, c3 unreachable, c4 answering errors.
func statusEnv(t *testing.T, e *env) map[string]*fakeCell {
	cells := map[string]*fakeCell{}
	for _, id := range []string{"c1", "c2"} {
		cells[id] = newFakeCell(t, id)
		e.replace = append(e.replace, cells[id].URL(), "http://ADMIN-"+id)
	}
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		problem.Write(w, problem.New(http.StatusServiceUnavailable, problem.IntakeClosed, "the cell is starting"))
	}))
	t.Cleanup(broken.Close)
	e.replace = append(e.replace, broken.URL, "http://ADMIN-c4")
	admin := map[string]string{"c1": cells["c1"].URL(), "c2": cells["c2"].URL(), "c3": "http://127.0.0.1:1", "c4": broken.URL}
	e.setup([]string{"c1", "c2", "c3", "c4"}, func(id string) string { return admin[id] })
	e.ok("drain", "c2", "--leave-data")
	v := e.load().Version()
	cells["c1"].set(func(f *fakeCell) {
		f.high, f.normal, f.inflight, f.mapVersion = 2, 17, 2, v
		f.release = "1.4.0@3fa9c1e20b7d"
		f.pools = map[string][2]int{"nice": {14, 20}, "kcb": {3, 10}}
	})
	cells["c2"].set(func(f *fakeCell) {
		f.mapVersion = v - 1
		f.breakers["kcb"] = "open"
		f.dlq = 1
		f.failed = []map[string]any{
			{"id": "c2-0002", "user_id": "user-9", "set": "error", "reason": "kcb: agency answered code 5001", "attempts": 1, "at": "2026-11-29T16:59:30Z"},
			{"id": "c2-0001", "user_id": "user-4", "set": "dead", "reason": "kcb: circuit breaker open, agency calls suspended", "attempts": 5, "at": "2026-11-29T16:58:10Z"},
		}
	})
	return cells
}

// TestStatus: one row per cell, unreachable cells shown as such (the
// command still succeeds), and the --json form.
func TestStatus(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		statusEnv(t, e)
		e.clock.Advance(3*time.Minute + 12*time.Second)
		r := e.ok("status")
		e.golden("status", r.stdout)

		var st statusJSON
		e.json(&st, "status")
		byID := map[string]cellStatus{}
		for _, c := range st.Cells {
			byID[c.ID] = c
		}
		if c := byID["c1"]; !c.Reachable || c.Status == nil || c.Status.High() != 2 || c.Status.Normal() != 17 ||
			c.Status.Inflight != 2 || c.Status.Agencies["nice"].Pool.InUse != 14 || !c.Status.Ready {
			t.Errorf("c1 = %+v", c)
		}
		if c := byID["c2"]; c.State != "draining" || c.Status.Agencies["kcb"].Breaker != "open" || c.Status.Failed != 2 || c.Status.IntakeOpen() {
			t.Errorf("c2 = %+v", c)
		}
		if c := byID["c3"]; c.Reachable || !strings.Contains(c.Error, "connection refused") {
			t.Errorf("c3 = %+v", c)
		}
		if c := byID["c4"]; !c.Reachable || !strings.Contains(c.Error, "503 Service Unavailable: the cell is starting") {
			t.Errorf("c4 = %+v", c)
		}
		if st.AgeSeconds != 192 || st.Version != 6 {
			t.Errorf("map version %d, age %v s", st.Version, st.AgeSeconds)
		}
	})
}

// TestFailedAndCircuit: failed list/retry and circuit against a cell's admin
// API, with its bearer token.
func TestFailedAndCircuit(t *testing.T) {
	e := newFileEnv(t)
	cells := statusEnv(t, e)
	c2 := cells["c2"]
	c2.set(func(f *fakeCell) { f.token = "s3cret" })

	r := e.run("failed", "list", "c2")
	if r.code != ExitFailure || !strings.Contains(r.stderr, "answered 401 Unauthorized: the admin API needs a bearer token") {
		t.Errorf("without the token: %v", r)
	}
	r = e.ok("failed", "list", "c2", "--admin-token", "s3cret")
	e.golden("failed_list", r.stdout)
	// The token also comes from the environment.
	e.cli.Getenv = func(k string) string {
		if k == EnvAdminToken {
			return "s3cret"
		}
		return ""
	}
	var items []api.FailedInquiry
	e.json(&items, "failed", "list", "c2", "--limit", "5")
	if len(items) != 2 || items[1].ID != "c2-0001" || items[1].Set != "dead" || items[1].Attempts != 5 || items[1].At.IsZero() {
		t.Errorf("failed list --json = %+v", items)
	}
	if got := c2.called("GET /v1/admin/failed?limit=5"); len(got) != 1 {
		t.Errorf("calls %v", c2.called("GET"))
	}

	r = e.ok("failed", "retry", "c2", "c2-0001")
	if !strings.Contains(r.stdout, "Re-enqueued 1 inquiry in c2.\n  c2-0001\n") {
		t.Errorf("retry:\n%s", r.stdout)
	}
	if got := c2.called(`POST /v1/admin/failed/retry {"ids":["c2-0001"]}`); len(got) != 1 {
		t.Errorf("retry request: %v", c2.called("POST"))
	}
	var rr api.RetryResult
	e.json(&rr, "failed", "retry", "c2", "--all")
	if len(rr.Retried) != 2 || len(c2.called(`POST /v1/admin/failed/retry {"all":true}`)) != 1 {
		t.Errorf("retry --all = %+v", rr)
	}
	r = e.run("failed", "retry", "c2", "c2-0001", "c2-0404")
	if r.code != ExitFailure || !strings.Contains(r.stdout, "c2-0404: not retried: unknown inquiry") || !strings.Contains(r.stderr, "1 inquiry could not be retried") {
		t.Errorf("retry of an unknown id: %v", r)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"failed", "retry", "c2"}, "give the inquiry ids to retry, or --all"},
		{[]string{"failed", "retry", "c2", "--all", "c2-1"}, "give inquiry ids or --all, not both"},
		{[]string{"failed", "retry", "c2", "c1-0001"}, `inquiry "c1-0001" is not one of c2's`},
		{[]string{"circuit", "c2", "kcb", "half-open"}, `action "half-open" must be open, close or reset`},
	} {
		if r := e.run(tc.args...); r.code != ExitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v", r)
		}
	}

	r = e.ok("circuit", "c2", "kcb", "reset")
	if r.stdout != "c2 kcb breaker: closed (reset).\n" || len(c2.called("POST /v1/admin/circuit/kcb/reset")) != 1 {
		t.Errorf("circuit reset: %q", r.stdout)
	}
	var out map[string]string
	e.json(&out, "circuit", "c2", "nice", "open")
	if out["breaker"] != "forced_open" || out["agency"] != "nice" {
		t.Errorf("circuit open --json = %v", out)
	}
	if r := e.run("circuit", "c2", "equifax", "open"); r.code != ExitFailure || !strings.Contains(r.stderr, `unknown agency "equifax" (agencies: kcb, nice)`) {
		t.Errorf("%v", r)
	}
	if r := e.run("circuit", "c3", "nice", "open"); r.code != ExitFailure || !strings.Contains(r.stderr, "cell c3: http://127.0.0.1:1/v1/admin/circuit/nice/open unreachable") {
		t.Errorf("%v", r)
	}
	if r := e.run("failed", "list", "c9"); r.code != ExitFailure || !strings.Contains(r.stderr, `unknown cell "c9"`) {
		t.Errorf("%v", r)
	}
}

// TestHotkeys sums the routers' heavy users, finds their cells in the live
// map and proposes overrides that spread them by weight.
func TestHotkeys(t *testing.T) {
	forEachBackend(t, testHotkeys)
}

func testHotkeys(t *testing.T, e *env) {
	e.setup([]string{"c1", "c2", "c3"}, nil)
	m := e.load()
	// Six heavy users that all live on c1.
	var heavy []string
	for i := 0; len(heavy) < 6; i++ {
		if u := "user-" + itoa(i); m.Lookup(u).Cell == "c1" {
			heavy = append(heavy, u)
		}
	}
	// Router A answers like internal/router, router B a bare list.
	var asked []string // the n each call asked for
	routerA := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/admin/hotkeys" {
			http.NotFound(w, r)
			return
		}
		asked = append(asked, r.URL.Query().Get("n"))
		var users []map[string]any
		for i, u := range heavy {
			users = append(users, map[string]any{"user_id": u, "count": 600 - 100*i, "error": 0, "share": 0.1, "slot": 1, "cell": "c1", "override": false})
		}
		json.NewEncoder(w).Encode(map[string]any{"window_seconds": 60, "total": 4000, "users": users})
	}))
	defer routerA.Close()
	routerB := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode([]map[string]any{{"user": heavy[5], "count": 550}})
	}))
	defer routerB.Close()
	e.replace = append(e.replace, routerA.URL, "http://ROUTER-A", routerB.URL, "http://ROUTER-B")

	r := e.ok("hotkeys", routerA.URL, routerB.URL+"/v1/admin/hotkeys", "http://127.0.0.1:1")
	e.golden("hotkeys", r.stdout)
	if !strings.Contains(r.stderr, "warning: router http://127.0.0.1:1:") {
		t.Errorf("unreachable router not warned about: %q", r.stderr)
	}
	var h hotJSON
	e.json(&h, "hotkeys", routerA.URL, routerB.URL+"/v1/admin/hotkeys", "--top", "3")
	if len(h.Users) != 3 || h.Users[0].User != heavy[5] || h.Users[0].Count != 650 || h.Total != 4550 || h.Users[0].Cell != "c1" {
		t.Errorf("hotkeys --json = %+v", h)
	}
	if len(asked) != 2 || asked[0] != "20" || asked[1] != "6" {
		t.Errorf("the routers were asked for n = %v, want twice the users shown: [20 6]", asked)
	}
	moved := 0
	for _, u := range h.Users {
		if u.Propose != "" {
			moved++
			if u.Propose == "c1" || u.Command != "cellctl override set "+u.User+" "+u.Propose {
				t.Errorf("proposal %+v", u)
			}
		}
	}
	if moved != 2 {
		t.Errorf("%d of 3 users on c1 proposed to move, want 2 (one per other cell)", moved)
	}
	// Light users are not worth an override.
	e.json(&h, "hotkeys", routerA.URL, routerB.URL+"/v1/admin/hotkeys", "--min-share", "0.13")
	for _, u := range h.Users {
		if u.Propose != "" && u.Share < 0.13 {
			t.Errorf("proposed to move %s with a share of %.3f < --min-share 0.13", u.User, u.Share)
		}
	}
	// The proposal is runnable as printed.
	e.ok(append(strings.Fields(h.Users[0].Command)[1:], "--leave-data")...)
	if r := e.run("hotkeys", "http://127.0.0.1:1"); r.code != ExitFailure || !strings.Contains(r.stderr, "no router answered") {
		t.Errorf("%v", r)
	}
	if r := e.run("hotkeys", "127.0.0.1:9080"); r.code != ExitUsage {
		t.Errorf("%v", r)
	}
}

// TestStoreText: the STORE column of cellctl status, from a cell's status.
func TestStoreText(t *testing.T) {
	for body, want := range map[string]string{
		`{}`: "-",
		`{"store":{"used":0.41,"high_watermark":0.95}}`:                             "41%",
		`{"store":{"used":0.96,"high_watermark":0.95,"refusing":true}}`:             "96% FULL",
		`{"store":{"used":0.5,"refusing":true,"failed":"no space left on device"}}`: "50% FAILED",
	} {
		var s api.CellStatus
		if err := json.Unmarshal([]byte(body), &s); err != nil {
			t.Fatal(err)
		}
		if got := storeText(&s); got != want {
			t.Errorf("%s: %q, want %q", body, got, want)
		}
	}
}

// TestLayout: `layout CELL` says what the cell writes; `layout CELL
// ledger` switches it, once, unless an instance's release does not know
// the ledger (refused, naming it).
func TestLayout(t *testing.T) {
	e := newFileEnv(t)
	cells := statusEnv(t, e)
	cells["c1"].set(func(f *fakeCell) {
		f.layout = map[string]any{"writes": "records", "knows": []string{"records", "ledger"}}
	})
	if r := e.ok("layout", "c1"); r.stdout != "c1 writes records (not switched to the ledger).\n" {
		t.Errorf("layout c1: %q", r.stdout)
	}
	if r := e.ok("layout", "c1", "ledger"); r.stdout != "c1 writes the ledger from 2026-12-05T04:20:15Z.\n" && r.stdout != "c1 writes the ledger since 2026-12-05T04:20:15Z.\n" {
		t.Errorf("layout c1 ledger: %q", r.stdout)
	}
	if n := len(cells["c1"].called("POST /v1/admin/layout/ledger")); n != 1 {
		t.Errorf("%d switches of c1, want 1", n)
	}
	e.ok("layout", "c1", "ledger") // switched already: nothing asked
	if n := len(cells["c1"].called("POST /v1/admin/layout/ledger")); n != 1 {
		t.Errorf("%d switches of c1 after a second ask, want 1", n)
	}
	r := e.run("layout", "c2", "ledger")
	if r.code != ExitFailure || !strings.Contains(r.stderr, "cell c2 not switched: c2 on a release that does not know the ledger") {
		t.Errorf("layout c2 ledger on a release before the ledger: %v", r)
	}
	if n := len(cells["c2"].called("POST /v1/admin/layout/ledger")); n != 0 {
		t.Errorf("c2 switched %d times", n)
	}
	if r := e.run("layout", "c1", "records"); r.code != ExitUsage {
		t.Errorf("layout c1 records: %v, want a usage error", r)
	}
	var out map[string]any
	e.json(&out, "layout", "c1")
	if out["writes"] != "ledger" || out["ledger_since"] != "2026-12-05T04:20:15Z" {
		t.Errorf("layout c1 --json = %v", out)
	}
}
