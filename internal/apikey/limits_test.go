package apikey

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/testkit"
)

func TestTokenBucket(t *testing.T) {
	keys, err := Parse([]byte(`[{"client":"a","key_sha256":"` + Hash("a") + `","rate":2,"burst":3},` +
		`{"client":"b","key_sha256":"` + Hash("b") + `","rate":0.25,"burst":1}]`))
	if err != nil {
		t.Fatal(err)
	}
	a, b := keys.Clients()[0], keys.Clients()[1]
	clk := testkit.NewClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	l := NewLimits(keys, clk.Now)
	type step struct {
		advance   time.Duration
		client    *Client
		ok        bool
		remaining int
		retry     time.Duration // when refused, within 1 ms
		reset     time.Duration // within 1 ms: until full, or with no token left until the next
	}
	for i, s := range []step{
		{0, a, true, 2, 0, 500 * time.Millisecond},
		{0, a, true, 1, 0, time.Second},
		{0, a, true, 0, 0, 500 * time.Millisecond},
		{0, a, false, 0, 500 * time.Millisecond, 500 * time.Millisecond}, // 2 tokens/s: one in 500 ms
		{0, b, true, 0, 0, 4 * time.Second},                              // clients do not share buckets
		{0, b, false, 0, 4 * time.Second, 4 * time.Second},
		{250 * time.Millisecond, a, false, 0, 250 * time.Millisecond, 250 * time.Millisecond},
		{250 * time.Millisecond, a, true, 0, 0, 500 * time.Millisecond},
		{2 * time.Second, a, true, 2, 0, 500 * time.Millisecond}, // refilled to the burst, never above
		{time.Hour, b, true, 0, 0, 4 * time.Second},
	} {
		clk.Advance(s.advance)
		v := l.Take(s.client)
		near := func(d, want time.Duration) bool { return d >= want-time.Millisecond && d <= want+time.Millisecond }
		if v.OK != s.ok || v.Remaining != s.remaining || (!v.OK && !near(v.RetryAfter, s.retry)) || !near(v.Reset, s.reset) ||
			v.Remaining > s.client.Burst || string(s.client.LimitText()) != strconv.Itoa(s.client.Burst) {
			t.Errorf("step %d: take(%s) = %+v (limit %s), want ok %v remaining %d retry %v reset %v", i, s.client.ID, v, s.client.LimitText(), s.ok, s.remaining, s.retry, s.reset)
		}
	}
}

func BenchmarkTake(b *testing.B) {
	keys, _ := Parse([]byte(`[{"client":"a","key_sha256":"` + Hash("a") + `","rate":1e9,"burst":1000000000}]`))
	l := NewLimits(keys, time.Now)
	c := keys.Clients()[0]
	b.ReportAllocs()
	for b.Loop() {
		l.Take(c)
	}
}

// TestLimitsCarry: new keys keep a kept client's bucket, tokens and all,
// under its new limits; a new client starts full; a removed one's bucket
// is gone.
func TestLimitsCarry(t *testing.T) {
	clk := testkit.NewClock(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	entry := func(client, key string, rate, burst int) string {
		return fmt.Sprintf(`{"client":%q,"key_sha256":%q,"rate":%d,"burst":%d}`, client, Hash(key), rate, burst)
	}
	old, err := Parse([]byte("[" + entry("a", "ka", 1, 2) + "," + entry("gone", "kg", 1, 1) + "]"))
	if err != nil {
		t.Fatal(err)
	}
	l := NewLimits(old, clk.Now)
	for range 2 {
		l.Take(old.Clients()[0])
	}
	next, err := Parse([]byte("[" + entry("fresh", "kf", 1, 3) + "," + entry("a", "ka", 5, 10) + "]"))
	if err != nil {
		t.Fatal(err)
	}
	n := l.For(next, clk.Now)
	if len(n.buckets) != 2 {
		t.Fatalf("%d buckets for 2 clients", len(n.buckets))
	}
	a, fresh := next.Clients()[1], next.Clients()[0]
	if v := n.Take(a); v.OK {
		t.Errorf("the kept client's empty bucket gave a token: %+v", v)
	}
	clk.Advance(time.Second)
	for i := range 5 {
		if v := n.Take(a); !v.OK {
			t.Fatalf("new limits, a second later, token %d refused: %+v", i, v)
		}
	}
	if v := n.Take(a); v.OK {
		t.Errorf("a sixth token in that second: %+v", v)
	}
	for i := range 3 {
		if v := n.Take(fresh); !v.OK {
			t.Errorf("a new client's token %d refused: %+v", i, v)
		}
	}
}

// TestSharesAndTokens: a bucket holding a share of its client's quota
// refills at that share of the rate and holds that share of the burst;
// the rate-limit fields tell of the whole quota (this bucket and what the
// others hold); SetTokens sets what it holds, up to its capacity.
func TestSharesAndTokens(t *testing.T) {
	keys, err := Parse([]byte(`[{"client":"a","key_sha256":"` + Hash("a") + `","rate":10,"burst":10}]`))
	if err != nil {
		t.Fatal(err)
	}
	a := keys.Clients()[0]
	clk := testkit.NewClock(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	l := NewEmptyLimits(keys, clk.Now)
	if v := l.Take(a); v.OK || v.RetryAfter != time.Second {
		t.Fatalf("no share yet: %+v, want refused, back in a second", v)
	}
	l.SetShares([]Share{{Client: "a", Rate: 0.5, Burst: 0.5, Others: 0.3}})
	clk.Advance(10 * time.Second) // fills to its capacity, 5
	l.SetTokens("a", 0.4)         // a successor's: 4 of the client's 10
	for i := range 4 {
		v := l.Take(a)
		// 3 left here after the first, and 3 the others hold.
		if !v.OK || (i == 0 && v.Remaining != 6) {
			t.Fatalf("take %d of the 4 set: %+v", i, v)
		}
	}
	if v := l.Take(a); v.OK || v.RetryAfter != 200*time.Millisecond {
		t.Fatalf("after the 4 set: %+v, want refused until the next token at 5/s (200 ms)", v)
	}
	l.SetTokens("a", 1) // never beyond its capacity
	n := 0
	for l.Take(a).OK {
		n++
	}
	if n != 5 {
		t.Fatalf("%d taken after setting a whole burst, want its capacity 5", n)
	}
	if u := l.Usage(); u[0].Asked != 12 {
		t.Fatalf("asked %d, want the 12 requests", u[0].Asked)
	}
}
