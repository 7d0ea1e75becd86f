package router

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/cellkit/cellkit/internal/breaker"
	"github.com/cellkit/cellkit/internal/h1"
)

// The router serves HTTP/1.1 from event loops (gnet: epoll, one loop per
// core), as NGINX does: a loop owns its client connections and its own
// keep-alive connections to the cells, so a request is read, routed,
// forwarded, answered and its connections recycled on one goroutine with no
// hand-off, no locks and no per-request allocation. Timeouts are deadlines
// on intrusive lists, one list per kind of timeout: every entry of a list has
// the same duration, so a list is ordered by deadline and a sweep every tick
// pops only what expired.

// tick is how often each loop sweeps its deadlines.
const tick = 5 * time.Millisecond

// timer is a deadline on one of a loop's lists.
type timer struct {
	prev, next *timer
	list       *tlist
	at         int64 // loop clock, ns
	owner      any   // *client or *upconn
}

// tlist is a list of timers of one duration, ordered by deadline.
type tlist struct {
	head timer // sentinel
	d    int64 // the duration of every timer on the list, ns
}

func (l *tlist) init(d time.Duration) {
	l.head.prev, l.head.next = &l.head, &l.head
	l.d = int64(d)
}

// arm puts t at the end of l with deadline now+l.d, off any list it was on.
func (l *tlist) arm(t *timer, now int64) {
	t.stop()
	t.at = now + l.d
	t.list = l
	t.prev, t.next = l.head.prev, &l.head
	l.head.prev.next = t
	l.head.prev = t
}

// stop takes t off its list.
func (t *timer) stop() {
	if t.list == nil {
		return
	}
	t.prev.next, t.next.prev = t.next, t.prev
	t.prev, t.next, t.list = nil, nil, nil
}

// expired pops the first timer of l if its deadline has passed.
func (l *tlist) expired(now int64) *timer {
	t := l.head.next
	if t == &l.head || t.at > now {
		return nil
	}
	t.stop()
	return t
}

// Client connection states.
const (
	stIdle  uint8 = iota // between requests
	stHead               // reading a request head
	stBody               // reading a request body
	stBusy               // a request is being answered
	stDrain              // answered with an error; reading away what the client still sends
	stClosed
)

