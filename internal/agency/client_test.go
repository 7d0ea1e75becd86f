package agency_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellkit/cellkit/internal/agency"
	"github.com/cellkit/cellkit/internal/agencysim"
	"github.com/cellkit/cellkit/internal/breaker"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/sessionpool"
	"github.com/cellkit/cellkit/internal/telegram"
	"github.com/cellkit/cellkit/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

func newClient(t testing.TB, cfg agency.Config, opts agency.Options) *agency.Client {
	t.Helper()
	c, err := agency.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	testkit.WaitFor(t, 5*time.Second, "the pool to fill", func() bool { return c.Status().Pool.Idle == cfg.Sessions })
	return c
}

func TestInquireBothProfiles(t *testing.T) {
	for _, profile := range []telegram.Profile{telegram.NICE(), telegram.KCB()} {
		t.Run(profile.Name, func(t *testing.T) {
			sim := celltest.StartSim(t, profile, agencysim.Config{MaxSessions: 4})
			c := newClient(t, agency.Config{Name: profile.Name, Addr: sim.Addr().String(), Profile: profile, Sessions: 2}, agency.Options{})
			for _, user := range []string{"u-1", "user-0000000000042", "x"} {
				res, err := c.Inquire(context.Background(), user)
				if err != nil {
					t.Fatalf("Inquire(%q) = %v", user, err)
				}
				if want := agencysim.Score(user); res.Score != want {
					t.Errorf("Inquire(%q).Score = %d, want %d", user, res.Score, want)
				}
			}
		})
	}
}

func TestAgencyErrorKeepsTheSessionAndTripsTheBreaker(t *testing.T) {
	sim := celltest.StartSim(t, telegram.NICE(), agencysim.Config{MaxSessions: 4, ErrorRate: 1})
	reg := prometheus.NewRegistry()
	m := agency.NewMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"cell": "c1"}, reg))
	c := newClient(t, agency.Config{Name: "nice", Addr: sim.Addr().String(), Sessions: 2,
		Breaker: breaker.Config{MinCalls: 5, Window: 10}}, agency.Options{Metrics: m})
	for i := 0; i < 5; i++ {
		_, err := c.Inquire(context.Background(), "u")
		var ce *agency.CodeError
		if !errors.As(err, &ce) || ce.Code != agencysim.CodeAgencyError {
			t.Fatalf("call %d: %v, want a CodeError %s", i, err, agencysim.CodeAgencyError)
		}
	}
	if st := c.Status(); st.Pool.Broken != 0 || st.Breaker != "open" {
		t.Fatalf("status %+v: want no broken session and an open breaker", st)
	}
	calls := sim.Stats().Calls
	began := time.Now()
	_, err := c.Inquire(context.Background(), "u")
	if !errors.Is(err, agency.ErrCircuitOpen) || time.Since(began) > 50*time.Millisecond {
		t.Fatalf("call with the breaker open = %v after %v, want ErrCircuitOpen at once", err, time.Since(began))
	}
	if sim.Stats().Calls != calls {
		t.Fatal("a call reached the agency through an open breaker")
	}
	if got := testutil.ToFloat64(m.BreakerState("nice")); got != float64(breaker.Open) {
		t.Errorf("breaker state metric = %v, want %d", got, breaker.Open)
	}

	// Operators: force closed lets calls through, reset closes.
	celltest.SetSim(t, sim, func(c *agencysim.Config) { c.ErrorRate = 0 })
	c.Breaker().ForceClose()
	if _, err := c.Inquire(context.Background(), "u"); err != nil {
		t.Fatalf("call with the breaker forced closed = %v", err)
	}
	c.Breaker().ForceOpen()
	if _, err := c.Inquire(context.Background(), "u"); !errors.Is(err, agency.ErrCircuitOpen) {
		t.Fatalf("call with the breaker forced open = %v", err)
	}
	c.Breaker().Reset()
	if _, err := c.Inquire(context.Background(), "u"); err != nil {
		t.Fatalf("call after reset = %v", err)
	}
}

