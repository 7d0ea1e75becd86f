package router

import (
	"bytes"
	"slices"
	"strconv"
	"time"
	"unsafe"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/cellkit/cellkit/internal/h1"
)

// The connections to the cells: each loop keeps its own keep-alive pool to
// each cell, dials off the loop (dial.go), and reads the cells' answers on it.

const (
	// maxAnswerHead bounds the head of a cell's answer.
	maxAnswerHead = 16 << 10
	// keptAnswer: a decoded chunked answer's buffer larger than this is
	// dropped after the answer, not kept for the connection's life.
	keptAnswer = 64 << 10
)

// pool is one loop's keep-alive connections to one endpoint of a cell.
type pool struct {
	lp      *loop
	ep      *endpoint
	u       *upstream
	idle    []*upconn // most recently used last
	waiters []*client
	dialing int
	open    int // connections open
}

func (lp *loop) pool(ep *endpoint) *pool {
	p := lp.pools[ep]
	if p == nil {
		p = &pool{lp: lp, ep: ep, u: ep.u}
		lp.pools[ep] = p
	}
	return p
}

// outstanding is how many calls the loop has at ep: connections lent out
// and requests waiting for one.
func (lp *loop) outstanding(ep *endpoint) int {
	p := lp.pools[ep]
	if p == nil {
		return 0
	}
	return p.open - len(p.idle) + len(p.waiters)
}

// take returns an idle connection with nothing to read on it, or nil.
// One the cell wrote to while it idled is closed, even when the loop has
// not read those bytes yet: they would be taken for the next call's
// answer.
func (p *pool) take() *upconn {
	for len(p.idle) > 0 {
		uc := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		uc.t.stop()
		if uc.dead || !uc.quiet("idle") {
			continue
		}
		return uc
	}
	return nil
}

func (p *pool) unwait(cl *client) {
	cl.wt.stop()
	for i, w := range p.waiters {
		if w == cl {
			p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
			return
		}
	}
}

// release puts a connection that finished a call back to work: to the
// first waiter, if it has nothing to read, or to the idle ones. Closing it
// instead leaves the waiters to the dials under way (topUp).
func (p *pool) release(uc *upconn) {
	if uc.dead {
		return
	}
	if p.u.retired.Load() {
		uc.shut()
		return
	}
	if len(p.waiters) > 0 && !uc.quiet("after an answer") {
		p.topUp() // closed: its waiter needs another
		return
	}
	for len(p.waiters) > 0 {
		cl := p.waiters[0]
		p.waiters = p.waiters[1:]
		cl.wt.stop()
		if cl.state == stBusy {
			uc.send(cl)
			return
		}
	}
	p.idle = append(p.idle, uc)
	p.lp.upIdles.arm(&uc.t, p.lp.e.now())
}

// sweepPools closes the idle connections to cells that left the map (or
// changed endpoint), moves the requests waiting for one of their
// connections to their cell's upstream in the map now (rehome), and
// forgets their pools once nothing uses them.
func (lp *loop) sweepPools() {
	for ep, p := range lp.pools {
		if !ep.u.retired.Load() {
			continue
		}
		for uc := p.take(); uc != nil; uc = p.take() {
			uc.shut()
		}
		lp.rehome(p)
		if p.open == 0 && p.dialing == 0 && len(p.waiters) == 0 {
			delete(lp.pools, ep)
		}
	}
}

// rehome sends the requests waiting for a connection of p, whose upstream
// was retired (the map changed the cell's instances: one left or came back
// to the rotation), to their cell's upstream in the map now. Left where
// they were, they would wait out the call's timeout: the connection being
// dialled for them is closed as it opens (release), and a retired pool
// dials no more. Their deadline stays the one they had; a cell that left
// the map answers them 503, as a connection that failed.
func (lp *loop) rehome(p *pool) {
	if len(p.waiters) == 0 {
		return
	}
	waiting := p.waiters
	p.waiters = nil
	t := lp.e.r.table()
	for _, cl := range waiting {
		cl.wt.stop()
		if cl.state != stBusy {
			continue
		}
		var u *upstream
		if t != nil {
			u = t.byID[cl.ex.u.cell]
		}
		if u == nil || u.retired.Load() {
			lp.failed(cl, false)
			continue
		}
		cl.ex.u = u
		lp.dispatch(cl)
	}
}

