package router

import (
	"net/http"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/testkit"
)

func TestTokenBucket(t *testing.T) {
	keys, err := ParseKeys([]byte(`[{"client":"a","key_sha256":"` + HashKey("a") + `","rate":2,"burst":3},` +
		`{"client":"b","key_sha256":"` + HashKey("b") + `","rate":0.25,"burst":1}]`))
	if err != nil {
		t.Fatal(err)
	}
	a, b := keys.Clients()[0], keys.Clients()[1]
	clk := testkit.NewClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	l := newLimits(keys, clk.Now)
	type step struct {
		advance   time.Duration
		client    *Client
		ok        bool
		remaining int
		retry     time.Duration // when refused, within 1 ms
	}
	for i, s := range []step{
		{0, a, true, 2, 0},
		{0, a, true, 1, 0},
		{0, a, true, 0, 0},
		{0, a, false, 0, 500 * time.Millisecond}, // 2 tokens/s: one in 500 ms
		{0, b, true, 0, 0},                       // clients do not share buckets
		{0, b, false, 0, 4 * time.Second},
		{250 * time.Millisecond, a, false, 0, 250 * time.Millisecond},
		{250 * time.Millisecond, a, true, 0, 0},
		{2 * time.Second, a, true, 2, 0}, // refilled to the burst, never above
		{time.Hour, b, true, 0, 0},
	} {
		clk.Advance(s.advance)
		v := l.take(s.client)
		if v.ok != s.ok || (v.ok && v.remaining != s.remaining) || (!v.ok && (v.retryAfter < s.retry-time.Millisecond || v.retryAfter > s.retry+time.Millisecond)) {
			t.Errorf("step %d: take(%s) = %+v, want ok %v remaining %d retry %v", i, s.client.ID, v, s.ok, s.remaining, s.retry)
		}
	}
}

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

func BenchmarkTake(b *testing.B) {
	keys, _ := ParseKeys([]byte(`[{"client":"a","key_sha256":"` + HashKey("a") + `","rate":1e9,"burst":1000000000}]`))
	l := newLimits(keys, time.Now)
	c := keys.Clients()[0]
	b.ReportAllocs()
	for b.Loop() {
		l.take(c)
	}
}
