package cellctl

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// fakeRouter answers /v1/admin/slots with rates and /v1/admin/hotkeys with
// no users, as internal/router does.
func fakeRouter(t *testing.T, slots int, rates [][2]float64) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/admin/slots":
			total := 0.0
			for _, x := range rates {
				total += x[1]
			}
			json.NewEncoder(w).Encode(map[string]any{"version": 1, "slots": slots, "window_seconds": 60, "total": total, "rates": rates})
		case "/v1/admin/hotkeys":
			json.NewEncoder(w).Encode(map[string]any{"window_seconds": 60, "total": 0, "users": []any{}})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestTrafficInPlans: with --routers, plans show each cell's measured
// traffic before → after (the routers' rates added up), flag a cell over
// its declared capacity, and rebalance --by traffic proposes weights that
// even it out.
func TestTrafficInPlans(t *testing.T) {
	forEachBackend(t, testTrafficInPlans)
}

func testTrafficInPlans(t *testing.T, e *env) {
	e.setup([]string{"c1", "c2", "c3"}, nil)
	m := e.load()
	// Every slot of c1 at 0.3 req/s over two routers (0.2 + 0.1), the
	// others' at 0.1: c1 carries three times its share.
	var a, b [][2]float64
	for s := range m.Slots() {
		if m.Owner(s) == "c1" {
			a = append(a, [2]float64{float64(s), 0.2})
		}
		b = append(b, [2]float64{float64(s), 0.1})
	}
	ra, rb := fakeRouter(t, m.Slots(), a), fakeRouter(t, m.Slots(), b)
	routers := "--routers=" + ra.URL + "," + rb.URL
	want := map[string]float64{}
	for id, n := range m.SlotCounts() {
		want[id] = 0.1 * float64(n)
		if id == "c1" {
			want[id] = 0.3 * float64(n)
		}
	}

	e.ok("capacity", "set", "c1", "400/s")
	r := e.ok("capacity", "set", "c2", "100", routers, "--dry-run")
	e.golden("traffic_plan", r.stdout)
	for _, s := range []string{"REQ/S", "CAPACITY", "400/s !", "Declared capacity of c2: none → 100/s", "! projected over"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("capacity set c2 --dry-run with --routers: no %q in\n%s", s, r.stdout)
		}
	}
	var res struct {
		Plan struct {
			Cells []struct {
				ID            string
				RateBefore    *float64 `json:"rate_before"`
				RateAfter     *float64 `json:"rate_after"`
				CapacityAfter int      `json:"capacity_after"`
			} `json:"cells"`
			Traffic *trafficSummary `json:"traffic"`
		} `json:"plan"`
	}
	e.json(&res, "weight", "c2", "2", routers, "--dry-run")
	if res.Plan.Traffic == nil || len(res.Plan.Traffic.Routers) != 2 {
		t.Fatalf("plan traffic %+v, want both routers", res.Plan.Traffic)
	}
	for _, c := range res.Plan.Cells {
		if c.RateBefore == nil || abs(*c.RateBefore-want[c.ID]) > 1e-6 {
			t.Errorf("%s: rate before %v, want %.1f", c.ID, c.RateBefore, want[c.ID])
		}
		if c.ID == "c1" && c.CapacityAfter != 400 {
			t.Errorf("c1 capacity %d, want 400", c.CapacityAfter)
		}
	}

	// Without --routers, the routers announced in the registry are asked.
	reg := e.open()
	defer reg.Close()
	ann := reg.(registry.Announcer)
	for i, u := range []string{ra.URL, rb.URL} {
		if err := ann.Announce(context.Background(), registry.Announcement{ID: fmt.Sprintf("router-%d", i), Admin: u}); err != nil {
			t.Fatal(err)
		}
	}
	var found struct {
		Plan struct {
			Traffic *trafficSummary `json:"traffic"`
		} `json:"plan"`
	}
	e.json(&found, "weight", "c2", "2", "--dry-run")
	if found.Plan.Traffic == nil || len(found.Plan.Traffic.Routers) != 2 {
		t.Fatalf("plan traffic %+v, want the two announced routers", found.Plan.Traffic)
	}

	r = e.ok("rebalance", "--by", "traffic", "--leave-data")
	if !strings.Contains(r.stdout, "rebalance by traffic") {
		t.Fatalf("rebalance --by traffic:\n%s", r.stdout)
	}
	after := e.load()
	load, err := after.Load(trafficOf(after.Slots(), a, b))
	if err != nil {
		t.Fatal(err)
	}
	if imb := after.Imbalance(load); imb > 1.1 {
		t.Fatalf("after rebalance --by traffic: imbalance %.3f (loads %v)\n%s", imb, load, r.stdout)
	}

	// A router that cannot be asked never stands in the way of a change:
	// the plan goes without traffic, with a warning.
	r = e.ok("weight", "c2", "1", "--routers", "http://127.0.0.1:1", "--leave-data")
	if !strings.Contains(r.stderr, "warning: the plan shows no measured traffic: no router answered") || strings.Contains(r.stdout, "REQ/S") {
		t.Errorf("weight with an unreachable router:\n%s", r)
	}
	for i := range 2 {
		if err := ann.Withdraw(context.Background(), fmt.Sprintf("router-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rebalance", "--by", "traffic"}, "needs the routers"},
		{[]string{"rebalance", "--by", "users"}, `--by "users"`},
		{[]string{"weight", "c2", "1", "--routers", "ftp://x"}, "--routers"},

		{[]string{"capacity", "set", "c1", "-5"}, "capacity"},
		{[]string{"capacity", "set", "c1", "fast"}, "capacity"},
		{[]string{"capacity", "set", "c9", "5"}, "c9"},
	} {
		r := e.run(tc.args...)
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
			t.Errorf("%v: exit %d, stderr %q; want a one-line error about %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

func abs(x float64) float64 { return max(x, -x) }

// trafficOf adds up routers' rates.
func trafficOf(slots int, routers ...[][2]float64) slotmap.Traffic {
	t := slotmap.Traffic{Slots: make([]float64, slots)}
	for _, rs := range routers {
		for _, r := range rs {
			t.Slots[int(r[0])] += r[1]
		}
	}
	return t
}
