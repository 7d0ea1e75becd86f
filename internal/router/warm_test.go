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
	if n := accepted.Load() - before; n < int64(got) {
		t.Fatalf("the cell accepted %d connections, Warm says %d are open", n, got)
	}
	if b.calls.Load() != 0 {
		t.Fatalf("warming sent %d requests to the cell", b.calls.Load())
	}
}

// TestDialsToACellArePaced: a burst of requests to a router with no
// connection to an https cell yet opens its connections a few at a time
// per loop (maxDialing), not one handshake per request at once; every
// request is answered.
func TestDialsToACellArePaced(t *testing.T) {
	var handshaking, most atomic.Int64
	b := &backend{cell: "c1", release: make(chan struct{})}
	b.srv = httptest.NewUnstartedServer(http.HandlerFunc(b.serve))
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
