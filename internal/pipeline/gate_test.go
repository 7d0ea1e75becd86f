package pipeline

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

func TestGate(t *testing.T) {
	g := newGate(2, nil)
	ctx := context.Background()
	for range 2 {
		if err := g.acquire(ctx, false); err != nil {
			t.Fatal(err)
		}
	}
	// A third waits, in order, and gives up with its context.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := g.acquire(short, false); err == nil {
		t.Fatal("acquired a third place of two")
	}
	got := make(chan int, 2)
	for i := range 2 {
		go func() {
			if g.acquire(ctx, false) == nil {
				got <- i
			}
		}()
		waitWaiters(t, g, i+1)
	}
	g.release()
	if first := <-got; first != 0 {
		t.Fatalf("waiter %d served first, want 0 (FIFO)", first)
	}
	// Growing lets the next one in; shrinking keeps holders.
	g.resize(3)
	<-got
	g.resize(1)
	if s, h, w := g.stats(); s != 1 || h != 3 || w != 0 {
		t.Fatalf("after shrinking: size %d held %d waiting %d", s, h, w)
	}
	g.release()
	g.release()
	if err := g.acquire(short, false); err == nil {
		t.Fatal("acquired over the new size")
	}
	g.release()
	if err := g.acquire(ctx, false); err != nil {
		t.Fatal(err)
	}
}

// The adaptive limit below the size holds the gate to it: workers wait here
// rather than being refused by the agency client; a raised limit lets the
// waiters in on the next release.
func TestGateFollowsLimit(t *testing.T) {
	var limit atomic.Int64
	limit.Store(1)
	g := newGate(3, func() int { return int(limit.Load()) })
	ctx := context.Background()
	if err := g.acquire(ctx, false); err != nil {
		t.Fatal(err)
	}
	got := make(chan int, 2)
	for i := range 2 {
		go func() {
			if g.acquire(ctx, false) == nil {
				got <- i
			}
		}()
		waitWaiters(t, g, i+1)
	}
	if p, h, w := g.stats(); p != 1 || h != 1 || w != 2 {
		t.Fatalf("limit 1: places %d held %d waiting %d, want 1 1 2", p, h, w)
	}
	limit.Store(5) // over the size: the size binds
	g.release()
	<-got
	<-got
	if p, h, w := g.stats(); p != 3 || h != 2 || w != 0 {
		t.Fatalf("limit 5 of size 3: places %d held %d waiting %d, want 3 2 0", p, h, w)
	}
	limit.Store(0) // a limit never closes the gate
	g.release()
	g.release()
	if err := g.acquire(ctx, false); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := g.stats(); p != 1 {
		t.Fatalf("limit 0: %d places, want 1", p)
	}
}

// A high inquiry waiting for a place goes before the normal ones that
// waited longer; within a lane the order is FIFO.
func TestGateServesTheHighLaneFirst(t *testing.T) {
	g := newGate(1, nil)
	ctx := context.Background()
	if err := g.acquire(ctx, false); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 4)
	for i, w := range []struct {
		name string
		high bool
	}{{"n1", false}, {"n2", false}, {"h1", true}, {"h2", true}} {
		go func() {
			if g.acquire(ctx, w.high) == nil {
				got <- w.name
				g.release()
			}
		}()
		waitWaiters(t, g, i+1)
	}
	g.release()
	var order []string
	for range 4 {
		order = append(order, <-got)
	}
	if want := []string{"h1", "h2", "n1", "n2"}; !slices.Equal(order, want) {
		t.Fatalf("served %v, want %v", order, want)
	}
}

func waitWaiters(t *testing.T, g *gate, n int) {
	t.Helper()
	testkit.WaitFor(t, 5*time.Second, fmt.Sprintf("%d waiters", n), func() bool { _, _, w := g.stats(); return w == n })
}

func BenchmarkGate(b *testing.B) {
	g := newGate(1<<20, nil)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			g.acquire(ctx, false)
			g.release()
		}
	})
}

// Capacity is places ÷ time per call: the mean of finished calls at a
// steady pace, and twice the mean age of the calls in flight as soon as
// they run longer than that (an agency that just slowed down).
func TestGateCapacity(t *testing.T) {
	g := newGate(10, nil)
	t0 := time.Unix(1000, 0)
	if c := g.capacity(t0); c != 0 {
		t.Fatalf("capacity %v before any call, want 0 (unknown)", c)
	}
	for i := range 100 { // 50 ms calls
		start := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		g.began(start)
		g.ended(start, 50*time.Millisecond)
	}
	if c := g.capacity(t0.Add(time.Second)); c < 199 || c > 201 {
		t.Fatalf("capacity %v at 50 ms per call over 10 places, want 200/s", c)
	}
	// Ten calls start 10 ms apart and are still running 300 ms after the
	// last: mean age 345 ms, so about 690 ms per call: 14.5/s.
	now := t0.Add(2 * time.Second)
	for i := range 10 {
		g.began(now.Add(time.Duration(i-9) * 10 * time.Millisecond))
	}
	now = now.Add(300 * time.Millisecond)
	if c := g.capacity(now); c < 14 || c > 15 {
		t.Fatalf("capacity %v with ten calls in flight for 300-390 ms, want about 14.5/s", c)
	}
	// They finish; the mean moves towards their duration.
	for i := range 10 {
		start := now.Add(time.Duration(i-39) * 10 * time.Millisecond)
		g.ended(start, 700*time.Millisecond)
	}
	if c := g.capacity(now); c >= 200 || c <= 14 {
		t.Fatalf("capacity %v after ten 700 ms calls, want between the two paces", c)
	}
	if _, _, w := g.stats(); w != 0 || g.calls != 0 || g.sumStart != 0 {
		t.Fatalf("calls %d, sum %v left after all ended", g.calls, g.sumStart)
	}
}