// upconn is one keep-alive connection to a cell, owned by a loop.
type upconn struct {
	c       gnet.Conn
	p       *pool
	d       *dialing
	t       timer // the call's deadline, or the idle one
	cl      *client
	orphan  bool // the client went away; drop the answer
	dead    bool
	got     bool     // bytes of the answer arrived
	tls     *tlsConn // an https cell's: what the loop reads and writes goes through it
	io      conn     // the connection as the calls see it: c, or tls
	head    h1.Response
	hdrs    [h1.MaxFields]h1.Field
	body    []byte          // a chunked answer's data, decoded as it arrives
	dec     h1.ChunkDecoder // where the chunked answer's decoding is
	raw     int             // bytes of the chunked answer after its head already decoded
	seq     uint64          // calls sent on the connection: the last one's number (Cellkit-Call)
	echoes  bool            // the cell echoed a call's number: every answer must name its call
	strayed bool            // a late answer to an earlier call came on it: closed after the call
}

func (uc *upconn) opened(c gnet.Conn) {
	uc.c, uc.io = c, c
	if uc.tls != nil {
		uc.tls.gc, uc.tls.tr.gc = c, c
		uc.io = uc.tls
	}
	uc.p.open++
	uc.head.Fields = uc.hdrs[:0]
	d := uc.d
	uc.d = nil
	if !uc.quiet("before any request") {
		// A cell that speaks first is no cell to send a request to: as
		// for a dial that failed, the first waiter goes elsewhere or fails
		// (dialling again would only meet the same).
		if d != nil {
			d.failed(false)
		}
		return
	}
	if d != nil { // nil: opened by Warm, for no one waiting
		d.finish()
	}
	uc.p.release(uc)
	uc.p.topUp()
}

// send writes cl's request to the cell.
func (uc *upconn) send(cl *client) {
	lp := uc.p.lp
	uc.cl, uc.orphan, uc.got = cl, false, false
	uc.seq++
	uc.dec, uc.raw, uc.body = h1.ChunkDecoder{}, 0, uc.body[:0]
	cl.ex.uc = uc
	cl.ex.attempts++
	lp.calls.arm(&uc.t, lp.e.now()-int64(time.Since(cl.ex.sentAt)))
	lp.out = lp.e.r.forward(lp.out[:0], cl)
	if _, err := uc.io.Write(lp.out); err != nil {
		uc.shut()
	}
}

// traffic reads the cell's answer.
func (uc *upconn) traffic() {
	lp := uc.p.lp
	buf, _ := uc.io.Peek(-1)
	if uc.cl == nil {
		if len(buf) == 0 && (uc.tls == nil || uc.tls.err == nil) {
			return // TLS's own messages (a session ticket): nothing of HTTP
		}
		// Nothing was asked: a stray answer, or a late one to a call the
		// router gave up on, is never read as the next call's answer.
		_, _ = uc.io.Discard(-1)
		if len(buf) > 0 {
			uc.unasked("idle", len(buf))
			return
		}
		uc.shut() // the TLS stream ended
		return
	}
	uc.got = true
	max := lp.e.r.cfg.Cell.MaxResponseBytes
	for {
		n, err := h1.ParseResponse(buf, &uc.head, maxAnswerHead)
		if err != nil {
			uc.broken()
			return
		}
		if n == 0 {
			return
		}
		h := &uc.head
		if h.Status >= 100 && h.Status < 200 {
			if h.Status == 101 {
				uc.broken()
				return
			}
			_, _ = uc.io.Discard(n)
			buf = buf[n:]
			continue
		}
		switch uc.echoed(h) {
		case echoEarlier:
			// A late answer to an earlier call, written before this call's:
			// skipped whole, and the connection closed after the call.
			skip, known := lateAnswerLen(h, n, max)
			switch {
			case !known:
				uc.broken() // its end cannot be found without reading it as an answer
				return
			case skip > len(buf):
				return
			}
			uc.strayed = true
			_, _ = uc.io.Discard(skip)
			buf = buf[skip:]
			continue
		case echoWrong:
			uc.broken()
			return
		}
		var body []byte
		used := n
		switch {
		case uc.cl != nil && string(uc.cl.head.Method) == "HEAD", h.Status == 204, h.Status == 304:
		case h.Chunked:
			// The answer stays in gnet's buffer until it is whole, so what
			// was decoded before sits at the same place: only new bytes
			// are decoded.
			m, done, err := uc.dec.Decode(buf[n+uc.raw:], &uc.body, max)
			uc.raw += m
			if err != nil {
				uc.broken()
				return
			}
			if !done {
				return
			}
			body, used = uc.body, n+uc.raw
		case h.ContentLength > int64(max):
			uc.broken()
			return
		case h.ContentLength >= 0:
			if int64(len(buf)-n) < h.ContentLength {
				return
			}
			used = n + int(h.ContentLength)
			body = buf[n:used]
		default:
			// The body runs to the end of the connection.
			if len(buf)-n > max {
				uc.broken()
				return
			}
			return
		}
		uc.finish(body, used, h.Close)
		return
	}
}

