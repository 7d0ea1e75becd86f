package router

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/panjf2000/gnet/v2/pkg/netpoll"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	"github.com/cellkit/cellkit/internal/testkit"
)

// The standing adversarial suite: what a hostile client can send on a raw
// socket, by class. Each case checks what the client got and what the
// cell received (nothing, for a refused request).

// refusedAtHead checks that rc got status, that the connection then
// closes, and that the cell was not called.
func refusedAtHead(t *testing.T, w *world, rc *rawConn, method string, status int) {
	t.Helper()
	resp, body := rc.read(method)
	if resp.StatusCode != status {
		t.Fatalf("status %d %s; want %d", resp.StatusCode, body, status)
	}
	if !resp.Close {
		t.Errorf("the answer does not say Connection: close")
	}
	if !rc.endsWithin(3 * time.Second) {
		t.Errorf("the connection stayed open after a %d", status)
	}
	for id, b := range w.backends {
		if n := b.calls.Load(); n != 0 {
			t.Errorf("cell %s was called %d times", id, n)
		}
	}
}

// endsWithin says whether the router ends the connection within d, by a
// close or a reset (a client that kept sending may see the latter).
func (rc *rawConn) endsWithin(d time.Duration) bool {
	rc.c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, rc.br)
	var ne net.Error
	return !errors.As(err, &ne) || !ne.Timeout()
}

// TestAuthIsDecidedFromTheHead: a request without a valid key is answered
// and its connection closed from the head alone, before any of its body
// arrives, whatever the body's framing says.
func TestAuthIsDecidedFromTheHead(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}})
	for _, tc := range []struct {
		name, key, framing string
		status             int
	}{
		{"no key, a length", "", "Content-Length: 60000\r\n", 401},
		{"unknown key, a length", "ck_nope", "Content-Length: 60000\r\n", 403},
		{"no key, chunked", "", "Transfer-Encoding: chunked\r\n", 401},
		{"no key, a length over the limit", "", "Content-Length: 99999999\r\n", 401},
		{"no key, waiting for 100 Continue", "", "Expect: 100-continue\r\nContent-Length: 100\r\n", 401},
		{"no key, no body", "", "", 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := w.dial()
			rc.t = t
			head := "POST /v1/inquiries HTTP/1.1\r\nHost: router.test\r\nContent-Type: application/json\r\n" + tc.framing
			if tc.key != "" {
				head += "X-API-Key: " + tc.key + "\r\n"
			}
			rc.send(head + "\r\n") // and not a byte of the body
			start := time.Now()
			refusedAtHead(t, w, rc, "POST", tc.status)
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("answered after %v", d)
			}
		})
	}
}

// TestChunkExtensionAmplification: 1-byte chunks with 4000-byte
// extensions. Without a key the body is never read; with one, the framing
// is refused once it outweighs the data, and the router has read a
// bounded number of bytes.
func TestChunkExtensionAmplification(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}})
	chunk := "1;" + strings.Repeat("e", 4000) + "\r\nx\r\n"
	body := strings.Repeat(chunk, 200) // 800 KB for 200 bytes of data

	t.Run("without a key", func(t *testing.T) {
		rc := w.dial()
		rc.t = t
		rc.send("POST /v1/inquiries HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
		go rc.c.Write([]byte(body)) // the router reads away at most a bounded amount, then closes
		refusedAtHead(t, w, rc, "POST", 401)
	})
	t.Run("with a key", func(t *testing.T) {
		rc := w.dial()
		rc.t = t
		rc.send(postHead(w.key, "Transfer-Encoding: chunked\r\n\r\n"))
		go rc.c.Write([]byte(body))
		start := time.Now()
		resp, text := rc.read("POST")
		if resp.StatusCode != 400 {
			t.Fatalf("status %d %s; want 400", resp.StatusCode, text)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("refused after %v", d)
		}
		if n := w.backends["c1"].calls.Load(); n != 0 {
			t.Errorf("the cell was called %d times", n)
		}
	})
}