func TestSlowCallsTripTheBreaker(t *testing.T) {
	sim := celltest.StartSim(t, telegram.NICE(), agencysim.Config{MaxSessions: 4, Latency: agencysim.FixedLatency(60 * time.Millisecond)})
	c := newClient(t, agency.Config{Name: "nice", Addr: sim.Addr().String(), Sessions: 2,
		Breaker: breaker.Config{MinCalls: 4, Window: 4, SlowCall: 50 * time.Millisecond}}, agency.Options{})
	for i := 0; i < 4; i++ {
		if _, err := c.Inquire(context.Background(), "u"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Inquire(context.Background(), "u"); !errors.Is(err, agency.ErrCircuitOpen) {
		t.Fatalf("after 4 slow calls: %v, want ErrCircuitOpen", err)
	}
}

func TestExcessCallsAreRejectedNotQueued(t *testing.T) {
	sim := celltest.StartSim(t, telegram.NICE(), agencysim.Config{MaxSessions: 4, Latency: agencysim.FixedLatency(300 * time.Millisecond)})
	c := newClient(t, agency.Config{Name: "nice", Addr: sim.Addr().String(), Sessions: 2}, agency.Options{})
	var wg sync.WaitGroup
	results := make(chan error, 10)
	fast := make(chan time.Duration, 10)
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			began := time.Now()
			_, err := c.Inquire(context.Background(), "u")
			if errors.Is(err, agency.ErrLimited) {
				fast <- time.Since(began)
			}
			results <- err
		}()
	}
	wg.Wait()
	close(results)
	close(fast)
	ok, limited := 0, 0
	for err := range results {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, agency.ErrLimited):
			limited++
		default:
			t.Fatalf("unexpected error %v", err)
		}
	}
	if ok > 2 || ok+limited != 10 || limited < 8 {
		t.Fatalf("%d ok, %d limited; want at most 2 admitted (the pool size), the rest limited", ok, limited)
	}
	for d := range fast {
		if d > 100*time.Millisecond {
			t.Fatalf("a rejection took %v: rejections must not wait for the 300ms call", d)
		}
	}
}

func TestTimeoutBreaksTheSession(t *testing.T) {
	sim := celltest.StartSim(t, telegram.NICE(), agencysim.Config{MaxSessions: 4, Latency: agencysim.FixedLatency(time.Second)})
	c := newClient(t, agency.Config{Name: "nice", Addr: sim.Addr().String(), Sessions: 1, CallTimeout: 50 * time.Millisecond,
		Pool: sessionpool.Config{BackoffBase: time.Millisecond}}, agency.Options{})
	_, err := c.Inquire(context.Background(), "u")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slow call = %v, want a timeout", err)
	}
	// Mid-call, the answer may still come: the session is out of step and
	// must be replaced, not reused.
	testkit.WaitFor(t, 5*time.Second, "the replacement session", func() bool {
		st := c.Status().Pool
		return st.Broken == 1 && st.Created == 2 && st.Idle == 1
	})
}

func TestCallerCancellationIsNotAnAgencyFailure(t *testing.T) {
	sim := celltest.StartSim(t, telegram.NICE(), agencysim.Config{MaxSessions: 4, Latency: agencysim.FixedLatency(time.Second)})
	c := newClient(t, agency.Config{Name: "nice", Addr: sim.Addr().String(), Sessions: 1,
		Breaker: breaker.Config{MinCalls: 1, Window: 1}}, agency.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := c.Inquire(ctx, "u"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Inquire with a short caller deadline = %v", err)
	}
	if st := c.Status(); st.Breaker != "closed" {
		t.Fatalf("breaker %s after the caller gave up, want closed", st.Breaker)
	}
}

func TestResizeFollowsTheQuota(t *testing.T) {
	sim := celltest.StartSim(t, telegram.NICE(), agencysim.Config{MaxSessions: 10})
	c := newClient(t, agency.Config{Name: "nice", Addr: sim.Addr().String(), Sessions: 2}, agency.Options{})
	c.Resize(5)
	testkit.WaitFor(t, 5*time.Second, "5 sessions", func() bool { st := c.Status(); return st.Pool.Idle == 5 && st.Limit == 5 })
	c.Resize(1)
	testkit.WaitFor(t, 5*time.Second, "1 session", func() bool { return sim.Stats().ActiveSessions == 1 })
	if st := c.Status(); st.Limit != 1 || st.Pool.Size != 1 {
		t.Fatalf("after resize to 1: %+v", st)
	}
}

func TestSessionOverTheAgencyLimitNeverEntersThePool(t *testing.T) {
	sim := celltest.StartSim(t, telegram.NICE(), agencysim.Config{MaxSessions: 2})
	c, err := agency.New(agency.Config{Name: "nice", Addr: sim.Addr().String(), Sessions: 3,
		Pool: sessionpool.Config{BackoffBase: 20 * time.Millisecond, BackoffMax: 50 * time.Millisecond}}, agency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The dials run side by side: the refused one may end before the
	// others are open. Through a few refused retries, the pool fills to
	// the agency's limit and never beyond.
	maxOpen := 0
	testkit.WaitFor(t, 5*time.Second, "two sessions open and three refused dials", func() bool {
		st := c.Status().Pool
		maxOpen = max(maxOpen, st.Open)
		return st.Open == 2 && st.DialErrors >= 3
	})
	if maxOpen > 2 {
		t.Fatalf("pool held %d sessions with an agency limit of 2", maxOpen)
	}
	if sim.Stats().Refused == 0 {
		t.Fatal("the simulator refused nothing")
	}
}
