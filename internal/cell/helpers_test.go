package cell

import (
	"context"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/cellkit/cellkit/internal/agencysim"
	"github.com/cellkit/cellkit/internal/breaker"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/telegram"
	"github.com/cellkit/cellkit/internal/testkit"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m, goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

// harness is one cell under test with its simulators and registry.
type harness struct {
	t      testing.TB
	cell   *Cell
	cfg    Config
	nice   *agencysim.Server
	kcb    *agencysim.Server
	reg    *celltest.Registry
	intake string // base URL
	admin  string
	client *http.Client
	stop   func() error
	// runEnds says that the test ends Run with an error on purpose (the
	// cleanup does not report it).
	runEnds bool
	runDone chan struct{} // closed when Run has returned
}

type setup struct {
	sessions int                // per agency, the whole limit (one cell)
	sim      agencysim.Config   // both simulators
	config   func(*Config)      // last word on the cell's config
	opts     Options            // CSS, Core
	noStart  bool               // build, do not wait for ready
	storeDir string             // reuse a store (restart tests)
	reg      *celltest.Registry // reuse a registry
}

func start(t testing.TB, s setup) *harness {
	t.Helper()
	if s.sessions == 0 {
		s.sessions = 4
	}
	if s.sim.MaxSessions == 0 {
		s.sim.MaxSessions = 2 * s.sessions
	}
	if s.sim.Latency.Dist == "" {
		s.sim.Latency = agencysim.FixedLatency(2 * time.Millisecond)
	}
	h := &harness{t: t, client: &http.Client{Timeout: 10 * time.Second}}
	t.Cleanup(h.client.CloseIdleConnections)
	h.nice = celltest.StartSim(t, telegram.NICE(), s.sim)
	h.kcb = celltest.StartSim(t, telegram.KCB(), s.sim)
	h.reg = s.reg
	if h.reg == nil {
		h.reg = celltest.NewRegistry(t, map[string]int{"nice": s.sessions, "kcb": s.sessions}, celltest.TestCell("c1"))
	}
	if s.storeDir == "" {
		s.storeDir = t.TempDir()
	}
	h.cfg = Config{
		ID: "c1", IntakeAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", Registry: h.reg.URL(),
		StoreDir: s.storeDir, NATSPort: -1,
		Agencies:   []AgencyAddr{{Name: "nice", Addr: h.nice.Addr().String()}, {Name: "kcb", Addr: h.kcb.Addr().String()}},
		CSSLatency: -1, CoreLatency: -1, SampleInterval: 20 * time.Millisecond,
		Breaker: breaker.Config{MinCalls: 5, Window: 10, OpenFor: time.Minute},
	}
	h.cfg.Pipeline.Backoff = []time.Duration{10 * time.Millisecond}
	h.cfg.Pipeline.DrainTimeout = 5 * time.Second
	h.cfg.Pipeline.IdlePoll = 20 * time.Millisecond
	if s.config != nil {
		s.config(&h.cfg)
	}
	s.opts.Logger = testkit.Logger()
	s.opts.Registerer = prometheus.NewRegistry()
	c, err := New(context.Background(), h.cfg, s.opts)
	if err != nil {
		t.Fatal(err)
	}
	h.cell = c
	h.intake = "http://" + c.IntakeAddr().String()
	h.admin = "http://" + c.AdminAddr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	h.runDone = make(chan struct{})
	go func() { err := c.Run(ctx); close(h.runDone); done <- err }()
	stopped := false
	var runErr error
	h.stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			runErr = <-done
		}
		return runErr
	}
	t.Cleanup(func() {
		if err := h.stop(); err != nil && !h.runEnds {
			t.Errorf("Run() = %v", err)
		}
	})
	if !s.noStart {
		h.waitReady()
	}
	return h
}

// loopbackCallbacks, as setup.config, lets the cell's callbacks reach a
// receiver on 127.0.0.1; by default the cell refuses them.
func loopbackCallbacks(c *Config) {
	c.Pipeline.CallbackAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
}

func (h *harness) waitReady() {
	h.t.Helper()
	testkit.WaitFor(h.t, 10*time.Second, "the cell to be ready", func() bool {
		ok, _ := h.cell.readiness()
		return ok
	})
}

func (h *harness) post(req any, headers map[string]string) testkit.Response {
	h.t.Helper()
	return testkit.Do(h.t, h.client, http.MethodPost, h.intake+"/v1/inquiries", req, headers)
}

func (h *harness) get(id string) testkit.Response {
	h.t.Helper()
	return testkit.Do(h.t, h.client, http.MethodGet, h.intake+"/v1/inquiries/"+id, nil, nil)
}

func (h *harness) adminDo(method, path string, body any) testkit.Response {
	h.t.Helper()
	return testkit.Do(h.t, h.client, method, h.admin+path, body, nil)
}

// accept posts a request and expects 202.
func (h *harness) accept(req inquiry.Request, headers map[string]string) string {
	h.t.Helper()
	resp := h.post(req, headers)
	if resp.Status != http.StatusAccepted {
		h.t.Fatalf("POST %+v = %d %s, want 202", req, resp.Status, resp.Body)
	}
	var a struct{ ID, Cell, Status, Status_URL string }
	resp.JSON(h.t, &a)
	return a.ID
}

// view reads an inquiry.
func (h *harness) view(id string) inquiry.View {
	h.t.Helper()
	resp := h.get(id)
	if resp.Status != http.StatusOK {
		h.t.Fatalf("GET %s = %d %s", id, resp.Status, resp.Body)
	}
	var v inquiry.View
	resp.JSON(h.t, &v)
	return v
}

// settled waits until an inquiry is done or failed.
func (h *harness) settled(id string) inquiry.View {
	h.t.Helper()
	var v inquiry.View
	testkit.WaitFor(h.t, 10*time.Second, "inquiry "+id+" to settle", func() bool {
		v = h.view(id)
		return v.Status != inquiry.Pending
	})
	return v
}

func user(n int) inquiry.Request {
	return inquiry.Request{UserID: "user-" + strconv.Itoa(n), Product: "credit_loan", Amount: 5_000_000, Priority: inquiry.Normal}
}
