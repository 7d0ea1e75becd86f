package router

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/breaker"
	"github.com/cellkit/cellkit/internal/testkit"
)

// guardConfig trips quickly and stays open for the whole test.
func guardConfig(timeout time.Duration, bulkhead int) Config {
	return Config{Cell: CellLimits{
		Timeout:       timeout,
		MaxConcurrent: bulkhead,
		Breaker:       breaker.Config{Window: 20, MinCalls: 5, FailureRate: 0.5, OpenFor: time.Minute},
	}}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestIsolationFromAHangingCell: four cells, one hangs. The other three
// keep their latency (compared with the same load before the hang), and
// once the hanging cell's guard trips its users get 503 in < 50 ms.
func TestIsolationFromAHangingCell(t *testing.T) {
	const timeout = 250 * time.Millisecond
	w := newWorld(t, worldOptions{cfg: guardConfig(timeout, 16)})
	m := w.currentMap()
	users := map[string][]string{}
	for _, c := range []string{"c1", "c2", "c3", "c4"} {
		users[c] = usersIn(t, m, c, 8)
	}

	// run drives 8 clients, each sending 3 requests to healthy cells for
	// every one to c4, and returns the healthy latencies and c4's answers.
	run := func(rounds int) (healthy []time.Duration, hung []answer) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for worker := range 8 {
			wg.Go(func() {
				for i := range rounds {
					cell := []string{"c1", "c2", "c3", "c4"}[i%4]
					a := w.create(users[cell][worker])
					mu.Lock()
					if cell == "c4" {
						hung = append(hung, a)
					} else {
						if a.status != http.StatusAccepted || a.header.Get("Cellkit-Cell") != cell {
							t.Errorf("healthy %s: %v from %q", cell, a, a.header.Get("Cellkit-Cell"))
						}
						healthy = append(healthy, a.took)
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return healthy, hung
	}

	run(8) // warm up connections
	base, _ := run(40)
	w.backends["c4"].mode.Store(modeHang)
	during, hung := run(40)

	b, d := median(base), median(during)
	t.Logf("healthy cells: median %v before the hang, %v during it (%.2fx)", b, d, float64(d)/float64(b))
	if d > 3*b+2*time.Millisecond {
		t.Errorf("healthy cells slowed from %v to %v while c4 hung", b, d)
	}
	var tripped, slow503 int
	for _, a := range hung {
		switch a.status {
		case http.StatusServiceUnavailable:
			// A request waiting for a connection to c4 when the health
			// checks found it hanging never reached it: 503 at once
			// then, after its wait (at most the timeout).
			cut := strings.Contains(string(a.body), "cannot be reached")
			if !cut {
				tripped++
			}
			if a.took >= 50*time.Millisecond && (!cut || a.took > 2*timeout) {
				slow503++
			}
			if a.header.Get("Cellkit-Overloaded") != "true" || a.header.Get("Retry-After") == "" || a.header.Get("Cellkit-Cell") != "c4" {
				t.Errorf("503 for c4 without the overload headers: %v", a.header)
			}
		case http.StatusGatewayTimeout:
			// At the cell timeout, or before it when the health checks
			// found the cell hanging (its calls in flight are cut).
			if a.took > 2*timeout {
				t.Errorf("504 after %v, long past the %v timeout", a.took, timeout)
			}
		default:
			t.Errorf("c4 answered %v", a)
		}
	}
	if tripped < len(hung)/2 || slow503 > 0 {
		t.Errorf("%d of %d c4 requests got 503, %d of them in 50 ms or more", tripped, len(hung), slow503)
	}
	if st := w.router.Cells()[3]; st.Cell != "c4" || st.Breaker != "open" {
		t.Errorf("c4 status %+v, want its breaker open", st)
	}
	// Once tripped: fast, every time.
	for range 20 {
		a := w.create(users["c4"][0])
		if a.status != http.StatusServiceUnavailable || a.took >= 50*time.Millisecond {
			t.Fatalf("c4 after the trip: %v in %v, want 503 in < 50 ms", a, a.took)
		}
		// Tripped by its failed calls (overloaded) or by its missed
		// health checks (cell-unavailable), whichever came first.
		if p := problemOf(t, a); p["type"] != "https://cellkit.dev/problems/overloaded" && p["type"] != "https://cellkit.dev/problems/cell-unavailable" {
			t.Errorf("type %v", p["type"])
		}
	}
	assertMetric(t, w, `cellkit_router_breaker_state{cell="c4"} 1`)
	assertMetric(t, w, `cellkit_router_shed_total{cell="c4",reason="breaker"}`)
	assertMetric(t, w, `cellkit_router_upstream_errors_total{cell="c4",kind="timeout"}`)
}

func TestBreakerOpensOnServerErrors(t *testing.T) {
	w := newWorld(t, guardWorld(time.Second, 16, "c1"))
	w.backends["c1"].mode.Store(modeFail)
	for i := range 5 {
		if a := w.create("u1"); a.status != http.StatusInternalServerError {
			t.Fatalf("call %d: %v, want the cell's 500 passed through", i, a)
		}
	}
	w.backends["c1"].mode.Store(modeOK)
	a := w.create("u1")
	if a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") != "60" || a.header.Get("Cellkit-Overloaded") != "true" {
		t.Fatalf("after 5 failures: %v %v, want 503 with Retry-After 60", a, a.header)
	}
	if calls := w.backends["c1"].calls.Load(); calls != 5 {
		t.Errorf("the cell got %d calls, want 5: an open breaker does not call it", calls)
	}
}

// A cell shedding its own load answers 503 with Retry-After and
// Cellkit-Overloaded at once: it is healthy and deciding, so its answers
// pass through and do not trip the router's breaker. Counting them as
// failures opened the breaker in the agency-slow drill and refused every
// user of the cell for OpenFor, the part it was still admitting included.
func TestCellSheddingDoesNotTripTheBreaker(t *testing.T) {
	w := newWorld(t, guardWorld(time.Second, 16, "c1"))
	w.backends["c1"].mode.Store(modeShed)
	for i := range 20 {
		a := w.create("u1")
		if a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") != "7" || a.header.Get("Cellkit-Overloaded") != "true" {
			t.Fatalf("call %d: %v %v, want the cell's 503 with its Retry-After 7", i, a, a.header)
		}
	}
	w.backends["c1"].mode.Store(modeOK)
	if a := w.create("u1"); a.status != http.StatusAccepted {
		t.Fatalf("after 20 shed answers: %v, want the cell reached (breaker closed)", a)
	}
	if calls := w.backends["c1"].calls.Load(); calls != 21 {
		t.Errorf("the cell got %d calls, want 21", calls)
	}
	assertMetric(t, w, `cellkit_router_breaker_state{cell="c1"} 0`)
}

func guardWorld(timeout time.Duration, bulkhead int, cells ...string) worldOptions {
	return worldOptions{cells: cells, cfg: guardConfig(timeout, bulkhead)}
}

func TestBulkheadRefusesAtOnceWhenFull(t *testing.T) {
	w := newWorld(t, guardWorld(5*time.Second, 2, "c1"))
	w.backends["c1"].mode.Store(modeHang)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { w.create("u1") })
	}
	g := w.router.table().byID["c1"].guard
	testkit.WaitFor(t, 5*time.Second, "2 requests in flight", func() bool { return g.InFlight() == 2 })
	a := w.create("u1")
	if a.status != http.StatusServiceUnavailable || a.took >= 50*time.Millisecond || a.header.Get("Retry-After") != "1" {
		t.Fatalf("third request: %v in %v, want 503 at once", a, a.took)
	}
	if p := problemOf(t, a); p["type"] != "https://cellkit.dev/problems/overloaded" {
		t.Errorf("type %v", p["type"])
	}
	w.backends["c1"].mode.Store(modeOK)
	w.backends["c1"].srv.CloseClientConnections() // frees the two hanging requests
	wg.Wait()
	testkit.WaitFor(t, 5*time.Second, "bulkhead empty", func() bool { return g.InFlight() == 0 })
	assertMetric(t, w, `cellkit_router_shed_total{cell="c1",reason="bulkhead"} 1`)
}

func TestTimeoutIs504(t *testing.T) {
	w := newWorld(t, guardWorld(100*time.Millisecond, 16, "c1"))
	w.backends["c1"].delay.Store(int64(400 * time.Millisecond))
	a := w.create("u1")
	if a.status != http.StatusGatewayTimeout || a.header.Get("Cellkit-Cell") != "c1" {
		t.Fatalf("%v after %v, want 504 from c1", a, a.took)
	}
	if a.took < 80*time.Millisecond || a.took > 390*time.Millisecond {
		t.Errorf("504 after %v, want about 100ms", a.took)
	}
	problemOf(t, a)
	// The operator hears of it: which instance, how long, on which call.
	testkit.WaitFor(t, 2*time.Second, "the timeout logged", func() bool {
		return strings.Contains(w.logs.String(), "call to a cell instance timed out")
	})
	if l := w.logs.String(); !strings.Contains(l, "cell=c1") || !strings.Contains(l, "call_on_connection=1") {
		t.Errorf("the timeout's log line names no instance or call:\n%s", l)
	}
}

func TestDeadCellIsFast503(t *testing.T) {
	w := newWorld(t, guardWorld(time.Second, 16, "c1", "c2"))
	w.backends["c2"].srv.Close()
	user := userIn(t, w.currentMap(), "c2", 0)
	a := w.create(user)
	if a.status != http.StatusServiceUnavailable || a.header.Get("Cellkit-Cell") != "c2" || a.header.Get("Cellkit-Overloaded") != "true" || a.took >= 50*time.Millisecond {
		t.Fatalf("dead cell: %v %v in %v", a, a.header, a.took)
	}
	if p := problemOf(t, a); p["type"] != "https://cellkit.dev/problems/cell-unavailable" {
		t.Errorf("type %v", p["type"])
	}
	if a := w.create(userIn(t, w.currentMap(), "c1", 0)); a.status != http.StatusAccepted {
		t.Errorf("c1 while c2 is dead: %v", a)
	}
}
