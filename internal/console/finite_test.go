package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/console"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/testkit"
)

// scraped is an admin API (a cell's or a router's) whose /metrics is the
// text exposition metrics(n) at its n-th scrape (from 1): a process
// exposing whatever numbers it likes, NaN and ±Inf among them, as
// Prometheus's format allows.
func scraped(t *testing.T, doc any, metrics func(n int64) string) string {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			fmt.Fprint(w, metrics(n.Add(1)))
		case "/v1/admin/hotkeys":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"window_seconds":60,"total":0,"users":[]}`)
		default:
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(doc)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func cellStatus(id string) api.CellStatus {
	return api.CellStatus{Cell: id, Ready: true, Intake: "open", Release: api.Release{ID: "devel@0123456789ab"},
		Checks: map[string]api.Check{"intake": {OK: true}}}
}

// intake is a cell's intake counters in the text format, with the
// samples given (code=value), and its start time.
func intake(started string, samples ...string) string {
	var b strings.Builder
	b.WriteString("# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds " + started + "\n")
	b.WriteString("# TYPE cellkit_cell_intake_requests_total counter\n")
	for _, s := range samples {
		code, v, _ := strings.Cut(s, "=")
		if code == "shed" {
			continue
		}
		fmt.Fprintf(&b, "cellkit_cell_intake_requests_total{code=%q,route=\"inquiries\"} %s\n", code, v)
	}
	b.WriteString("# TYPE cellkit_cell_intake_shed_total counter\n")
	for _, s := range samples {
		if v, ok := strings.CutPrefix(s, "shed="); ok {
			fmt.Fprintf(&b, "cellkit_cell_intake_shed_total{reason=\"queue\"} %s\n", v)
		}
	}
	return b.String()
}

// TestOneBadNumberDoesNotBlindTheConsole: processes that expose NaN and
// ±Inf counters (and a start time of NaN), and counters whose rate
// overflows, leave the view encodable: /api/view answers 200 and the
// event stream carries it; each bad value is dropped and named on its
// card, which turns amber; the rates it fed say "bad", the others are
// shown; a card with nothing bad stays green with its rates.
func TestOneBadNumberDoesNotBlindTheConsole(t *testing.T) {
	nan := scraped(t, cellStatus("c1"), func(n int64) string {
		return intake("NaN", fmt.Sprintf("201=%d", 10*n), "200=NaN", "500=+Inf", "shed=-Inf")
	})
	huge := scraped(t, cellStatus("c2"), func(n int64) string {
		v := "-1.7e308"
		if n > 1 {
			v = "1.7e308" // up by 3.4e308 since the last read: no finite rate
		}
		return intake("1000", "200="+v)
	})
	fine := scraped(t, cellStatus("c2"), func(n int64) string { return intake("1000", fmt.Sprintf("200=%d", 100*n)) })
	good := scraped(t, cellStatus("c3"), func(n int64) string { return intake("1000", fmt.Sprintf("200=%d", 100*n), "shed=0") })
	router := scraped(t, api.RouterReadiness{Ready: true, MapVersion: 1}, func(n int64) string {
		return "# TYPE cellkit_router_requests_total counter\ncellkit_router_requests_total{code=\"200\"} NaN\n" +
			fmt.Sprintf("cellkit_router_requests_total{code=\"502\"} %d\n", n)
	})
	reg := celltest.NewRegistry(t, map[string]int{"nice": 80},
		slotmap.Cell{ID: "c1", Weight: 1, Intake: "http://127.0.0.1:1", Admin: nan},
		slotmap.Cell{ID: "c2", Weight: 1, Intake: "http://127.0.0.1:1", Admin: huge, Instances: []slotmap.Instance{
			{ID: "i1", Intake: "http://127.0.0.1:1", Admin: huge}, {ID: "i2", Intake: "http://127.0.0.1:1", Admin: fine}}},
		slotmap.Cell{ID: "c3", Weight: 1, Intake: "http://127.0.0.1:1", Admin: good})
	promReg := prometheus.NewRegistry()
	con, err := console.New(console.Config{Token: token, TrustedAdmin: append(adminURLs(reg.Map()), router)}, console.Options{
		Registry: reg.Reg, Admin: adminclient.Client{HTTP: &http.Client{}}, Registerer: promReg,
		Routers: func(context.Context) ([]console.RouterRef, error) {
			return []console.RouterRef{{ID: "r1", Admin: router}}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t, 20*time.Second)
	con.Collect(ctx)
	con.Collect(ctx) // rates need two reads
	srv := httptest.NewServer(con.Handler())
	t.Cleanup(srv.Close)

	resp, body := get(t, srv, "/api/view", "Authorization", "Bearer "+token)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/api/view with bad numbers in the scrapes: %d %.300s", resp.StatusCode, body)
	}
	var v console.View
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("the view: %v", err)
	}
	c1, c2, c3, r1 := v.Cells[0], v.Cells[1], v.Cells[2], v.Routers[0]
	for _, want := range []string{
		`cellkit_cell_intake_requests_total{code="200",route="inquiries"} = NaN`,
		`cellkit_cell_intake_requests_total{code="500",route="inquiries"} = +Inf`,
		`cellkit_cell_intake_shed_total{reason="queue"} = -Inf`,
		"process_start_time_seconds is NaN",
	} {
		if !slices.ContainsFunc(c1.Bad, func(s string) bool { return strings.Contains(s, want) }) {
			t.Errorf("c1's card does not name %s: %q", want, c1.Bad)
		}
	}
	if c1.Health != console.HealthWarn || !strings.Contains(c1.Why, "4 values dropped") ||
		!slices.Equal(c1.Rates.Bad, []string{"requests", "errors", "shed"}) {
		t.Errorf("c1: health %s why %q rates %+v", c1.Health, c1.Why, c1.Rates)
	}
	if c2.Health != console.HealthWarn || !slices.Contains(c2.Rates.Bad, "requests") || c2.Instances[1].Rates.Requests <= 0 ||
		len(c2.Instances[1].Rates.Bad) != 0 {
		t.Errorf("c2 (one instance's rate overflows): health %s why %q rates %+v, i2 %+v", c2.Health, c2.Why, c2.Rates, c2.Instances[1].Rates)
	}
	if c3.Health != console.HealthOK || len(c3.Bad) != 0 || !c3.Rates.Known || c3.Rates.Requests <= 0 {
		t.Errorf("c3, nothing bad: %+v", c3)
	}
	if r1.Health != console.HealthWarn || len(r1.Bad) != 1 || !strings.Contains(r1.Bad[0], `cellkit_router_requests_total{code="200"} = NaN`) ||
		!slices.Contains(r1.Rates.Bad, "requests") || r1.Rates.Errors <= 0 {
		t.Errorf("the router: health %s why %q bad %q rates %+v", r1.Health, r1.Why, r1.Bad, r1.Rates)
	}
	if got := gauge(t, promReg, "cellkit_console_bad_values"); got < 6 {
		t.Errorf("cellkit_console_bad_values %v, want the 6 or more dropped", got)
	}

	// The stream carries the same view.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	sresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer sresp.Body.Close()
	sc := bufio.NewScanner(sresp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var sv console.View
			if err := json.Unmarshal([]byte(data), &sv); err != nil || len(sv.Cells) != 3 {
				t.Fatalf("the stream's view: %v", err)
			}
			return
		}
	}
	t.Fatalf("the stream ended without a view: %v", sc.Err())
}

// gauge is the value of the gauge name in reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}