// TestARefusalStopsTheReading: a client refused with Connection: close
// that goes on sending — a body it declared, chunks whose extensions
// outweigh their data, endless trailers, an endless chunk-size line or
// header fold — has read from it no more than a small bound, however
// large the body limit (1 MiB here), and its connection ends; on the
// batched loop and with a system call per read alike. The client's
// send buffer is held small, so the bytes its writes got accepted are
// those the router took (read, or held in its socket's buffer).
func TestARefusalStopsTheReading(t *testing.T) {
	const bound = 512 << 10
	extChunk := "1;" + strings.Repeat("e", 4000) + "\r\nx\r\n"
	for _, syscalls := range []bool{false, true} {
		t.Run(fmt.Sprintf("syscalls=%v", syscalls), func(t *testing.T) {
			netpoll.SyscallPerSocketIO.Store(syscalls)
			defer netpoll.SyscallPerSocketIO.Store(false)
			w := newWorld(t, worldOptions{cells: []string{"c1"}, cfg: Config{Server: ServerLimits{MaxBodyBytes: 1 << 20}}})
			noKey := "POST /v1/inquiries HTTP/1.1\r\nHost: a\r\n"
			for _, tc := range []struct {
				name, head, filler string
				status             int
			}{
				{"no key, chunks of kilobyte extensions", noKey + "Transfer-Encoding: chunked\r\n\r\n", extChunk, 401},
				{"no key, a body of 3 MB declared", noKey + "Content-Length: 3000000\r\n\r\n", strings.Repeat("x", 4096), 401},
				{"a body over the limit by its length", postHead(w.key, "Content-Length: 3000000\r\n\r\n"), strings.Repeat("x", 4096), 413},
				{"chunks of kilobyte extensions", postHead(w.key, "Transfer-Encoding: chunked\r\n\r\n"), extChunk, 400},
				{"endless trailers", postHead(w.key, "Transfer-Encoding: chunked\r\n\r\n0\r\n"), "X-T: " + strings.Repeat("t", 1000) + "\r\n", 400},
				{"an endless chunk-size line", postHead(w.key, "Transfer-Encoding: chunked\r\n\r\n"), strings.Repeat("0", 4096), 400},
				{"an endless header fold", noKey + "X-A: 1\r\n", " " + strings.Repeat("f", 1000) + "\r\n", 0},
			} {
				t.Run(tc.name, func(t *testing.T) {
					status, took, ended := sendRefused(t, w, tc.head, tc.filler)
					switch {
					case tc.status != 0 && status != tc.status:
						t.Errorf("status %d, want %d", status, tc.status)
					case status < 400 || status > 499:
						t.Errorf("status %d, want a refusal", status)
					}
					if !ended {
						t.Errorf("the connection did not end; %d bytes taken", took)
					}
					if took > bound {
						t.Errorf("the router took %d bytes after refusing, want at most %d", took, bound)
					}
					t.Logf("%d: %d bytes taken", status, took)
				})
			}
		})
	}
}

// sendRefused sends head and then filler again and again, from a client
// whose send buffer is small, until the router ends the connection (or 5 s
// pass): it returns the answer's status, the bytes its writes got
// accepted, and whether the connection ended.
func sendRefused(t *testing.T, w *world, head, filler string) (status, took int, ended bool) {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 4096) })
	}}
	c, err := d.Dial("tcp", strings.TrimPrefix(w.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	answer := make(chan int, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			answer <- 0
			return
		}
		_ = resp.Body.Close()
		answer <- resp.StatusCode
	}()
	buf := []byte(head + strings.Repeat(filler, max(1, 16384/len(filler))))
	for {
		n, err := c.Write(buf)
		took += n
		if err != nil {
			var ne net.Error
			ended = !errors.As(err, &ne) || !ne.Timeout()
			break
		}
		buf = buf[len(head):] // the filler, from now on
		head = ""
	}
	return <-answer, took, ended
}

