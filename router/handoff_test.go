package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/handoff"
	"github.com/cellkit/cellkit/internal/httpx"
	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/program"
	"github.com/cellkit/cellkit/internal/router"
	"github.com/cellkit/cellkit/internal/testkit"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

// generation is one router process of a handoff test, run by run().
type generation struct {
	addrs  addrs
	logs   *testkit.Buffer
	done   chan error
	cancel context.CancelFunc
}

// launch runs the router with args until the test ends; it waits until
// it serves (ok) or run returns (the error).
func launch(t *testing.T, args ...string) (*generation, error) {
	t.Helper()
	g := &generation{logs: &testkit.Buffer{}, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	ready := make(chan addrs, 1)
	go func() { g.done <- run(ctx, args, io.Discard, g.logs, func(a addrs) { ready <- a }) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-g.done:
		case <-time.After(10 * time.Second):
			t.Errorf("a router did not stop")
		}
	})
	select {
	case g.addrs = <-ready:
		return g, nil
	case err := <-g.done:
		g.done <- err
		return g, err
	case <-time.After(15 * time.Second):
		return g, fmt.Errorf("not serving after 15 s\n%s", g.logs)
	}
}

// ended waits for g's run to return, and returns its error.
func (g *generation) ended(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case err := <-g.done:
		g.done <- err
		return err
	case <-time.After(within):
		t.Fatalf("the router did not end within %s\n%s", within, g.logs)
		return nil
	}
}

// handoffSetup is a registry with one cell, a keys file and the flags a
// router of the test runs with.
type handoffSetup struct {
	key  string
	keys string // the keys file
	args []string
}

func newHandoffSetup(t *testing.T, intake string, extra ...string) handoffSetup {
	t.Helper()
	dir := t.TempDir()
	regPath := filepath.Join(dir, "map.json")
	publishMap(t, regPath, intake)
	keys := filepath.Join(dir, "keys.json")
	key := mustAddKey(t, keys, "platform-a", "--rate", "100000", "--burst", "100000")
	args := append([]string{"-registry", "file:" + regPath, "-keys", keys, "-reload-interval", "1h",
		"-shutdown-timeout", "5s", "-cell-probe-interval", "0", "-handoff-socket", filepath.Join(dir, "handoff", "router.sock")}, extra...)
	return handoffSetup{key: key, keys: keys, args: args}
}

// at are the setup's flags with the listeners at a (the first router's
// ports, or ":0").
func (s handoffSetup) at(public, admin string, more ...string) []string {
	return append(append([]string{"-listen", public, "-admin-listen", admin}, s.args...), more...)
}

// load sends inquiries from workers, half on kept-alive connections and
// half on a new connection each, until stopped; it counts refused
// connections and every other failure.
type load struct {
	ok, refused atomic.Int64
	mu          sync.Mutex
	failures    []string
	stop        chan struct{}
	wg          sync.WaitGroup
}

