package router

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/panjf2000/gnet/v2"
)

// TLS on the public listener, at event-loop speed.
//
// The handshake runs off the loops, on a goroutine of its own with the
// socket in blocking mode and a deadline (ReadHeaderTimeout): Go's
// crypto/tls cannot pause a handshake for want of bytes and resume it.
// Once it is done the socket is handed to an event loop like a plain one,
// and from then on crypto/tls's record layer runs on the loop: what gnet
// reads is decrypted by the connection's tls.Conn, whose transport returns
// a temporary error when gnet holds no more bytes (crypto/tls keeps its
// state across temporary errors: a record cut in two is finished when the
// rest comes), and what the loop writes is encrypted into gnet's write
// path. The request chain sees plaintext through the same conn interface
// as a plain connection, so every limit, timeout and answer is the same.
//
// Only HTTP/1.1 is offered (ALPN "http/1.1"): the router's parser is an
// HTTP/1.1 one.
//
// Connections to https cells work the same way from the other side: the
// dialling goroutine connects and runs the client handshake (within
// DialTimeout), the connection joins the loop, and the calls read and
// write it through a tlsConn. Sessions are resumed when a connection is
// dialled again (a client session cache per cell).

// tlsPlainRoom is how much decrypted plaintext a connection holds ahead of
// what the chain has taken, beyond two whole requests (what a plain
// connection may buffer before a pipelining client is cut).
const tlsPlainRoom = 16 << 10

// tlsTransport is the net.Conn under a client's tls.Conn: the socket
// during the handshake, then gnet's buffers.
type tlsTransport struct {
	net.Conn             // the socket (the handshake; addresses after it)
	gc       gnet.Conn   // set by the loop: reads come from its buffer, writes go to it
	held     *halfClosed // set when the client ended its side: writes are collected there
}

// errNoBytes is the transport's answer when gnet holds no more bytes: a
// temporary error, which crypto/tls does not keep.
var errNoBytes net.Error = noBytes{}

type noBytes struct{}

func (noBytes) Error() string   { return "router: no more bytes buffered" }
func (noBytes) Timeout() bool   { return true }
func (noBytes) Temporary() bool { return true }

func (t *tlsTransport) Read(p []byte) (int, error) {
	if t.gc == nil {
		if t.held != nil {
			return 0, errNoBytes
		}
		return t.Conn.Read(p)
	}
	if t.gc.InboundBuffered() == 0 {
		return 0, errNoBytes
	}
	return t.gc.Read(p)
}

func (t *tlsTransport) Write(p []byte) (int, error) {
	switch {
	case t.held != nil:
		t.held.out = append(t.held.out, p...)
		return len(p), nil
	case t.gc != nil:
		return t.gc.Write(p)
	}
	return t.Conn.Write(p)
}

// tlsConn is a client connection on TLS as the loop sees it: plaintext
// in and out.
type tlsConn struct {
	gc    gnet.Conn
	tc    *tls.Conn
	tr    *tlsTransport
	plain []byte // decrypted and not yet taken
	off   int    // where plain's untaken bytes start
	room  int    // plaintext held ahead at most
	err   error  // the TLS stream ended (io.EOF: close_notify) or failed
}

var _ conn = (*tlsConn)(nil)

// fill decrypts what gnet holds until room plaintext bytes are held.
func (t *tlsConn) fill() {
	for t.err == nil && len(t.plain)-t.off < t.room {
		if t.off > 0 && t.off == len(t.plain) {
			t.plain, t.off = t.plain[:0], 0
		}
		if len(t.plain) == cap(t.plain) {
			t.plain = append(t.plain, make([]byte, min(max(cap(t.plain), 4096), t.room))...)[:len(t.plain)]
		}
		n, err := t.tc.Read(t.plain[len(t.plain):cap(t.plain)])
		t.plain = t.plain[:len(t.plain)+n]
		if err != nil {
			if !errors.Is(err, errNoBytes) {
				t.err = err
			}
			return
		}
		if n == 0 {
			return
		}
	}
}

