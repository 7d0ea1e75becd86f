package router

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
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
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/httpx"
	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/testkit"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

// tlsWorld is a world whose router's public listener speaks TLS with a
// certificate issued for 127.0.0.1 by a test CA, in files it can replace.
type tlsWorld struct {
	*world
	srv   *tlsconf.Server
	ca    *pki.CA
	dir   string
	roots *x509.CertPool
}

func newTLSWorld(t *testing.T, o worldOptions) *tlsWorld {
	t.Helper()
	certs := celltest.DevCerts(t)
	tw := &tlsWorld{ca: certs.CAObject(t), dir: t.TempDir()}
	tw.issue(t, "first")
	var err error
	tw.srv, err = tlsconf.NewServer(tlsconf.ServerFiles{Cert: filepath.Join(tw.dir, "srv.pem"), Key: filepath.Join(tw.dir, "srv-key.pem")},
		tlsconf.Options{What: "public_tls"})
	if err != nil {
		t.Fatal(err)
	}
	tw.roots, err = tlsconf.LoadPool(certs.CA())
	if err != nil {
		t.Fatal(err)
	}
	o.opts.TLS = tw.srv.Config()
	o.clientTLS = &tls.Config{RootCAs: tw.roots}
	tw.world = newWorld(t, o)
	return tw
}

