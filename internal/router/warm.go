package router

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Warming a router's connections to the cells: a router that takes over
// a host's sockets (handoff) opens, before it tells its predecessor that
// it serves, as many connections to each cell instance as the
// predecessor holds, so that the load it takes over does not open them
// all at once — a burst of dials, and on https cells of TLS handshakes,
// that the cells would pay for in latency while they serve.

// warmParallel is how many connections Warm opens at once: a paced
// fill, not a burst.
const warmParallel = 8

// warmRecent is how recently an idle connection must have been used to
// count in Pools: what a burst left idle long ago is not what the load
// needs.
const warmRecent = 10 * time.Second

// WarmMax bounds the connections Pools reports for one instance, and
// those Warm opens to one: what a successor opens before it serves; the
// paced dials open the rest as the load asks (a stall before the handoff
// can leave hundreds in use, which on https would be as many handshakes
// at the cells at once).
const WarmMax = 32

// Pools is how many connections the router uses to each cell instance
// (its intake's host:port), over all its event loops: those lent out to
// calls and those idle that served one within warmRecent.
func (r *Router) Pools() map[string]int {
	out := map[string]int{}
	for _, lp := range r.eng.loopList() {
		own := map[string]int{}
		if _, ok := onLoop(lp, func() (int64, bool) {
			now := lp.e.now()
			for ep, p := range lp.pools {
				if ep.u.retired.Load() {
					continue
				}
				n := p.open - len(p.idle)
				for _, uc := range p.idle {
					if now-(uc.t.at-lp.upIdles.d) < int64(warmRecent) {
						n++
					}
				}
				if n > 0 {
					own[ep.addr] += n
				}
			}
			return 0, true
		}); ok {
			for addr, n := range own {
				out[addr] = min(out[addr]+n, WarmMax)
			}
		}
	}
	return out
}

// Warm opens connections to the cell instances of the current map, up to
// want (host:port → connections, as Pools reports them, at most WarmMax,
// less those the router holds already), warmParallel at a time, each
// joining the pool of the event loop it is enrolled on (the loops take
// turns); it returns how many it opened, once every dial ended or ctx
// ended. Instances out of rotation and addresses not in the map are
// skipped; a dial that fails is not tried again (the load opens what is
// missing, as without warming).
func (r *Router) Warm(ctx context.Context, want map[string]int) int {
	t := r.table()
	if t == nil || len(want) == 0 || !r.eng.started.Load() {
		return 0
	}
	held := r.Pools()
	now := time.Now().UnixNano()
	var eps []*endpoint
	for _, u := range t.byID {
		for _, ep := range u.eps {
			if ep.ejected(now) {
				continue
			}
			for range min(want[ep.addr], WarmMax) - held[ep.addr] {
				eps = append(eps, ep)
			}
		}
	}
	var opened atomic.Int64
	sem := make(chan struct{}, warmParallel)
	var wg sync.WaitGroup
	for _, ep := range eps {
		select {
		case <-ctx.Done():
		case sem <- struct{}{}:
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			c, tc, err := r.dialCell(ep)
			if err != nil {
				return
			}
			uc := &upconn{tls: tc}
			uc.t.owner = uc
			if _, err := r.eng.cli.EnrollContext(c, warmConn{uc: uc, ep: ep}); err == nil {
				opened.Add(1)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	case <-r.eng.stopped: // an enrolment may never return then
	}
	return int(opened.Load())
}

// warmConn is the context of a connection Warm opened until its loop's
// OnOpen gives it the pool of that loop.
type warmConn struct {
	uc *upconn
	ep *endpoint
}