func (t *tlsConn) Peek(n int) ([]byte, error) {
	t.fill()
	b := t.plain[t.off:]
	if n >= 0 && n < len(b) {
		b = b[:n]
	}
	return b, nil
}

func (t *tlsConn) Discard(n int) (int, error) {
	if n >= 0 {
		n = min(n, len(t.plain)-t.off)
		t.off += n
		t.shrink()
		return n, nil
	}
	total := 0
	for {
		t.fill()
		k := len(t.plain) - t.off
		if k == 0 {
			return total, nil
		}
		total += k
		t.off = len(t.plain)
		t.shrink()
	}
}

// shrink drops a large plaintext buffer once it is all taken.
func (t *tlsConn) shrink() {
	if t.off == len(t.plain) {
		t.off = 0
		if cap(t.plain) > keptBuffer {
			t.plain = nil
		} else {
			t.plain = t.plain[:0]
		}
	}
}

// InboundBuffered is the plaintext held and what gnet holds still
// encrypted (there only once room plaintext bytes are held).
func (t *tlsConn) InboundBuffered() int {
	t.fill()
	n := len(t.plain) - t.off
	if t.gc != nil {
		n += t.gc.InboundBuffered()
	}
	return n
}

func (t *tlsConn) OutboundBuffered() int {
	if t.gc == nil {
		return 0
	}
	return t.gc.OutboundBuffered()
}

func (t *tlsConn) Write(b []byte) (int, error) { return t.tc.Write(b) }

// handshakes are the TLS handshakes under way, off the loops.
type handshakes struct {
	mu    sync.Mutex
	conns map[net.Conn]time.Time // when each was accepted
	wg    sync.WaitGroup
	done  bool
}

// add counts c in; false if the engine is stopping.
func (h *handshakes) add(c net.Conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return false
	}
	if h.conns == nil {
		h.conns = map[net.Conn]time.Time{}
	}
	h.conns[c] = time.Now()
	h.wg.Add(1)
	return true
}

func (h *handshakes) remove(c net.Conn) {
	h.mu.Lock()
	delete(h.conns, c)
	h.mu.Unlock()
	h.wg.Done()
}

// evictOldest ends the oldest handshake under way, to make room for a new
// connection at the connection limit (a handshake not done is a
// connection without a byte of a request); false if there is none.
func (h *handshakes) evictOldest() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	var oldest net.Conn
	var at time.Time
	for c, t := range h.conns {
		if oldest == nil || t.Before(at) {
			oldest, at = c, t
		}
	}
	if oldest == nil {
		return false
	}
	delete(h.conns, oldest)
	oldest.Close()
	return true
}

// stop ends every handshake under way and waits for their goroutines.
func (h *handshakes) stop() {
	h.mu.Lock()
	h.done = true
	for c := range h.conns {
		c.Close()
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// handshake runs c's TLS handshake and hands the connection to an event
// loop; a handshake that fails or takes longer than ReadHeaderTimeout
// closes the connection. The connection's counts were taken by admitConn.
func (e *engine) handshake(c net.Conn, key acceptedConn) {
	if !e.hs.add(c) {
		e.unadmit(c, key)
		return
	}
	defer e.hs.remove(c)
	start := time.Now()
	tr := &tlsTransport{Conn: c}
	tc := tls.Server(tr, e.r.tlsConfig)
	// A handshake under way when the router stops is ended by closing
	// its socket (handshakes.stop).
	c.SetDeadline(start.Add(e.r.cfg.Server.ReadHeaderTimeout))
	if err := tc.Handshake(); err != nil {
		e.r.metrics.tlsHandshakes.WithLabelValues("failed").Inc()
		e.unadmit(c, key)
		return
	}
	e.r.metrics.tlsHandshakes.WithLabelValues("ok").Inc()
	e.r.metrics.tlsHandshakeSeconds.Observe(time.Since(start).Seconds())
	c.SetDeadline(time.Time{})
	key.tls = tc
	key.tr = tr
	e.enroll(c, key)
}
