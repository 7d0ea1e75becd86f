package router

import (
	"context"
	"sync/atomic"

	"github.com/panjf2000/gnet/v2"
)

// The router serves HTTP/1.1 from event loops (gnet: epoll, one loop per
// core), as NGINX does: a loop owns its client connections and its own
// keep-alive connections to the cells, so a request is read, routed,
// forwarded, answered and its connections recycled on one goroutine with no
// hand-off, no locks and no per-request allocation. Timeouts are deadlines
// on intrusive lists, one list per kind of timeout: every entry of a list has
// the same duration, so a list is ordered by deadline and a sweep every tick
// pops only what expired.

// loop is one event loop's state. Only its goroutine touches it.
type loop struct {
	e     *engine
	el    gnet.EventLoop
	pools map[*endpoint]*pool
	rnd   uint64 // xorshift state: the choice of endpoints

	heads, bodies, idles, drains, writes tlist // client timers
	waits, calls, upIdles                tlist // exchange and cell connection timers
	dials                                []*dialing

	out      []byte       // an answer or request being built
	swept    atomic.Int64 // when it last swept its deadlines (engine clock), for the watchdog
	downSeen uint64       // the router's downGen when the loop last cut calls to instances found down
	woken    int64        // sweeps the tick woke the loop for (Run); the others were in callbacks (sweepIfDue)
	inline   int64
}

// Run is the loop's tick, run on the loop (a gnet.Runnable): it sweeps
// the deadlines.
func (lp *loop) Run(context.Context) error {
	defer func() { lp.e.panicked("sweep", recover()) }()
	lp.woken++
	lp.sweep(lp.e.now())
	return nil
}

// sweepIfDue sweeps the deadlines when the last sweep is a tick old, and
// says whether it did; the loop's callbacks call it first, so a loop with
// traffic sweeps as it serves and the tick need not wake it (engine.run).
func (lp *loop) sweepIfDue() bool {
	now := lp.e.now()
	if now-lp.swept.Load() < int64(tick) {
		return false
	}
	lp.inline++
	lp.sweep(now)
	return true
}

// sweep acts on every deadline of the loop expired at now.
func (lp *loop) sweep(now int64) {
	lp.swept.Store(now)
	lp.deadlines(now)
	for t := lp.waits.expired(now); t != nil; t = lp.waits.expired(now) {
		lp.waitExpired(t.owner.(*client))
	}
	for t := lp.calls.expired(now); t != nil; t = lp.calls.expired(now) {
		t.owner.(*upconn).timedOut()
	}
	for t := lp.upIdles.expired(now); t != nil; t = lp.upIdles.expired(now) {
		t.owner.(*upconn).shut()
	}
	if g := lp.e.r.downGen.Load(); g != lp.downSeen {
		lp.downSeen = g
		lp.cutDown()
	}
	lp.sweepDials(now)
	lp.sweepPools()
	if lp.e.draining.Load() {
		lp.drainIdle()
	}
}

// drainIdle closes the loop's idle client connections (shutting down).
// A router that handed over closes only kept-alive connections idle for
// handOverIdle: a connection accepted and not yet read from is waiting for
// its first request, which it will be answered.
func (lp *loop) drainIdle() {
	if lp.e.handing.Load() {
		now := lp.e.now()
		for t := lp.idles.head.next; t != &lp.idles.head; {
			next := t.next
			if since := t.at - lp.idles.d; now-since >= int64(handOverIdle) {
				t.stop()
				lp.e.idleClosed.Add(1)
				lp.closeClient(t.owner.(*client))
			}
			t = next
		}
		return
	}
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
