package router

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/testkit"
)

// TestWarmOpensTheConnectionsAsked: Warm opens the connections asked to
// a cell instance, spread over the loops, before any request; Pools
// reports them; an address not in the map is skipped.
func TestWarmOpensTheConnectionsAsked(t *testing.T) {
	var accepted atomic.Int64
	b := newBackend(t, "c1")
	srv := httptest.NewUnstartedServer(b.srv.Config.Handler)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			accepted.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	w := newWorld(t, worldOptions{cells: []string{"c1"}, intake: map[string]string{"c1": srv.URL}})
	addr := strings.TrimPrefix(srv.URL, "http://")
	if n := w.router.Warm(context.Background(), nil); n != 0 {
		t.Fatalf("Warm(nil) = %d", n)
	}
	before := accepted.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got := w.router.Warm(ctx, map[string]int{addr: 6, "127.0.0.1:1": 5})
	if got < 6 {
		t.Fatalf("Warm opened %d connections, want at least 6", got)
	}
	if pools := w.router.Pools(); pools[addr] != got || len(pools) != 1 {
		t.Fatalf("Pools() = %v after Warm opened %d to %s", pools, got, addr)
	}
	// The kernel completes a connection before the cell's server accepts
	// it: Warm may return before the server has seen every one.
	testkit.WaitFor(t, 2*time.Second, "the cell to accept Warm's connections", func() bool {
		return accepted.Load()-before >= int64(got)
	})
	if b.calls.Load() != 0 {
		t.Fatalf("warming sent %d requests to the cell", b.calls.Load())
	}
}

// TestWarmOpensAtMostWarmMaxToAnInstance: the counts come from the
// predecessor; one beyond WarmMax opens WarmMax, not as many as it says.
func TestWarmOpensAtMostWarmMaxToAnInstance(t *testing.T) {
	b := newBackend(t, "c1")
	w := newWorld(t, worldOptions{cells: []string{"c1"}, intake: map[string]string{"c1": b.srv.URL}})
	addr := strings.TrimPrefix(b.srv.URL, "http://")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if got := w.router.Warm(ctx, map[string]int{addr: 10000}); got < 1 || got > WarmMax {
		t.Fatalf("Warm opened %d connections for a count of 10000, want 1 to %d", got, WarmMax)
	}
	if pools := w.router.Pools(); pools[addr] > WarmMax {
		t.Fatalf("Pools() = %v", pools)
	}
}

// TestDialsToACellArePaced: a burst of requests to a router with no
// connection to an https cell yet opens its connections a few at a time
// per loop (maxDialing), not one handshake per request at once; every
// request is answered.
func TestDialsToACellArePaced(t *testing.T) {
	var handshaking, most atomic.Int64
	b := &backend{cell: "c1", release: make(chan struct{})}
	b.srv = httptest.NewUnstartedServer(b.handler())
	b.srv.StartTLS()
	base := b.srv.TLS.Clone()
	b.srv.TLS.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		n := handshaking.Add(1)
		defer handshaking.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(30 * time.Millisecond) // a handshake that costs the cell
		return base, nil
	}
	t.Cleanup(func() { close(b.release); b.srv.CloseClientConnections(); b.srv.Close() })
	roots := b.srv.Client().Transport.(*http.Transport).TLSClientConfig
	w := newWorld(t, worldOptions{cells: []string{"c1"}, intake: map[string]string{"c1": b.srv.URL},
		// No health checks: their connections are not the pools'.
		cfg: Config{Cell: CellLimits{TLS: roots, Timeout: 5 * time.Second, ProbeInterval: -1}}})
	bound := int64(maxDialing * runtime.GOMAXPROCS(0))
	burst := int(3 * bound)
	var wg sync.WaitGroup
	statuses := make([]int, burst)
	for i := range burst {
		wg.Go(func() { statuses[i] = w.do("GET", "/v1/inquiries/c1-abc", "").status })
	}
	wg.Wait()
	for i, s := range statuses {
		if s != 200 {
			t.Fatalf("request %d of the burst: %d", i, s)
		}
	}
	if m := most.Load(); m > bound || m == 0 {
		t.Fatalf("%d TLS handshakes with the cell at once for a burst of %d requests; want at most %d (%d per loop)", m, burst, bound, maxDialing)
	}
	t.Logf("a burst of %d requests: at most %d handshakes with the cell at once", burst, most.Load())
}

// TestHandOverClosesKeptAliveConnectionsGradually: a router that handed
// over tells its kept-alive clients Connection: close spread over
// handOverSpread — few of the answers right after the handoff, every one
// once it has passed — rather than all at their next answer, and its
// drain cuts nothing.
func TestHandOverClosesKeptAliveConnectionsGradually(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}})
	const conns = 40
	rcs := make([]*rawConn, conns)
	get := "GET /v1/inquiries/c1-abc HTTP/1.1\r\nHost: router.test\r\nX-API-Key: " + w.key + "\r\n\r\n"
	for i := range rcs {
		rcs[i] = w.dial()
		rcs[i].send(get)
		if resp, _ := rcs[i].read("GET"); resp.StatusCode != 200 || resp.Close {
			t.Fatalf("before the handoff: %d, close %v", resp.StatusCode, resp.Close)
		}
	}
	drained := make(chan Drained, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d, err := w.router.HandOver(ctx)
		if err != nil {
			t.Errorf("HandOver: %v", err)
		}
		drained <- d
	}()
	testkit.WaitFor(t, 2*time.Second, "the handoff", func() bool { return w.router.eng.handing.Load() })
	closed, open := 0, []*rawConn{}
	for _, rc := range rcs {
		rc.send(get)
		resp, _ := rc.read("GET")
		if resp.StatusCode != 200 {
			t.Fatalf("right after the handoff: %d", resp.StatusCode)
		}
		if resp.Close {
			closed++
		} else {
			open = append(open, rc)
		}
	}
	if closed > conns/2 {
		t.Fatalf("%d of %d answers right after the handoff closed their connection; want them spread over %s", closed, conns, handOverSpread)
	}
	// Clients in use (a request every 100 ms) are all told within the
	// spread, each with an answer.
	start := time.Now()
	for len(open) > 0 {
		time.Sleep(100 * time.Millisecond)
		still := open[:0]
		for _, rc := range open {
			rc.send(get)
			resp, _ := rc.read("GET")
			if resp.StatusCode != 200 {
				t.Fatalf("during the drain: %d", resp.StatusCode)
			}
			if !resp.Close {
				still = append(still, rc)
			}
		}
		open = still
		if time.Since(start) > handOverSpread+300*time.Millisecond {
			t.Fatalf("%d connections not told to close %v after the handoff", len(open), time.Since(start))
		}
	}
	select {
	case d := <-drained:
		if d.Cut != 0 || d.RequestsCut != 0 {
			t.Fatalf("drained %+v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("HandOver did not return once every connection closed")
	}
	t.Logf("right after the handoff %d of %d answers closed their connection", closed, conns)
}
