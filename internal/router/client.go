package router

import (
	"context"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/cellkit/cellkit/internal/h1"
)

// A client connection, as a state machine run by its loop. This file is
// the whole of its life, in the order it is lived; the request chain
// (chain.go) is the work done in one state, busy, and the cells' side of a
// call (loop_cells.go) ends it with answered or failed.
//
//	        open
//	          │
//	          ▼
//	 ┌────▶ head ──────────────▶ body ─────────┐
//	 │        │ admit: refused    │ body whole │
//	 │        │ from the head     ▼            │
//	 │        └───────────────▶ busy ◀─────────┘
//	 │                            │ write → done
//	 └── idle ◀───────────────────┤ (kept alive)
//	      │                       │ (Connection: close, refused body,
//	      │ bytes: head           ▼  draining)
//	      │                     drain ── silent, bounded ──▶ closed
//	      └──────── idle timeout, shutdown ───────────────▶ closed
//
// Every state may close (the client leaves, a deadline passes, a request
// cannot be read: refuse, tooLarge); closed is final. The events are
// gnet's (traffic, a FIN while busy: halfClose, close) and the loop's
// deadlines (deadlines, one timer list per state). A state changes only
// through to, which tests check against the table below.

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
	nStates
)

var connStates = [...]string{"idle", "head", "body", "busy", "drain", "closed"}

