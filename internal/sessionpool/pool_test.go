package sessionpool_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellkit/cellkit/internal/agency"
	"github.com/cellkit/cellkit/internal/agencysim"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/sessionpool"
	"github.com/cellkit/cellkit/internal/telegram"
	"github.com/cellkit/cellkit/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

func dialer(addr string) sessionpool.Dialer[*agency.Conn] {
	return func(ctx context.Context) (*agency.Conn, error) {
		return agency.Dial(ctx, addr, telegram.NICE())
	}
}

func newPool(t testing.TB, addr string, cfg sessionpool.Config, opts sessionpool.Options[*agency.Conn]) *sessionpool.Pool[*agency.Conn] {
	t.Helper()
	opts.Dial = dialer(addr)
	p, err := sessionpool.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func full(p *sessionpool.Pool[*agency.Conn], n int) func() bool {
	return func() bool { st := p.Stats(); return st.Idle == n && st.Open == n }
}

func TestPrewarmAndBoundedConcurrency(t *testing.T) {
	sim := celltest.StartSim(t, telegram.NICE(), agencysim.Config{MaxSessions: 10, Latency: agencysim.FixedLatency(time.Millisecond)})
	p := newPool(t, sim.Addr().String(), sessionpool.Config{Name: "nice", Size: 3, BorrowTimeout: 5 * time.Second}, sessionpool.Options[*agency.Conn]{})
	testkit.WaitFor(t, 5*time.Second, "3 prewarmed sessions", full(p, 3))

	var inUse, maxInUse atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				s, err := p.Borrow(context.Background())
				if err != nil {
					errs <- err
					return
				}
				n := inUse.Add(1)
				for m := maxInUse.Load(); n > m && !maxInUse.CompareAndSwap(m, n); m = maxInUse.Load() {
				}
				_, err = s.Conn().Inquire(context.Background(), "user-1")
				inUse.Add(-1)
				p.Return(s, err == nil)
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := p.Stats()
	if maxInUse.Load() > 3 || st.Created != 3 || sim.Stats().PeakSessions > 3 {
		t.Fatalf("max in use %d, created %d, simulator peak %d; want all ≤ 3 and 3 created", maxInUse.Load(), st.Created, sim.Stats().PeakSessions)
	}
	if st.Borrows != 400 || st.Reused != 397 {
		t.Errorf("borrows %d, reused %d; want 400 and 397", st.Borrows, st.Reused)
	}
	if calls := sim.Stats().Calls; calls != 400 {
		t.Errorf("simulator saw %d calls, want 400", calls)
	}
}

func TestReuseIsTheSameConnection(t *testing.T) {
	sim := celltest.StartSim(t, telegram.NICE(), agencysim.Config{MaxSessions: 5})
	p := newPool(t, sim.Addr().String(), sessionpool.Config{Size: 1}, sessionpool.Options[*agency.Conn]{})
	testkit.WaitFor(t, 5*time.Second, "a session", full(p, 1))
	s1, err := p.Borrow(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	id, local := s1.ID(), s1.Conn().LocalAddr().String()
	p.Return(s1, true)
	s2, err := p.Borrow(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Return(s2, true)
	if s2.ID() != id || s2.Conn().LocalAddr().String() != local {
		t.Fatalf("second borrow got session %d on %s, want %d on %s", s2.ID(), s2.Conn().LocalAddr(), id, local)
	}
	if sim.Stats().Accepted != 1 {
		t.Fatalf("simulator accepted %d sessions, want 1", sim.Stats().Accepted)
	}
}

func TestBrokenSessionIsReplaced(t *testing.T) {
	sim := celltest.StartSim(t, telegram.NICE(), agencysim.Config{MaxSessions: 5})
	p := newPool(t, sim.Addr().String(), sessionpool.Config{Size: 2, BackoffBase: time.Millisecond}, sessionpool.Options[*agency.Conn]{})
	testkit.WaitFor(t, 5*time.Second, "2 sessions", full(p, 2))

	cfg := sim.Config()
	cfg.ResetRate = 1
	if err := sim.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	s, err := p.Borrow(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Conn().Inquire(context.Background(), "u"); err == nil {
		t.Fatal("call on a reset session succeeded")
	}
	p.Return(s, false)
	cfg.ResetRate = 0
	sim.SetConfig(cfg)
	testkit.WaitFor(t, 5*time.Second, "the replacement", func() bool { st := p.Stats(); return st.Created == 3 && st.Idle == 2 })
	if st := p.Stats(); st.Broken != 1 {
		t.Fatalf("broken = %d, want 1", st.Broken)
	}
	for i := 0; i < 2; i++ { // both sessions work
		s, err := p.Borrow(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer p.Return(s, true)
		if _, err := s.Conn().Inquire(context.Background(), "u"); err != nil {
			t.Fatalf("session %d after replacement: %v", s.ID(), err)
		}
	}
}

func TestSessionClosedByTheFarSideIsDetectedOnBorrow(t *testing.T) {
	sim := celltest.StartSim(t, telegram.NICE(), agencysim.Config{MaxSessions: 5, IdleTimeout: 100 * time.Millisecond})
	p := newPool(t, sim.Addr().String(), sessionpool.Config{Size: 1, HeartbeatIdle: -1, BackoffBase: time.Millisecond}, sessionpool.Options[*agency.Conn]{})
	testkit.WaitFor(t, 5*time.Second, "a session", full(p, 1))
	testkit.WaitFor(t, 5*time.Second, "the firewall to cut it", func() bool { return sim.Stats().IdleCuts == 1 })
	s, err := p.Borrow(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Return(s, true)
	if _, err := s.Conn().Inquire(context.Background(), "u"); err != nil {
		t.Fatalf("borrow handed out a dead session: %v", err)
	}
	if st := p.Stats(); st.Broken != 1 || st.Created != 2 {
		t.Fatalf("broken %d, created %d; want the cut session detected and replaced", st.Broken, st.Created)
	}
}

func TestHeartbeatsKeepTheFirewallAway(t *testing.T) {
	for _, tt := range []struct {
		name      string
		heartbeat time.Duration
		wantCuts  bool
	}{
		{"with heartbeats", 50 * time.Millisecond, false},
		{"without heartbeats", -1, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sim := celltest.StartSim(t, telegram.NICE(), agencysim.Config{MaxSessions: 5, IdleTimeout: 250 * time.Millisecond})
			p := newPool(t, sim.Addr().String(), sessionpool.Config{Size: 2, HeartbeatIdle: tt.heartbeat}, sessionpool.Options[*agency.Conn]{})
			testkit.WaitFor(t, 5*time.Second, "2 sessions", full(p, 2))
			time.Sleep(800 * time.Millisecond) // over three idle cut-offs
			st, sst := p.Stats(), sim.Stats()
			if cut := sst.IdleCuts > 0; cut != tt.wantCuts {
				t.Fatalf("idle cuts %d (heartbeats sent %d, answered %d), want cuts: %v", sst.IdleCuts, st.Heartbeats, sst.Heartbeats, tt.wantCuts)
			}
			if !tt.wantCuts && (st.Heartbeats == 0 || st.Created != 2) {
				t.Fatalf("heartbeats %d, created %d; want heartbeats on the same 2 sessions", st.Heartbeats, st.Created)
			}
		})
	}
}

func TestBorrowDeadlineAndFIFO(t *testing.T) {
	sim := celltest.StartSim(t, telegram.NICE(), agencysim.Config{MaxSessions: 5})
	p := newPool(t, sim.Addr().String(), sessionpool.Config{Size: 1, BorrowTimeout: 150 * time.Millisecond}, sessionpool.Options[*agency.Conn]{})
	testkit.WaitFor(t, 5*time.Second, "a session", full(p, 1))
	held, err := p.Borrow(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	_, err = p.Borrow(context.Background())
	waited := time.Since(began)
	if !errors.Is(err, sessionpool.ErrPoolExhausted) {
		t.Fatalf("Borrow from an empty pool = %v, want ErrPoolExhausted", err)
	}
	if waited < 150*time.Millisecond || waited > 2*time.Second {
		t.Fatalf("Borrow gave up after %v, want the 150ms deadline", waited)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Borrow(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Borrow with a cancelled context = %v, want context.Canceled", err)
	}

	// FIFO: three waiters queue in order and are served in order.
	order := make(chan int, 3)
	var wg sync.WaitGroup
	for i := 1; i <= 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := p.Borrow(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			p.Return(s, true)
		}()
		testkit.WaitFor(t, time.Second, "the waiter to queue", func() bool { return p.Stats().Waiters == i })
	}
	// The waiters' deadline is 150ms: hand over before it.
	p.Return(held, true)
	wg.Wait()
	close(order)
	want := 1
	for got := range order {
		if got != want {
			t.Fatalf("waiter %d served in place %d, want FIFO", got, want)
		}
		want++
	}
}

func TestResizeUnderLoad(t *testing.T) {
	sim := celltest.StartSim(t, telegram.NICE(), agencysim.Config{MaxSessions: 10, Latency: agencysim.FixedLatency(2 * time.Millisecond)})
	p := newPool(t, sim.Addr().String(), sessionpool.Config{Size: 3, BorrowTimeout: 5 * time.Second}, sessionpool.Options[*agency.Conn]{})
	testkit.WaitFor(t, 5*time.Second, "3 sessions", full(p, 3))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var calls atomic.Int64
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				s, err := p.Borrow(ctx)
				if err != nil {
					continue
				}
				_, err = s.Conn().Inquire(ctx, "u")
				p.Return(s, err == nil)
				calls.Add(1)
			}
		}()
	}
	p.Resize(6)
	testkit.WaitFor(t, 5*time.Second, "6 sessions open at the simulator", func() bool {
		return p.Stats().Open == 6 && sim.Stats().ActiveSessions == 6
	})
	p.Resize(2)
	testkit.WaitFor(t, 5*time.Second, "2 sessions left", func() bool {
		return p.Stats().Open == 2 && sim.Stats().ActiveSessions == 2
	})
	cancel()
	wg.Wait()
	if peak := sim.Stats().PeakSessions; peak > 6 {
		t.Fatalf("simulator saw %d sessions at once, want ≤ 6", peak)
	}
	if calls.Load() == 0 {
		t.Fatal("no calls went through during the resize")
	}
}

func TestStartsWhileTheAgencyIsDownAndFillsWhenItComesUp(t *testing.T) {
	addr := testkit.FreeAddr(t) // nobody listens: dials are refused
	p := newPool(t, addr, sessionpool.Config{Size: 3, BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond}, sessionpool.Options[*agency.Conn]{})
	testkit.WaitFor(t, 5*time.Second, "failed dials", func() bool { return p.Stats().DialErrors >= 2 })
	if st := p.Stats(); st.Open != 0 {
		t.Fatalf("open = %d with the agency down", st.Open)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s taken meanwhile: %v", addr, err)
	}
	sim := celltest.ServeSim(t, ln, telegram.NICE(), agencysim.Config{MaxSessions: 5})
	testkit.WaitFor(t, 5*time.Second, "the pool to fill", full(p, 3))
	if peak := sim.Stats().PeakSessions; peak != 3 {
		t.Fatalf("simulator peak %d, want 3", peak)
	}
}

func TestBackoffHoldsDialsUntilItEnds(t *testing.T) {
	addr := testkit.FreeAddr(t)
	c := testkit.NewClock(time.Unix(1_000_000, 0))
	p := newPool(t, addr, sessionpool.Config{Size: 2, BackoffBase: time.Minute, BackoffMax: time.Hour, CheckInterval: time.Hour},
		sessionpool.Options[*agency.Conn]{Now: c.Now})
	testkit.WaitFor(t, 5*time.Second, "the first dials to fail", func() bool { st := p.Stats(); return st.DialErrors == 2 && st.Dialing == 0 })
	p.Check()
	if st := p.Stats(); st.Dialing != 0 || st.DialErrors != 2 {
		t.Fatalf("dialled again during the backoff: %+v", st)
	}
	c.Advance(time.Minute) // the first backoff is at most the base
	p.Check()
	testkit.WaitFor(t, 5*time.Second, "one probe dial", func() bool { return p.Stats().DialErrors == 3 })
	if st := p.Stats(); st.DialErrors != 3 {
		t.Fatalf("after the backoff: %d dial errors, want exactly one probe", st.DialErrors)
	}
}

func TestMaxLifetimeRetiresOneAtATime(t *testing.T) {
	sim := celltest.StartSim(t, telegram.NICE(), agencysim.Config{MaxSessions: 10})
	c := testkit.NewClock(time.Unix(1_000_000, 0))
	p := newPool(t, sim.Addr().String(), sessionpool.Config{Size: 3, MaxLifetime: time.Hour, HeartbeatIdle: -1, CheckInterval: time.Hour},
		sessionpool.Options[*agency.Conn]{Now: c.Now})
	testkit.WaitFor(t, 5*time.Second, "3 sessions", full(p, 3))
	c.Advance(2 * time.Hour)
	for round := 1; round <= 3; round++ {
		p.Check()
		if st := p.Stats(); st.Retired != uint64(round) {
			t.Fatalf("round %d: %d retired, want one per round", round, st.Retired)
		}
		testkit.WaitFor(t, 5*time.Second, "the replacement", func() bool { st := p.Stats(); return st.Created == uint64(3+round) && st.Idle == 3 })
		if peak := sim.Stats().PeakSessions; peak > 3 {
			t.Fatalf("simulator saw %d sessions at once during replacement, want ≤ 3", peak)
		}
	}
	p.Check() // the replacements are young: nothing more to retire
	if st := p.Stats(); st.Retired != 3 {
		t.Fatalf("retired %d, want 3", st.Retired)
	}
}

func TestCloseReleasesWaiters(t *testing.T) {
	sim := celltest.StartSim(t, telegram.NICE(), agencysim.Config{MaxSessions: 5})
	p, err := sessionpool.New(sessionpool.Config{Size: 1, BorrowTimeout: 10 * time.Second}, sessionpool.Options[*agency.Conn]{Dial: dialer(sim.Addr().String())})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "a session", full(p, 1))
	held, _ := p.Borrow(context.Background())
	got := make(chan error, 1)
	go func() { _, err := p.Borrow(context.Background()); got <- err }()
	testkit.WaitFor(t, time.Second, "the waiter", func() bool { return p.Stats().Waiters == 1 })
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	if err := <-got; !errors.Is(err, sessionpool.ErrClosed) {
		t.Fatalf("waiting Borrow after Close = %v, want ErrClosed", err)
	}
	p.Return(held, true)
	<-closed
	testkit.WaitFor(t, 5*time.Second, "the simulator to see the session closed", func() bool { return sim.Stats().ActiveSessions == 0 })
}

func TestMetrics(t *testing.T) {
	sim := celltest.StartSim(t, telegram.NICE(), agencysim.Config{MaxSessions: 5})
	reg := prometheus.NewRegistry()
	m := sessionpool.NewMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"cell": "c1"}, reg))
	p := newPool(t, sim.Addr().String(), sessionpool.Config{Name: "nice", Size: 2}, sessionpool.Options[*agency.Conn]{Metrics: m})
	testkit.WaitFor(t, 5*time.Second, "2 sessions", full(p, 2))
	s, err := p.Borrow(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n, err := testutil.GatherAndCount(reg, "cellkit_pool_size", "cellkit_pool_in_use", "cellkit_pool_idle", "cellkit_pool_wait_seconds", "cellkit_pool_created_total")
	if err != nil || n != 5 {
		t.Fatalf("gathered %d series: %v", n, err)
	}
	if got := gauge(t, reg, "cellkit_pool_in_use"); got != 1 {
		t.Errorf("cellkit_pool_in_use = %v, want 1", got)
	}
	p.Return(s, true)
	if got := gauge(t, reg, "cellkit_pool_in_use"); got != 0 {
		t.Errorf("cellkit_pool_in_use = %v after Return, want 0", got)
	}
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

// BenchmarkPoolBorrow measures a Borrow and Return of an idle session (no
// I/O), from 2 goroutines over a pool of 4 real sessions.
func BenchmarkPoolBorrow(b *testing.B) {
	sim := celltest.StartSim(b, telegram.NICE(), agencysim.Config{MaxSessions: 10})
	p := newPool(b, sim.Addr().String(), sessionpool.Config{Size: 4, HeartbeatIdle: -1}, sessionpool.Options[*agency.Conn]{})
	testkit.WaitFor(b, 5*time.Second, "4 sessions", full(p, 4))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s, err := p.Borrow(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			p.Return(s, true)
		}
	})
}

