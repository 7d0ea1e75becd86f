package guard

import (
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/breaker"
)

// TestBulkheadThenBreaker: the bulkhead refuses beyond its limit and frees
// a place when a request leaves; failures open the breaker, which then
// refuses with its open time as the wait.
func TestBulkheadThenBreaker(t *testing.T) {
	cfg := breaker.Config{Window: 4, MinCalls: 4, FailureRate: 0.5, OpenFor: 7 * time.Second}
	var changes []breaker.State
	g := New("c1", 2, cfg, false, func(_, to breaker.State) { changes = append(changes, to) })
	p1, why := g.Enter()
	if why != Admitted {
		t.Fatalf("first: %v", why)
	}
	p2, _ := g.Enter()
	if _, why := g.Enter(); why != Bulkhead || g.InFlight() != 2 {
		t.Fatalf("third of 2: %v with %d in flight, want bulkhead", why, g.InFlight())
	}
	if d := g.RetryAfter(Bulkhead); d != time.Second {
		t.Errorf("bulkhead wait %v", d)
	}
	g.Leave(p1, true, time.Millisecond)
	g.Leave(p2, true, time.Millisecond)
	for range 2 {
		p, why := g.Enter()
		if why != Admitted {
			t.Fatalf("after leaving: %v", why)
		}
		g.Leave(p, true, time.Millisecond)
	}
	if _, why := g.Enter(); why != Breaker || g.InFlight() != 0 {
		t.Fatalf("after 4 failures of 4: %v with %d in flight, want breaker and none", why, g.InFlight())
	}
	if d := g.RetryAfter(Breaker); d != 7*time.Second {
		t.Errorf("breaker wait %v, want its open time", d)
	}
	if len(changes) != 1 || changes[0] != breaker.Open || g.Circuit().State() != breaker.Open {
		t.Errorf("breaker changes %v, state %v", changes, g.Circuit().State())
	}
	for r, want := range []string{"bulkhead", "breaker", "no_cell", "admitted"} {
		if got := Reason(r).String(); got != want {
			t.Errorf("Reason(%d) = %q, want %q", r, got, want)
		}
	}
}