func startLoad(t *testing.T, url, key string, workers int, tlsCfg *tls.Config) *load {
	l := &load{stop: make(chan struct{})}
	for i := range workers {
		tr := &http.Transport{DisableKeepAlives: i%2 == 1, TLSClientConfig: tlsCfg}
		hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
		l.wg.Go(func() {
			defer tr.CloseIdleConnections()
			for n := 0; n < 100000; n++ {
				select {
				case <-l.stop:
					return
				default:
				}
				resp, err := testkit.Send(hc, "POST", url+"/v1/inquiries", `{"user_id":"u1"}`,
					map[string]string{"X-API-Key": key, "Idempotency-Key": fmt.Sprintf("w%d-%d", i, n)})
				switch {
				case errors.Is(err, syscall.ECONNREFUSED):
					l.refused.Add(1)
				case err != nil:
					l.fail(err.Error())
				case resp.Status != http.StatusAccepted:
					l.fail(fmt.Sprintf("%d %s", resp.Status, resp.Body))
				default:
					l.ok.Add(1)
				}
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	t.Cleanup(l.halt)
	return l
}

func (l *load) fail(s string) {
	l.mu.Lock()
	l.failures = append(l.failures, s)
	l.mu.Unlock()
}

func (l *load) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

func (l *load) check(t *testing.T, what string) {
	t.Helper()
	// The load has its say however slow the machine (a race build on
	// shared cores answers fewer per second): 100 answers, or a failure.
	testkit.Poll(10*time.Second, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.ok.Load() >= 100 || l.refused.Load() > 0 || len(l.failures) > 0
	})
	l.halt()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refused.Load() != 0 || len(l.failures) != 0 || l.ok.Load() < 100 {
		t.Fatalf("%s: %d answered, %d refused, %d failed: %q", what, l.ok.Load(), l.refused.Load(), len(l.failures), l.failures[:min(5, len(l.failures))])
	}
	t.Logf("%s: %d answered, 0 refused, 0 failed", what, l.ok.Load())
}

// TestRestartsHandOverWithNoConnectionRefused: three routers in a row take
// over the sockets under load on kept-alive and new connections: no
// connection is refused and no request fails; each old router ends
// handed over, and the generation counts up.
func TestRestartsHandOverWithNoConnectionRefused(t *testing.T) {
	s := newHandoffSetup(t, okCell(t).URL)
	first, err := launch(t, s.at("127.0.0.1:0", "127.0.0.1:0")...)
	if err != nil {
		t.Fatalf("first router: %v\n%s", err, first.logs)
	}
	public, admin := first.addrs.Public.String(), first.addrs.Admin.String()
	l := startLoad(t, "http://"+public, s.key, 8, nil)
	time.Sleep(200 * time.Millisecond)
	prev := first
	for i := 2; i <= 4; i++ {
		next, err := launch(t, s.at(public, admin)...)
		if err != nil {
			t.Fatalf("router %d: %v\n%s", i, err, next.logs)
		}
		if err := prev.ended(t, 10*time.Second); !errors.Is(err, program.ErrHandedOver) {
			t.Fatalf("router %d ended with %v, want handed over\n%s", i-1, err, prev.logs)
		}
		if !strings.Contains(prev.logs.String(), `"msg":"drained after the handoff"`) {
			t.Errorf("router %d's log has no drain report:\n%s", i-1, prev.logs)
		}
		time.Sleep(300 * time.Millisecond)
		prev = next
	}
	l.check(t, "three handoffs")
	m := testkit.Do(t, http.DefaultClient, "GET", "http://"+admin+"/metrics", nil, nil)
	if !strings.Contains(string(m.Body), "cellkit_router_generation 4\n") {
		t.Fatalf("the fourth router's generation:\n%s", grepLines(string(m.Body), "cellkit_router_generation"))
	}
}

func grepLines(s, prefix string) string {
	var out []string
	for line := range strings.SplitSeq(s, "\n") {
		if strings.HasPrefix(line, prefix) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// TestAFailedSuccessorLeavesTheOldRouterServing: a successor that takes
// the sockets and then fails to start (no map within --map-wait) ends; the
// old router serves on without a failed request and says why.
func TestAFailedSuccessorLeavesTheOldRouterServing(t *testing.T) {
	s := newHandoffSetup(t, okCell(t).URL)
	old, err := launch(t, s.at("127.0.0.1:0", "127.0.0.1:0")...)
	if err != nil {
		t.Fatalf("%v\n%s", err, old.logs)
	}
	public, admin := old.addrs.Public.String(), old.addrs.Admin.String()
	l := startLoad(t, "http://"+public, s.key, 6, nil)
	time.Sleep(200 * time.Millisecond)
	bad := append(s.at(public, admin), "-registry", "file:"+filepath.Join(t.TempDir(), "no-map.json"), "-map-wait", "500ms")
	failed, err := launch(t, bad...)
	if err == nil || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("the successor without a map: %v\n%s", err, failed.logs)
	}
	testkit.WaitFor(t, 5*time.Second, "the old router to report the failed successor", func() bool {
		return strings.Contains(old.logs.String(), "a successor failed to take over: serving on")
	})
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-old.done:
		t.Fatalf("the old router ended: %v\n%s", err, old.logs)
	default:
	}
	l.check(t, "a failed successor")
	// And a good one takes over after it.
	if _, err := launch(t, s.at(public, admin)...); err != nil {
		t.Fatal(err)
	}
	if err := old.ended(t, 10*time.Second); !errors.Is(err, program.ErrHandedOver) {
		t.Fatalf("ended with %v", err)
	}
}

// TestARequestInFlightIsAnsweredByTheOldRouter: a request the old router
// is waiting on its cell for when it hands over is answered, with
// Connection: close; the next request on a new connection goes to the
// successor.
func TestARequestInFlightIsAnsweredByTheOldRouter(t *testing.T) {
	release := make(chan struct{})
	cell := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Slow") != "" {
			<-release
		}
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"id":"c1-1"}`)
	}))
	t.Cleanup(cell.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	s := newHandoffSetup(t, cell.URL, "-cell-timeout", "10s")
	old, err := launch(t, s.at("127.0.0.1:0", "127.0.0.1:0")...)
	if err != nil {
		t.Fatal(err)
	}
	public, admin := old.addrs.Public.String(), old.addrs.Admin.String()
	hc := &http.Client{Timeout: 10 * time.Second}
	type answer struct {
		status int
		close  bool
		err    error
	}
	slow := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("POST", "http://"+public+"/v1/inquiries", strings.NewReader(`{"user_id":"u1"}`))
		req.Header.Set("X-API-Key", s.key)
		req.Header.Set("X-Slow", "1")
		resp, err := hc.Do(req)
		if err != nil {
			slow <- answer{err: err}
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		slow <- answer{resp.StatusCode, resp.Close, nil}
	}()
	time.Sleep(200 * time.Millisecond)
	if _, err := launch(t, s.at(public, admin)...); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "the old router to hand over", func() bool {
		return strings.Contains(old.logs.String(), "handed over: no more connections accepted here")
	})
	time.Sleep(300 * time.Millisecond)
	close(release)
	a := <-slow
	if a.err != nil || a.status != http.StatusAccepted || !a.close {
		t.Fatalf("the request in flight: %v %d, Connection: close %v", a.err, a.status, a.close)
	}
	if err := old.ended(t, 10*time.Second); !errors.Is(err, program.ErrHandedOver) {
		t.Fatalf("ended with %v", err)
	}
	if !strings.Contains(old.logs.String(), `"cut":0`) {
		t.Fatalf("the drain report:\n%s", old.logs)
	}
}

// TestTLSSessionsResumeAcrossAHandoff: a client that resumed its session
// with the old router resumes it with the successor (the ticket keys are
// carried over), and the successor serves the same certificate.
func TestTLSSessionsResumeAcrossAHandoff(t *testing.T) {
	certs := celltest.DevCerts(t)
	dir := t.TempDir()
	is, err := certs.CAObject(t).Issue(pki.Request{Name: "pub", Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := is.Write(dir, "pub"); err != nil {
		t.Fatal(err)
	}
	s := newHandoffSetup(t, okCell(t).URL, "-tls-cert", filepath.Join(dir, "pub.pem"), "-tls-key", filepath.Join(dir, "pub-key.pem"))
	old, err := launch(t, s.at("127.0.0.1:0", "127.0.0.1:0")...)
	if err != nil {
		t.Fatal(err)
	}
	public, admin := old.addrs.Public.String(), old.addrs.Admin.String()
	pool, err := tlsconf.LoadPool(certs.CA())
	if err != nil {
		t.Fatal(err)
	}
	var resumed atomic.Bool
	cfg := &tls.Config{RootCAs: pool, ClientSessionCache: tls.NewLRUClientSessionCache(4),
		VerifyConnection: func(cs tls.ConnectionState) error { resumed.Store(cs.DidResume); return nil }}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}, Timeout: 5 * time.Second}
	post := func() int {
		return testkit.Do(t, hc, "POST", "https://"+public+"/v1/inquiries", `{"user_id":"u1"}`, map[string]string{"X-API-Key": s.key}).Status
	}
	post()
	if post() != http.StatusAccepted || !resumed.Load() {
		t.Fatal("no resumption with the same router")
	}
	l := startLoad(t, "https://"+public, s.key, 4, &tls.Config{RootCAs: pool})
	time.Sleep(300 * time.Millisecond)
	next, err := launch(t, s.at(public, admin)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.ended(t, 10*time.Second); !errors.Is(err, program.ErrHandedOver) {
		t.Fatalf("ended with %v", err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("old:\n%s\nnew:\n%s", old.logs, next.logs)
		}
	}()
	if post() != http.StatusAccepted || !resumed.Load() {
		t.Fatal("the session did not resume with the successor")
	}
	time.Sleep(300 * time.Millisecond)
	l.check(t, "a handoff over TLS")
}

// TestASuccessorOpensTheCellConnectionsFirst: before it takes the load
// over, the successor opens as many connections to the cell as the old
// router holds, so that the load it takes does not open them all at once.
func TestASuccessorOpensTheCellConnectionsFirst(t *testing.T) {
	var accepted atomic.Int64
	cell := httptest.NewUnstartedServer(httpx.EchoCall(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(5 * time.Millisecond) // calls overlap: the old router's pool grows
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"id":"c1-1"}`)
	})))
	cell.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			accepted.Add(1)
		}
	}
	cell.Start()
	t.Cleanup(cell.Close)
	s := newHandoffSetup(t, cell.URL)
	old, err := launch(t, s.at("127.0.0.1:0", "127.0.0.1:0")...)
	if err != nil {
		t.Fatalf("%v\n%s", err, old.logs)
	}
	public, admin := old.addrs.Public.String(), old.addrs.Admin.String()
	l := startLoad(t, "http://"+public, s.key, 8, nil)
	time.Sleep(300 * time.Millisecond)
	l.check(t, "the load before the handoff")
	before := accepted.Load()
	next, err := launch(t, s.at(public, admin)...)
	if err != nil {
		t.Fatal(err)
	}
	var line struct{ Wanted, Opened int }
	testkit.WaitFor(t, 10*time.Second, "the successor to open the connections", func() bool {
		for _, l := range strings.Split(next.logs.String(), "\n") {
			if strings.Contains(l, "opened the old router's connections to the cells") {
				return json.Unmarshal([]byte(l), &line) == nil
			}
		}
		return false
	})
	if line.Wanted < 2 || line.Opened != line.Wanted {
		t.Fatalf("the successor opened %d of the %d connections the old router held", line.Opened, line.Wanted)
	}
	// The cell's server takes them off its listener's queue in its own
	// time (the successor's dials ended once the kernel had them).
	testkit.WaitFor(t, 5*time.Second, fmt.Sprintf("the cell to accept the %d connections the successor opened", line.Opened), func() bool {
		return accepted.Load()-before >= int64(line.Opened)
	})
	if err := old.ended(t, 10*time.Second); !errors.Is(err, program.ErrHandedOver) {
		t.Fatalf("ended with %v", err)
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	return len(ents)
}

