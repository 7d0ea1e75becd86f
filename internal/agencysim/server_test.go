package agencysim

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellkit/cellkit/internal/telegram"
	"github.com/cellkit/cellkit/internal/testkit"
	"github.com/cellkit/cellkit/internal/wire"
)

func profiles() []telegram.Profile { return []telegram.Profile{telegram.NICE(), telegram.KCB()} }

func TestCallsAreAnsweredWithTheUsersScore(t *testing.T) {
	t.Parallel()
	for _, p := range profiles() {
		t.Run(p.Name, func(t *testing.T) {
			t.Parallel()
			srv := startServer(t, p, Config{})
			c := dial(t, srv)
			for i, key := range []string{"user-1", "user-2", "user-1", "U0000000000000000042"} {
				trace := uint64(100000000000 + i)
				got := c.mustCall(trace, key)
				want := telegram.Message{
					Type: telegram.Response, TraceNo: trace, UserKey: key,
					RespCode: telegram.CodeOK, Score: Score(key), Text: TextOK,
				}
				if got != want {
					t.Errorf("call(%d, %q) = %+v, want %+v", trace, key, got, want)
				}
			}
			hb, err := c.heartbeat(7)
			if err != nil {
				t.Fatalf("heartbeat: %v", err)
			}
			if hb.Type != telegram.HeartbeatAck || hb.TraceNo != 7 || hb.RespCode != telegram.CodeOK {
				t.Errorf("heartbeat answer = %+v, want a 0810 echoing trace 7 with code 0000", hb)
			}
			st := srv.Stats()
			if st.Calls != 4 || st.Heartbeats != 1 || st.Accepted != 1 || st.ActiveSessions != 1 || st.BytesOut == 0 {
				t.Errorf("Stats() = %+v, want 4 calls, 1 heartbeat, 1 accepted and active session, bytes out", st)
			}
		})
	}
}

func TestSessionLimit(t *testing.T) {
	t.Parallel()
	const limit = 3
	srv := startServer(t, telegram.NICE(), Config{MaxSessions: limit})

	// A burst of connections at once: exactly `limit` are admitted.
	const burst = 10
	clients := make([]*client, burst)
	for i := range clients {
		clients[i] = dial(t, srv)
	}
	st := waitStats(t, srv, "every connection admitted or refused", func(st Stats) bool { return st.Accepted+st.Refused == burst })
	if st.Accepted != limit || st.Refused != burst-limit || st.PeakSessions != limit || st.ActiveSessions != limit {
		t.Fatalf("after %d connections to a limit of %d: Stats() = %+v", burst, limit, st)
	}

	// The admitted ones answer a heartbeat; the refused ones read one error
	// frame, then the end of the stream.
	var admitted []*client
	for i, c := range clients {
		m, err := c.heartbeat(uint64(i))
		if err != nil {
			t.Fatalf("client %d: heartbeat: %v", i, err)
		}
		if m.Type == telegram.HeartbeatAck {
			admitted = append(admitted, c)
			continue
		}
		if m.Type != telegram.Response || m.RespCode != CodeSessionLimit || m.Text != TextSessionLimit {
			t.Errorf("client %d: refusal = %+v, want 0210 %s %q", i, m, CodeSessionLimit, TextSessionLimit)
		}
		c.expectClosed()
	}
	if len(admitted) != limit {
		t.Fatalf("%d clients admitted, want %d", len(admitted), limit)
	}
	for i, c := range admitted {
		c.mustCall(uint64(i), "user")
	}

	// A freed slot is reusable.
	admitted[0].conn.Close()
	waitStats(t, srv, "a slot freed", func(st Stats) bool { return st.ActiveSessions == limit-1 })
	c := dial(t, srv)
	if got := c.mustCall(1, "late"); got.RespCode != telegram.CodeOK {
		t.Errorf("call on the freed slot = %+v, want code 0000", got)
	}
	if st := srv.Stats(); st.PeakSessions != limit || st.Accepted != limit+1 {
		t.Errorf("Stats() = %+v, want peak %d and %d accepted", st, limit, limit+1)
	}
}

