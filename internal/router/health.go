package router

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/cellkit/cellkit/internal/api"
)

// Active health checks. A cell that hangs (a frozen process, a stuck
// runtime) accepts connections and reads nothing: without checks, every
// request sent to it waits the whole cell timeout, and the breaker's
// half-open trials are users' requests that wait it again. So the router
// checks every instance it routes to itself, as Envoy and HAProxy do:
//
//   - Every ProbeInterval, one GET of the intake's health path
//     (api.PathHealth) on a connection of the check's own (never one of
//     the loops'), within ProbeTimeout. An answer below 500 is healthy
//     (a cell too old to know the path answers 404, and is alive); a 5xx,
//     or a TLS handshake the instance refuses (it wants another
//     certificate, or the router does not trust its own), is an answer
//     that it cannot take work; no answer in time is a miss. A refused connection is a miss only
//     for an instance already down: a process that is not there costs a
//     call a refused dial (microseconds, then failover or the breaker), so
//     it needs no check, and counting it would keep a cell that starts
//     just after the router out until the next check.
//   - A check the router cannot make — no socket for it: the process at
//     its open-file limit, short of memory or of local ports — is
//     skipped, not missed: the router's own shortage says nothing of the
//     cell, and counting it took every cell's instances down and tripped
//     their breakers, to answer 503 after the files were back.
//   - probeFall misses in a row take the instance out of rotation (it is
//     down) until a healthy check; a miss is checked again at once, not
//     after the interval, so a hang is found within ProbeInterval +
//     probeFall × ProbeTimeout. A 5xx answer (the instance cannot reach
//     its queue, or its streams have no leader) also takes it out, but it
//     is not hung: its calls in flight are left to finish (they may be
//     waiting out an election), and it does not count toward tripping the
//     cell's breaker.
//   - The requests in flight at an instance found down are answered 504
//     at once, and those waiting for one of its connections 503: none
//     waits out the cell timeout after the hang is found.
//   - When every instance of a cell hangs (or is gone), the cell's breaker
//     trips: its users get 503 with Retry-After at once. When every one is
//     out but some answer that they cannot take work (waiting for their
//     streams' leader: an election), the calls go on to those and wait. The breaker's trials are the
//     checks (breaker.Options.ProbeTrials): no user's request is spent on
//     a trial. One the checks tripped closes at the first healthy check
//     of an instance, so a cell that thaws serves again at once (the check
//     in flight is answered as soon as the process runs); one that failed
//     calls opened closes after HalfOpenProbes healthy checks in a row
//     once OpenFor has passed.

// probeFall is how many misses in a row take an instance down.
const probeFall = 2

// checkResult is what one check found.
type checkResult uint8

const (
	healthy   checkResult = iota
	missed                // no answer in time
	refused               // no process listens: a miss only for an instance already down
	unhealthy             // a 5xx answer, a refused TLS handshake: alive, and cannot take work now
	skipped               // the router could not open a socket (shortOfResources): says nothing of the instance
)

// checks runs the health checks of the endpoints of the routing table's
// upstreams until stop: one goroutine per endpoint, started when it
// appears in a table and stopped when it leaves.
func (r *Router) checks(stop <-chan struct{}) {
	interval := r.cfg.Cell.ProbeInterval
	if interval <= 0 {
		return
	}
	running := map[*endpoint]context.CancelFunc{}
	var wg sync.WaitGroup
	defer func() {
		for _, cancel := range running {
			cancel()
		}
		wg.Wait()
	}()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		current := map[*endpoint]bool{}
		if t := r.table(); t != nil {
			for _, u := range t.byID {
				for _, ep := range u.eps {
					current[ep] = true
					if running[ep] == nil {
						ctx, cancel := context.WithCancel(context.Background())
						running[ep] = cancel
						wg.Go(func() { r.check(ctx, ep) })
					}
				}
			}
		}
		for ep, cancel := range running {
			if !current[ep] {
				cancel()
				delete(running, ep)
			}
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

// check checks ep until ctx ends.
func (r *Router) check(ctx context.Context, ep *endpoint) {
	l := r.cfg.Cell
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: l.ProbeTimeout, Control: unackedTimeout(l.UnackedTimeout)}).DialContext,
		TLSClientConfig:     ep.tls,
		TLSHandshakeTimeout: l.ProbeTimeout,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     10 * l.ProbeInterval,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: l.ProbeTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	scheme := "http"
	if ep.tls != nil {
		scheme = "https"
	}
	url := scheme + "://" + ep.addr + ep.prefix + api.PathHealth
	wait := time.NewTimer(0)
	defer wait.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wait.C:
		}
		v := r.probe(ctx, client, url, string(ep.host))
		if ctx.Err() != nil {
			return
		}
		r.probed(ep, v)
		if v != missed || ep.misses.Load() >= probeFall {
			wait.Reset(l.ProbeInterval)
		} else {
			wait.Reset(0) // a first miss is checked again at once
		}
	}
}

