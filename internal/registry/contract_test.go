package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/testkit"
)

// harness adapts one backend to the contract suite.
type harness struct {
	// open returns a new client of the same registry store (like a new process).
	open func(t *testing.T) Registry
	// stop makes the registry unreachable; start makes it reachable again (it may have lost its data).
	stop, start func(t *testing.T)
	// holdAndDie takes the writer lock in a holder that then dies when kill is called
	// (a process killed, or a Consul session destroyed).
	holdAndDie func(t *testing.T, r Registry) (kill func())
}

// firstMap is version 1: 64 slots over two cells.
func firstMap(t *testing.T) *slotmap.Map {
	t.Helper()
	m, err := slotmap.New(64, map[string]int{"nice": 80})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c1", "c2"} {
		p, err := m.AddCell(slotmap.Cell{ID: id, Weight: 1, Intake: "http://127.0.0.1:8001", Admin: "http://127.0.0.1:9001"})
		if err != nil {
			t.Fatal(err)
		}
		m = p.After
	}
	// Renumber as version 1: the registry's first map.
	data, _ := m.Encode()
	m, err = slotmap.Decode(bytes.Replace(data, []byte(`"version":3`), []byte(`"version":1`), 1))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// pin plans the next version of m: user pinned to c1.
func pin(t *testing.T, m *slotmap.Map, user string) *slotmap.Map {
	t.Helper()
	p, err := m.SetOverride(user, "c1")
	if err != nil {
		t.Fatal(err)
	}
	return p.After
}