func TestLoweringTheSessionLimitKeepsExistingSessions(t *testing.T) {
	t.Parallel()
	srv := startServer(t, telegram.KCB(), Config{MaxSessions: 3})
	var clients []*client
	for range 3 {
		clients = append(clients, dial(t, srv))
	}
	waitStats(t, srv, "3 sessions", func(st Stats) bool { return st.ActiveSessions == 3 })

	cfg := srv.Config()
	cfg.MaxSessions = 1
	if err := srv.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	for i, c := range clients {
		c.mustCall(uint64(i), "kept") // still served
	}
	extra := dial(t, srv)
	if m, err := extra.recv(); err != nil || m.RespCode != CodeSessionLimit {
		t.Fatalf("connection over the lowered limit: %+v, %v; want a %s refusal", m, err, CodeSessionLimit)
	}
	// Two sessions leave: one remains, which is the new limit, so new
	// connections are still refused; the third leaving makes room.
	clients[0].conn.Close()
	clients[1].conn.Close()
	waitStats(t, srv, "1 session left", func(st Stats) bool { return st.ActiveSessions == 1 })
	if m, err := dial(t, srv).recv(); err != nil || m.RespCode != CodeSessionLimit {
		t.Fatalf("connection at the lowered limit: %+v, %v; want a %s refusal", m, err, CodeSessionLimit)
	}
	clients[2].conn.Close()
	waitStats(t, srv, "no session left", func(st Stats) bool { return st.ActiveSessions == 0 })
	dial(t, srv).mustCall(9, "admitted")
}

// Not parallel: it measures time, so it runs alone.
func TestFixedLatencyIsHonoured(t *testing.T) {
	const latency = 100 * time.Millisecond
	srv := startServer(t, telegram.NICE(), Config{Latency: FixedLatency(latency)})
	c := dial(t, srv)
	for i := range 3 {
		start := time.Now()
		c.mustCall(uint64(i), "slow")
		// The simulator sets its timers up to maxSlack early so that
		// answers leave on time on average; one answer may be that early.
		if took := time.Since(start); took < latency-maxSlack || took > latency+500*time.Millisecond {
			t.Errorf("call %d took %v, want about %v", i, took, latency)
		}
	}
	start := time.Now()
	if _, err := c.heartbeat(1); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= latency {
		t.Errorf("heartbeat took %v, want it answered at once (under the %v latency)", took, latency)
	}
}

func TestFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		p     telegram.Profile
		cfg   Config
		check func(t *testing.T, c *client, resp telegram.Message, err error)
		stat  func(Stats) int64
	}{
		{
			name: "error rate 1", p: telegram.NICE(), cfg: Config{ErrorRate: 1},
			check: func(t *testing.T, c *client, resp telegram.Message, err error) {
				if err != nil || resp.Type != telegram.Response || resp.RespCode != CodeAgencyError || resp.TraceNo != 42 {
					t.Errorf("call = %+v, %v; want a 0210 with code %s for trace 42", resp, err, CodeAgencyError)
				}
			},
			stat: func(st Stats) int64 { return st.Errors },
		},
		{
			name: "garbage rate 1 NICE", p: telegram.NICE(), cfg: Config{GarbageRate: 1},
			check: func(t *testing.T, c *client, resp telegram.Message, err error) {
				if !errors.Is(err, wire.ErrMalformedFrame) {
					t.Errorf("call = %+v, %v; want ErrMalformedFrame (a non-digit length header)", resp, err)
				}
			},
			stat: func(st Stats) int64 { return st.Garbage },
		},
		{
			name: "garbage rate 1 KCB", p: telegram.KCB(), cfg: Config{GarbageRate: 1},
			check: func(t *testing.T, c *client, resp telegram.Message, err error) {
				if err == nil || !strings.HasPrefix(err.Error(), "decode") {
					t.Errorf("call = %+v, %v; want a 200-byte frame that does not decode", resp, err)
				}
			},
			stat: func(st Stats) int64 { return st.Garbage },
		},
		{
			name: "reset rate 1", p: telegram.NICE(), cfg: Config{ResetRate: 1},
			check: func(t *testing.T, c *client, resp telegram.Message, err error) {
				if !errors.Is(err, syscall.ECONNRESET) {
					t.Errorf("call = %+v, %v; want connection reset by peer", resp, err)
				}
			},
			stat: func(st Stats) int64 { return st.Resets },
		},
		{
			name: "all rates 1: reset wins", p: telegram.KCB(), cfg: Config{ResetRate: 1, GarbageRate: 1, ErrorRate: 1},
			check: func(t *testing.T, c *client, resp telegram.Message, err error) {
				if !errors.Is(err, syscall.ECONNRESET) {
					t.Errorf("call = %+v, %v; want connection reset by peer", resp, err)
				}
			},
			stat: func(st Stats) int64 { return st.Resets },
		},
		{
			name: "all rates 0", p: telegram.KCB(), cfg: Config{},
			check: func(t *testing.T, c *client, resp telegram.Message, err error) {
				if err != nil || resp.RespCode != telegram.CodeOK || resp.Score != Score("fault") {
					t.Errorf("call = %+v, %v; want code 0000 with the user's score", resp, err)
				}
			},
			stat: func(st Stats) int64 { return st.Calls - st.Errors - st.Garbage - st.Resets },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := startServer(t, tt.p, tt.cfg)
			c := dial(t, srv)
			resp, err := c.call(&telegram.Message{Type: telegram.Request, TraceNo: 42, UserKey: "fault"})
			tt.check(t, c, resp, err)
			if st := srv.Stats(); st.Calls != 1 || tt.stat(st) != 1 {
				t.Errorf("Stats() = %+v, want 1 call counted under its outcome", st)
			}
		})
	}
}

func TestFaultRatesAreFractionsOfCalls(t *testing.T) {
	t.Parallel()
	const calls = 400
	srv := startServer(t, telegram.NICE(), Config{ErrorRate: 0.3, Seed: 7})
	c := dial(t, srv)
	for i := range calls {
		c.mustCall(uint64(i), "rate")
	}
	st := srv.Stats()
	if frac := float64(st.Errors) / calls; frac < 0.2 || frac > 0.4 {
		t.Errorf("%d errors in %d calls at rate 0.3 (%.2f)", st.Errors, calls, frac)
	}
}

// Not parallel: it measures time, so it runs alone.
func TestIdleFirewall(t *testing.T) {
	const idle = 400 * time.Millisecond
	srv := startServer(t, telegram.NICE(), Config{IdleTimeout: idle})
	prev := time.Now()
	silent, chatty := dial(t, srv), dial(t, srv)
	waitStats(t, srv, "2 sessions", func(st Stats) bool { return st.ActiveSessions == 2 })

	// The chatty session heartbeats ten times faster than the firewall
	// forgets, for well over the idle timeout. A machine too loaded to keep
	// that pace (a gap of idle/2 or more) cannot judge whether it survives.
	tick := time.NewTicker(idle / 10)
	defer tick.Stop()
	var maxGap time.Duration
	chattyCut := false
	for i := range 15 {
		<-tick.C
		now := time.Now()
		maxGap, prev = max(maxGap, now.Sub(prev)), now
		if _, err := chatty.heartbeat(uint64(i)); err != nil {
			if maxGap < idle/2 {
				t.Fatalf("heartbeat %d on a busy session (gaps at most %v): %v", i, maxGap, err)
			}
			t.Logf("heartbeat %d failed after a %v gap: the machine is too loaded to judge the busy session", i, maxGap)
			chattyCut = true
			break
		}
	}
	waitStats(t, srv, "the silent session cut", func(st Stats) bool { return st.IdleCuts >= 1 })
	// The cut was silent: the client finds out when it next uses the
	// session.
	if _, err := silent.call(&telegram.Message{Type: telegram.Request, TraceNo: 1, UserKey: "late"}); !closedByServer(err) {
		t.Errorf("call on a cut session: %v, want the connection closed", err)
	}
	if chattyCut {
		return
	}
	if st := srv.Stats(); st.IdleCuts != 1 || st.ActiveSessions != 1 {
		t.Errorf("Stats() = %+v, want the silent session cut and the chatty one alive", st)
	}
	chatty.mustCall(1, "alive")
}

