package router

import (
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/cellkit/cellkit/internal/h1"
)

// A client connection's life on its loop: reading a request (head, then
// body), refusing what cannot be read, and what follows an answer.

// connState is where a client connection is.
type connState uint8

// Client connection states.
const (
	stIdle  connState = iota // between requests
	stHead                   // reading a request head
	stBody                   // reading a request body
	stBusy                   // a request is being answered
	stDrain                  // answered with an error; reading away what the client still sends
	stClosed
)

var connStates = [...]string{"idle", "head", "body", "busy", "drain", "closed"}

func (s connState) String() string {
	if int(s) < len(connStates) {
		return connStates[s]
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// Sizes and times of a client connection.
const (
	// chunkWindow is how much of a chunked body is held undecoded at a
	// time: room for the longest chunk-size line and some data.
	chunkWindow = 16 << 10
	// keptBuffer: a connection's read or decoding buffer larger than this
	// is dropped after its request, not kept for the connection's life.
	keptBuffer = 16 << 10
	// maxUnsent: a client with more answers than this not yet taken off
	// its socket reads nothing of what it asks for, and is cut.
	maxUnsent = 4 << 20
	// lingerFor bounds reading away what a client still sends after an
	// answer that ends the connection; lingerSilence ends it earlier once
	// the client has been silent this long; lingerFactor × the body limit
	// bounds the bytes read away when their number is not known.
	lingerFor     = time.Second
	lingerSilence = 50 * time.Millisecond
	lingerFactor  = 4
)

// client is one client connection on a loop.
type client struct {
	c       conn      // gnet's connection, or a halfClosed one
	gc      gnet.Conn // gnet's connection (nil once half-closed)
	lp      *loop
	remote  netip.Addr
	key     netip.Addr // what the per-address cap counts it under
	state   connState
	close   bool // close after the current answer
	sent100 bool
	inServe bool // serve is on the stack: it picks up pipelined requests itself

	t  timer // the state's deadline: head, body, idle or drain
	w  timer // an answer not yet written out
	wt timer // waiting for a connection to the cell

	in      []byte // bytes read and not yet consumed: the current request first
	head    h1.Request
	hdrs    [h1.MaxFields]h1.Field
	body    []byte // the request body: a view of in, or chunked decoded
	dec     []byte // a decoded chunked body
	chunks  h1.ChunkDecoder
	bodyOff int   // where the body starts in in (the head's length)
	used    int   // bytes of in the current request takes
	unread  int64 // bytes of a refused request's body not read (-1: a chunked body, unknown)

	drained   int64 // stDrain: bytes read away
	drainMax  int64
	lastInput int64

	ex  exchange
	seq uint64 // counts requests, to recognise a continuation's own request
}

// traffic reads what a client sent.
func (lp *loop) traffic(cl *client) {
	switch cl.state {
	case stClosed:
		_, _ = cl.c.Discard(-1)
		return
	case stBusy:
		// A pipelined request: it waits in gnet's buffer until the
		// current one is answered. A client that sends far more than one
		// request can hold while it waits is cut.
		if cl.c.InboundBuffered() > lp.maxRequest()*2 {
			lp.closeClient(cl)
		}
		return
	case stDrain:
		n, _ := cl.c.Discard(-1)
		cl.drained += int64(n)
		cl.lastInput = lp.e.now()
		if cl.drained >= cl.drainMax {
			lp.closeClient(cl)
		}
		return
	}
	lp.serve(cl)
}

func (lp *loop) maxRequest() int {
	return lp.e.r.cfg.Server.MaxHeaderBytes + lp.e.r.cfg.Server.MaxBodyBytes
}

// pull moves what gnet holds for cl into cl.in, up to limit bytes in
// cl.in: nothing is read before it is needed.
func (lp *loop) pull(cl *client, limit int) {
	k := min(cl.c.InboundBuffered(), limit-len(cl.in))
	if k <= 0 {
		return
	}
	b, _ := cl.c.Peek(k)
	cl.in = append(cl.in, b...)
	_, _ = cl.c.Discard(len(b)) // a TLS connection may hold fewer plaintext bytes than it counts
}

// tlsTraffic reads what a TLS client sent; when its TLS stream has ended
// (close_notify) or failed, nothing more comes: the request being
// answered is still answered, then the connection closes.
func (lp *loop) tlsTraffic(cl *client) {
	if cl.state == stClosed {
		return
	}
	lp.traffic(cl)
	t, ok := cl.c.(*tlsConn)
	if !ok || t.err == nil || cl.state == stClosed {
		return
	}
	if cl.state == stBusy {
		cl.close = true
		return
	}
	lp.closeClient(cl)
}

// serve reads and answers the requests in cl's buffer, one at a time,
// until one waits for a cell or for more bytes.
func (lp *loop) serve(cl *client) {
	cl.inServe = true
	for lp.step(cl) {
	}
	cl.inServe = false
}

// step moves cl's current request on by what its buffer holds; false
// means it waits (for bytes, a cell or the end of the connection).
func (lp *loop) step(cl *client) bool {
	switch cl.state {
	case stIdle, stHead:
		return lp.readHead(cl)
	case stBody:
		return lp.readBody(cl)
	}
	return false
}

// readHead reads a request head and answers what can be answered from it
// alone: a request without a valid key, over its limits, or that no route
// takes is refused before a byte of its body is read.
func (lp *loop) readHead(cl *client) bool {
	s := &lp.e.r.cfg.Server
	lp.pull(cl, s.MaxHeaderBytes)
	if len(cl.in) == 0 {
		if cl.ended() {
			lp.closeClient(cl)
		}
		return false
	}
	if cl.state == stIdle {
		cl.state = stHead
		lp.heads.arm(&cl.t, lp.e.now())
	}
	h := &cl.head
	n, err := h1.ParseRequest(cl.in, h, s.MaxHeaderBytes)
	switch {
	case err == h1.ErrHeaderTooLarge:
		lp.refuse(cl, &probHeaderTooBig)
		return false
	case err != nil:
		lp.refuse(cl, &probMalformed)
		return false
	case n == 0:
		if cl.ended() {
			lp.closeClient(cl) // a head that cannot be completed
		}
		return false
	}
	cl.bodyOff, cl.used, cl.body = n, n, nil
	if room := lp.bodyRoom(h); room > 0 && cap(cl.in) < n+room {
		// Room for the body now, so that reading it never moves the
		// bytes the head's fields view; the head is parsed again in its
		// new place.
		cl.in = slices.Grow(cl.in, n+room-len(cl.in))
		_, _ = h1.ParseRequest(cl.in, h, s.MaxHeaderBytes) // the same bytes parsed before: it succeeds again
	}
	lp.begin(cl)
	if !lp.admit(cl) {
		return true
	}
	if h.Chunked || h.ContentLength > 0 {
		cl.chunks, cl.dec = h1.ChunkDecoder{}, cl.dec[:0]
		cl.state = stBody
		lp.bodies.arm(&cl.t, lp.e.now())
		return true
	}
	lp.enter(cl)
	lp.route(cl)
	return true
}

// bodyRoom is the buffer a request's body needs after its head: its
// length, or a window of a chunked body.
func (lp *loop) bodyRoom(h *h1.Request) int {
	switch {
	case h.Chunked:
		return chunkWindow
	case h.ContentLength > 0 && h.ContentLength <= int64(lp.e.r.cfg.Server.MaxBodyBytes):
		return int(h.ContentLength)
	}
	return 0
}

// readBody reads an admitted request's body: a Content-Length body into
// cl.in, a chunked one decoded as it arrives into cl.dec (its framing is
// consumed and bounded, see h1.ChunkDecoder). Then the request is routed.
func (lp *loop) readBody(cl *client) bool {
	h := &cl.head
	if h.Chunked {
		for {
			lp.pull(cl, cap(cl.in))
			raw := cl.in[cl.bodyOff:]
			n, done, err := cl.chunks.Decode(raw, &cl.dec, lp.e.r.cfg.Server.MaxBodyBytes)
			cl.in = append(cl.in[:cl.bodyOff], raw[n:]...)
			switch {
			case err == h1.ErrBodyTooLarge:
				lp.tooLarge(cl, -1)
				return false
			case err != nil:
				lp.refuse(cl, &probMalformed)
				return false
			case done:
				cl.body, cl.used = cl.dec, cl.bodyOff
			case n == 0 || cl.c.InboundBuffered() == 0:
				lp.awaitBody(cl)
				return false
			default:
				continue
			}
			break
		}
	} else {
		end := cl.bodyOff + int(h.ContentLength)
		lp.pull(cl, end)
		if len(cl.in) < end {
			lp.awaitBody(cl)
			return false
		}
		cl.body, cl.used = cl.in[cl.bodyOff:end], end
	}
	lp.enter(cl)
	lp.route(cl)
	return true
}

// awaitBody waits for more of a body, or closes the connection of a
// client that has ended its side (the body will not come).
func (lp *loop) awaitBody(cl *client) {
	if cl.ended() {
		lp.closeClient(cl)
		return
	}
	lp.continue100(cl)
}

// continue100 says 100 Continue to an HTTP/1.1 client that waits for it
// before sending its body (an HTTP/1.0 client never gets one: RFC 9110
// §10.1.1).
func (lp *loop) continue100(cl *client) {
	if cl.head.ExpectContinue && cl.head.Minor == 1 && !cl.sent100 {
		cl.sent100 = true
		_, _ = cl.c.Write(continue100)
	}
}

var continue100 = []byte("HTTP/1.1 100 Continue\r\n\r\n")

// tooLarge answers 413 and reads away up to 4× the body limit of what the
// client still sends, for at most a second, so that it sees the answer
// rather than a reset; then the connection is closed.
func (lp *loop) tooLarge(cl *client, left int64) {
	if cl.state == stClosed {
		return
	}
	lp.answerUnread(cl, &probTooLarge)
	cl.in = cl.in[:0]
	lp.linger(cl, left)
}

// linger reads away what the client still sends after an answer that ends
// the connection (up to left bytes, or 4× the body limit when left < 0;
// for at most a second; until it has been silent for 50 ms), then closes
// it: closing a socket with unread bytes resets it, and the client might
// lose the answer.
func (lp *loop) linger(cl *client, left int64) {
	cl.state = stDrain
	cl.drained = 0
	cl.drainMax = lingerFactor * int64(lp.e.r.cfg.Server.MaxBodyBytes)
	if left >= 0 && left < cl.drainMax {
		cl.drainMax = left
	}
	now := lp.e.now()
	cl.lastInput = now
	lp.drains.arm(&cl.t, now)
	if n, _ := cl.c.Discard(-1); n > 0 {
		cl.drained += int64(n)
	}
	if cl.drained >= cl.drainMax {
		lp.closeClient(cl)
	}
}

// refuse answers a request the router could not read (or read in time)
// and closes the connection after the answer.
func (lp *loop) refuse(cl *client, p *prob) {
	if cl.state == stClosed {
		return
	}
	lp.answerUnread(cl, p)
	lp.closeClient(cl)
}

// answerUnread writes p as the answer to a request that was not read
// whole, saying the connection closes after it.
func (lp *loop) answerUnread(cl *client, p *prob) {
	cl.t.stop()
	cl.ex = exchange{cm: lp.e.r.noCell}
	cl.ex.rid = lp.e.r.newRequestID(&cl.ex.ridBuf)
	cl.close = true
	lp.out = lp.problemAnswer(lp.out[:0], cl, p, 0, nil)
	_, _ = cl.c.Write(lp.out)
	lp.e.r.noCell.answered(p.status, 0)
}

// closeClient closes cl's connection (what was written is still sent).
func (lp *loop) closeClient(cl *client) {
	if cl.state == stClosed {
		return
	}
	if hc, ok := cl.c.(*halfClosed); ok {
		hc.finish()
		lp.closed(cl)
		return
	}
	lp.el.Close(cl.gc)
}

// closed is a client connection's end, whoever closed it.
func (lp *loop) closed(cl *client) {
	if cl.state == stClosed {
		return
	}
	if cl.state == stBusy {
		lp.e.busy.Add(-1)
		lp.abandon(cl)
	}
	cl.state = stClosed
	cl.t.stop()
	cl.w.stop()
	cl.wt.stop()
	lp.e.conns.Add(-1)
	lp.e.addrs.release(cl.key)
}

// done ends cl's current request once its answer is written: the
// connection is closed or goes back to reading.
func (lp *loop) done(cl *client, status int) {
	lp.e.busy.Add(-1)
	ex := &cl.ex
	ex.cm.answered(status, time.Since(ex.start).Seconds())
	if cl.c.OutboundBuffered() > 0 {
		lp.writes.arm(&cl.w, lp.e.now())
	}
	if cl.close || lp.e.draining.Load() {
		// Bytes the client sent that were not read (a body refused from
		// its head, pipelined requests) are read away before closing.
		if !cl.ended() && (cl.unread != 0 || len(cl.in) > cl.used || cl.c.InboundBuffered() > 0) {
			cl.in = cl.in[:0]
			lp.linger(cl, cl.unread)
			return
		}
		cl.state = stIdle
		lp.closeClient(cl)
		return
	}
	rest := copy(cl.in, cl.in[cl.used:])
	cl.in = cl.in[:rest]
	if rest == 0 && cap(cl.in) > keptBuffer {
		cl.in = nil // a large request's buffer is not kept for the connection's life
	}
	if cap(cl.dec) > keptBuffer {
		cl.dec = nil
	}
	cl.used, cl.body, cl.sent100 = 0, nil, false
	cl.head.Method = nil
	cl.state = stIdle
	if cl.ended() && rest == 0 {
		lp.closeClient(cl) // all it sent is answered
		return
	}
	lp.idles.arm(&cl.t, lp.e.now())
	if cl.c.OutboundBuffered() > maxUnsent {
		lp.closeClient(cl) // the client reads nothing of what it asked for
	}
}

// drainIdle closes the loop's idle client connections (shutting down).
func (lp *loop) drainIdle() {
	for _, l := range []*tlist{&lp.idles, &lp.heads} {
		for t := l.head.next; t != &l.head; {
			next := t.next
			cl := t.owner.(*client)
			if cl.state == stIdle || cl.state == stHead && len(cl.in) == 0 && cl.c.InboundBuffered() == 0 {
				t.stop()
				lp.closeClient(cl)
			}
			t = next
		}
	}
}

// --- the request chain --------------------------------------------------
