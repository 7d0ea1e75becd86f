package slotrate

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/testkit"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 0.02*math.Max(1, math.Abs(b)) }

func rateOf(s Snapshot, slot int) float64 {
	for _, r := range s.Rates {
		if int(r[0]) == slot {
			return r[1]
		}
	}
	return 0
}

func TestRatesFollowTheTraffic(t *testing.T) {
	clk := testkit.NewClock(time.Unix(1000, 0))
	r := New(16, 10*time.Second, clk.Now)
	// 5 s at 20/s on slot 3 and 2/s on slot 9: within the first window the
	// rates are the plain means.
	for range 5 {
		for range 20 {
			r.Add(3)
		}
		r.Add(9)
		r.Add(9)
		clk.Advance(time.Second)
	}
	s := r.Snapshot()
	if !near(rateOf(s, 3), 20) || !near(rateOf(s, 9), 2) || !near(s.Total, 22) || len(s.Rates) != 2 || s.Slots != 16 {
		t.Fatalf("after 5 s: %+v, want 20/s on 3 and 2/s on 9", s)
	}
	// Slot 3 stops: its rate decays, with the time counted so far as the
	// time constant until it reaches the window, not at once.
	want := 20.0
	for i := range 10 {
		clk.Advance(time.Second)
		s = r.Snapshot()
		want *= math.Exp(-1 / math.Min(10, float64(6+i)))
	}
	if got := rateOf(s, 3); !near(got, want) || got > 20*math.Exp(-1) {
		t.Fatalf("10 s after slot 3 stopped: %.2f/s, want %.2f/s", got, want)
	}
	r.Add(99) // out of range: ignored
	r.Add(-1)
}

func TestAddIsSafeAlongsideSnapshot(t *testing.T) {
	r := New(1024, time.Second, nil)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10_000 {
				r.Add((g*7 + i) % 1024)
			}
		}()
	}
	for range 10 {
		r.Snapshot()
	}
	wg.Wait()
	if s := r.Snapshot(); s.Total <= 0 {
		t.Fatalf("total %v after 40,000 adds", s.Total)
	}
}

// BenchmarkAdd is the request path's cost: one atomic add.
func BenchmarkAdd(b *testing.B) {
	r := New(16384, 0, nil)
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			r.Add(i & 16383)
			i += 7
		}
	})
}

// BenchmarkSnapshot is the cost of one read of 16384 slots.
func BenchmarkSnapshot(b *testing.B) {
	r := New(16384, 0, nil)
	for i := range 16384 {
		r.Add(i)
	}
	b.ReportAllocs()
	for b.Loop() {
		r.Snapshot()
	}
}