// TestHostIsRequired: HTTP/1.1 needs one valid Host (RFC 9112 §3.2).
func TestHostIsRequired(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}})
	get := func(minor int, host string) string {
		return fmt.Sprintf("GET /v1/inquiries/c1-abc HTTP/1.%d\r\n%sX-API-Key: %s\r\n\r\n", minor, host, w.key)
	}
	for _, tc := range []struct {
		name, req string
		status    int
	}{
		{"none", get(1, ""), 400},
		{"a path", get(1, "Host: a/b\r\n"), 400},
		{"userinfo", get(1, "Host: u@a\r\n"), 400},
		{"two ports", get(1, "Host: a:1:2\r\n"), 400},
		{"a port not a number", get(1, "Host: a:x\r\n"), 400},
		{"an open bracket", get(1, "Host: [::1\r\n"), 400},
		{"two", get(1, "Host: a\r\nHost: b\r\n"), 400},
		{"a name", get(1, "Host: router.example:8080\r\n"), 200},
		{"an IPv6 literal", get(1, "Host: [::1]:8080\r\n"), 200},
		{"empty", get(1, "Host: \r\n"), 200},
		{"none in HTTP/1.0", get(0, ""), 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := w.backends["c1"].calls.Load()
			rc := w.dial()
			rc.t = t
			rc.send(tc.req)
			resp, body := rc.read("GET")
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d %s; want %d", resp.StatusCode, body, tc.status)
			}
			called := w.backends["c1"].calls.Load() - before
			if (tc.status == 200) != (called == 1) {
				t.Errorf("the cell was called %d times", called)
			}
		})
	}
}

// TestExpectations: an expectation other than 100-continue is 417 before
// the body; an HTTP/1.0 client never gets a 100 Continue.
func TestExpectations(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}})
	body := inquiryBody("u1")
	length := "Content-Length: " + strconv.Itoa(len(body)) + "\r\n"

	rc := w.dial()
	rc.t = t
	rc.send(postHead(w.key, "Expect: 200-ok\r\n"+length+"\r\n"))
	refusedAtHead(t, w, rc, "POST", 417)

	rc = w.dial()
	rc.send(strings.Replace(postHead(w.key, "Expect: 100-continue\r\n"+length+"\r\n"), "HTTP/1.1", "HTTP/1.0", 1))
	time.Sleep(100 * time.Millisecond) // room for a wrong 100 Continue to arrive first
	rc.send(body)
	resp, text := rc.read("POST")
	if resp.StatusCode != 202 {
		t.Fatalf("HTTP/1.0 with Expect: 100-continue: status %d %s; want 202 and no 100 first", resp.StatusCode, text)
	}
}

// TestInternalHeadersAreStripped: whatever a client claims in the
// router's and the cells' own fields, or in the fields other proxies use
// for the client's address, never reaches the cell.
func TestInternalHeadersAreStripped(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}})
	claims := []string{
		"Cellkit-Fingerprint", "Cellkit-Client", "Cellkit-Map-Version", "Cellkit-Slot", "Cellkit-Priority", "CELLKIT-ANYTHING",
		"X-Real-IP", "True-Client-IP", "X-Client-IP", "X-Forwarded-Port", "X-Forwarded-Server", "Forwarded",
	}
	var extra strings.Builder
	for _, c := range claims {
		extra.WriteString(c + ": 6.6.6.6\r\n")
	}
	extra.WriteString("X-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: https\r\nX-Custom: kept\r\n")
	body := inquiryBody("u1")
	rc := w.dial()
	rc.t = t
	rc.send(postHead(w.key, extra.String()+"Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n") + body)
	if resp, text := rc.read("POST"); resp.StatusCode != 202 {
		t.Fatalf("status %d %s", resp.StatusCode, text)
	}
	req, _ := w.backends["c1"].lastRequest()
	for name, vs := range req.Header {
		for _, v := range vs {
			if strings.Contains(v, "6.6.6.6") {
				t.Errorf("the cell got %s: %s", name, v)
			}
		}
	}
	if got := req.Header.Get("X-Forwarded-Proto"); got != "http" {
		t.Errorf("X-Forwarded-Proto %q, want the router's http", got)
	}
	if got := req.Header.Get("Cellkit-Client"); got != "platform-a" {
		t.Errorf("Cellkit-Client %q, want the router's platform-a", got)
	}
	if req.Header.Get("X-Custom") != "kept" {
		t.Errorf("an ordinary field was dropped: %v", req.Header)
	}
	if _, ok := req.Header[http.CanonicalHeaderKey("Cellkit-Fingerprint")]; ok {
		t.Errorf("Cellkit-Fingerprint reached the cell")
	}
}

