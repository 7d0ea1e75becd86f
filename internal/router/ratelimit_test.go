package router

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/testkit"
)

func TestRateLimitAnswers(t *testing.T) {
	clk := testkit.NewClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	w := newWorld(t, worldOptions{cells: []string{"c1"}, rate: 1, burst: 2, opts: Options{Now: clk.Now}})
	// The limit is the bucket's capacity (2); the reset is when it is full
	// again (a token a second: 1 s after the first request), or with
	// none left when the next token comes, as Retry-After says.
	for i, want := range []struct {
		status    int
		remaining string
		reset     string
		retry     string
	}{
		{202, "1", "1", ""},
		{202, "0", "1", ""},
		{429, "0", "1", "1"},
		{429, "0", "1", "1"},
	} {
		a := w.create("u1")
		if a.status != want.status || a.header.Get("X-RateLimit-Remaining") != want.remaining ||
			a.header.Get("X-RateLimit-Reset") != want.reset ||
			a.header.Get("Retry-After") != want.retry || a.header.Get("X-RateLimit-Limit") != "2" {
			t.Errorf("request %d: %v, headers %v; want %d limit 2 remaining %s reset %s retry %q", i, a, a.header, want.status, want.remaining, want.reset, want.retry)
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

// TestRateLimitFieldsDescribeOneQuota: X-RateLimit-Limit, -Remaining and
// -Reset tell of the same quota, the client's token bucket, whether its
// burst is above its rate or below: the limit is the burst, never less
// than what remains; each request of a burst takes one; the reset is when
// the bucket is full again, or, once it is empty, when the next token
// comes, which is what a 429's Retry-After says too.
func TestRateLimitFieldsDescribeOneQuota(t *testing.T) {
	for _, tc := range []struct {
		rate  float64
		burst int
	}{
		{1000, 2000},
		{10, 5},
	} {
		t.Run(fmt.Sprintf("rate %g burst %d", tc.rate, tc.burst), func(t *testing.T) {
			clk := testkit.NewClock(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
			w := newWorld(t, worldOptions{cells: []string{"c1"}, rate: tc.rate, burst: tc.burst, opts: Options{Now: clk.Now}})
			// In whole seconds, rounded up: the time the bucket takes to
			// gain n tokens.
			secs := func(n int) string { return strconv.Itoa(int(math.Ceil(float64(n) / tc.rate))) }
			limit := strconv.Itoa(tc.burst)
			// The clock stands still: the burst is all there is.
			for i := 1; i <= tc.burst+1; i++ {
				a := w.do("GET", "/v1/inquiries/c1-abc", "")
				h := a.header
				remaining, err := strconv.Atoi(h.Get("X-RateLimit-Remaining"))
				if err != nil || h.Get("X-RateLimit-Limit") != limit || remaining > tc.burst {
					t.Fatalf("request %d: limit %q, remaining %q; want limit %s and remaining at most that", i, h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"), limit)
				}
				wantRemaining, wantReset, wantRetry, wantStatus := tc.burst-i, secs(i), "", 200
				switch {
				case i == tc.burst: // the last token: the next one comes in 1/rate
					wantReset = secs(1)
				case i > tc.burst:
					wantRemaining, wantReset, wantRetry, wantStatus = 0, secs(1), secs(1), http.StatusTooManyRequests
				}
				if a.status != wantStatus || remaining != wantRemaining || h.Get("X-RateLimit-Reset") != wantReset || h.Get("Retry-After") != wantRetry {
					t.Fatalf("request %d: %d, remaining %d, reset %q, Retry-After %q; want %d, %d, %q, %q",
						i, a.status, remaining, h.Get("X-RateLimit-Reset"), h.Get("Retry-After"), wantStatus, wantRemaining, wantReset, wantRetry)
				}
			}
			// Once the next token has come, one request goes through, and
			// the bucket is empty again.
			clk.Advance(time.Duration(float64(time.Second) / tc.rate))
			a := w.do("GET", "/v1/inquiries/c1-abc", "")
			if a.status != 200 || a.header.Get("X-RateLimit-Remaining") != "0" || a.header.Get("X-RateLimit-Reset") != secs(1) {
				t.Errorf("at the reset: %d, remaining %q, reset %q; want 200, 0, %s", a.status, a.header.Get("X-RateLimit-Remaining"), a.header.Get("X-RateLimit-Reset"), secs(1))
			}
			// Long after, the bucket is full, never fuller.
			clk.Advance(time.Hour)
			a = w.do("GET", "/v1/inquiries/c1-abc", "")
			if a.header.Get("X-RateLimit-Remaining") != strconv.Itoa(tc.burst-1) || a.header.Get("X-RateLimit-Reset") != secs(1) {
				t.Errorf("an hour later: remaining %q, reset %q; want %d, %s", a.header.Get("X-RateLimit-Remaining"), a.header.Get("X-RateLimit-Reset"), tc.burst-1, secs(1))
			}
		})
	}
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
