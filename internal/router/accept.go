package router

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"
)

// The router accepts client connections itself rather than through gnet's
// acceptor: gnet stops its whole engine on the first accept error other
// than EAGAIN, EINTR, ECONNRESET or ECONNABORTED, so a moment at the
// open-file limit (EMFILE, ENFILE) or short of memory (ENOMEM, ENOBUFS)
// would leave the process up, healthy to every probe, and deaf. Here, as in
// net/http, an accept error is counted, logged and retried after a backoff
// (5 ms doubling to 1 s); so is a connection accepted at the open-file
// limit that cannot yet be handed to a loop (see awaitFile). An accepted connection is checked against the
// limits (all connections, connections per address) and handed to the
// event loop with the fewest connections.

// fdReserve is the room the open-file limit must leave beyond MaxConns:
// connections to the cells and the process's own files.
const fdReserve = 1024

// defaultMaxConns is MaxConns when none is given and the open-file limit
// holds it.
const defaultMaxConns = 16384

// fileLimitRoom is how many client connections the open-file limit leaves
// room for (0 if it cannot be read or leaves none).
func fileLimitRoom() int {
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &l); err != nil || l.Cur <= fdReserve {
		return 0
	}
	return int(min(l.Cur-fdReserve, 1<<30))
}

// checkFileLimit refuses to start when the process may not open MaxConns
// client connections and fdReserve more files.
func checkFileLimit(maxConns int) error {
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &l); err != nil {
		return fmt.Errorf("router: read the open-file limit: %w", err)
	}
	if need := uint64(maxConns) + fdReserve; l.Cur < need {
		return fmt.Errorf("router: the open-file limit is %d (hard %d), below the %d that max-conns %d needs (%d more for the cells and the process): raise it (ulimit -n, LimitNOFILE=) or lower max-conns",
			l.Cur, l.Max, need, maxConns, fdReserve)
	}
	return nil
}

// addrKey is what the per-address cap counts by: the IPv4 address, or the
// /64 an IPv6 address is in (one host usually holds a whole /64).
func addrKey(a netip.Addr) netip.Addr {
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a
}

// addrCounts counts the open client connections per address key.
type addrCounts struct {
	mu  sync.Mutex
	n   map[netip.Addr]int32
	max int32
}

// take counts one more connection from a; false (and nothing counted) if
// a is at its cap.
func (ac *addrCounts) take(a netip.Addr) bool {
	ac.mu.Lock()
	defer ac.mu.Unlock()
	if ac.n[a] >= ac.max {
		return false
	}
	ac.n[a]++
	return true
}

// release counts one connection from a less.
func (ac *addrCounts) release(a netip.Addr) {
	ac.mu.Lock()
	defer ac.mu.Unlock()
	if ac.n[a] <= 1 {
		delete(ac.n, a)
		return
	}
	ac.n[a]--
}

// Accept backoff after an error, as net/http's.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// acceptBackoff counts and logs an accept error and waits: delay doubles
// from acceptBackoffMin to acceptBackoffMax (one line per doubling, then
// one a second while it lasts). False if the router stops meanwhile.
func (e *engine) acceptBackoff(delay *time.Duration, msg string, err error) bool {
	e.r.metrics.acceptErrs.Inc()
	*delay = min(max(2**delay, acceptBackoffMin), acceptBackoffMax)
	e.r.log.Warn(msg, "err", err, "retry_in", *delay)
	select {
	case <-time.After(*delay):
		return true
	case <-e.quit:
		return false
	}
}

// acceptLoop accepts client connections from ln until it is closed.
func (e *engine) acceptLoop(ln net.Listener) {
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if !e.acceptBackoff(&delay, "cannot accept a client connection; retrying", err) {
				return
			}
			continue
		}
		delay = 0
		e.admitConn(c)
	}
}

// admitConn hands an accepted connection to an event loop, or closes it:
// shutting down, its address at its cap, or the router at MaxConns with
// no idle connection to evict.
func (e *engine) admitConn(c net.Conn) {
	key := addrKey(addrOf(c.RemoteAddr()))
	switch {
	case e.draining.Load() && !e.handing.Load():
		e.r.metrics.connRefuse.WithLabelValues("draining").Inc()
		c.Close()
		return
	case !e.addrs.take(key):
		e.r.metrics.connRefuse.WithLabelValues("per_addr").Inc()
		c.Close()
		return
	}
	if e.conns.Add(1) > int64(e.r.cfg.Server.MaxConns) && !e.evictIdle() {
		e.conns.Add(-1)
		e.addrs.release(key)
		e.r.metrics.connRefuse.WithLabelValues("max_conns").Inc()
		c.Close()
		return
	}
	ac := acceptedConn{key: key}
	if e.r.tlsConfig != nil {
		go e.handshake(c, ac)
		return
	}
	e.enroll(c, ac)
}