// fileLimit lowers the process's open-file limit and takes every file it
// allows; free gives n of them back, restore all and the limit.
type fileLimit struct {
	t       *testing.T
	saved   unix.Rlimit
	fillers []*os.File
	done    bool
}

func atFileLimit(t *testing.T) *fileLimit {
	fl := &fileLimit{t: t}
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &fl.saved); err != nil {
		t.Fatal(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	low := unix.Rlimit{Cur: uint64(len(fds)) + 16, Max: fl.saved.Max}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fl.restore)
	fill := func() {
		for {
			f, err := os.Open(os.DevNull)
			if err != nil {
				return
			}
			fl.fillers = append(fl.fillers, f)
		}
	}
	// Once more after a while: files closed meanwhile (a connection's
	// other end seeing its peer close) are taken too.
	fill()
	time.Sleep(100 * time.Millisecond)
	fill()
	return fl
}

func (fl *fileLimit) free(n int) {
	for ; n > 0 && len(fl.fillers) > 0; n-- {
		fl.fillers[len(fl.fillers)-1].Close()
		fl.fillers = fl.fillers[:len(fl.fillers)-1]
	}
}

func (fl *fileLimit) restore() {
	if fl.done {
		return
	}
	fl.done = true
	fl.free(len(fl.fillers))
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &fl.saved); err != nil {
		fl.t.Fatal(err)
	}
}

// servedOn sends a request on c and wants it answered 200.
func (w *world) servedOn(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET /v1/inquiries/c1-abc HTTP/1.1\r\nHost: a\r\nX-API-Key: %s\r\n\r\n", w.key)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%s: %v, %v", what, resp, err)
	}
}

// TestAcceptErrorsAreRetried: at the open-file limit, accept fails with
// EMFILE; the router keeps its listener, retries, and serves again once
// files are free, ready all along.
func TestAcceptErrorsAreRetried(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}})
	if a := w.do("GET", "/v1/inquiries/c1-abc", ""); a.status != 200 {
		t.Fatalf("before: %v", a)
	}
	// Every file the limit allows is taken; then one is freed at a time
	// for the client's socket, so that the router's accept has none.
	fl := atFileLimit(t)
	var conns []net.Conn
	for try := 0; try < 10 && testutil.ToFloat64(w.router.metrics.acceptErrs) == 0; try++ {
		fl.free(1)
		if c, err := net.DialTimeout("tcp", strings.TrimPrefix(w.url, "http://"), time.Second); err == nil {
			conns = append(conns, c)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if testutil.ToFloat64(w.router.metrics.acceptErrs) == 0 {
		t.Fatal("no accept error at the open-file limit")
	}
	fl.restore()
	// The connection made while the router could not accept it is served
	// once it can.
	w.servedOn(t, conns[len(conns)-1], "the connection made at the limit")
	for _, c := range conns {
		c.Close()
	}
	w.client.CloseIdleConnections()
	if a := w.do("GET", "/v1/inquiries/c1-abc", ""); a.status != 200 {
		t.Fatalf("after: %v", a)
	}
	if rd := w.router.Readiness(); !rd.Ready {
		t.Errorf("readiness after accept errors: %+v", rd)
	}
}

// TestAConnectionAcceptedAtTheFileLimitWaits: two files free, one for the
// client's socket and one for the router's accept: the accept succeeds,
// but handing the connection to a loop takes one more file for a moment.
// The connection waits for it (counted as an accept error) and is served
// once files are free, instead of being closed.
func TestAConnectionAcceptedAtTheFileLimitWaits(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}})
	if a := w.do("GET", "/v1/inquiries/c1-abc", ""); a.status != 200 {
		t.Fatalf("before: %v", a)
	}
	w.client.CloseIdleConnections()
	fl := atFileLimit(t)
	fl.free(2)
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(w.url, "http://"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testkit.WaitFor(t, 5*time.Second, "the accepted connection to wait for a file", func() bool {
		return testutil.ToFloat64(w.router.metrics.acceptErrs) > 0
	})
	fl.restore()
	w.servedOn(t, c, "the connection accepted at the limit")
}

