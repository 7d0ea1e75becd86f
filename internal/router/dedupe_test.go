package router

import (
	"sync"
	"testing"
	"time"
)

// TestADuplicateInFlightIsAnsweredFromTheFirst: while a client's inquiry
// with an Idempotency-Key is at the cell, the same inquiry again (a
// retry of an impatient client, on another connection) is not sent: it
// gets the first's answer with its own request id. Another body, another
// key or another time goes to the cell.
func TestADuplicateInFlightIsAnsweredFromTheFirst(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}})
	b := w.backends["c1"]
	b.delay.Store(int64(300 * time.Millisecond))
	send := func(n int, key string, bodies ...string) []answer {
		out := make([]answer, n)
		var wg sync.WaitGroup
		for i := range n {
			body := inquiryBody("u1")
			if i < len(bodies) {
				body = bodies[i]
			}
			wg.Go(func() {
				if i > 0 {
					time.Sleep(50 * time.Millisecond) // the first is at the cell
				}
				out[i] = w.do("POST", "/v1/inquiries", body, "Idempotency-Key", key, "X-Request-Id", "req-"+key+"-"+string(rune('a'+i)))
			})
		}
		wg.Wait()
		return out
	}
	as := send(3, "k-1")
	if got := b.calls.Load(); got != 1 {
		t.Fatalf("three alike at once: the cell got %d calls, want 1", got)
	}
	for i, a := range as {
		if a.status != 202 || string(a.body) != string(as[0].body) || a.header.Get("X-Request-Id") != "req-k-1-"+string(rune('a'+i)) ||
			a.header.Get("X-RateLimit-Limit") == "" || a.header.Get("Cellkit-Cell") != "c1" {
			t.Errorf("request %d: %v %v, want the first's answer with its own request id", i, a, a.header)
		}
	}
	assertMetric(t, w, `cellkit_router_deduped_total 2`)

	b.calls.Store(0)
	send(2, "k-2", inquiryBody("u1"), inquiryBody("u2"))
	if got := b.calls.Load(); got != 2 {
		t.Fatalf("one key, two bodies: the cell got %d calls, want 2 (it says the key was used for another body)", got)
	}
	b.calls.Store(0)
	w.create("u1", "Idempotency-Key", "k-3")
	w.create("u1", "Idempotency-Key", "k-3")
	if got := b.calls.Load(); got != 2 {
		t.Fatalf("one key, one after the other: the cell got %d calls, want 2", got)
	}
}

// TestAFollowerOfAFailedFirstGetsItsAnswer: the first's timeout is the
// followers' too; a follower whose client left is dropped.
func TestAFollowerOfAFailedFirstGetsItsAnswer(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}, cfg: Config{Cell: CellLimits{Timeout: 400 * time.Millisecond}}})
	b := w.backends["c1"]
	b.mode.Store(modeHang)
	var wg sync.WaitGroup
	as := make([]answer, 2)
	for i := range 2 {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 50 * time.Millisecond)
			as[i] = w.create("u1", "Idempotency-Key", "k-9")
		})
	}
	wg.Wait()
	for i, a := range as {
		if a.status != 504 {
			t.Errorf("request %d: %v, want the first's 504", i, a)
		}
	}
	if got := b.calls.Load(); got != 1 {
		t.Fatalf("the cell got %d calls, want 1", got)
	}
}