// TestAPredecessorsDataBeyondTheBoundsIsRefused: a predecessor's data
// that no router of this build hands over (a ticket key born in the
// future or known to all, more keys or cell instances than a router
// keeps, connection counts beyond what a successor opens) refuses the
// handoff, its sockets closed; keys older than their week are let
// through (the ring drops them).
func TestAPredecessorsDataBeyondTheBoundsIsRefused(t *testing.T) {
	now := time.Now()
	key := func(i int, born time.Time) tlsconf.TicketKey {
		return tlsconf.TicketKey{Key: [32]byte{byte(i + 1)}, Born: born}
	}
	keys := func(n int) []tlsconf.TicketKey {
		var out []tlsconf.TicketKey
		for i := range n {
			out = append(out, key(i, now.Add(-time.Duration(i)*time.Hour)))
		}
		return out
	}
	pools := func(n int) map[string]int {
		out := map[string]int{}
		for i := range n {
			out[fmt.Sprintf("10.0.%d.%d:8443", i/250, i%250)] = 1
		}
		return out
	}
	ln1, ln2 := testkit.Listen(t), testkit.Listen(t)
	for _, tc := range []struct {
		name, want string
		d          handoffData
		raw        string // the data as sent, when it is not a handoffData
	}{
		{"a ticket key born in the future", "in the future", handoffData{TicketKeys: []tlsconf.TicketKey{key(0, now.Add(24*time.Hour))}}, ""},
		{"a zero ticket key", "is zero", handoffData{TicketKeys: []tlsconf.TicketKey{{Born: now}}}, ""},
		{"more ticket keys than the ring keeps", "17 session ticket keys", handoffData{TicketKeys: keys(17)}, ""},
		{"more connections than a successor opens", "33 connections", handoffData{Pools: map[string]int{"127.0.0.1:8443": router.WarmMax + 1}}, ""},
		{"a count below zero", "-1 connections", handoffData{Pools: map[string]int{"127.0.0.1:8443": -1}}, ""},
		{"more cell instances than the bound", "1025 cell instances", handoffData{Pools: pools(1025)}, ""},
		{"an instance that is no address", "not a host:port", handoffData{Pools: map[string]int{"cell-1": 1}}, ""},
		{"data that is not the router's", "the old router's data", handoffData{}, `{"pools":[1,2]}`},
		{"a week-old key and a fresh one", "", handoffData{TicketKeys: []tlsconf.TicketKey{key(0, now), key(1, now.Add(-30*24*time.Hour))}, Pools: pools(3)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := json.Marshal(tc.d)
			if err != nil {
				t.Fatal(err)
			}
			if tc.raw != "" {
				data = []byte(tc.raw)
			}
			path := filepath.Join(t.TempDir(), "handoff", "router.sock")
			h, err := handoff.Listen(path)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			failed := make(chan error, 1)
			served := make(chan struct{})
			go func() {
				defer close(served)
				_, _ = h.Serve(ctx, 5*time.Second, func() (handoff.Offer, error) {
					files, err := handoff.Files(ln1, ln2)
					return handoff.Offer{State: handoff.State{PID: os.Getpid(), Generation: 1, Names: []string{"public", "admin"}, Data: data}, Files: files}, err
				}, func(_ handoff.Hello, err error) { failed <- err })
			}()
			t.Cleanup(func() { cancel(); <-served; _ = h.Remove() })
			before := openFDs(t)
			succ, _, err := takeOver(testkit.Context(t, 5*time.Second), options{handoffSocket: path}, testkit.Logger())
			if tc.want == "" {
				if err != nil || succ == nil {
					t.Fatalf("take over: %v", err)
				}
				succ.Close()
				<-failed
				return
			}
			if err == nil {
				succ.Close()
				t.Fatalf("took over from data %s", data[:min(len(data), 200)])
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("take over: %v, want an error saying %q", err, tc.want)
			}
			if err := <-failed; !strings.Contains(err.Error(), "ended before it was ready") {
				t.Fatalf("the old router's side: %v", err)
			}
			if after := openFDs(t); after != before {
				t.Fatalf("%d descriptors open after the refusal, %d before", after, before)
			}
		})
	}
}