// TestTheRoutersOwnShortageIsNotTheCells: at the open-file limit the
// router can open no socket to a cell, for a call or a health check. That
// shortage is the router's own: the call gets 503 with Retry-After and
// without Cellkit-Overloaded (another router may serve it), the checks are
// skipped, not missed, and nothing is held against the cell — no instance
// out of rotation, no breaker failure — so it is served at once when files
// are free again.
func TestTheRoutersOwnShortageIsNotTheCells(t *testing.T) {
	// A cell that closes every connection after its answer: each call and
	// each check needs a socket of its own.
	cell := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Connection", "close")
		rw.Header().Set("Content-Type", "application/json")
		_, _ = rw.Write([]byte("{}"))
	}))
	t.Cleanup(cell.Close)
	w := newWorld(t, worldOptions{cells: []string{"c1"}, intake: map[string]string{"c1": cell.URL}})
	c, err := net.Dial("tcp", strings.TrimPrefix(w.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	ask := func(what string) (*http.Response, []byte) {
		t.Helper()
		fmt.Fprintf(c, "GET /v1/inquiries/c1-abc HTTP/1.1\r\nHost: a\r\nX-API-Key: %s\r\n\r\n", w.key)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return resp, body
	}
	if resp, body := ask("before"); resp.StatusCode != 200 {
		t.Fatalf("before: %d %s", resp.StatusCode, body)
	}
	m := w.router.metrics.cell("c1")
	skippedBefore, missedBefore := testutil.ToFloat64(m.probes[skipped]), testutil.ToFloat64(m.probes[missed])

	fl := atFileLimit(t)
	resp, body := ask("at the file limit")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		resp.Header.Get("Cellkit-Overloaded") != "" || !strings.Contains(string(body), "short of files") {
		t.Errorf("at the file limit: %d %v %s, want 503 with Retry-After, without Cellkit-Overloaded, saying the router is short", resp.StatusCode, resp.Header, body)
	}
	testkit.WaitFor(t, 5*time.Second, "health checks skipped at the file limit", func() bool {
		return testutil.ToFloat64(m.probes[skipped]) >= skippedBefore+probeFall+1
	})
	fl.restore()
	if got := testutil.ToFloat64(m.probes[missed]); got != missedBefore {
		t.Errorf("%v checks missed at the file limit, want none (skipped)", got-missedBefore)
	}
	st := w.router.Cells()[0]
	if st.Breaker != "closed" {
		t.Errorf("breaker %s after the router's shortage, want closed", st.Breaker)
	}
	for _, in := range st.Instances {
		if in.Ejected {
			t.Errorf("instance %s out of rotation after the router's shortage", in.Intake)
		}
	}
	if resp, body := ask("once files are free"); resp.StatusCode != 200 {
		t.Errorf("once files are free: %d %s, want 200 at once", resp.StatusCode, body)
	}
}

// TestStalledLoopEndsServing: an event loop that stops running is a
// failure the router cannot recover from: readiness fails first, then
// ListenAndServe returns an error (and the process ends).
func TestStalledLoopEndsServing(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}, failing: true,
		cfg: Config{Server: ServerLimits{StallTimeout: 300 * time.Millisecond}}})
	if a := w.do("GET", "/v1/inquiries/c1-abc", ""); a.status != 200 {
		t.Fatalf("before: %v", a)
	}
	release := make(chan struct{})
	lp := w.router.eng.loopList()[0]
	lp.el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		<-release // a loop stuck in a callback
		return nil
	}))
	testkit.WaitFor(t, 5*time.Second, "readiness failing", func() bool { return !w.router.Readiness().Ready })
	if rd := w.router.Readiness(); !strings.Contains(rd.Failure, "event loop") {
		t.Errorf("readiness: %+v; want the failure named", rd)
	}
	select {
	case err := <-w.served:
		t.Fatalf("ListenAndServe returned %v before readiness had failed for a while", err)
	case <-time.After(fatalGrace / 2):
	}
	close(release)
	select {
	case err := <-w.served:
		if err == nil {
			t.Fatal("ListenAndServe returned nil after a stalled loop")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ListenAndServe still running after a stalled loop")
	}
}