// client is one client connection on a loop.
type client struct {
	c       conn      // gnet's connection, or a halfClosed one
	gc      gnet.Conn // gnet's connection (nil once half-closed)
	lp      *loop
	remote  netip.Addr
	key     netip.Addr // what the per-address cap counts it under
	state   uint8
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

// exchange is one request's state through the chain.
type exchange struct {
	start    time.Time
	client   *Client
	v        verdict
	rid      []byte
	ridBuf   [64]byte
	cm       *cellMetrics
	cell     string
	kind     routeKind
	cellID   []byte
	userID   []byte
	slot     int
	version  int64
	u        *upstream
	permit   breaker.Permit
	admitted bool
	sentAt   time.Time
	attempts int  // calls made to the cell for this request (a stale connection is retried once)
	tlsCall  bool // at an https cell, through its Transport
	retried  bool
	uc       *upconn
}

// loop is one event loop's state. Only its goroutine touches it.
type loop struct {
	e     *engine
	el    gnet.EventLoop
	pools map[*upstream]*pool

	heads, bodies, idles, drains, writes tlist // client timers
	waits, calls, upIdles                tlist // exchange and cell connection timers
	dials                                []*dialing

	out   []byte       // an answer or request being built
	swept atomic.Int64 // when it last swept its deadlines (engine clock), for the watchdog
}

// engine runs the router's event loops.
type engine struct {
	r    *Router
	base time.Time

	gnet.BuiltinEventEngine
	cli     *gnet.Client // the event loops (gnet's client mode: the router accepts itself, see accept.go)
	ln      net.Listener // the public listener
	started atomic.Bool
	quit    chan struct{} // closed by shutdown once the requests in flight are answered
	stopped chan struct{} // closed when serve returns
	fatal   chan error    // a failure the router cannot recover from (the first one is taken)
	failed  atomic.Pointer[error]

	mu    sync.Mutex
	loops map[gnet.EventLoop]*loop

	conns    atomic.Int64 // client connections open
	addrs    addrCounts   // client connections open per address
	busy     atomic.Int64 // requests being answered
	draining atomic.Bool
	done     chan struct{}
	date     atomic.Pointer[[]byte] // the Date header's value
	dateSec  atomic.Int64           // the second it is for
}

func newEngine(r *Router) *engine {
	return &engine{
		r:       r,
		quit:    make(chan struct{}),
		stopped: make(chan struct{}),
		done:    make(chan struct{}),
		fatal:   make(chan error, 1),
		loops:   map[gnet.EventLoop]*loop{},
		addrs:   addrCounts{n: map[netip.Addr]int32{}, max: int32(r.cfg.Server.MaxConnsPerAddr)},
	}
}

// fail reports a failure the router cannot recover from: readiness fails
// at once, and serve ends with err.
func (e *engine) fail(err error) {
	if e.failed.CompareAndSwap(nil, &err) {
		e.fatal <- err
	}
}

// Failure is the failure that ends the router's serving, or nil.
func (e *engine) failure() error {
	if p := e.failed.Load(); p != nil {
		return *p
	}
	return nil
}

func (e *engine) now() int64 { return int64(time.Since(e.base)) }

// loopOf returns the state of c's loop, making it on first sight.
func (e *engine) loopOf(c gnet.Conn) *loop {
	el := c.EventLoop()
	e.mu.Lock()
	defer e.mu.Unlock()
	lp := e.loops[el]
	if lp == nil {
		s := e.r.cfg.Server
		lp = &loop{e: e, el: el, pools: map[*upstream]*pool{}}
		lp.heads.init(s.ReadHeaderTimeout)
		lp.bodies.init(s.ReadTimeout)
		lp.idles.init(s.IdleTimeout)
		lp.drains.init(time.Second)
		lp.writes.init(s.WriteTimeout)
		lp.waits.init(e.r.cfg.Cell.Timeout)
		lp.calls.init(e.r.cfg.Cell.Timeout)
		lp.upIdles.init(e.r.cfg.Cell.IdleConnTimeout)
		lp.swept.Store(e.now())
		e.loops[el] = lp
	}
	return lp
}

func (e *engine) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	var key netip.Addr
	switch x := c.Context().(type) {
	case *upconn:
		x.opened(c)
		return nil, gnet.None
	case acceptedConn:
		key = x.key
	}
	lp := e.loopOf(c)
	cl := &client{c: c, gc: c, lp: lp, remote: addrOf(c.RemoteAddr()), key: key}
	cl.t.owner, cl.w.owner, cl.wt.owner = cl, cl, cl
	cl.head.Fields = cl.hdrs[:0]
	c.SetContext(cl)
	cl.state = stHead
	lp.heads.arm(&cl.t, e.now()) // a new connection has ReadHeaderTimeout for its first request
	if e.draining.Load() {
		return nil, gnet.Close // shutting down: no new connections (OnClose counts it out)
	}
	return nil, gnet.None
}

func (e *engine) OnClose(c gnet.Conn, err error) gnet.Action {
	defer func() { e.panicked("close", recover()) }()
	switch x := c.Context().(type) {
	case *client:
		if errors.Is(err, io.EOF) && x.lp.halfClose(x) {
			return gnet.None // its answer still goes out
		}
		x.lp.closed(x)
	case *upconn:
		x.closed()
	}
	return gnet.None
}

func (e *engine) OnTraffic(c gnet.Conn) (action gnet.Action) {
	defer func() {
		if e.panicked("traffic", recover()) {
			action = gnet.Close // the connection's state is not to be trusted
		}
	}()
	switch x := c.Context().(type) {
	case *client:
		x.lp.traffic(x)
	case *upconn:
		x.traffic()
	default:
		c.Discard(-1)
	}
	return gnet.None
}