// probe makes one check: healthy is an answer below 500.
func (r *Router) probe(ctx context.Context, client *http.Client, url, host string) checkResult {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return missed
	}
	req.Host = host
	resp, err := client.Do(req)
	switch {
	case shortOfResources(err):
		return skipped
	case errors.Is(err, syscall.ECONNREFUSED):
		return refused
	case spokeTLS(err):
		// It answered, with a refusal of the handshake: alive, and
		// unable to take this router's calls. Not a hang, whose calls in
		// flight would be cut.
		return unhealthy
	case err != nil:
		return missed
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10)) // to keep the connection; the status decides
	resp.Body.Close()
	if resp.StatusCode >= 500 {
		return unhealthy
	}
	return healthy
}

// spokeTLS says whether err is the peer's answer to a TLS handshake: an
// alert it sent (a certificate it wants or refuses), or a certificate of
// its that this router does not trust. A process that answers that is
// alive.
func spokeTLS(err error) bool {
	var oerr *net.OpError
	var verr *tls.CertificateVerificationError
	return errors.As(err, &oerr) && oerr.Op == "remote error" || errors.As(err, &verr)
}

// probed records a check of ep: it takes ep down or brings it back, and
// trips or probes the cell's breaker.
func (r *Router) probed(ep *endpoint, v checkResult) {
	u := ep.u
	u.m.probed(v)
	switch {
	case v == skipped, v == refused && !ep.down.Load():
		return
	case v == healthy:
		ep.misses.Store(0)
		ep.hung.Store(false)
		if ep.down.Swap(false) {
			ep.fails.Store(0)
			r.log.Info("cell instance answers its health checks again: back in rotation", "cell", u.cell, "intake", ep.intake)
		}
	case ep.misses.Add(1) >= probeFall:
		// No answer (a hang, a process gone) is a hang: its calls in
		// flight are cut. An answer that it cannot take work (its queue
		// unreachable, its streams without a leader) leaves them be: they
		// may be waiting out an election.
		if v != unhealthy && !ep.hung.Swap(true) {
			r.downGen.Add(1)
		}
		if !ep.down.Swap(true) {
			if ep.ejectedUntil.Load() <= time.Now().UnixNano() {
				u.m.ejections.Inc() // not out already for failed calls
			}
			what := "misses its health checks: out of rotation, its calls in flight answered 504"
			if v == unhealthy {
				what = "answers its health checks that it cannot take work: out of rotation while another instance can"
			}
			r.log.Warn("cell instance "+what, "cell", u.cell, "intake", ep.intake, "misses", ep.misses.Load(), "timeout", r.cfg.Cell.ProbeTimeout)
		}
	}
	// A cell whose instances all hang, or are gone, gets fast 503s; one
	// of whose instances some answer that they cannot take work (waiting
	// for their streams' leader) still gets its calls, on those, which
	// wait.
	if u.allHung() {
		u.guard.Circuit().Trip()
		u.guard.Circuit().Probe(false)
		return
	}
	u.guard.Circuit().Probe(!u.allDown())
}

// allDown says whether the health checks found every instance of u down.
func (u *upstream) allDown() bool {
	for _, ep := range u.eps {
		if !ep.down.Load() {
			return false
		}
	}
	return true
}

// allHung says whether every instance of u is down for answering nothing.
func (u *upstream) allHung() bool {
	for _, ep := range u.eps {
		if !ep.hung.Load() {
			return false
		}
	}
	return true
}

// cutDown answers the calls of this loop in flight at an instance found
// down 504 (it may have taken them), and the requests waiting for one of
// its connections 503 (it never saw them); run on the loop when the
// router's downGen changed.
func (lp *loop) cutDown() {
	var calls []*upconn
	for t := lp.calls.head.next; t != &lp.calls.head; t = t.next {
		if uc := t.owner.(*upconn); uc.p.ep.hung.Load() {
			calls = append(calls, uc)
		}
	}
	for _, uc := range calls {
		uc.timedOut()
	}
	var waiting []*client
	for t := lp.waits.head.next; t != &lp.waits.head; t = t.next {
		if cl := t.owner.(*client); cl.ex.ep != nil && cl.ex.ep.hung.Load() {
			waiting = append(waiting, cl)
		}
	}
	for _, cl := range waiting {
		// Never sent: the cell did not see it, so 503 (as for a
		// connection that failed), not a timeout's 504.
		if cl.state == stBusy {
			lp.pool(cl.ex.ep).unwait(cl)
			lp.failed(cl, false)
		}
	}
}
