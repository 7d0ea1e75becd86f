package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
)

// The engine: gnet's loops, their lifecycle (serve, shutdown, the
// watchdog) and the callbacks that dispatch to a loop's connections.

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

	hs       handshakes   // TLS handshakes under way, off the loops
	conns    atomic.Int64 // client connections open
	addrs    addrCounts   // client connections open per address
	busy     atomic.Int64 // requests being answered
	draining atomic.Bool
	// handing: the router handed its listener over (handOver); it serves
	// the connections it accepted, each to its next answer.
	handing      atomic.Bool
	handingSince atomic.Int64 // e.now() when it handed over
	idleClosed   atomic.Int64 // kept-alive connections closed idle while handing over
	done         chan struct{}
	date         atomic.Pointer[[]byte] // the Date header's value
	dateSec      atomic.Int64           // the second it is for
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

var (
	_ gnet.EventHandler = (*engine)(nil)
	_ gnet.Runnable     = (*loop)(nil)
	_ conn              = gnet.Conn(nil)
)

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

// waitCounter is a gnet event loop as patched in third_party/gnet: it
// counts its epoll_wait calls.
type waitCounter interface{ Waits() uint64 }

// batchCounter is a gnet event loop as patched in third_party/gnet: it
// counts its batched reads and writes (io_uring calls).
type batchCounter interface{ Batched() *gnet.Batched }

// loopCounts sums the loops' system-call counters.
func (e *engine) loopCounts() loopCounts {
	var n loopCounts
	for _, lp := range e.loopList() {
		if w, ok := lp.el.(waitCounter); ok {
			n.waits += w.Waits()
		}
		if b, ok := lp.el.(batchCounter); ok {
			s := b.Batched()
			n.batches += s.Calls.Load()
			n.batchedReads += s.Reads.Load()
			n.batchedWrites += s.Writes.Load()
		}
	}
	return n
}

