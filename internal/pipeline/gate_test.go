package pipeline

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, _, w := g.stats(); w == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %d waiters", n)
		}
		time.Sleep(time.Millisecond)
	}
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