// TestFileLimitCheckedAtStart: a max-conns the open-file limit cannot hold
// is refused at start, with the numbers.
func TestFileLimitCheckedAtStart(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}})
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &l); err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Server: ServerLimits{MaxConns: int(l.Cur)}}, Options{Maps: w.follower, Keys: w.router.Keys()})
	if err != nil {
		t.Fatal(err)
	}
	err = r.ListenAndServe("127.0.0.1:0", nil)
	if err == nil || !strings.Contains(err.Error(), "open-file limit") || !strings.Contains(err.Error(), strconv.Itoa(int(l.Cur))) {
		t.Fatalf("ListenAndServe with max-conns %d = %v; want the open-file limit refused", l.Cur, err)
	}
}

// TestPerAddressConnectionCap: one address cannot hold more than its cap
// of connections; the others are served.
func TestPerAddressConnectionCap(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}, cfg: Config{Server: ServerLimits{MaxConnsPerAddr: 4}}})
	var held []*rawConn
	for range 4 {
		held = append(held, w.dial())
	}
	extra := w.dial()
	if !extra.endsWithin(2 * time.Second) {
		t.Fatal("a fifth connection from one address stayed open")
	}
	get := "GET /v1/inquiries/c1-abc HTTP/1.1\r\nHost: a\r\nX-API-Key: " + w.key + "\r\n\r\n"
	held[0].send(get)
	if resp, _ := held[0].read("GET"); resp.StatusCode != 200 {
		t.Fatalf("a held connection: %d", resp.StatusCode)
	}
	if n := w.backends["c1"].calls.Load(); n != 1 {
		t.Errorf("the cell was called %d times, want 1 (the held connection's request)", n)
	}
	if n := testutil.ToFloat64(w.router.metrics.connRefuse.WithLabelValues("per_addr")); n != 1 {
		t.Errorf("per_addr refusals %v, want 1", n)
	}
	held[1].c.Close()
	testkit.WaitFor(t, 2*time.Second, "room for a new connection", func() bool {
		rc := w.dial()
		rc.t = t
		rc.send(get)
		rc.c.SetReadDeadline(time.Now().Add(time.Second))
		resp, err := http.ReadResponse(rc.br, nil)
		return err == nil && resp.StatusCode == 200
	})
}

// TestIdleConnectionsEvictedAtMaxConns: connections that send nothing, or
// that idle between requests, cannot lock a client out: at MaxConns the
// oldest idle one is closed for the new one.
func TestIdleConnectionsEvictedAtMaxConns(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}, cfg: Config{Server: ServerLimits{MaxConns: 8}}})
	get := "GET /v1/inquiries/c1-abc HTTP/1.1\r\nHost: a\r\nX-API-Key: " + w.key + "\r\n\r\n"
	kept := w.dial() // idle after one request
	kept.send(get)
	if resp, _ := kept.read("GET"); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	for range 7 {
		w.dial() // open, silent
	}
	testkit.WaitFor(t, 2*time.Second, "8 connections open", func() bool { return w.router.eng.conns.Load() == 8 })
	for i := range 5 {
		rc := w.dial()
		rc.t = t
		rc.send(get)
		resp, body := rc.read("GET")
		if resp.StatusCode != 200 {
			t.Fatalf("client %d at the limit: %d %s", i, resp.StatusCode, body)
		}
	}
	if !kept.endsWithin(time.Second) {
		t.Error("the oldest idle connection was not the one evicted")
	}
	if n := testutil.ToFloat64(w.router.metrics.evicted); n < 5 {
		t.Errorf("evictions %v, want at least 5", n)
	}
}