// runContract proves the Registry contract against one backend. The steps
// share one store and run in order; the last one stops and restarts it.
func runContract(t *testing.T, h harness) {
	ctx := testkit.Context(t, 2*time.Minute)
	r := h.open(t)

	t.Run("empty registry has no map", func(t *testing.T) {
		if m, err := r.Load(ctx); !errors.Is(err, ErrNoMap) {
			t.Fatalf("Load() = %v, %v; want ErrNoMap", m, err)
		}
	})

	t.Run("create and load", func(t *testing.T) {
		m := firstMap(t)
		if err := r.CompareAndSwap(ctx, 0, m); err != nil {
			t.Fatalf("CompareAndSwap(0, v1) = %v", err)
		}
		if err := r.CompareAndSwap(ctx, 0, m); !errors.Is(err, ErrConflict) {
			t.Fatalf("second CompareAndSwap(0, v1) = %v, want ErrConflict", err)
		}
		got, err := h.open(t).Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := m.Encode()
		if enc, _ := got.Encode(); !bytes.Equal(enc, want) {
			t.Fatalf("Load() = %s, want %s", enc, want)
		}
	})

	t.Run("refuses bad writes and keeps the map", func(t *testing.T) {
		before, err := r.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name    string
			old     int64
			m       *slotmap.Map
			wantErr string
		}{
			{"same version", before.Version(), before, "versions only go up"},
			{"nil map", before.Version(), nil, "nil map"},
			{"stale base", before.Version() - 1, pin(t, before, "x"), "conflict"},
			{"base from the future", before.Version() + 5, pin(t, pin(t, pin(t, pin(t, pin(t, pin(t, before, "a"), "b"), "c"), "d"), "e"), "f"), "conflict"},
		}
		for _, tt := range tests {
			err := r.CompareAndSwap(ctx, tt.old, tt.m)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: CompareAndSwap = %v, want error containing %q", tt.name, err, tt.wantErr)
			}
		}
		after, err := r.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b1, _ := before.Encode()
		b2, _ := after.Encode()
		if !bytes.Equal(b1, b2) {
			t.Fatal("a refused write changed the stored map")
		}
	})

	t.Run("racing writers: one winner per version, no lost update", func(t *testing.T) {
		start, err := r.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		const writers, each = 8, 5
		var (
			mu        sync.Mutex
			winners   = map[int64]int{}
			conflicts int
			wg        sync.WaitGroup
			errs      = make(chan error, writers)
		)
		for g := 0; g < writers; g++ {
			client := h.open(t)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; k < each; k++ {
					for {
						cur, err := client.Load(ctx)
						if err != nil {
							errs <- err
							return
						}
						p, err := cur.SetOverride(fmt.Sprintf("w%d-%d", g, k), "c2")
						if err != nil {
							errs <- err
							return
						}
						err = client.CompareAndSwap(ctx, cur.Version(), p.After)
						if errors.Is(err, ErrConflict) {
							mu.Lock()
							conflicts++
							mu.Unlock()
							continue
						}
						if err != nil {
							errs <- err
							return
						}
						mu.Lock()
						if prev, dup := winners[p.After.Version()]; dup {
							errs <- fmt.Errorf("version %d won by writers %d and %d", p.After.Version(), prev, g)
						}
						winners[p.After.Version()] = g
						mu.Unlock()
						break
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		final, err := r.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := start.Version() + writers*each; final.Version() != want || len(winners) != writers*each {
			t.Fatalf("final version %d with %d winning writes, want %d and %d", final.Version(), len(winners), want, writers*each)
		}
		ov := final.Overrides()
		for g := 0; g < writers; g++ {
			for k := 0; k < each; k++ {
				if ov[fmt.Sprintf("w%d-%d", g, k)] != "c2" {
					t.Fatalf("update w%d-%d was lost", g, k)
				}
			}
		}
		t.Logf("%d writers × %d updates: %d conflicts re-planned", writers, each, conflicts)
	})

	t.Run("watch delivers newer versions in order", func(t *testing.T) {
		start, err := r.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		var (
			mu   sync.Mutex
			seen []int64
			done = make(chan struct{})
		)
		go func() {
			defer close(done)
			h.open(t).Watch(wctx, start.Version(), func(ev Event) {
				if ev.Map != nil {
					mu.Lock()
					seen = append(seen, ev.Map.Version())
					mu.Unlock()
				}
			})
		}()
		cur := start
		for i := 0; i < 10; i++ {
			next := pin(t, cur, fmt.Sprintf("watch-%d", i))
			if err := r.CompareAndSwap(ctx, cur.Version(), next); err != nil {
				t.Fatal(err)
			}
			cur = next
			if i%3 == 0 {
				time.Sleep(30 * time.Millisecond) // let some versions arrive one by one
			}
		}
		testkit.WaitFor(t, 10*time.Second, "the watcher to see the last version", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(seen) > 0 && seen[len(seen)-1] == cur.Version()
		})
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for i, v := range seen {
			if v <= start.Version() || (i > 0 && v <= seen[i-1]) {
				t.Fatalf("watch delivered versions %v after %d: not strictly increasing", seen, start.Version())
			}
		}
		t.Logf("10 commits seen as %d deliveries: %v", len(seen), seen)
	})

	t.Run("writer lock excludes a second holder", func(t *testing.T) {
		l, err := r.Lock(ctx, "first writer")
		if err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		other := h.open(t)
		_, err = other.Lock(short, "second writer")
		var locked *LockedError
		if !errors.As(err, &locked) || !strings.Contains(err.Error(), "first writer") {
			t.Fatalf("second Lock = %v, want a LockedError naming the first writer", err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("second Unlock = %v, want nil", err)
		}
		l2, err := other.Lock(ctx, "second writer")
		if err != nil {
			t.Fatalf("Lock after Unlock = %v", err)
		}
		if err := l2.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("writer lock is released when its holder dies", func(t *testing.T) {
		kill := h.holdAndDie(t, h.open(t))
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		if l, err := r.Lock(short, "waiting writer"); err == nil {
			l.Unlock(ctx)
			t.Fatal("Lock succeeded while another holder is alive")
		}
		kill()
		lctx, cancel2 := context.WithTimeout(ctx, 30*time.Second)
		defer cancel2()
		began := time.Now()
		l, err := r.Lock(lctx, "waiting writer")
		if err != nil {
			t.Fatalf("Lock after the holder died = %v", err)
		}
		t.Logf("lock taken over %v after the holder died", time.Since(began).Round(time.Millisecond))
		l.Unlock(ctx)
	})

	t.Run("follower keeps the map while the registry is down and catches up", func(t *testing.T) {
		f, err := NewFollower(FollowerConfig{StaleAfter: 500 * time.Millisecond}, FollowerOptions{Registry: h.open(t), Registerer: prometheus.WrapRegistererWithPrefix("cellkit_test_", prometheus.NewRegistry())})
		if err != nil {
			t.Fatal(err)
		}
		fctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); f.Run(fctx) }()
		defer func() { cancel(); <-done }()
		if err := f.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		cur, err := r.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 5*time.Second, "the follower to reach the current version", func() bool {
			return f.Map().Version() == cur.Version() && !f.Status().Stale
		})

		h.stop(t)
		testkit.WaitFor(t, 30*time.Second, "the follower to report the map stale", func() bool {
			st := f.Status()
			return st.Stale && st.LastError != ""
		})
		if got := f.Map(); got == nil || got.Version() != cur.Version() {
			t.Fatalf("follower map version = %v while the registry is down, want the last good %d", got, cur.Version())
		}
		if r := f.Map().Lookup("anyone"); r.Cell == "" {
			t.Fatal("follower map does not route while the registry is down")
		}

		h.start(t)
		writer := h.open(t)
		base, err := writer.Load(ctx)
		old := int64(0)
		switch {
		case errors.Is(err, ErrNoMap): // the registry came back empty: restore from the follower's map
			base = f.Map()
		case err != nil:
			t.Fatal(err)
		default:
			old = base.Version()
		}
		next := pin(t, base, "after-restart")
		if err := writer.CompareAndSwap(ctx, old, next); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 30*time.Second, "the follower to catch up", func() bool {
			return f.Map().Version() == next.Version() && !f.Status().Stale
		})
	})
}