// finish ends the call with a whole answer of used bytes; the connection
// is reused unless the cell closes it (closeAfter), sent more than the
// answer with it, or the call's client left (an answer nobody waited for:
// the clients that leave are mostly those a slow cell made give up, and a
// cell's late bytes come on such connections; a dial costs less), or the
// cell has not echoed the call's number on it. An answer that names no
// call cannot be told from a late one to an earlier call: a cell that does
// not echo (an older release, any other HTTP/1.1 server, or a proxy in
// front of a cell that answered for it and then sends the cell's own
// answer) could hand the next call on the connection bytes it sent for
// this one, so each of its connections carries one call.
func (uc *upconn) finish(body []byte, used int, closeAfter bool) {
	cl, orphan := uc.cl, uc.orphan
	uc.cl, uc.orphan = nil, false
	uc.t.stop()
	if cl != nil {
		if orphan {
			uc.p.lp.leave(cl, uc.head.Status >= 500) // the client left: count the call, drop the answer
		} else {
			uc.p.lp.answered(cl, &uc.head, body)
		}
	}
	_, _ = uc.io.Discard(used)
	if cap(uc.body) > keptAnswer {
		uc.body = nil // a large chunked answer's buffer is not kept
	}
	if n := uc.buffered(); n > 0 {
		uc.unasked("beyond an answer", n) // not the start of the next one
		return
	}
	if closeAfter || orphan || uc.strayed || !uc.echoes {
		uc.shut()
		return
	}
	uc.p.release(uc)
}

// buffered is how many bytes of the cell's the loop holds unread: on an
// https cell, the plaintext they decrypt to (a partial record or TLS's
// own messages are no bytes of an answer).
func (uc *upconn) buffered() int {
	if uc.tls == nil {
		return uc.c.InboundBuffered()
	}
	uc.tls.fill()
	return len(uc.tls.plain) - uc.tls.off
}

// quiet says whether nothing waits to be read on the connection, neither
// in the loop's buffer nor in the kernel's (bytes the loop has not been
// told of yet), and the cell has not closed it; if not, it closes it. A
// connection given a request must be quiet: whatever waits on it would
// be read as the request's answer. The kernel is asked (a system call)
// before a connection's first call only: a connection carries a second
// call only once its cell has echoed a call's number on it (finish), and
// from then on every answer names its call (echoed), so unasked bytes
// cannot pass for an answer — they fail the one call they meet instead of
// being found before it.
// On an https cell the kernel's bytes are not looked at: they may be
// TLS's own messages (a session ticket), which carry no answer.
func (uc *upconn) quiet(when string) bool {
	if n := uc.buffered(); n > 0 {
		uc.unasked(when, n)
		return false
	}
	if uc.tls != nil {
		if uc.tls.err != nil {
			uc.shut()
			return false
		}
		return true
	}
	if uc.echoes {
		return true
	}
	uc.p.lp.e.r.metrics.peeks.Inc()
	if ra, ok := uc.c.(readAheader); ok {
		// Read by the loop's batch this round, not yet handed over: the
		// kernel no longer has it to show.
		if res, pending := ra.ReadAhead(); pending {
			if res > 0 {
				uc.unasked(when, res)
			} else {
				uc.shut()
			}
			return false
		}
	}
	switch n, err := peek(uc.c.Fd()); {
	case err == unix.EAGAIN:
		return true
	case n > 0:
		uc.unasked(when, n)
	default:
		// The cell closed the connection (n == 0), or it failed: the loop
		// would learn of it next.
		uc.shut()
	}
	return false
}

// readAheader is a gnet connection as patched in third_party/gnet: a
// loop reads a round's sockets before it hands them over.
type readAheader interface {
	ReadAhead() (res int, pending bool)
}

// peek is recv(fd, 1 byte, MSG_PEEK|MSG_DONTWAIT): 1 if a byte waits, 0
// at the end of the stream, EAGAIN if nothing waits. unix.Recvfrom would
// allocate the sender's address on every call; this does not.
func peek(fd int) (int, error) {
	var b [1]byte
	for {
		n, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), 1,
			unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			return int(n), nil
		case unix.EINTR:
			continue
		}
		return 0, e
	}
}

// What an answer's Cellkit-Call says of it.
const (
	echoOK      = iota // the call's number, or none from a cell that never echoed on the connection
	echoEarlier        // an earlier call's number on the connection: a late answer
	echoWrong          // none from a cell that echoes, a later or unreadable number
)