// TestHalfClosedClientGetsItsAnswer: a client that ends its side of the
// connection (shutdown(SHUT_WR)) after its request still gets the answer,
// as from net/http: the cell ran the request, the client must see it.
func TestHalfClosedClientGetsItsAnswer(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}})
	w.backends["c1"].delay.Store(int64(200 * time.Millisecond))
	body := inquiryBody("u1")
	for _, tc := range []struct{ name, req, method string }{
		{"a POST", postHead(w.key, "Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n") + body, "POST"},
		{"a GET", "GET /v1/inquiries/c1-abc HTTP/1.1\r\nHost: a\r\nX-API-Key: " + w.key + "\r\n\r\n", "GET"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := w.backends["c1"].calls.Load()
			rc := w.dial()
			rc.t = t
			rc.send(tc.req)
			if err := rc.c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			resp, text := rc.read(tc.method)
			if resp.StatusCode/100 != 2 {
				t.Fatalf("status %d %s", resp.StatusCode, text)
			}
			if !rc.endsWithin(2 * time.Second) {
				t.Error("the connection stayed open after the answer")
			}
			if n := w.backends["c1"].calls.Load() - before; n != 1 {
				t.Errorf("the cell was called %d times", n)
			}
		})
	}
	t.Run("two pipelined requests and a partial one", func(t *testing.T) {
		before := w.backends["c1"].calls.Load()
		get := "GET /v1/inquiries/c1-abc HTTP/1.1\r\nHost: a\r\nX-API-Key: " + w.key + "\r\n\r\n"
		rc := w.dial()
		rc.t = t
		rc.send(get + get + "GET /v1/inq") // the third will never be whole
		if err := rc.c.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			if resp, text := rc.read("GET"); resp.StatusCode != 200 {
				t.Fatalf("answer %d: %d %s", i+1, resp.StatusCode, text)
			}
		}
		if !rc.endsWithin(2 * time.Second) {
			t.Error("the connection stayed open after the answers")
		}
		if n := w.backends["c1"].calls.Load() - before; n != 2 {
			t.Errorf("the cell was called %d times, want 2", n)
		}
	})
	testkit.WaitFor(t, 2*time.Second, "no connection counted", func() bool { return w.router.eng.conns.Load() == 0 })
}

// TestDefaultMaxConnsFitsTheFileLimit: without an explicit max-conns, the
// router serves as many connections as the open-file limit holds, so that
// it starts on a machine with a low limit.
func TestDefaultMaxConnsFitsTheFileLimit(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}})
	var saved unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &saved); err != nil {
		t.Fatal(err)
	}
	low := unix.Rlimit{Cur: 3000, Max: saved.Max}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{}, Options{Maps: w.follower, Keys: w.router.Keys(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &saved); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.cfg.Server.MaxConns, 3000-fdReserve; got != want {
		t.Errorf("default MaxConns under a limit of 3000 = %d, want %d", got, want)
	}
	if r2, _ := New(Config{}, Options{Maps: w.follower, Keys: w.router.Keys()}); r2.cfg.Server.MaxConns != min(defaultMaxConns, fileLimitRoom()) {
		t.Errorf("default MaxConns = %d", r2.cfg.Server.MaxConns)
	}
}

// TestFramingAttacksReachNoCell: requests that could be read two ways
// (request smuggling) are refused with 400 and the connection closed, and
// the cell never sees a byte of them.
func TestFramingAttacksReachNoCell(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}})
	body := inquiryBody("u1")
	for _, tc := range []struct{ name, framing string }{
		{"length and chunked", "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n"},
		{"two lengths", "Content-Length: 4\r\nContent-Length: 5\r\n"},
		{"chunked twice", "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"},
		{"chunked, not last", "Transfer-Encoding: chunked, identity\r\n"},
		{"obs-fold", "X-A: 1\r\n folded\r\nContent-Length: 4\r\n"},
		{"space before colon", "Content-Length : 4\r\n"},
		{"signed length", "Content-Length: +4\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := w.dial()
			rc.t = t
			rc.send(postHead(w.key, tc.framing+"\r\n") + "0\r\n\r\n" + body)
			refusedAtHead(t, w, rc, "POST", 400)
		})
	}
}