// loopOf returns the state of c's loop, making it on first sight.
func (e *engine) loopOf(c gnet.Conn) *loop {
	el := c.EventLoop()
	e.mu.Lock()
	defer e.mu.Unlock()
	lp := e.loops[el]
	if lp == nil {
		s := e.r.cfg.Server
		lp = &loop{e: e, el: el, pools: map[*endpoint]*pool{}, rnd: uint64(time.Now().UnixNano()) | 1}
		lp.heads.init(s.ReadHeaderTimeout)
		lp.bodies.init(s.ReadTimeout)
		lp.idles.init(s.IdleTimeout)
		lp.drains.init(lingerFor)
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
	var ac acceptedConn
	switch x := c.Context().(type) {
	case *upconn:
		x.opened(c)
		return nil, gnet.None
	case warmConn:
		x.uc.p = e.loopOf(c).pool(x.ep)
		c.SetContext(x.uc)
		x.uc.opened(c)
		return nil, gnet.None
	case acceptedConn:
		ac = x
	}
	e.loopOf(c).open(c, ac)
	if e.draining.Load() && !e.handing.Load() {
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
		if x.lp.sweepIfDue() && x.state == stClosed {
			break // a deadline of its own had passed
		}
		if _, ok := x.c.(*tlsConn); ok {
			x.lp.tlsTraffic(x)
			break
		}
		x.lp.traffic(x)
	case *upconn:
		if x.p.lp.sweepIfDue() && x.dead {
			break
		}
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
// goroutine, and the Date header is refreshed. A loop that swept within
// the last tick (one with traffic sweeps as it serves: sweepIfDue) is
// not woken: a wake-up from here is an eventfd write and an epoll return
// on the loop, system calls a busy loop need not make. It is also the loops'
// watchdog: a loop that has not swept for StallTimeout is dead or stuck
// (its connections are not served), which the router cannot recover from.
func (e *engine) run() {
	t := time.NewTicker(tick)
	defer t.Stop()
	ctx := context.Background()
	stall := int64(e.r.cfg.Server.StallTimeout)
	var lps []*loop
	for {
		select {
		case <-e.done:
			return
		case now := <-t.C:
			e.setDate(now)
		}
		now := e.now()
		lps = e.loopList(lps...)
		for _, lp := range lps {
			swept := lp.swept.Load()
			if now-swept > stall && !e.draining.Load() {
				e.fail(fmt.Errorf("router: an event loop has not run for %v", time.Duration(now-swept).Round(time.Millisecond)))
			}
			if now-swept < int64(tick) {
				continue
			}
			if err := lp.el.Execute(ctx, lp); err != nil && !e.draining.Load() {
				e.fail(fmt.Errorf("router: the event loops stopped: %w", err))
			}
		}
	}
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

// serve runs the event loops and accepts client connections on addr
// until shutdown, or until a failure it cannot recover from (a loop that
// stopped or hangs), which it returns after readiness has failed for
// fatalGrace.
func (e *engine) serve(ln net.Listener, ready func(net.Addr)) error {
	if !e.started.CompareAndSwap(false, true) {
		ln.Close()
		return errors.New("router: already serving")
	}
	defer close(e.stopped)
	defer ln.Close()
	if err := checkFileLimit(e.r.cfg.Server.MaxConns); err != nil {
		return err
	}
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
		e.hs.stop()
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
	e.hs.stop()
	if serr := cli.Stop(); serr != nil {
		e.r.log.Warn("event loops stopped with an error", "err", serr)
	}
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

// handOver is shutdown for a router whose successor accepts from the same
// listening socket: it stops accepting (the socket stays open in the
// successor), serves the connections it has — each request answered with
// Connection: close, a connection accepted just before served all the
// same, a kept-alive connection idle for handOverIdle closed — and stops
// when none is left or ctx ends, cutting what is left then.
func (e *engine) handOver(ctx context.Context) (Drained, error) {
	var d Drained
	if !e.started.Load() {
		return d, nil
	}
	e.handingSince.Store(e.now())
	e.handing.Store(true)
	if e.draining.Swap(true) {
		return d, errors.New("router: already stopping")
	}
	d.Conns = e.conns.Load()
	e.mu.Lock()
	if e.ln != nil {
		e.ln.Close() // this process's descriptor: the successor's stays open
	}
	e.mu.Unlock()
	t := time.NewTicker(tick)
	defer t.Stop()
	var err error
wait:
	for e.conns.Load() > 0 { // handshakes under way included
		select {
		case <-ctx.Done():
			err = ctx.Err()
			break wait
		case <-e.stopped:
			return d, e.failure()
		case <-t.C:
		}
	}
	d.Cut, d.RequestsCut = e.conns.Load(), e.busy.Load()
	d.Idle = e.idleClosed.Load()
	close(e.quit)
	select {
	case <-e.stopped:
	case <-time.After(5 * time.Second):
		err = errors.Join(err, errors.New("router: the event loops did not stop within 5s"))
	}
	return d, err
}

// Drained is what a router that handed over did with its connections.
type Drained struct {
	Conns       int64 // client connections open when it handed over
	Idle        int64 // of those, kept-alive ones closed while idle
	Cut         int64 // connections still open at the bound, closed
	RequestsCut int64 // requests in flight on them, cut
}

// handOverIdle is how long a kept-alive connection of a router that
// handed over may stay idle before it is closed: long enough for a
// client in use to send its next request and be told Connection: close
// with its answer, rather than find its connection closed as it sends.
const handOverIdle = time.Second

// handOverSpread is how long a router that handed over takes to tell its
// kept-alive clients Connection: close: each answer closes its connection
// with a chance growing from 0 to 1 over it, so that the clients come to
// the successor spread over that time, not all at the next answer (on TLS
// each comes with a handshake), as Envoy's gradual drain does.
const handOverSpread = time.Second

// drainCloses says whether the answer to cl's request closes its
// connection because the router is stopping: always at shutdown; after a
// handoff, for a request that was in flight when it handed over, and for
// later ones by the growing chance of handOverSpread.
func (lp *loop) drainCloses(cl *client) bool {
	e := lp.e
	if !e.draining.Load() {
		return false
	}
	if !e.handing.Load() {
		return true
	}
	since := e.handingSince.Load()
	elapsed := e.now() - since
	if elapsed >= int64(handOverSpread) || cl.ex.start.Before(e.base.Add(time.Duration(since))) {
		return true
	}
	const scale = 1 << 20
	return lp.random(scale) < int(elapsed*scale/int64(handOverSpread))
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
