package router

import (
	"time"
)

// A cell may run as several instances (the map lists their intakes); the
// router spreads the cell's calls over those in rotation and takes one
// that fails out of it for a while:
//
//   - Choice: the power of two choices on each loop: two instances at
//     random, the one with fewer calls outstanding on this loop (lent
//     connections and waiting requests). No state is shared between
//     loops for it.
//   - Ejection: EjectAfter consecutive failed calls at an instance (no
//     connection, a timeout, an unreadable answer, or a 5xx: 503 when the
//     instance cannot reach its queue included; not
//     the cell's own load shedding, a 503 with Cellkit-Overloaded) take it
//     out of rotation for EjectFor. When it comes back, it takes one call
//     at a time on each loop until one succeeds, which puts its count back
//     to zero; one more failure takes it out again. When
//     every instance is ejected, all are chosen from (a cell with no
//     instance to try would only fail faster).
//   - Failover: a request that never reached an instance (its connection
//     could not be opened), or that an instance shed (503 with
//     Cellkit-Overloaded: it took nothing), goes to another instance in
//     rotation at once, once. A shed then costs a cell that sheds on
//     every instance two intake calls per refused request. A
//     request that may have been delivered is not sent again, unless it is
//     idempotent (GET, HEAD, an Idempotency-Key) and its kept-alive
//     connection closed before a byte of the answer came (the rule for
//     one instance too).
//
// So an instance that refuses connections costs its cell's users nothing
// but a connection attempt (and is out after EjectAfter of them); one that
// is unreachable costs at most DialTimeout to the requests that try it
// before it is ejected; one that hangs costs the requests in flight there
// a 504 after Timeout.
//
// The cell's breaker counts a failed call only when it tells of the cell:
// its only instance, or none other in rotation (cellWide). One bad
// instance of three is ejection's business; when every instance fails
// (the cell's queue is down), each is ejected after EjectAfter failures
// and the failures after that open the breaker.

// pick chooses the instance of u a call goes to, not avoid if another is
// in rotation.
func (lp *loop) pick(u *upstream, avoid *endpoint) *endpoint {
	eps := u.eps
	if len(eps) == 1 {
		return eps[0]
	}
	now := time.Now().UnixNano()
	n := 0
	for _, ep := range eps {
		if ep != avoid && lp.inRotation(ep, now) {
			n++
		}
	}
	in := func(ep *endpoint) bool { return ep != avoid && lp.inRotation(ep, now) }
	if n == 0 {
		// None in rotation: every one but avoid and those the health
		// checks found hung (a call there would wait out the timeout),
		// else every one but avoid, or avoid itself.
		in = func(ep *endpoint) bool { return ep != avoid && !ep.hung.Load() }
		for _, ep := range eps {
			if in(ep) {
				n++
			}
		}
		if n == 0 {
			in = func(ep *endpoint) bool { return ep != avoid }
			n = len(eps) - 1
			if avoid == nil {
				n = len(eps)
			}
		}
		if n == 0 {
			return eps[0]
		}
	}
	a, b := lp.random(n), lp.random(n)
	if n > 1 {
		for b == a {
			b = lp.random(n)
		}
	}
	var first, second *endpoint
	for i, k := 0, 0; i < len(eps); i++ {
		if !in(eps[i]) {
			continue
		}
		if k == a {
			first = eps[i]
		}
		if k == b {
			second = eps[i]
		}
		k++
	}
	if lp.outstanding(second) < lp.outstanding(first) {
		return second
	}
	return first
}

// inRotation reports whether ep may take a call on this loop: not
// ejected, and, back from an ejection without a success yet, not already
// trying a call here (one probe at a time per loop: a slow failure would
// otherwise draw every call made meanwhile, its outstanding count being
// the lowest).
func (lp *loop) inRotation(ep *endpoint, now int64) bool {
	if ep.ejected(now) {
		return false
	}
	return int(ep.fails.Load()) < lp.e.r.cfg.Cell.EjectAfter || lp.outstanding(ep) == 0
}

// random is a number in [0, n) from the loop's xorshift generator.
func (lp *loop) random(n int) int {
	x := lp.rnd
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	lp.rnd = x
	return int(x % uint64(n))
}

// otherInRotation reports whether ep's cell has another instance in
// rotation.
func otherInRotation(ep *endpoint) bool {
	return ep != nil && !cellWide(ep)
}

// cellWide reports whether a failed call at ep tells of the cell, for its
// breaker: ep is its only instance (or none was chosen), or no other
// instance of it is in rotation.
func cellWide(ep *endpoint) bool {
	if ep == nil || len(ep.u.eps) < 2 {
		return true
	}
	now := time.Now().UnixNano()
	for _, o := range ep.u.eps {
		if o != ep && !o.ejected(now) {
			return false
		}
	}
	return true
}

// endpointFailed counts a failed call at ep and ejects it at the
// threshold.
func (r *Router) endpointFailed(ep *endpoint) {
	if len(ep.u.eps) < 2 {
		return // one instance: the cell's breaker is what acts
	}
	n := ep.fails.Add(1)
	if int(n) < r.cfg.Cell.EjectAfter {
		return
	}
	now := time.Now()
	if ep.ejected(now.UnixNano()) {
		return
	}
	ep.ejectedUntil.Store(now.Add(r.cfg.Cell.EjectFor).UnixNano())
	ep.u.m.ejections.Inc()
	r.log.Warn("cell instance out of rotation", "cell", ep.u.cell, "intake", ep.intake,
		"failures", n, "for", r.cfg.Cell.EjectFor)
}

// callTimedOut logs a call to instance ep that outlived Cell.Timeout (its
// client is answered 504): how long it waited, whether any of the answer
// had come, and the call's number on its connection (1: a new one; 0: it
// was never sent, no connection came in time). At
// most a line a second per instance, with the count since the last: a
// hung instance is found by the health checks, and its calls cut, long
// before many time out.
func (r *Router) callTimedOut(ep *endpoint, waited time.Duration, answering bool, call uint64) {
	n := ep.timeouts.Add(1)
	now := time.Now().UnixNano()
	last := ep.timeoutLog.Load()
	if now-last < int64(time.Second) || !ep.timeoutLog.CompareAndSwap(last, now) {
		return
	}
	ep.timeouts.Add(-n)
	r.log.Warn("call to a cell instance timed out: answered 504", "cell", ep.u.cell, "intake", ep.intake,
		"waited", waited.Round(time.Millisecond), "answer_begun", answering, "call_on_connection", call, "timeouts", n)
}
