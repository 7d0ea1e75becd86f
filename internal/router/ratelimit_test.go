package router

import (
	"net/http"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/testkit"
)

func TestRateLimitAnswers(t *testing.T) {
	clk := testkit.NewClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	w := newWorld(t, worldOptions{cells: []string{"c1"}, rate: 1, burst: 2, opts: Options{Now: clk.Now}})
	for i, want := range []struct {
		status    int
		remaining string
		retry     string
	}{
		{202, "1", ""},
		{202, "0", ""},
		{429, "0", "1"},
		{429, "0", "1"},
	} {
		a := w.create("u1")
		if a.status != want.status || a.header.Get("X-RateLimit-Remaining") != want.remaining ||
			a.header.Get("Retry-After") != want.retry || a.header.Get("X-RateLimit-Limit") != "1" {
			t.Errorf("request %d: %v, headers %v; want %d remaining %s retry %q", i, a, a.header, want.status, want.remaining, want.retry)
		}
		if a.status == http.StatusTooManyRequests {
			if p := problemOf(t, a); p["type"] != "https://cellkit.dev/problems/rate-limited" {
				t.Errorf("429 type = %v", p["type"])
			}
		}
	}
	clk.Advance(time.Second)
	if a := w.create("u1"); a.status != 202 {
		t.Errorf("after a second: %v, want 202", a)
	}
	if calls := w.backends["c1"].calls.Load(); calls != 3 {
		t.Errorf("the cell got %d calls, want 3: refused requests must not reach it", calls)
	}
	assertMetric(t, w, `cellkit_router_limited_total{client="platform-a"} 2`)
}

// assertMetric checks that the text exposition has a line starting with want.
func assertMetric(t *testing.T, w *world, want string) {
	t.Helper()
	mfs, err := w.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	text := exposition(mfs)
	for _, line := range text {
		if len(line) >= len(want) && line[:len(want)] == want {
			return
		}
	}
	t.Errorf("no metric line %q", want)
}