func TestIdleTimeoutChangesApplyToWaitingSessions(t *testing.T) {
	t.Parallel()
	srv := startServer(t, telegram.KCB(), Config{})
	c := dial(t, srv)
	c.mustCall(1, "before")
	cfg := srv.Config()
	cfg.IdleTimeout = 50 * time.Millisecond
	if err := srv.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	waitStats(t, srv, "the session cut by the new timeout", func(st Stats) bool { return st.IdleCuts == 1 })
	c.expectClosed()
}

// Not parallel: it measures time, so it runs alone.
func TestBandwidthLimit(t *testing.T) {
	const (
		bw    = 4000 // bytes/s
		calls = 8
		frame = 200 // KCB
	)
	srv := startServer(t, telegram.KCB(), Config{})
	c := dial(t, srv)
	timeCalls := func() time.Duration {
		start := time.Now()
		for i := range calls {
			c.mustCall(uint64(i), "line")
		}
		return time.Since(start)
	}
	// The same calls without a line limit tell how slow this machine is.
	unlimited := timeCalls()
	if err := srv.SetConfig(Config{BandwidthBytesPerSec: bw}); err != nil {
		t.Fatal(err)
	}
	took := timeCalls()
	// The first LineBurst bytes go at once, the rest at the line's pace.
	want := time.Duration(float64(calls*frame-LineBurst(bw)) / bw * float64(time.Second)) // 336 ms
	if took < want*9/10 || took > 2*want+3*unlimited {
		t.Errorf("%d KCB calls over a %d B/s line took %v, want about %v (%v without the limit)", calls, bw, took, want, unlimited)
	}
	// The last frame is counted just after the client could read it.
	waitStats(t, srv, fmt.Sprintf("%d bytes out", 2*calls*frame), func(st Stats) bool { return st.BytesOut == 2*calls*frame })
}

func TestSetConfig(t *testing.T) {
	t.Parallel()
	srv := startServer(t, telegram.NICE(), Config{MaxSessions: 5})
	c := dial(t, srv)
	c.mustCall(1, "fast")

	slow := Config{MaxSessions: 5, Latency: FixedLatency(20 * time.Millisecond).Scaled(5), ErrorRate: 1}
	if err := srv.SetConfig(slow); err != nil {
		t.Fatalf("SetConfig(%+v): %v", slow, err)
	}
	if got := srv.Config(); got != slow {
		t.Errorf("Config() = %+v, want %+v", got, slow)
	}
	start := time.Now()
	if resp := c.mustCall(2, "slow"); resp.RespCode != CodeAgencyError {
		t.Errorf("call after SetConfig = %+v, want code %s", resp, CodeAgencyError)
	}
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Errorf("call after SetConfig took %v, want >= 100ms", took)
	}

	bad := Config{ErrorRate: 2}
	if err := srv.SetConfig(bad); err == nil {
		t.Errorf("SetConfig(%+v) = nil, want an error", bad)
	}
	if got := srv.Config(); got != slow {
		t.Errorf("Config() after a rejected SetConfig = %+v, want %+v", got, slow)
	}
}