// TestASuccessorTakesTheBucketsOver: a router handing over passes its
// clients' buckets on: the successor spends the tokens its predecessor
// held (a cold router holds none: a restart without them would refuse
// a client its burst) and no more (a restart gives no fresh burst).
func TestASuccessorTakesTheBucketsOver(t *testing.T) {
	s := newHandoffSetup(t, okCell(t).URL)
	key := mustAddKey(t, s.keys, "bursty", "--rate", "1", "--burst", "3")
	first, err := launch(t, s.at("127.0.0.1:0", "127.0.0.1:0")...)
	if err != nil {
		t.Fatalf("first router: %v\n%s", err, first.logs)
	}
	public, admin := first.addrs.Public.String(), first.addrs.Admin.String()
	post := func() int {
		return testkit.Do(t, http.DefaultClient, "POST", "http://"+public+"/v1/inquiries", `{"user_id":"u1"}`, map[string]string{"X-API-Key": key}).Status
	}
	time.Sleep(3200 * time.Millisecond) // the first router's bucket fills: 3 tokens
	second, err := launch(t, s.at(public, admin)...)
	if err != nil {
		t.Fatalf("second router: %v\n%s", err, second.logs)
	}
	if err := first.ended(t, 10*time.Second); !errors.Is(err, program.ErrHandedOver) {
		t.Fatalf("the first router ended with %v, want handed over", err)
	}
	for i := range 3 {
		if st := post(); st != http.StatusAccepted {
			t.Fatalf("request %d of the burst the first router held, to its successor: %d, want 202\n%s", i, st, second.logs)
		}
	}
	if st := post(); st != http.StatusTooManyRequests {
		t.Fatalf("a fourth request at once: %d, want 429", st)
	}
	third, err := launch(t, s.at(public, admin)...)
	if err != nil {
		t.Fatalf("third router: %v\n%s", err, third.logs)
	}
	if err := second.ended(t, 10*time.Second); !errors.Is(err, program.ErrHandedOver) {
		t.Fatalf("the second router ended with %v, want handed over", err)
	}
	ok := 0
	for range 3 {
		if post() == http.StatusAccepted {
			ok++
		}
	}
	if ok > 2 {
		t.Fatalf("after a handoff from an empty bucket: %d of 3 taken at once, want at most the tokens of the handoff's second or two (a fresh burst)", ok)
	}
}
