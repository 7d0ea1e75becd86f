package router

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"syscall"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"
)

// Opening connections to the cells: off the loops, a few at a time per
// loop and instance, each joining its loop's pool when connected.

// maxDialing bounds the dials under way from one loop to one instance:
// requests beyond it wait for a connection that comes free or a dial that
// ends, rather than each open its own. A router that starts (or takes
// over) under load would otherwise open as many connections at once as it
// has requests — on an https cell as many TLS handshakes, which the cell
// pays for in the latency of everything it serves — where a few,
// reused, carry them.
const maxDialing = 8

// topUp dials for the waiters that no dial under way will serve, up to
// maxDialing at once.
func (p *pool) topUp() {
	for p.dialing < len(p.waiters) && p.dialing < maxDialing {
		p.dial()
	}
}

// dialing is one connection being opened to a cell.
type dialing struct {
	p   *pool
	at  int64 // give up on it then
	end bool
}

// dial opens one more connection to the cell, off the loop; it joins the
// loop when connected (for an https cell, once its TLS handshake is done,
// within another DialTimeout), or the first waiter fails.
func (p *pool) dial() {
	lp := p.lp
	timeout := lp.e.r.cfg.Cell.DialTimeout
	d := &dialing{p: p, at: lp.e.now() + int64(2*timeout+time.Second)}
	p.dialing++
	lp.dials = append(lp.dials, d)
	uc := &upconn{p: p, d: d}
	uc.t.owner = uc
	stopped := lp.e.stopped
	go func() {
		c, tc, err := lp.e.r.dialCell(p.ep)
		uc.tls = tc
		if err == nil {
			var ch <-chan gnet.RegisteredResult
			if ch, err = lp.el.Enroll(gnet.NewContext(context.Background(), uc), c); err == nil {
				// The loop registers the socket; if the engine stops first
				// it never does, and the result never comes.
				select {
				case res := <-ch:
					err = res.Err
				case <-stopped:
					return
				}
			} else {
				c.Close()
			}
		}
		if err != nil {
			short := shortOfResources(err)
			lp.el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
				d.failed(short)
				return nil
			}))
		}
	}()
}

// dialCell connects to a cell instance (for an https one, its TLS
// handshake done within another DialTimeout), off the loops.
func (r *Router) dialCell(ep *endpoint) (net.Conn, *tlsConn, error) {
	timeout := r.cfg.Cell.DialTimeout
	dl := net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, Control: unackedTimeout(r.cfg.Cell.UnackedTimeout)}
	c, err := dl.Dial("tcp", ep.addr)
	if err != nil || ep.tls == nil {
		return c, nil, err
	}
	tr := &tlsTransport{Conn: c}
	tc := tls.Client(tr, ep.tls)
	c.SetDeadline(time.Now().Add(timeout))
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, nil, err
	}
	c.SetDeadline(time.Time{})
	return c, &tlsConn{tc: tc, tr: tr, room: r.cfg.Cell.MaxResponseBytes + maxAnswerHead + tlsPlainRoom}, nil
}

// unackedTimeout sets TCP_USER_TIMEOUT on a connection to a cell: the
// kernel closes it when bytes sent on it stay unacknowledged for d. A cell
// that is slow to answer still acknowledges what it receives at once, so
// this catches only a path or host that is gone: without it a request
// written on a kept-alive connection into a partition waits for the
// whole call Timeout.
func unackedTimeout(d time.Duration) func(network, address string, rc syscall.RawConn) error {
	return func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d/time.Millisecond))
		}); err != nil {
			return err
		}
		return serr
	}
}

// shortOfResources says whether err is the router's own shortage, not the
// far side's answer: no socket (the open-file limit, the system's file
// table), no memory or buffers, no local port. A check or a call that
// fails for it says nothing of the cell, and is not held against it.
func shortOfResources(err error) bool {
	for _, e := range []error{unix.EMFILE, unix.ENFILE, unix.ENOMEM, unix.ENOBUFS, unix.EADDRNOTAVAIL} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// finish marks d finished, once.
func (d *dialing) finish() bool {
	if d.end {
		return false
	}
	d.end = true
	d.p.dialing--
	return true
}

// failed: the connection could not be opened; the first waiter gets 503.
func (d *dialing) failed(short bool) {
	if !d.finish() {
		return
	}
	p := d.p
	for len(p.waiters) > 0 {
		cl := p.waiters[0]
		p.waiters = p.waiters[1:]
		cl.wt.stop()
		if cl.state != stBusy {
			continue
		}
		if short {
			p.lp.ownShortage(cl)
		} else {
			p.lp.undelivered(cl)
		}
		break
	}
	p.topUp()
}

// sweepDials gives up on dials that neither connected nor failed in time.
func (lp *loop) sweepDials(now int64) {
	keep := lp.dials[:0]
	for _, d := range lp.dials {
		if d.end {
			continue
		}
		if d.at <= now {
			d.failed(false)
			continue
		}
		keep = append(keep, d)
	}
	clear(lp.dials[len(keep):])
	lp.dials = keep
}