// issue writes a new certificate for the router, named name.
func (tw *tlsWorld) issue(t *testing.T, name string) {
	t.Helper()
	is, err := tw.ca.Issue(pki.Request{Name: name, Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := is.Write(tw.dir, "srv"); err != nil {
		t.Fatal(err)
	}
}

// dial opens a TLS connection to the router.
func (tw *tlsWorld) dial(t *testing.T) *tls.Conn {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", strings.TrimPrefix(tw.url, "https://"), &tls.Config{RootCAs: tw.roots})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

func rawCreate(key, user string) string {
	body := inquiryBody(user)
	return fmt.Sprintf("POST /v1/inquiries HTTP/1.1\r\nHost: r\r\nX-API-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", key, len(body), body)
}

// TestTLSRequestChain: over TLS the router serves what it serves in plain
// HTTP, with the same refusals: kept-alive requests, a body of the largest
// size (several TLS records), one over it (413), a bad key (403), a chunked
// body, and every answer names the cell.
func TestTLSRequestChain(t *testing.T) {
	tw := newTLSWorld(t, worldOptions{})
	m := tw.currentMap()
	for i, user := range usersIn(t, m, "c2", 20) {
		a := tw.create(user)
		if a.status != http.StatusAccepted || a.header.Get("Cellkit-Cell") != "c2" {
			t.Fatalf("create #%d over TLS: %v (cell %q)", i, a, a.header.Get("Cellkit-Cell"))
		}
	}
	user := userIn(t, m, "c3", 1)
	pad := strings.Repeat("x", 60<<10)
	if a := tw.do("POST", "/v1/inquiries", `{"user_id":"`+user+`","product":"credit-line","amount":5,"note":"`+pad+`"}`); a.status != http.StatusAccepted {
		t.Fatalf("a 60 KiB body over TLS: %v", a)
	}
	if a := tw.do("POST", "/v1/inquiries", `{"user_id":"`+user+`","note":"`+strings.Repeat("x", 70<<10)+`"}`); a.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("a 70 KiB body over TLS: %d, want 413", a.status)
	}
	if a := tw.create(user, "X-API-Key", "ck_wrong"); a.status != http.StatusForbidden {
		t.Fatalf("an unknown key over TLS: %d, want 403", a.status)
	}

	// Chunked, and two requests pipelined in one write.
	c := tw.dial(t)
	body := inquiryBody(user)
	chunked := fmt.Sprintf("POST /v1/inquiries HTTP/1.1\r\nHost: r\r\nX-API-Key: %s\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", tw.key, len(body), body)
	if _, err := io.WriteString(c, chunked+rawCreate(tw.key, user)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for i := range 2 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("pipelined answer %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("pipelined answer %d: %d, want 202", i, resp.StatusCode)
		}
	}
	if got := testutil.ToFloat64(tw.router.metrics.tlsHandshakes.WithLabelValues("ok")); got < 2 {
		t.Fatalf("tls handshakes ok = %v, want ≥ 2", got)
	}
}

// TestTLSClientEndsItsSide: a client that sends its request and then ends
// its side, with a TCP FIN or with TLS's close_notify, still gets its
// answer.
func TestTLSClientEndsItsSide(t *testing.T) {
	tw := newTLSWorld(t, worldOptions{})
	tw.backends["c1"].delay.Store(int64(50 * time.Millisecond)) // the end comes while the cell works
	user := userIn(t, tw.currentMap(), "c1", 1)
	for _, how := range []string{"close_notify", "fin"} {
		t.Run(how, func(t *testing.T) {
			c := tw.dial(t)
			if _, err := io.WriteString(c, rawCreate(tw.key, user)); err != nil {
				t.Fatal(err)
			}
			if how == "close_notify" {
				c.CloseWrite()
			} else {
				c.NetConn().(*net.TCPConn).CloseWrite()
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("answer after %s: %v", how, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("answer after %s: %d, want 202", how, resp.StatusCode)
			}
		})
	}
}

// TestTLSRefusesWhatIsNotTLS: plain HTTP to the TLS port, a client that
// never starts its handshake, and a client that does not trust the
// certificate each end with the connection closed and a failed handshake
// counted; the router serves on.
func TestTLSRefusesWhatIsNotTLS(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Server.ReadHeaderTimeout = 300 * time.Millisecond
	tw := newTLSWorld(t, worldOptions{cfg: cfg})
	addr := strings.TrimPrefix(tw.url, "https://")
	failed := func() float64 { return testutil.ToFloat64(tw.router.metrics.tlsHandshakes.WithLabelValues("failed")) }

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, rawCreate(tw.key, "u1"))
	if b, _ := io.ReadAll(c); strings.Contains(string(b), "HTTP/1.1 202") {
		t.Fatalf("plain HTTP on the TLS port was served: %q", b)
	}

	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	silent.SetDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if _, err := silent.Read(make([]byte, 1)); err == nil {
		t.Fatal("a silent connection got bytes")
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("a silent connection was closed after %v, want about the read-header timeout", took)
	}

	_, err = tls.Dial("tcp", addr, &tls.Config{RootCAs: x509.NewCertPool()})
	if err == nil {
		t.Fatal("a client that does not trust the certificate completed a handshake")
	}
	testkit.WaitFor(t, 5*time.Second, "three failed handshakes counted", func() bool { return failed() >= 3 })
	if a := tw.create(userIn(t, tw.currentMap(), "c1", 1)); a.status != http.StatusAccepted {
		t.Fatalf("after the refused clients: %v", a)
	}
	testkit.WaitFor(t, 5*time.Second, "the refused connections counted out", func() bool { return tw.router.eng.conns.Load() <= 1 })
}

// TestTLSCertificateReloadUnderLoad: clients making new connections and
// kept-alive ones send requests without pause while the certificate is
// replaced twice (once by a broken file, refused); not one request fails,
// kept-alive connections stay up, and new handshakes get the new
// certificate.
func TestTLSCertificateReloadUnderLoad(t *testing.T) {
	tw := newTLSWorld(t, worldOptions{})
	users := usersIn(t, tw.currentMap(), "c1", 8)
	var stop atomic.Bool
	var sent, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for i := range 4 {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: tw.roots}, DisableKeepAlives: i%2 == 0}
		cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer tr.CloseIdleConnections()
			for n := 0; !stop.Load() && n < 5000; n++ {
				req, _ := http.NewRequest("POST", tw.url+"/v1/inquiries", strings.NewReader(inquiryBody(users[n%len(users)])))
				req.Header.Set("X-API-Key", tw.key)
				resp, err := cl.Do(req)
				sent.Add(1)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusAccepted {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	served := func() string {
		c := tw.dial(t)
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	testkit.WaitFor(t, 10*time.Second, "load under way", func() bool { return sent.Load() > 50 })
	tw.issue(t, "second")
	if err := tw.srv.Watcher().Reload(); err != nil {
		t.Fatal(err)
	}
	if got := served(); got != "second" {
		t.Fatalf("a new handshake after the reload got %q, want second", got)
	}
	at := sent.Load()
	testkit.WaitFor(t, 10*time.Second, "load after the reload", func() bool { return sent.Load() > at+50 })
	os.WriteFile(filepath.Join(tw.dir, "srv.pem"), []byte("-----BEGIN CERTIFICATE-----\ntruncated"), 0o644)
	if err := tw.srv.Watcher().Reload(); err == nil {
		t.Fatal("a broken certificate file was taken")
	}
	if got := served(); got != "second" {
		t.Fatalf("after a refused reload a handshake got %q, want second", got)
	}
	at = sent.Load()
	testkit.WaitFor(t, 10*time.Second, "load after the refused reload", func() bool { return sent.Load() > at+50 })
	stop.Store(true)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d requests failed across the reloads; first: %v", n, sent.Load(), firstErr.Load())
	}
	t.Logf("%d requests across two reloads, none failed", sent.Load())
}

// TestTLSPipelineFloodIsCut: a TLS client that keeps sending while its
// request is answered is cut once it has sent more than two whole
// requests can hold, as a plain one is; what the router decrypts ahead is
// bounded.
func TestTLSPipelineFloodIsCut(t *testing.T) {
	tw := newTLSWorld(t, worldOptions{})
	tw.backends["c1"].mode.Store(modeHang)
	c := tw.dial(t)
	if _, err := io.WriteString(c, rawCreate(tw.key, userIn(t, tw.currentMap(), "c1", 1))); err != nil {
		t.Fatal(err)
	}
	junk := []byte(strings.Repeat("x", 16<<10))
	limit := 2 * tw.router.eng.r.cfg.Server.MaxHeaderBytes * 40 // far more than 2 × (header + body limits)
	sent := 0
	var err error
	for sent < limit {
		var n int
		n, err = c.Write(junk)
		sent += n
		if err != nil {
			break
		}
	}
	if err == nil {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
	}
	if err == nil {
		t.Fatalf("a client that sent %d bytes behind a request in flight was not cut", sent)
	}
	t.Logf("cut after %d bytes sent: %v", sent, err)
}

// TestMutualTLSToCells: cells on mutual TLS (routers' certificates only)
// are served by the loops over kept-alive TLS connections: every request
// of a concurrent burst arrives with the router's certificate, the
// connections are far fewer than the requests, chunked answers are whole,
// and a cell that closes its idle connections (close_notify, then FIN) is
// dialled again and served.
func TestMutualTLSToCells(t *testing.T) {
	certs := celltest.DevCerts(t)
	srvTLS, err := tlsconf.NewServer(tlsconf.ServerFiles{Cert: certs.Cert(pki.RoleCell), Key: certs.Key(pki.RoleCell),
		ClientCA: certs.CA(), ClientRole: pki.RoleRouter}, tlsconf.Options{What: "intake_tls"})
	if err != nil {
		t.Fatal(err)
	}
	cliTLS, err := tlsconf.NewClient(tlsconf.ClientFiles{CA: certs.CA(), Cert: certs.Cert(pki.RoleRouter), Key: certs.Key(pki.RoleRouter)}, tlsconf.Options{What: "cell_tls"})
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{cell: "c1", release: make(chan struct{})}
	var conns, fromRouter, chunked, probesFromRouter atomic.Int64
	b.srv = httptest.NewUnstartedServer(httpx.EchoCall(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		router := r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && tlsconf.PeerHasRole(r.TLS, pki.RoleRouter)
		if r.URL.Path == "/v1/health" {
			if router {
				probesFromRouter.Add(1)
			}
			b.serve(w, r)
			return
		}
		if router {
			fromRouter.Add(1)
		}
		if r.Method == http.MethodGet {
			chunked.Add(1)
			w.Header().Set("Content-Type", "application/json")
			for i := range 3 {
				fmt.Fprintf(w, `{"part":%d,"pad":"%s"}`, i, strings.Repeat("p", 20000))
				w.(http.Flusher).Flush()
			}
			return
		}
		b.serve(w, r)
	})))
	b.srv.TLS = srvTLS.Config()
	b.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	b.srv.StartTLS()
	t.Cleanup(func() { close(b.release); b.srv.CloseClientConnections(); b.srv.Close() })
	w := newWorld(t, worldOptions{cells: []string{"c1"}, intake: map[string]string{"c1": b.srv.URL},
		cfg: Config{Cell: CellLimits{TLS: cliTLS.Config()}}})

	const senders, each = 8, 25
	var wg sync.WaitGroup
	var bad atomic.Int64
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				req, _ := http.NewRequest("POST", w.url+"/v1/inquiries", strings.NewReader(inquiryBody("u1")))
				req.Header.Set("X-API-Key", w.key)
				resp, err := w.client.Do(req)
				if err != nil {
					bad.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					bad.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if bad.Load() > 0 || fromRouter.Load() != senders*each {
		t.Fatalf("%d failed; the cell saw %d requests with the router's certificate, want %d", bad.Load(), fromRouter.Load(), senders*each)
	}
	if n := conns.Load(); n > senders*2+1 {
		t.Errorf("%d TLS connections for %d requests (and the health checks'): not kept alive", n, senders*each)
	}
	if probesFromRouter.Load() == 0 || probesFromRouter.Load() != b.probes.Load() {
		t.Errorf("%d of %d health checks came with the router's certificate", probesFromRouter.Load(), b.probes.Load())
	}
	a := w.do("GET", "/v1/inquiries/c1-abc", "")
	if a.status != 200 || len(a.body) < 60000 || !strings.HasSuffix(string(a.body), `}`) {
		t.Fatalf("a chunked answer over TLS: %d, %d bytes", a.status, len(a.body))
	}

	// The cell closes every connection it holds (a restart, an idle
	// timeout): the router dials again.
	b.srv.CloseClientConnections()
	before := conns.Load()
	testkit.WaitFor(t, 5*time.Second, "a request served after the cell closed its connections", func() bool {
		return w.do("GET", "/v1/inquiries/c1-abc", "").status == 200
	})
	if conns.Load() == before {
		t.Error("no new connection after the cell closed them all")
	}
}

// TestTLSHandshakesAreEvictedAtTheLimit: at the connection limit, a
// connection that never finishes its handshake gives its place to a new
// one, as a connection without a byte of a request does on plain HTTP.
func TestTLSHandshakesAreEvictedAtTheLimit(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Server.MaxConns = 2
	tw := newTLSWorld(t, worldOptions{cfg: cfg})
	addr := strings.TrimPrefix(tw.url, "https://")
	for range 2 {
		c, err := net.Dial("tcp", addr) // connects, never says hello
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	testkit.WaitFor(t, 5*time.Second, "two connections in their handshake", func() bool { return tw.router.eng.conns.Load() == 2 })
	if a := tw.create(userIn(t, tw.currentMap(), "c1", 1)); a.status != http.StatusAccepted {
		t.Fatalf("a client at the limit with two silent handshakes: %v", a)
	}
	if got := testutil.ToFloat64(tw.router.metrics.evicted); got < 1 {
		t.Fatalf("evicted = %v, want ≥ 1", got)
	}
}

// A request waiting for a connection being opened to a cell's instance
// when the map changes the cell's instances (one leaves or comes back to
// the rotation, and the router retires the cell's upstream) goes on with
// the new map: left to the retired upstream, the connection opened for it
// was closed as it came and it waited out the call's timeout (504), once
// in each release step of a cell on Kubernetes.
func TestAWaitingRequestFollowsTheMapChange(t *testing.T) {
	certs := celltest.DevCerts(t)
	srvTLS, err := tlsconf.NewServer(tlsconf.ServerFiles{Cert: certs.Cert(pki.RoleCell), Key: certs.Key(pki.RoleCell)}, tlsconf.Options{What: "intake_tls"})
	if err != nil {
		t.Fatal(err)
	}
	cliTLS, err := tlsconf.NewClient(tlsconf.ClientFiles{CA: certs.CA()}, tlsconf.Options{What: "cell_tls"})
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{cell: "c1", release: make(chan struct{})}
	b.srv = httptest.NewUnstartedServer(b.handler())
	b.srv.TLS = srvTLS.Config()
	b.srv.StartTLS()
	t.Cleanup(func() { close(b.release); b.srv.CloseClientConnections(); b.srv.Close() })
	// Two ways to the instance, each holding a new connection 700 ms
	// before it passes a byte: its TLS handshake, and so the router's dial,
	// takes that long.
	const hold = 700 * time.Millisecond
	first, second := slowWay(t, b.srv.Listener.Addr().String(), hold), slowWay(t, b.srv.Listener.Addr().String(), hold)
	const timeout = 5 * time.Second
	w := newWorld(t, worldOptions{cells: []string{"c1"}, intake: map[string]string{"c1": first},
		cfg: Config{Cell: CellLimits{TLS: cliTLS.Config(), Timeout: timeout, ProbeInterval: -1}}})

	got := make(chan answer, 1)
	go func() { got <- w.create("u1") }()
	time.Sleep(hold / 3) // the request waits for the connection being opened
	w.publish(func(m *slotmap.Map) (*slotmap.Plan, error) {
		return m.SetInstance("c1", slotmap.Instance{ID: "i2", Intake: second, Admin: b.srv.URL})
	})
	a := <-got
	if a.status != http.StatusAccepted || a.took > timeout/2 {
		t.Fatalf("the request that waited through the map change: %v after %v, want 202 well inside the %v timeout", a, a.took, timeout)
	}
}

// slowWay is a TCP way to addr that holds each connection for hold before
// it passes anything, as an instance slow to take a connection would.
func slowWay(t *testing.T, addr string, hold time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				time.Sleep(hold)
				up, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { io.Copy(up, c); up.Close() }()
				io.Copy(c, up)
			}()
		}
	}()
	return "https://" + ln.Addr().String()
}