// echoed reads h's Cellkit-Call, an answer's head, against the current
// call's number. An answer that is not the call's is never taken for it:
// an earlier call's is skipped (traffic), anything else fails the call
// and closes the connection.
func (uc *upconn) echoed(h *h1.Response) int {
	v := h.Get(hdrCall)
	if v == nil {
		if uc.echoes {
			uc.p.lp.e.r.log.Warn("a cell that echoes each call's number answered without one; failing the call",
				"cell", uc.p.u.cell, "instance", uc.p.ep.intake, "call", uc.seq)
			return echoWrong
		}
		return echoOK
	}
	var num [20]byte
	if bytes.Equal(v, strconv.AppendUint(num[:0], uc.seq, 10)) {
		uc.echoes = true
		return echoOK
	}
	if n, err := strconv.ParseUint(string(v), 10, 64); err == nil && n < uc.seq {
		uc.p.lp.e.r.log.Warn("skipping a cell's late answer to an earlier call on the connection",
			"cell", uc.p.u.cell, "instance", uc.p.ep.intake, "call", uc.seq, "answer_names", n)
		return echoEarlier
	}
	uc.p.lp.e.r.log.Warn("a cell answered with a call number never sent on the connection; failing the call",
		"cell", uc.p.u.cell, "instance", uc.p.ep.intake, "call", uc.seq, "answer_names", string(v[:min(len(v), 24)]))
	return echoWrong
}

// lateAnswerLen is the length of a late answer whose head, h, is n bytes:
// known when it has no body or a Content-Length of at most max.
func lateAnswerLen(h *h1.Response, n, max int) (int, bool) {
	switch {
	case h.Status == 204 || h.Status == 304:
		return n, true
	case !h.Chunked && h.ContentLength >= 0 && h.ContentLength <= int64(max):
		return n + int(h.ContentLength), true
	}
	return 0, false
}

// unasked closes the connection: the cell sent n bytes on it that no
// call of its asked for (at least n, when counted in the kernel).
func (uc *upconn) unasked(when string, n int) {
	uc.p.lp.e.r.log.Debug("closing a connection to a cell that sent bytes nobody asked for",
		"cell", uc.p.u.cell, "instance", uc.p.ep.intake, "when", when, "bytes", n)
	uc.shut()
}

// broken: the cell's answer cannot be read; the call fails.
func (uc *upconn) broken() {
	cl, orphan := uc.cl, uc.orphan
	uc.cl = nil
	uc.shut()
	switch {
	case cl == nil:
	case orphan:
		uc.p.lp.leave(cl, true)
	default:
		uc.p.lp.failed(cl, false)
	}
}

// timedOut: the cell did not answer within the call's timeout.
func (uc *upconn) timedOut() {
	cl, orphan := uc.cl, uc.orphan
	uc.cl = nil
	uc.shut()
	if cl == nil {
		return
	}
	if orphan {
		uc.p.lp.leave(cl, true)
		return
	}
	uc.p.lp.e.r.callTimedOut(uc.p.ep, time.Since(cl.ex.sentAt), uc.got, uc.seq)
	uc.p.lp.failed(cl, true)
}

// shut closes the connection; closed does the accounting.
func (uc *upconn) shut() {
	if uc.dead {
		return
	}
	uc.p.lp.el.Close(uc.c)
}

// closed is the connection's end, whoever closed it. A call on it that got
// no byte of answer is retried once on another connection when repeating
// it is safe (GET, HEAD, or a POST with an Idempotency-Key, which the cell
// dedupes), as net/http's Transport does for a kept-alive connection the
// cell closed; otherwise it fails.
func (uc *upconn) closed() {
	if uc.dead {
		return
	}
	uc.dead = true
	uc.p.open--
	uc.t.stop()
	cl, orphan, got := uc.cl, uc.orphan, uc.got
	uc.cl = nil
	if cl == nil {
		if i := slices.Index(uc.p.idle, uc); i >= 0 {
			uc.p.idle = slices.Delete(uc.p.idle, i, i+1)
		}
		return
	}
	if orphan {
		uc.p.lp.leave(cl, true)
		return
	}
	if cl.ex.uc != uc {
		return // already answered (timeout, broken)
	}
	cl.ex.uc = nil
	if got {
		// An answer delimited by the end of the connection is whole now.
		h := &uc.head
		buf, _ := uc.io.Peek(-1)
		n, err := h1.ParseResponse(buf, h, maxAnswerHead)
		if err == nil && n > 0 && h.Status >= 200 && h.ContentLength < 0 && !h.Chunked &&
			len(buf)-n <= uc.p.lp.e.r.cfg.Cell.MaxResponseBytes && uc.echoed(h) == echoOK {
			uc.p.lp.answered(cl, h, buf[n:])
			return
		}
	}
	if !got && cl.ex.attempts < 2 && idempotent(&cl.head) {
		uc.p.lp.dispatch(cl)
		return
	}
	uc.p.lp.failed(cl, false)
}

func idempotent(h *h1.Request) bool {
	m := string(h.Method)
	return m == "GET" || m == "HEAD" || len(h.Get(hdrIdempotencyKey)) > 0
}

var hdrIdempotencyKey = []byte("Idempotency-Key")
