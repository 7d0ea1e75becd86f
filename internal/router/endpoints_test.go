package router

import (
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/testkit"
)

// instancesWorld is a router with one cell c1 of three instances: i1 and
// i2 on backends, i3 where the test says.
func instancesWorld(t *testing.T, cfg Config, i3 string) (*world, [2]*backend) {
	t.Helper()
	w := newWorld(t, worldOptions{cells: []string{"c1"}, cfg: cfg})
	bs := [2]*backend{newBackend(t, "c1"), newBackend(t, "c1")}
	intakes := []string{bs[0].srv.URL, bs[1].srv.URL, i3}
	for i, id := range []string{"i1", "i2", "i3"} {
		w.publish(func(m *slotmap.Map) (*slotmap.Plan, error) {
			return m.SetInstance("c1", slotmap.Instance{ID: id, Intake: intakes[i], Admin: intakes[i]})
		})
	}
	testkit.WaitFor(t, 5*time.Second, "the router on the map with three instances", func() bool {
		t := w.router.table()
		return t != nil && len(t.byID["c1"].eps) == 3
	})
	return w, bs
}

func ejections(w *world) float64 {
	return testutil.ToFloat64(w.router.metrics.cell("c1").ejections)
}

// TestInstancesShareTheCalls: calls are spread over a cell's instances.
func TestInstancesShareTheCalls(t *testing.T) {
	third := newBackend(t, "c1")
	w, bs := instancesWorld(t, Config{}, third.srv.URL)
	const n = 300
	for i := range n {
		if a := w.create("user-" + string(rune('a'+i%26))); a.status != http.StatusAccepted {
			t.Fatalf("create %d: %v", i, a)
		}
	}
	for i, b := range []*backend{bs[0], bs[1], third} {
		if got := b.calls.Load(); got < n/6 {
			t.Errorf("instance %d served %d of %d calls", i+1, got, n)
		}
	}
}

// TestInstanceRefusingConnectionsCostsNothing: an instance whose port
// refuses connections costs no request (each goes to another instance,
// never having reached it) and is out of the rotation after EjectAfter
// attempts.
func TestInstanceRefusingConnectionsCostsNothing(t *testing.T) {
	w, bs := instancesWorld(t, Config{}, "http://"+testkit.FreeAddr(t))
	for i := range 100 {
		if a := w.create("user-x"); a.status != http.StatusAccepted {
			t.Fatalf("create %d with one instance refusing connections: %v", i, a)
		}
	}
	if got := ejections(w); got != 1 {
		t.Errorf("ejections = %v, want 1", got)
	}
	if got := bs[0].calls.Load() + bs[1].calls.Load(); got != 100 {
		t.Errorf("the two live instances served %d calls, want 100", got)
	}
	cells := w.router.Cells()
	if len(cells[0].Instances) != 3 || !cells[0].Instances[2].Ejected {
		t.Errorf("admin view of the instances: %+v", cells[0].Instances)
	}
}

// TestFailingInstanceIsEjected: an instance answering 502 is not retried
// (the request may have been delivered), and after EjectAfter failures it
// gets no calls until EjectFor has passed; a success puts it back in full.
func TestFailingInstanceIsEjected(t *testing.T) {
	sick := newBackend(t, "c1")
	sick.mode.Store(modeFail)
	cfg := DefaultConfig()
	cfg.Cell.EjectFor = 500 * time.Millisecond
	cfg.Cell.Breaker.MinCalls = 1000 // the cell's breaker stays out of it
	w, _ := instancesWorld(t, cfg, sick.srv.URL)
	bad := 0
	for range 200 {
		if a := w.create("user-y"); a.status != http.StatusAccepted {
			bad++
		}
	}
	if bad != cfg.Cell.EjectAfter {
		t.Errorf("%d of 200 answers failed, want %d (the failures that eject the instance)", bad, cfg.Cell.EjectAfter)
	}
	if got := sick.calls.Load(); got != int64(cfg.Cell.EjectAfter) {
		t.Errorf("the failing instance got %d calls, want %d", got, cfg.Cell.EjectAfter)
	}
	// Back in rotation after EjectFor, and out again at its next failure.
	testkit.WaitFor(t, 5*time.Second, "the instance back in rotation", func() bool { return !w.router.Cells()[0].Instances[2].Ejected })
	testkit.WaitFor(t, 5*time.Second, "the instance tried again and ejected again", func() bool {
		w.create("user-y")
		return ejections(w) >= 2
	})
	if got := sick.calls.Load(); got != int64(cfg.Cell.EjectAfter)+1 {
		t.Errorf("after its return the failing instance got %d calls in all, want %d", got, cfg.Cell.EjectAfter+1)
	}
}

// BenchmarkPick: the choice of an instance among three, one ejected.
func BenchmarkPick(b *testing.B) {
	u := &upstream{}
	for range 3 {
		u.eps = append(u.eps, &endpoint{u: u})
	}
	u.eps[1].ejectedUntil.Store(time.Now().Add(time.Hour).UnixNano())
	lp := &loop{pools: map[*endpoint]*pool{}, rnd: 1}
	b.ReportAllocs()
	for b.Loop() {
		if lp.pick(u, nil) == u.eps[1] {
			b.Fatal("picked the ejected instance")
		}
	}
}
