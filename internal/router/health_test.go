package router

import (
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellkit/cellkit/internal/testkit"
)

// sent is one request of a load that runs across a hang.
type sent struct {
	at   time.Duration // after the hang began
	a    answer
	cell string
}

// loadAcross sends create requests for users from workers clients until
// stop, recording each with its time relative to began.
func loadAcross(w *world, users []string, workers int, began func() time.Time, stop <-chan struct{}) []sent {
	var mu sync.Mutex
	var out []sent
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				at := time.Since(began())
				a := w.create(users[(i+n)%len(users)])
				mu.Lock()
				out = append(out, sent{at: at, a: a, cell: a.header.Get("Cellkit-Cell")})
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	return out
}

func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)*99/100]
}

// TestHungCellIsFoundByItsHealthChecks: a cell that hangs (it takes
// connections and answers nothing, as a frozen process does) is found by
// the router's health checks at their defaults, not by its users'
// timeouts: the requests in flight when it is found are answered 504 at
// once (none waits the 15 s cell timeout), from 1 s after the hang its users
// get 503 with Retry-After in < 50 ms, no user's request is spent on a
// trial while it hangs, and once it answers again it serves within 2 s.
func TestHungCellIsFoundByItsHealthChecks(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1", "c2"}})
	if got := w.router.cfg.Cell; got.ProbeInterval != 200*time.Millisecond || got.ProbeTimeout != 250*time.Millisecond || got.Timeout != 15*time.Second {
		t.Fatalf("defaults: probe every %v within %v, cell timeout %v", got.ProbeInterval, got.ProbeTimeout, got.Timeout)
	}
	m := w.currentMap()
	users := append(usersIn(t, m, "c1", 8), usersIn(t, m, "c2", 8)...)
	for _, u := range users {
		if a := w.create(u); a.status != http.StatusAccepted {
			t.Fatalf("before the hang: %v", a)
		}
	}
	hung := w.backends["c1"]
	var mu sync.Mutex
	var began time.Time
	stop := make(chan struct{})
	done := make(chan []sent)
	go func() {
		done <- loadAcross(w, users, 16, func() time.Time { mu.Lock(); defer mu.Unlock(); return began }, stop)
	}()
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	began = time.Now()
	hung.mode.Store(modeHang)
	mu.Unlock()
	time.Sleep(time.Second)
	callsAt1s := hung.calls.Load()
	time.Sleep(time.Second)
	trials := hung.calls.Load() - callsAt1s
	thawed := time.Now()
	hung.mode.Store(modeOK)
	testkit.WaitFor(t, 5*time.Second, "c1 serving again", func() bool {
		return w.create(usersIn(t, m, "c1", 1)[0]).status == http.StatusAccepted
	})
	back := time.Since(thawed)
	close(stop)
	load := <-done

	var late []time.Duration // c1's answers to requests sent from 1 s after the hang
	var other []string
	for _, s := range load {
		if s.at < 0 {
			continue // before the hang
		}
		if s.a.took >= 2*time.Second {
			t.Errorf("a request sent %v after the hang waited %v (%d)", s.at, s.a.took, s.a.status)
		}
		switch {
		case s.cell == "c2" && s.a.status != http.StatusAccepted:
			other = append(other, s.a.String())
		case s.cell == "c1" && s.at >= time.Second && s.at < 2*time.Second:
			late = append(late, s.a.took)
			if s.a.status != http.StatusServiceUnavailable || s.a.header.Get("Retry-After") == "" {
				t.Errorf("c1 %v after the hang: %v %v, want 503 with Retry-After", s.at, s.a, s.a.header)
			} else if p := problemOf(t, s.a); p["type"] != "https://cellkit.dev/problems/cell-unavailable" {
				t.Errorf("c1 %v after the hang: type %v, want cell-unavailable", s.at, p["type"])
			}
		}
	}
	if len(other) > 0 {
		t.Errorf("c2 failed %d requests while c1 hung: %v", len(other), other[:min(5, len(other))])
	}
	if len(late) < 20 {
		t.Fatalf("only %d requests for c1 between 1 s and 2 s after the hang", len(late))
	}
	if q := p99(late); q >= 50*time.Millisecond {
		t.Errorf("c1's users from 1 s after the hang: p99 %v, want < 50 ms", q)
	}
	if trials != 0 {
		t.Errorf("%d users' requests reached the hung cell between 1 s and 2 s after the hang: the breaker's trials must be the checks", trials)
	}
	if back > 2*time.Second {
		t.Errorf("c1 served again %v after it answered, want within 2 s", back)
	}
	t.Logf("%d requests; c1 from 1 s: %d answers, p99 %v; back %v after the thaw", len(load), len(late), p99(late), back)
	if got := testutil.ToFloat64(w.router.metrics.cell("c1").probes[missed]); got < probeFall {
		t.Errorf("cellkit_router_probes_total{result=missed} = %v", got)
	}
}