func TestMalformedClientFramesCloseTheSession(t *testing.T) {
	t.Parallel()
	validBody := func(p telegram.Profile, typ telegram.Type) []byte {
		frame, err := p.AppendFrame(nil, &telegram.Message{Type: typ, TraceNo: 1, UserKey: "u"})
		if err != nil {
			t.Fatal(err)
		}
		return frame
	}
	tests := []struct {
		name  string
		p     telegram.Profile
		frame []byte
	}{
		{"NICE non-digit length header", telegram.NICE(), []byte("12x4" + strings.Repeat(" ", 20))},
		{"NICE length over the maximum", telegram.NICE(), []byte("9999")},
		{"NICE body that does not decode", telegram.NICE(), []byte("0010ABCDEFGHIJ")},
		{"KCB frame that does not decode", telegram.KCB(), []byte(strings.Repeat("\xff", 200))},
		{"NICE response sent by a client", telegram.NICE(), validBody(telegram.NICE(), telegram.Response)},
		{"KCB heartbeat ack sent by a client", telegram.KCB(), validBody(telegram.KCB(), telegram.HeartbeatAck)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := startServer(t, tt.p, Config{})
			c := dial(t, srv)
			if err := c.sendRaw(tt.frame); err != nil {
				t.Fatal(err)
			}
			c.expectClosed()
			st := waitStats(t, srv, "the session closed", func(st Stats) bool { return st.ActiveSessions == 0 })
			if st.Malformed != 1 || st.Calls != 0 {
				t.Errorf("Stats() = %+v, want 1 malformed and no call", st)
			}
		})
	}
}

func TestShutdownAnswersRequestsInFlight(t *testing.T) {
	t.Parallel()
	srv, err := New(Config{Latency: FixedLatency(200 * time.Millisecond)}, Options{Profile: telegram.NICE(), Logger: testkit.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	ln := testkit.Listen(t)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	testkit.WaitFor(t, ioTimeout, "server listening", func() bool { return srv.Addr() != nil })
	busy, idle := dial(t, srv), dial(t, srv)
	waitStats(t, srv, "2 sessions", func(st Stats) bool { return st.ActiveSessions == 2 })
	if err := busy.send(&telegram.Message{Type: telegram.Request, TraceNo: 5, UserKey: "in-flight"}); err != nil {
		t.Fatal(err)
	}
	waitStats(t, srv, "the call received", func(st Stats) bool { return st.Calls == 1 })

	if err := srv.Shutdown(testkit.Context(t, 10*time.Second)); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve() = %v, want ErrServerClosed", err)
	}
	if resp, err := busy.recv(); err != nil || resp.RespCode != telegram.CodeOK || resp.TraceNo != 5 {
		t.Errorf("answer to the request in flight at shutdown = %+v, %v; want code 0000 for trace 5", resp, err)
	}
	busy.expectClosed()
	idle.expectClosed()
	if err := srv.Serve(ln); !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve after Shutdown = %v, want ErrServerClosed", err)
	}
}