// panicked logs v, what recover returned in a loop callback, if it is a
// panic, and says so. A bug in one request's handling must not end the
// process, which serves every cell's users; net/http recovers its handlers
// for the same reason.
func (e *engine) panicked(where string, v any) bool {
	if v == nil {
		return false
	}
	e.r.metrics.panics.Inc()
	e.r.log.Error("router panic recovered", "in", where, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	return true
}

func addrOf(a net.Addr) netip.Addr {
	if t, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(t.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.IPv4Unspecified()
}

// run ticks the loops until done: each sweeps its deadlines on its own
// goroutine, and the Date header is refreshed. It is also the loops'
// watchdog: a loop that has not swept for StallTimeout is dead or stuck
// (its connections are not served), which the router cannot recover from.
func (e *engine) run() {
	t := time.NewTicker(tick)
	defer t.Stop()
	ctx := context.Background()
	stall := int64(e.r.cfg.Server.StallTimeout)
	for {
		select {
		case <-e.done:
			return
		case now := <-t.C:
			e.setDate(now)
		}
		now := e.now()
		for _, lp := range e.loopList() {
			if swept := lp.swept.Load(); now-swept > stall && !e.draining.Load() {
				e.fail(fmt.Errorf("router: an event loop has not run for %v", time.Duration(now-swept).Round(time.Millisecond)))
			}
			if err := lp.el.Execute(ctx, lp); err != nil && !e.draining.Load() {
				e.fail(fmt.Errorf("router: the event loops stopped: %w", err))
			}
		}
	}
}

// Run is the loop's tick, run on the loop (a gnet.Runnable): it sweeps
// the deadlines.
func (lp *loop) Run(context.Context) error {
	defer func() { lp.e.panicked("sweep", recover()) }()
	lp.sweep()
	return nil
}

// setDate refreshes the Date header value once a second.
func (e *engine) setDate(now time.Time) {
	if d := e.date.Load(); d != nil && now.Unix() == e.dateSec.Load() {
		return
	}
	e.dateSec.Store(now.Unix())
	b := now.UTC().AppendFormat(nil, "Mon, 02 Jan 2006 15:04:05 GMT")
	e.date.Store(&b)
}

// sweep acts on every expired deadline of the loop.
func (lp *loop) sweep() {
	now := lp.e.now()
	lp.swept.Store(now)
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
		if cl := t.owner.(*client); now-cl.lastInput > int64(50*time.Millisecond) {
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
	for t := lp.waits.expired(now); t != nil; t = lp.waits.expired(now) {
		lp.waitExpired(t.owner.(*client))
	}
	for t := lp.calls.expired(now); t != nil; t = lp.calls.expired(now) {
		t.owner.(*upconn).timedOut()
	}
	for t := lp.upIdles.expired(now); t != nil; t = lp.upIdles.expired(now) {
		t.owner.(*upconn).shut()
	}
	lp.sweepDials(now)
	lp.sweepPools()
	if lp.e.draining.Load() {
		lp.drainIdle()
	}
}

// traffic reads what a client sent.
func (lp *loop) traffic(cl *client) {
	switch cl.state {
	case stClosed:
		cl.c.Discard(-1)
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
	cl.c.Discard(k)
}

// chunkWindow is how much of a chunked body is held undecoded at a time:
// room for the longest chunk-size line and some data.
const chunkWindow = 16 << 10

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
		return false
	}
	cl.bodyOff, cl.used, cl.body = n, n, nil
	if room := lp.bodyRoom(h); room > 0 && cap(cl.in) < n+room {
		// Room for the body now, so that reading it never moves the
		// bytes the head's fields view; the head is parsed again in its
		// new place.
		cl.in = slices.Grow(cl.in, n+room-len(cl.in))
		h1.ParseRequest(cl.in, h, s.MaxHeaderBytes)
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
// consumed and bounded, see chunkDecoder). Then the request is routed.
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
				lp.continue100(cl)
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
			lp.continue100(cl)
			return false
		}
		cl.body, cl.used = cl.in[cl.bodyOff:end], end
	}
	lp.enter(cl)
	lp.route(cl)
	return true
}

// continue100 says 100 Continue to an HTTP/1.1 client that waits for it
// before sending its body (an HTTP/1.0 client never gets one: RFC 9110
// §10.1.1).
func (lp *loop) continue100(cl *client) {
	if cl.head.ExpectContinue && cl.head.Minor == 1 && !cl.sent100 {
		cl.sent100 = true
		cl.c.Write(continue100)
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
	cl.drainMax = 4 * int64(lp.e.r.cfg.Server.MaxBodyBytes)
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
	cl.c.Write(lp.out)
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
		if cl.unread != 0 || len(cl.in) > cl.used || cl.c.InboundBuffered() > 0 {
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
	if rest == 0 && cap(cl.in) > 16<<10 {
		cl.in = nil // a large request's buffer is not kept for the connection's life
	}
	if cap(cl.dec) > 16<<10 {
		cl.dec = nil
	}
	cl.used, cl.body, cl.sent100 = 0, nil, false
	cl.head.Method = nil
	cl.state = stIdle
	lp.idles.arm(&cl.t, lp.e.now())
	if cl.c.OutboundBuffered() > 4<<20 {
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

// begin starts the exchange for the request whose head is in cl.head.
func (lp *loop) begin(cl *client) {
	r := lp.e.r
	ex := &cl.ex
	*ex = exchange{start: time.Now(), cm: r.noCell, slot: -1}
	cl.close, cl.unread = cl.head.Close, 0
	cl.seq++
	ex.rid = r.requestIDFrom(&cl.head, &ex.ridBuf)
}

// enter marks cl's request as being answered.
func (lp *loop) enter(cl *client) {
	cl.t.stop()
	cl.state = stBusy
	lp.e.busy.Add(1)
}

// admit is the part of the request chain that needs only the head: the
// protocol's demands (Host, Expect), the API key, the body limit, the
// client's rate and the route. It answers a request it refuses and says
// false.
func (lp *loop) admit(cl *client) bool {
	r := lp.e.r
	h := &cl.head
	ex := &cl.ex
	switch {
	case h.Minor == 1 && !h.HostSeen, h.HostSeen && !h1.ValidHost(h.Host):
		lp.refuseHead(cl, &probBadHost, 0, nil, true)
		return false
	case h.ExpectOther:
		lp.refuseHead(cl, &probExpectation, 0, nil, false)
		return false
	}
	client, res := r.keys.Authenticate(h.Get(hdrAPIKey))
	switch res {
	case authMissing:
		r.metrics.authFail.WithLabelValues("missing").Inc()
		lp.refuseHead(cl, &probMissingKey, 0, nil, true)
		return false
	case authUnknown:
		r.metrics.authFail.WithLabelValues("unknown").Inc()
		lp.refuseHead(cl, &probUnknownKey, 0, nil, true)
		return false
	}
	ex.client = client
	if h.ContentLength > int64(r.cfg.Server.MaxBodyBytes) {
		lp.tooLarge(cl, h.ContentLength-int64(len(cl.in)-cl.bodyOff))
		return false
	}
	ex.v = r.limits.take(client)
	if !ex.v.ok {
		r.metrics.limited.WithLabelValues(client.ID).Inc()
		lp.refuseHead(cl, &probRateLimit, ex.v.retryAfter, nil, false)
		return false
	}
	kind, cellID := classify(h.Method, h.Path)
	ex.kind, ex.cellID = kind, cellID
	switch kind {
	case routeNotFound:
		lp.refuseHead(cl, &probNotFound, 0, nil, false)
		return false
	case routeBadInquiry:
		lp.refuseHead(cl, &probBadInquiry, 0, nil, false)
		return false
	case routeBadMethod:
		allow := allowCreate
		if len(h.Path) >= pathPrefixLen {
			allow = allowRead
		}
		lp.refuseHead(cl, &probBadMethod, 0, allow, false)
		return false
	case routeRead:
		t := r.table()
		if t == nil {
			lp.refuseHead(cl, &probNoMap, time.Second, nil, false)
			return false
		}
		if ex.u = t.byID[bstr(cellID)]; ex.u == nil {
			lp.refuseHead(cl, &probBadInquiry, 0, nil, false)
			return false
		}
		ex.version = t.m.Version()
	}
	return true
}

// refuseHead answers a request from its head alone. A body already in
// the buffer is skipped; one still to come is not read: the connection
// closes after the answer (as it does, whatever the body, when close is
// set).
func (lp *loop) refuseHead(cl *client, p *prob, retry time.Duration, allow []byte, close bool) {
	h := &cl.head
	switch have := int64(len(cl.in) - cl.bodyOff); {
	case h.Chunked:
		cl.unread = -1
	case h.ContentLength > have:
		cl.unread = h.ContentLength - have
	case h.ContentLength > 0:
		cl.used = cl.bodyOff + int(h.ContentLength)
	}
	if cl.unread != 0 {
		cl.used = len(cl.in)
		close = true
	}
	cl.close = cl.close || close
	lp.enter(cl)
	lp.answer(cl, p, retry, allow)
}

// route is the rest of the request chain once the request is whole: a
// new inquiry goes to the cell of the user_id in its body.
func (lp *loop) route(cl *client) {
	r := lp.e.r
	ex := &cl.ex
	if ex.kind == routeCreate {
		t := r.table()
		if t == nil {
			lp.answer(cl, &probNoMap, time.Second, nil)
			return
		}
		id, ok := userIDFrom(cl.body)
		if !ok {
			lp.answer(cl, &probBadUser, 0, nil)
			return
		}
		ex.userID = id
		rt := t.m.Lookup(bstr(id))
		r.hot.Add(id, uint64(rt.Slot)) // the slot's low bits are the hash's
		ex.slot = rt.Slot
		ex.u = t.byID[rt.Cell]
		if ex.u == nil {
			r.noCell.shed[shedNoCell].Inc()
			lp.answer(cl, &probNoCell, time.Second, nil)
			return
		}
		ex.version = t.m.Version()
	}
	lp.call(cl)
}

// call sends the request through its cell's guard.
func (lp *loop) call(cl *client) {
	ex := &cl.ex
	u := ex.u
	ex.cell, ex.cm = u.cell, u.m
	permit, why := u.guard.enter()
	if why != admitted {
		u.m.shed[why].Inc()
		p := &u.probs.bulkhead
		if why == shedBreaker {
			p = &u.probs.breaker
		}
		lp.answer(cl, p, u.guard.retryAfter(why), nil)
		return
	}
	ex.permit, ex.admitted = permit, true
	ex.sentAt = time.Now()
	ex.attempts = 0
	lp.dispatch(cl)
}

// dispatch hands the request to a connection to its cell, or queues it
// for one being dialled.
func (lp *loop) dispatch(cl *client) {
	if cl.ex.u.tls != nil {
		lp.callTLS(cl)
		return
	}
	p := lp.pool(cl.ex.u)
	if uc := p.take(); uc != nil {
		uc.send(cl)
		return
	}
	p.waiters = append(p.waiters, cl)
	lp.waits.arm(&cl.wt, lp.e.now()-int64(time.Since(cl.ex.sentAt)))
	if p.dialing < len(p.waiters) {
		p.dial()
	}
}

// waitExpired: no connection to the cell within the call's timeout.
func (lp *loop) waitExpired(cl *client) {
	if cl.state != stBusy {
		return
	}
	lp.pool(cl.ex.u).unwait(cl)
	lp.failed(cl, true)
}

// failed ends a call that got no answer: a timeout (504) or a connection
// that failed (503); both count against the cell.
func (lp *loop) failed(cl *client, timeout bool) {
	ex := &cl.ex
	u := ex.u
	ex.uc = nil
	lp.leave(cl, true)
	if timeout {
		u.m.timeout.Inc()
		lp.answer(cl, &u.probs.timeout, 0, nil)
		return
	}
	u.m.connErr.Inc()
	lp.answer(cl, &u.probs.unavailable, time.Second, nil)
}

func (lp *loop) leave(cl *client, failed bool) {
	ex := &cl.ex
	if ex.admitted {
		ex.admitted = false
		ex.u.guard.leave(ex.permit, failed, time.Since(ex.sentAt))
	}
}

// abandon: the client went away while its request was being answered.
func (lp *loop) abandon(cl *client) {
	ex := &cl.ex
	cl.wt.stop()
	if ex.u != nil {
		if p := lp.pools[ex.u]; p != nil {
			p.unwait(cl)
		}
	}
	ex.tlsCall = false
	if uc := ex.uc; uc != nil {
		// The cell has the request: its answer will be read and dropped,
		// and the connection reused.
		uc.orphan = true
		ex.uc = nil
		return
	}
	lp.leave(cl, false)
}

// answered ends a call with the cell's answer in resp (the head) and body:
// the answer goes to the client, a 421 is retried once with a newer map.
func (lp *loop) answered(cl *client, resp *h1.Response, body []byte) {
	ex := &cl.ex
	u := ex.u
	status := resp.Status
	shedByCell := status == 503 && bytes.Equal(resp.Get(hdrOverloaded), valTrue)
	lp.leave(cl, status >= 500 && !shedByCell)
	ex.uc = nil
	if status == 421 {
		u.m.misdir.Inc()
		if !ex.retried {
			ex.retried = true
			lp.retryMisdirected(cl)
			return
		}
		lp.answer(cl, &u.probs.misdirected, time.Second, nil)
		return
	}
	lp.out = lp.proxyAnswer(lp.out[:0], cl, resp, body)
	lp.write(cl, status)
}

// retryMisdirected looks for a newer map (the registry read runs off the
// loop) and sends the request once more with it.
func (lp *loop) retryMisdirected(cl *client) {
	r := lp.e.r
	seen := cl.ex.version
	if m := r.currentMap(); m != nil && m.Version() > seen {
		lp.reroute(cl)
		return
	}
	seq := cl.seq
	go func() {
		r.refreshAfter(seen)
		lp.el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			if cl.state == stBusy && cl.seq == seq {
				lp.reroute(cl)
			}
			return nil
		}))
	}()
}

// reroute sends a misdirected request again with the newest map.
func (lp *loop) reroute(cl *client) {
	r := lp.e.r
	ex := &cl.ex
	t := r.table()
	if t == nil || t.m.Version() <= ex.version {
		lp.answer(cl, &ex.u.probs.misdirected, time.Second, nil)
		return
	}
	var u *upstream
	if ex.kind == routeCreate {
		rt := t.m.Lookup(bstr(ex.userID))
		u, ex.slot = t.byID[rt.Cell], rt.Slot
	} else {
		u = t.byID[bstr(ex.cellID)]
	}
	if u == nil {
		r.noCell.shed[shedNoCell].Inc()
		lp.answer(cl, &probNoCell, time.Second, nil)
		return
	}
	ex.u, ex.version = u, t.m.Version()
	lp.call(cl)
}

// answer sends one of the router's own problem answers.
func (lp *loop) answer(cl *client, p *prob, retry time.Duration, allow []byte) {
	lp.out = lp.problemAnswer(lp.out[:0], cl, p, retry, allow)
	lp.write(cl, p.status)
}

// write sends lp.out, the answer to cl's request, and ends the request;
// after an answer that came from a cell, a pipelined request is served.
func (lp *loop) write(cl *client, status int) {
	if cl.state != stBusy {
		return
	}
	cl.c.Write(lp.out)
	lp.done(cl, status)
	if !cl.inServe && cl.state == stIdle && len(cl.in)+cl.c.InboundBuffered() > 0 {
		lp.serve(cl)
	}
}

// requestIDFrom is the client's X-Request-Id if it is a sane one, else a
// new one.
func (r *Router) requestIDFrom(h *h1.Request, buf *[64]byte) []byte {
	if v := h.Get(hdrRequestID); validRequestID(v) {
		return append(buf[:0], v...)
	}
	return r.newRequestID(buf)
}

// newRequestID is this process's random prefix and a sequence number.
func (r *Router) newRequestID(buf *[64]byte) []byte {
	b := append(buf[:0], r.ridPrefix[:]...)
	return strconv.AppendUint(b, r.ridSeq.Add(1), 36)
}

// serve runs the event loops and accepts client connections on addr
// until shutdown, or until a failure it cannot recover from (a loop that
// stopped or hangs), which it returns after readiness has failed for
// fatalGrace.
func (e *engine) serve(addr string, ready func(net.Addr)) error {
	if !e.started.CompareAndSwap(false, true) {
		return errors.New("router: already serving")
	}
	defer close(e.stopped)
	if err := checkFileLimit(e.r.cfg.Server.MaxConns); err != nil {
		return err
	}
	lc := net.ListenConfig{KeepAlive: 3 * time.Minute}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return fmt.Errorf("router: %w", err)
	}
	defer ln.Close()
	cli, err := gnet.NewClient(e,
		gnet.WithMulticore(true),
		gnet.WithNumEventLoop(runtime.GOMAXPROCS(0)),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay),
		gnet.WithLogger(gnetLogger{e.r.log}),
	)
	if err == nil {
		err = cli.Start()
	}
	if err != nil {
		return fmt.Errorf("router: start the event loops: %w", err)
	}
	e.cli = cli
	e.mu.Lock()
	e.ln = ln
	e.mu.Unlock()
	e.base = time.Now()
	e.setDate(time.Now())
	go e.run()
	defer close(e.done)
	accepting := make(chan struct{})
	go func() {
		defer close(accepting)
		e.acceptLoop(ln)
	}()
	if ready != nil {
		ready(ln.Addr())
	}
	select {
	case <-e.quit:
		ln.Close()
		<-accepting
		if err := cli.Stop(); err != nil {
			e.r.log.Warn("event loops stopped with an error", "err", err)
		}
		return nil
	case err = <-e.fatal:
	}
	e.r.log.Error("router cannot go on serving; readiness fails and the process must end", "err", err, "in", fatalGrace)
	select {
	case <-time.After(fatalGrace):
	case <-e.quit:
	}
	ln.Close()
	<-accepting
	cli.Stop()
	return err
}