// enroll hands an admitted connection to an event loop. Enrolling
// duplicates the socket into the loop and closes c; the loop's OnOpen
// takes over the counts.
func (e *engine) enroll(c net.Conn, ac acceptedConn) {
	if !e.awaitFile(c) {
		e.unadmit(c, ac)
		return
	}
	if _, err := e.cli.EnrollContext(c, ac); err != nil {
		e.conns.Add(-1)
		e.addrs.release(ac.key)
		e.r.log.Warn("cannot hand a client connection to an event loop", "err", err)
	}
}

// awaitFile waits until the process can open a file more, which
// enrolling c takes for a moment (a duplicate of its socket): at the
// open-file limit an accept may succeed where that duplicate would fail
// and lose the connection. The connection waits instead, with the accept
// loop's backoff and counted as an accept error, until a file is free;
// false if the router stops meanwhile. (A file freed here may still be
// taken by another goroutine before the loop's duplicate: a narrower
// window, not none.)
func (e *engine) awaitFile(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	var delay time.Duration
	for {
		var derr error
		if err := rc.Control(func(fd uintptr) {
			var dup int
			if dup, derr = unix.Dup(int(fd)); derr == nil {
				_ = unix.Close(dup) // a probe of the descriptor table: nothing to recover
			}
		}); err != nil || derr == nil || !errors.Is(derr, unix.EMFILE) && !errors.Is(derr, unix.ENFILE) {
			return true
		}
		if !e.acceptBackoff(&delay, "cannot take an accepted client connection on: no file left; retrying", derr) {
			return false
		}
	}
}

// unadmit closes an admitted connection that never reached a loop.
func (e *engine) unadmit(c net.Conn, ac acceptedConn) {
	c.Close()
	e.conns.Add(-1)
	e.addrs.release(ac.key)
}

// acceptedConn is the context of a client connection until OnOpen makes
// its client.
type acceptedConn struct {
	key netip.Addr
	tls *tls.Conn     // a TLS connection's, its handshake done
	tr  *tlsTransport // under tls
}

// What evictIdle closes, in order: connections kept alive between
// requests, then connections open without a byte of a request yet, then
// (TLS) the oldest connection still in its handshake.
const (
	evictKeptAlive = iota
	evictSilent
)

// evictIdle closes the oldest idle client connection of all the loops to
// make room for a new one; false if none is idle.
func (e *engine) evictIdle() bool {
	lps := e.loopList()
	for _, kind := range []int{evictKeptAlive, evictSilent} {
		var oldest *loop
		var oldestAt int64
		for _, lp := range lps {
			at, ok := onLoop(lp, func() (int64, bool) { return lp.idleSince(kind) })
			if ok && (oldest == nil || at < oldestAt) {
				oldest, oldestAt = lp, at
			}
		}
		if oldest == nil {
			continue
		}
		if _, ok := onLoop(oldest, func() (int64, bool) { return 0, oldest.evictOne(kind) }); ok {
			e.r.metrics.evicted.Inc()
			return true
		}
	}
	if e.hs.evictOldest() {
		e.r.metrics.evicted.Inc()
		return true
	}
	return false
}

// onLoop runs f on lp's goroutine and returns its results; ok is false if
// the loop does not run it within 100 ms.
func onLoop(lp *loop, f func() (int64, bool)) (int64, bool) {
	type result struct {
		v  int64
		ok bool
	}
	res := make(chan result, 1)
	err := lp.el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		v, ok := f()
		res <- result{v, ok}
		return nil
	}))
	if err != nil {
		return 0, false
	}
	select {
	case r := <-res:
		return r.v, r.ok
	case <-time.After(100 * time.Millisecond):
		return 0, false
	}
}

// evictScan bounds how many connections waiting for a first request byte
// the loop looks at.
const evictScan = 64

// oldestIdle returns the loop's oldest idle connection of the kind.
func (lp *loop) oldestIdle(kind int) *timer {
	if kind == evictKeptAlive {
		if t := lp.idles.head.next; t != &lp.idles.head {
			return t
		}
		return nil
	}
	n := 0
	for t := lp.heads.head.next; t != &lp.heads.head && n < evictScan; t, n = t.next, n+1 {
		if cl := t.owner.(*client); len(cl.in) == 0 && cl.c.InboundBuffered() == 0 {
			return t
		}
	}
	return nil
}

// idleSince says when the loop's oldest idle connection of the kind went
// idle (its deadline less its list's duration), and whether there is one.
func (lp *loop) idleSince(kind int) (int64, bool) {
	t := lp.oldestIdle(kind)
	if t == nil {
		return 0, false
	}
	return t.at - t.list.d, true
}

// evictOne closes the loop's oldest idle connection of the kind.
func (lp *loop) evictOne(kind int) bool {
	t := lp.oldestIdle(kind)
	if t == nil {
		return false
	}
	t.stop()
	lp.closeClient(t.owner.(*client))
	return true
}

// loopList is the loops known so far, appended to dst[:0] (the tick
// reuses its slice).
func (e *engine) loopList(dst ...*loop) []*loop {
	e.mu.Lock()
	defer e.mu.Unlock()
	dst = dst[:0]
	for _, lp := range e.loops {
		dst = append(dst, lp)
	}
	return dst
}