func (s connState) String() string {
	if int(s) < len(connStates) {
		return connStates[s]
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// transitions are the moves the machine makes.
var transitions = [nStates][nStates]bool{
	stIdle:  {stHead: true, stClosed: true},
	stHead:  {stBody: true, stBusy: true, stDrain: true, stClosed: true},
	stBody:  {stBusy: true, stDrain: true, stClosed: true},
	stBusy:  {stIdle: true, stDrain: true, stClosed: true},
	stDrain: {stClosed: true},
}

// badTransition, when set (by tests), hears of a move the table does not
// have.
var badTransition func(from, to connState)

// to moves cl to state s.
func (cl *client) to(s connState) {
	if badTransition != nil && !transitions[cl.state][s] {
		badTransition(cl.state, s)
	}
	cl.state = s
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
	// the client has been silent this long; lingerMax bounds the bytes
	// read away, whatever the body limit and whatever they are (a body's
	// data, chunk framing, pipelined requests): enough for the rest of a
	// modest body to arrive, so that its client reads the answer rather
	// than a reset; a client that sends more is cut there.
	lingerFor     = time.Second
	lingerSilence = 50 * time.Millisecond
	lingerMax     = 64 << 10
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

// open makes the client of a connection the loop has just been given (a
// TLS one after its handshake): it starts reading a head, within
// ReadHeaderTimeout for its first request.
func (lp *loop) open(c gnet.Conn, ac acceptedConn) {
	cl := &client{c: c, gc: c, lp: lp, remote: addrOf(c.RemoteAddr()), key: ac.key}
	if ac.tls != nil {
		ac.tr.gc = c
		cl.c = &tlsConn{gc: c, tc: ac.tls, tr: ac.tr, room: 2*lp.maxRequest() + tlsPlainRoom}
		// The handshake may have read the first request's bytes already:
		// they are in the tls.Conn, and no traffic event will come for
		// them.
		lp.el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			defer func() { lp.e.panicked("traffic", recover()) }()
			lp.tlsTraffic(cl)
			return nil
		}))
	}
	cl.t.owner, cl.w.owner, cl.wt.owner = cl, cl, cl
	cl.head.Fields = cl.hdrs[:0]
	c.SetContext(cl)
	cl.to(stHead)
	lp.heads.arm(&cl.t, lp.e.now())
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
		cl.to(stHead)
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
		cl.to(stBody)
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

func (lp *loop) maxRequest() int {
	return lp.e.r.cfg.Server.MaxHeaderBytes + lp.e.r.cfg.Server.MaxBodyBytes
}

// begin starts the exchange for the request whose head is in cl.head.
func (lp *loop) begin(cl *client) {
	r := lp.e.r
	ex := &cl.ex
	*ex = exchange{start: time.Now(), cm: r.noCell, slot: -1, readSlot: -1}
	cl.close, cl.unread = cl.head.Close, 0
	cl.seq++
	ex.rid = r.requestIDFrom(&cl.head, &ex.ridBuf)
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

// enter marks cl's request as being answered.
func (lp *loop) enter(cl *client) {
	cl.t.stop()
	cl.to(stBusy)
	lp.e.busy.Add(1)
}

// write sends lp.out, the answer to cl's request, and ends the request;
// after an answer that came from a cell, a pipelined request is served.
func (lp *loop) write(cl *client, status int) {
	if cl.state != stBusy {
		return
	}
	_, _ = cl.c.Write(lp.out)
	lp.done(cl, status)
	if !cl.inServe && cl.state == stIdle && len(cl.in)+cl.c.InboundBuffered() > 0 {
		lp.serve(cl)
	}
}

// done ends cl's current request once its answer is written: the
// connection is closed or goes back to reading.
func (lp *loop) done(cl *client, status int) {
	lp.e.busy.Add(-1)
	ex := &cl.ex
	ex.cm.answered(status, time.Since(ex.start).Seconds())
	// The write timer runs from every answer: the loop may write it after
	// this (its writes of a round go out together), and the timer, when
	// it fires, cuts the client only if bytes of an answer are still
	// waiting for it then — all written before the last answer's time.
	lp.writes.arm(&cl.w, lp.e.now())
	if cl.close || lp.e.draining.Load() && !lp.e.handing.Load() {
		// Bytes the client sent that were not read (a body refused from
		// its head, pipelined requests) are read away before closing.
		if !cl.ended() && (cl.unread != 0 || len(cl.in) > cl.used || cl.c.InboundBuffered() > 0) {
			cl.in = cl.in[:0]
			lp.linger(cl, cl.unread)
			return
		}
		cl.to(stIdle)
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
	cl.to(stIdle)
	if cl.ended() && rest == 0 {
		lp.closeClient(cl) // all it sent is answered
		return
	}
	lp.idles.arm(&cl.t, lp.e.now())
	if cl.c.OutboundBuffered() > maxUnsent {
		lp.closeClient(cl) // the client reads nothing of what it asked for
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

// tooLarge answers 413 and reads away a bounded part of what the client
// still sends (linger), so that it sees the answer rather than a reset;
// then the connection is closed.
func (lp *loop) tooLarge(cl *client, left int64) {
	if cl.state == stClosed {
		return
	}
	lp.answerUnread(cl, &probTooLarge)
	cl.in = cl.in[:0]
	lp.linger(cl, left)
}

// linger reads away what the client still sends after an answer that ends
// the connection (up to left bytes when left >= 0, and never more than
// lingerMax; for at most a second; until it has been silent for 50 ms),
// then closes it: closing a socket with unread bytes resets it, and the
// client might lose the answer. Past lingerMax it is closed all the same:
// a refusal is not an invitation to send megabytes.
func (lp *loop) linger(cl *client, left int64) {
	cl.to(stDrain)
	cl.drained = 0
	cl.drainMax = lingerMax
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

// halfClose makes cl a halfClosed connection when its client ended its
// side while its request is being answered; false when there is no such
// request or the socket cannot be kept.
func (lp *loop) halfClose(cl *client) bool {
	if cl.state != stBusy {
		return false
	}
	fd, err := cl.gc.Dup()
	if err != nil {
		return false
	}
	// Requests pipelined behind this one wait in gnet's buffer, which goes
	// with its connection: they are taken now and answered in turn. (The
	// current request's fields keep viewing the old buffer if this one
	// moves.)
	hc := &halfClosed{fd: fd, timeout: lp.e.r.cfg.Server.WriteTimeout}
	if t, ok := cl.c.(*tlsConn); ok {
		// Decrypted first: all that gnet still holds.
		t.room = int(^uint(0) >> 1)
		if b, _ := t.Peek(-1); len(b) > 0 {
			cl.in = append(cl.in, b...)
		}
		hc.tls = t.tc
		t.tr.gc, t.tr.held, t.gc = nil, hc, nil
	} else if b, _ := cl.gc.Peek(-1); len(b) > 0 {
		cl.in = append(cl.in, b...)
	}
	cl.c = hc
	cl.gc = nil
	return true
}

// ended says whether cl's client has ended its side: no more bytes come,
// so a request not whole in cl.in never will be.
func (cl *client) ended() bool {
	_, ok := cl.c.(*halfClosed)
	return ok
}

// deadlines acts on the client deadlines that have passed: a head or a
// body not read in time is refused (a connection that sent nothing of a
// request is closed quietly), an idle or draining one closed, and so is a
// client that has not taken its answer off its socket in time.
func (lp *loop) deadlines(now int64) {
	for t := lp.heads.expired(now); t != nil; t = lp.heads.expired(now) {
		cl := t.owner.(*client)
		if len(cl.in) == 0 && cl.c.InboundBuffered() == 0 {
			lp.closeClient(cl) // not a byte of a request: close quietly
			continue
		}
		lp.refuse(cl, &probReadTimeout)
	}
	for t := lp.bodies.expired(now); t != nil; t = lp.bodies.expired(now) {
		lp.refuse(t.owner.(*client), &probReadTimeout)
	}
	for t := lp.idles.expired(now); t != nil; t = lp.idles.expired(now) {
		lp.closeClient(t.owner.(*client))
	}
	for t := lp.drains.expired(now); t != nil; t = lp.drains.expired(now) {
		lp.closeClient(t.owner.(*client))
	}
	// A draining client that has been silent for 50 ms has sent all it
	// will: close it (the list is by start, so scan it all; it is short).
	for t := lp.drains.head.next; t != &lp.drains.head; {
		next := t.next
		if cl := t.owner.(*client); now-cl.lastInput > int64(lingerSilence) {
			t.stop()
			lp.closeClient(cl)
		}
		t = next
	}
	for t := lp.writes.expired(now); t != nil; t = lp.writes.expired(now) {
		if cl := t.owner.(*client); cl.c.OutboundBuffered() > 0 {
			lp.closeClient(cl)
		}
	}
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
	cl.to(stClosed)
	cl.t.stop()
	cl.w.stop()
	cl.wt.stop()
	lp.e.conns.Add(-1)
	lp.e.addrs.release(cl.key)
}