// fatalGrace is how long readiness fails before serve returns a failure:
// time for load balancers to see it before the process ends.
const fatalGrace = time.Second

// shutdown refuses new connections, closes idle ones, waits for the
// requests in flight (until ctx ends) and stops the loops.
func (e *engine) shutdown(ctx context.Context) error {
	if !e.started.Load() {
		return nil
	}
	select {
	case <-e.stopped:
		return nil
	default:
	}
	if e.draining.Swap(true) {
		// Another shutdown is under way: wait for it.
		select {
		case <-e.stopped:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	e.mu.Lock()
	if e.ln != nil {
		e.ln.Close() // no new connections: the port refuses them
	}
	e.mu.Unlock()
	t := time.NewTicker(tick)
	defer t.Stop()
	var err error
	for e.busy.Load() > 0 && err == nil {
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-e.stopped:
			return nil
		case <-t.C:
		}
	}
	close(e.quit)
	select {
	case <-e.stopped:
	case <-time.After(5 * time.Second):
		if err == nil {
			err = errors.New("router: the event loops did not stop within 5s")
		}
	}
	return err
}

// gnetLogger sends gnet's own messages to the router's log.
type gnetLogger struct{ log *slog.Logger }

func (l gnetLogger) Debugf(f string, a ...any) {
	l.log.Debug(fmt.Sprintf(f, a...), "component", "gnet")
}
func (l gnetLogger) Infof(f string, a ...any) { l.log.Debug(fmt.Sprintf(f, a...), "component", "gnet") }
func (l gnetLogger) Warnf(f string, a ...any) { l.log.Warn(fmt.Sprintf(f, a...), "component", "gnet") }
func (l gnetLogger) Errorf(f string, a ...any) {
	l.log.Error(fmt.Sprintf(f, a...), "component", "gnet")
}
func (l gnetLogger) Fatalf(f string, a ...any) {
	l.log.Error(fmt.Sprintf(f, a...), "component", "gnet")
}