// TestHungInstanceLeavesRotation: in a cell of three instances, one that
// hangs is out of rotation once its health checks miss: its calls in
// flight are answered 504 at once, and after that every request goes to
// the two others and is served.
func TestHungInstanceLeavesRotation(t *testing.T) {
	third := newBackend(t, "c1")
	w, bs := instancesWorld(t, Config{}, third.srv.URL)
	for i := range 30 {
		if a := w.create("user-" + string(rune('a'+i%26))); a.status != http.StatusAccepted {
			t.Fatalf("before the hang: %v", a)
		}
	}
	began := time.Now()
	third.mode.Store(modeHang)
	stop := make(chan struct{})
	done := make(chan []sent)
	go func() {
		done <- loadAcross(w, []string{"user-a", "user-b", "user-c", "user-d"}, 8, func() time.Time { return began }, stop)
	}()
	time.Sleep(2 * time.Second)
	close(stop)
	load := <-done
	for _, s := range load {
		if s.a.took >= time.Second {
			t.Errorf("a request sent %v after the hang waited %v (%d)", s.at, s.a.took, s.a.status)
		}
		if s.at >= time.Second && s.a.status != http.StatusAccepted {
			t.Errorf("%v after the hang: %v, want 202 from the two instances left", s.at, s.a)
		}
	}
	cells := w.router.Cells()
	if !cells[0].Instances[2].Ejected {
		t.Errorf("admin view of the instances: %+v", cells[0].Instances)
	}
	if got := ejections(w); got != 1 {
		t.Errorf("ejections = %v, want 1", got)
	}
	if bs[0].calls.Load() == 0 || bs[1].calls.Load() == 0 {
		t.Errorf("the two instances left served %d and %d calls", bs[0].calls.Load(), bs[1].calls.Load())
	}
	// Back in rotation once it answers its checks again.
	third.mode.Store(modeOK)
	testkit.WaitFor(t, 2*time.Second, "the instance back in rotation", func() bool { return !w.router.Cells()[0].Instances[2].Ejected })
}

// TestNoHealthChecks: a negative ProbeInterval checks nothing; the
// breaker's trials are then users' requests, as before the checks.
func TestNoHealthChecks(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Cell.ProbeInterval = -1
	w := newWorld(t, worldOptions{cells: []string{"c1"}, cfg: cfg})
	if a := w.create("u1"); a.status != http.StatusAccepted {
		t.Fatal(a)
	}
	time.Sleep(300 * time.Millisecond)
	if n := w.backends["c1"].probes.Load(); n != 0 {
		t.Errorf("%d health checks with ProbeInterval -1", n)
	}
}

// TestUnhealthyInstances: an instance whose health check answers 503 (it
// cannot take work: its streams have no leader, its queue is out of reach)
// leaves the rotation while others can take the calls, without its calls
// in flight being cut; when every instance answers so (they all wait for
// an election), the calls still go to them and the breaker stays closed.
func TestUnhealthyInstances(t *testing.T) {
	third := newBackend(t, "c1")
	w, bs := instancesWorld(t, Config{}, third.srv.URL)
	third.delay.Store(int64(time.Second)) // a call in flight there when it turns unhealthy
	done := make(chan answer, 1)
	go func() {
		for {
			if a := w.create("user-slow"); third.calls.Load() > 0 {
				done <- a
				return
			}
		}
	}()
	testkit.WaitFor(t, 5*time.Second, "a call at the third instance", func() bool { return third.active.Load() > 0 })
	third.unhealthy.Store(true)
	testkit.WaitFor(t, 2*time.Second, "the unhealthy instance out of rotation", func() bool { return w.router.Cells()[0].Instances[2].Ejected })
	if a := <-done; a.status != http.StatusAccepted {
		t.Errorf("the call in flight at the unhealthy instance: %v, want it answered, not cut", a)
	}
	third.delay.Store(0)
	before := third.calls.Load()
	for i := range 30 {
		if a := w.create("user-" + string(rune('a'+i%26))); a.status != http.StatusAccepted {
			t.Fatalf("with one instance unhealthy: %v", a)
		}
	}
	if got := third.calls.Load() - before; got != 0 {
		t.Errorf("the unhealthy instance got %d calls while out of rotation", got)
	}
	for _, b := range bs {
		b.unhealthy.Store(true)
	}
	testkit.WaitFor(t, 2*time.Second, "every instance out of rotation", func() bool {
		for _, in := range w.router.Cells()[0].Instances {
			if !in.Ejected {
				return false
			}
		}
		return true
	})
	for range 10 {
		if a := w.create("user-q"); a.status != http.StatusAccepted {
			t.Fatalf("with every instance unhealthy (not hung): %v, want the calls to go on", a)
		}
	}
	if st := w.router.Cells()[0]; st.Breaker != "closed" {
		t.Errorf("breaker %s with every instance unhealthy, want closed", st.Breaker)
	}
}

// TestProbeOfARefusedHandshake: an instance that refuses the check's TLS
// handshake (it wants a client certificate the router lacks, or its own
// is one the router does not trust) answered:
// it is unhealthy, not missed, so that its calls in flight are not cut
// as a hang's.
func TestProbeOfARefusedHandshake(t *testing.T) {
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	wantsCert := httptest.NewUnstartedServer(ok)
	wantsCert.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	wantsCert.Config.ErrorLog = log.New(io.Discard, "", 0)
	wantsCert.StartTLS()
	defer wantsCert.Close()
	plain := httptest.NewServer(ok)
	defer plain.Close()
	trusting := &http.Client{Transport: wantsCert.Client().Transport, Timeout: 2 * time.Second}
	untrusting := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{}}, Timeout: 2 * time.Second}
	ctx := testkit.Context(t, 10*time.Second)
	var r Router
	for _, c := range []struct {
		name   string
		client *http.Client
		url    string
	}{
		{"a client certificate wanted", trusting, wantsCert.URL},
		{"its certificate not trusted", untrusting, wantsCert.URL},
	} {
		if got := r.probe(ctx, c.client, c.url+"/v1/health", "c1"); got != unhealthy {
			t.Errorf("%s: %v, want unhealthy", c.name, got)
		}
	}
	if got := r.probe(ctx, &http.Client{Timeout: 2 * time.Second}, plain.URL+"/v1/health", "c1"); got != healthy {
		t.Errorf("a plain check of a plain server: %v, want healthy", got)
	}
}