// heldConn is a real agency session whose heartbeats and Close wait first
// for their channel, if it is not nil: the test decides how long a
// heartbeat is out, or a closing session stays counted.
type heldConn struct {
	*agency.Conn
	heartbeat, close <-chan struct{}
}

func (c *heldConn) Heartbeat(ctx context.Context) error {
	if c.heartbeat != nil {
		select {
		case <-c.heartbeat:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return c.Conn.Heartbeat(ctx)
}

func (c *heldConn) Close() error {
	if c.close != nil {
		<-c.close
	}
	return c.Conn.Close()
}

// dialHeld dials heldConns to the agency at addr.
func dialHeld(addr string, heartbeat, closing <-chan struct{}) func(context.Context) (*heldConn, error) {
	return func(ctx context.Context) (*heldConn, error) {
		conn, err := agency.Dial(ctx, addr, telegram.NICE())
		if err != nil {
			return nil, err
		}
		return &heldConn{Conn: conn, heartbeat: heartbeat, close: closing}, nil
	}
}

// A quiet pool heartbeats all its sessions in the same round; while they
// are out they are still up, or a cell's readiness (which counts them)
// would drop for the length of a heartbeat.
func TestSessionsOutForAHeartbeatAreUp(t *testing.T) {
	sim := celltest.StartSim(t, telegram.NICE(), agencysim.Config{MaxSessions: 10})
	c := testkit.NewClock(time.Unix(1_000_000, 0))
	hold := make(chan struct{})
	p, err := sessionpool.New(sessionpool.Config{Size: 3, HeartbeatIdle: time.Minute, CheckInterval: time.Hour},
		sessionpool.Options[*heldConn]{Now: c.Now, Dial: dialHeld(sim.Addr().String(), hold, nil)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	testkit.WaitFor(t, 5*time.Second, "3 sessions", func() bool { st := p.Stats(); return st.Idle == 3 && st.Open == 3 })
	c.Advance(2 * time.Minute)
	p.Check()
	if st := p.Stats(); st.Idle != 0 || st.Checking != 3 || st.Up() != 3 || st.Heartbeats != 3 {
		t.Fatalf("all 3 out for a heartbeat: %+v (up %d), want 3 checking and 3 up", st, st.Up())
	}
	close(hold)
	testkit.WaitFor(t, 5*time.Second, "the heartbeats answered", func() bool { st := p.Stats(); return st.Idle == 3 && st.Checking == 0 })
	if st := p.Stats(); st.Created != 3 || st.Broken != 0 {
		t.Fatalf("after the heartbeats: %+v, want the same 3 sessions", st)
	}
}

// Shrinking closes only the sessions beyond the new size. The ones it
// closes count against the size until their Close returns (an agency that
// counts sessions must not see more), and must not be taken for sessions
// still to close: a pool that did so closed every idle session, and a cell
// whose quota shrank (a cell added to the map) was not ready until it had
// dialled them all again.
func TestShrinkingKeepsTheSessionsItNeeds(t *testing.T) {
	sim := celltest.StartSim(t, telegram.NICE(), agencysim.Config{MaxSessions: 10})
	hold := make(chan struct{})
	released := sync.OnceFunc(func() { close(hold) })
	p, err := sessionpool.New(sessionpool.Config{Size: 6},
		sessionpool.Options[*heldConn]{Dial: dialHeld(sim.Addr().String(), nil, hold)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	t.Cleanup(released) // runs first: the pool's Close waits for the closes
	testkit.WaitFor(t, 5*time.Second, "6 sessions", func() bool { st := p.Stats(); return st.Idle == 6 && st.Open == 6 })
	p.Resize(4)
	if st := p.Stats(); st.Idle != 4 || st.Up() != 4 || st.Open != 6 || st.Retired != 2 {
		t.Fatalf("shrunk from 6 to 4 with the closes held: %+v (up %d), want 4 idle, 6 open (2 closing), 2 retired", st, st.Up())
	}
	// Shrinking again while the first closes are still out: the two closing
	// ones already count, so only two more go.
	p.Resize(2)
	if st := p.Stats(); st.Idle != 2 || st.Open != 6 || st.Retired != 4 {
		t.Fatalf("shrunk from 4 to 2 with 2 closes out: %+v, want 2 idle, 6 open, 4 retired", st)
	}
	released()
	testkit.WaitFor(t, 5*time.Second, "2 sessions left at the simulator", func() bool {
		st := p.Stats()
		return st.Open == 2 && st.Idle == 2 && sim.Stats().ActiveSessions == 2
	})
	if st := p.Stats(); st.Created != 6 || st.Dialing != 0 {
		t.Fatalf("after the closes: %+v, want the 6 first sessions and no dial", st)
	}
}