func TestCloseDropsRequestsInFlight(t *testing.T) {
	t.Parallel()
	srv, err := New(Config{Latency: FixedLatency(time.Hour)}, Options{Profile: telegram.KCB(), Logger: testkit.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	ln := testkit.Listen(t)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	testkit.WaitFor(t, ioTimeout, "server listening", func() bool { return srv.Addr() != nil })
	c := dial(t, srv)
	if err := c.send(&telegram.Message{Type: telegram.Request, TraceNo: 5, UserKey: "dropped"}); err != nil {
		t.Fatal(err)
	}
	waitStats(t, srv, "the call received", func(st Stats) bool { return st.Calls == 1 })
	start := time.Now()
	srv.Close()
	if took := time.Since(start); took > time.Second {
		t.Errorf("Close took %v with an hour-long call in flight", took)
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve() = %v, want ErrServerClosed", err)
	}
	c.expectClosed()
}

func TestServeRejectsAnInvalidConfig(t *testing.T) {
	t.Parallel()
	srv, err := New(Config{MaxSessions: -1}, Options{Profile: telegram.NICE(), Logger: testkit.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	ln := testkit.Listen(t)
	if err := srv.Serve(ln); err == nil || !strings.Contains(err.Error(), "max sessions") {
		t.Errorf("Serve with MaxSessions -1 = %v, want a config error", err)
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Error("the listener is still open after Serve failed")
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	opts := Options{Logger: testkit.Logger(), Registerer: reg}
	nice := startServerWith(t, telegram.NICE(), Config{}, opts)
	kcb := startServerWith(t, telegram.KCB(), Config{ErrorRate: 1}, opts) // shares the registry
	dial(t, nice).mustCall(1, "m")
	for i := range 2 {
		dial(t, kcb).mustCall(uint64(i), "m")
	}
	waitStats(t, kcb, "two sessions", func(st Stats) bool { return st.Accepted == 2 })

	want := fmt.Sprintf(`
# HELP cellkit_agencysim_calls_total Requests received, whatever their outcome.
# TYPE cellkit_agencysim_calls_total counter
cellkit_agencysim_calls_total{agency=%q} 1
cellkit_agencysim_calls_total{agency=%q} 2
# HELP cellkit_agencysim_errors_total Requests answered with an error code.
# TYPE cellkit_agencysim_errors_total counter
cellkit_agencysim_errors_total{agency=%q} 0
cellkit_agencysim_errors_total{agency=%q} 2
`, nice.Profile().Name, kcb.Profile().Name, nice.Profile().Name, kcb.Profile().Name)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "cellkit_agencysim_calls_total", "cellkit_agencysim_errors_total"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "cellkit_agencysim_delay_seconds"); err != nil || n != 2 {
		t.Errorf("delay histograms: %d, %v; want one per agency", n, err)
	}
}

func TestConcurrentSessionsUnderRace(t *testing.T) {
	t.Parallel()
	srv := startServer(t, telegram.NICE(), Config{MaxSessions: 8, Latency: UniformLatency(0, 2*time.Millisecond), ErrorRate: 0.1, BandwidthBytesPerSec: 1 << 20})
	var wg sync.WaitGroup
	for g := range 8 {
		c := dial(t, srv)
		wg.Go(func() {
			for i := range 25 {
				resp, err := c.call(&telegram.Message{Type: telegram.Request, TraceNo: uint64(g*100 + i), UserKey: "k"})
				if err != nil {
					t.Errorf("session %d call %d: %v", g, i, err)
					return
				}
				if resp.TraceNo != uint64(g*100+i) {
					t.Errorf("session %d: answer for trace %d, want %d", g, resp.TraceNo, g*100+i)
				}
			}
		})
	}
	// Turn knobs while the sessions run.
	for i := range 20 {
		cfg := srv.Config()
		cfg.ErrorRate = float64(i%3) / 10
		cfg.IdleTimeout = time.Duration(10+i) * time.Second
		cfg.BandwidthBytesPerSec = 1<<20 + i
		if err := srv.SetConfig(cfg); err != nil {
			t.Fatal(err)
		}
		_ = srv.Stats()
	}
	wg.Wait()
	if st := srv.Stats(); st.Calls != 200 || st.PeakSessions > 8 {
		t.Errorf("Stats() = %+v, want 200 calls and peak <= 8", st)
	}
}

// BenchmarkCall measures one request/response round trip over loopback TCP,
// the simulator's own cost per call.
func BenchmarkCall(b *testing.B) {
	for _, p := range profiles() {
		b.Run(p.Name, func(b *testing.B) {
			srv, err := New(Config{}, Options{Profile: p, Logger: testkit.Logger()})
			if err != nil {
				b.Fatal(err)
			}
			ln := testkit.Listen(b)
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ln) }()
			b.Cleanup(func() { srv.Close(); <-served })
			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			r := p.NewReader(conn)
			req, err := p.AppendFrame(nil, &telegram.Message{Type: telegram.Request, TraceNo: 1, UserKey: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			var m telegram.Message
			b.ReportAllocs()
			for b.Loop() {
				if _, err := conn.Write(req); err != nil {
					b.Fatal(err)
				}
				body, err := r.ReadFrame()
				if err != nil {
					b.Fatal(err)
				}
				if err := p.Decode(body, &m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
