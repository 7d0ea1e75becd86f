package router

import (
	"bytes"
	"context"
	"strconv"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/apikey"
	"github.com/cellkit/cellkit/internal/breaker"
	"github.com/cellkit/cellkit/internal/guard"
	"github.com/cellkit/cellkit/internal/h1"
	"github.com/cellkit/cellkit/internal/route"
)

// The request chain: from an admitted head to the cell and back.

// exchange is one request's state through the chain.
type exchange struct {
	start    time.Time
	client   *apikey.Client
	ring     *keyring
	v        apikey.Verdict
	rid      []byte
	ridBuf   [64]byte
	cm       *cellMetrics
	cell     string
	kind     route.Kind
	cellID   []byte
	readSlot int // a read's: the slot its id holds (api.NoSlot: none)
	userID   []byte
	lane     []byte // the Cellkit-Priority the cell gets (new inquiries)
	slot     int
	version  int64
	u        *upstream
	ep       *endpoint // the instance the call went to
	redialed bool      // the call was moved to another instance once, undelivered
	permit   breaker.Permit
	admitted bool
	sentAt   time.Time
	attempts int // calls made to the cell for this request (a stale connection is retried once)
	retried  bool
	uc       *upconn
	// Edge dedupe (dedupe.go): the key this request is the first of, or
	// the first it waits for.
	leads     *inFlight
	follows   *inFlight
	dedupeKey dedupeKey
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
	kr := r.ring()
	client, res := kr.keys.Authenticate(h.Get(hdrAPIKey))
	switch res {
	case apikey.Missing:
		r.metrics.authFail.WithLabelValues("missing").Inc()
		lp.refuseHead(cl, &probMissingKey, 0, nil, true)
		return false
	case apikey.Unknown:
		r.metrics.authFail.WithLabelValues("unknown").Inc()
		lp.refuseHead(cl, &probUnknownKey, 0, nil, true)
		return false
	}
	ex.client, ex.ring = client, kr
	if h.ContentLength > int64(r.cfg.Server.MaxBodyBytes) {
		lp.tooLarge(cl, h.ContentLength-int64(len(cl.in)-cl.bodyOff))
		return false
	}
	ex.v = kr.limits.Take(client)
	if !ex.v.OK {
		r.metrics.limited.WithLabelValues(client.ID).Inc()
		lp.refuseHead(cl, &probRateLimit, ex.v.RetryAfter, nil, false)
		return false
	}
	kind, cellID := route.Classify(h.Method, h.Path)
	ex.kind, ex.cellID = kind, cellID
	switch kind {
	case route.NotFound:
		lp.refuseHead(cl, &probNotFound, 0, nil, false)
		return false
	case route.BadInquiry:
		lp.refuseHead(cl, &probBadInquiry, 0, nil, false)
		return false
	case route.BadMethod:
		lp.refuseHead(cl, &probBadMethod, 0, route.Allowed(h.Path), false)
		return false
	case route.Read:
		t := r.table()
		if t == nil {
			lp.refuseHead(cl, &probNoMap, time.Second, nil, false)
			return false
		}
		ex.readSlot = route.SlotOfRead(h.Path)
		if ex.u = t.readCell(ex); ex.u == nil {
			lp.refuseHead(cl, &probBadInquiry, 0, nil, false)
			return false
		}
		ex.version = t.m.Version()
	}
	return true
}

// readCell is the cell a read goes to: the owner of the slot its id
// holds, where the user's inquiries live now, else the cell its id names.
func (t *cellTable) readCell(ex *exchange) *upstream {
	if s := ex.readSlot; s != api.NoSlot && s < t.m.Slots() {
		if owner := t.m.Owner(s); owner != "" {
			return t.byID[owner]
		}
	}
	return t.byID[bstr(ex.cellID)]
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
	if ex.kind == route.Create {
		t := r.table()
		if t == nil {
			lp.answer(cl, &probNoMap, time.Second, nil)
			return
		}
		id, ok, priority := route.InquiryFields(cl.body)
		if !ok {
			lp.answer(cl, &probBadUser, 0, nil)
			return
		}
		if ex.lane, ok = ex.client.Lanes().Lane(priority); !ok {
			lp.answer(cl, &ex.ring.refusals[ex.client.Index()], 0, nil)
			return
		}
		ex.userID = id
		rt := t.m.Lookup(bstr(id))
		r.hot.Add(id, uint64(rt.Slot)) // the slot's low bits are the hash's
		t.rates.Add(rt.Slot)
		ex.slot = rt.Slot
		ex.u = t.byID[rt.Cell]
		if ex.u == nil {
			r.noCell.shed[guard.NoCell].Inc()
			lp.answer(cl, &probNoCell, time.Second, nil)
			return
		}
		ex.version = t.m.Version()
		if lp.lead(cl) {
			return // answered with the same inquiry's answer (dedupe.go)
		}
	}
	lp.call(cl)
}

// call sends the request through its cell's guard.
func (lp *loop) call(cl *client) {
	ex := &cl.ex
	u := ex.u
	ex.cell, ex.cm = u.cell, u.m
	permit, why := u.guard.Enter()
	if why != guard.Admitted {
		u.m.shed[why].Inc()
		p, after := &u.probs.bulkhead, u.guard.RetryAfter(why)
		switch {
		case why == guard.Breaker && u.allHung():
			// The health checks close the breaker as soon as the cell
			// answers them again: a short wait.
			p, after = &u.probs.down, time.Second
		case why == guard.Breaker:
			p = &u.probs.breaker
		}
		lp.answer(cl, p, after, nil)
		return
	}
	ex.permit, ex.admitted = permit, true
	ex.sentAt = time.Now()
	ex.attempts = 0
	lp.dispatch(cl)
}

// dispatch hands the request to a connection to one of its cell's
// instances, or queues it for one being dialled.
func (lp *loop) dispatch(cl *client) {
	lp.dispatchAvoiding(cl, nil)
}

// dispatchAvoiding is dispatch to an instance other than avoid if the cell
// has another in rotation.
func (lp *loop) dispatchAvoiding(cl *client, avoid *endpoint) {
	cl.ex.ep = lp.pick(cl.ex.u, avoid)
	p := lp.pool(cl.ex.ep)
	if uc := p.take(); uc != nil {
		uc.send(cl)
		return
	}
	p.waiters = append(p.waiters, cl)
	lp.waits.arm(&cl.wt, lp.e.now()-int64(time.Since(cl.ex.sentAt)))
	p.topUp()
}

// waitExpired: no connection to the cell within the call's timeout.
func (lp *loop) waitExpired(cl *client) {
	if cl.state != stBusy {
		return
	}
	lp.pool(cl.ex.ep).unwait(cl)
	lp.e.r.callTimedOut(cl.ex.ep, time.Since(cl.ex.sentAt), false, 0)
	lp.failed(cl, true)
}

// undelivered: no connection could be opened to the call's instance, so
// the cell never saw the request. It goes to another instance of the
// cell, once, if there is one; otherwise it fails.
func (lp *loop) undelivered(cl *client) {
	ex := &cl.ex
	if ex.redialed || len(ex.u.eps) < 2 {
		lp.failed(cl, false)
		return
	}
	ex.redialed = true
	lp.e.r.endpointFailed(ex.ep)
	lp.dispatchAvoiding(cl, ex.ep)
}

// ownShortage ends a call the router could not open a connection for,
// short of files or memory itself (shortOfResources): 503 with Retry-After, and, unlike
// failed, nothing held against the cell (no breaker failure, no ejection)
// and no Cellkit-Overloaded (another router may serve it).
func (lp *loop) ownShortage(cl *client) {
	ex := &cl.ex
	u := ex.u
	ex.uc = nil
	lp.leave(cl, false)
	u.m.connErr.Inc()
	lp.answer(cl, &u.probs.short, time.Second, nil)
}

// failed ends a call that got no answer: a timeout (504) or a connection
// that failed (503); both count against the cell.
func (lp *loop) failed(cl *client, timeout bool) {
	ex := &cl.ex
	u := ex.u
	ex.uc = nil
	lp.leave(cl, true)
	if ex.ep != nil {
		lp.e.r.endpointFailed(ex.ep)
	}
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
		// A failure at one instance of several, while another is in
		// rotation, is that instance's (ejection acts on it), not the
		// cell's: counted, it would open the breaker for every user of a
		// cell whose other instances serve.
		failed = failed && cellWide(ex.ep)
		ex.u.guard.Leave(ex.permit, failed, time.Since(ex.sentAt))
	}
}

// abandon: the client went away while its request was being answered.
func (lp *loop) abandon(cl *client) {
	ex := &cl.ex
	lp.unfollow(cl)
	lp.orphanLead(cl)
	cl.wt.stop()
	if ex.ep != nil {
		if p := lp.pools[ex.ep]; p != nil {
			p.unwait(cl)
		}
	}
	if uc := ex.uc; uc != nil {
		// The cell has the request: its answer will be read and dropped,
		// and the connection closed (finish).
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
	if shedByCell && !ex.redialed && otherInRotation(ex.ep) {
		// The instance refused before taking anything (its own shedder:
		// its pace, its queue connection); another instance of the cell
		// may take the request. Once, as for a request never delivered.
		ex.redialed = true
		ex.uc = nil
		u.m.shedRetried.Inc()
		lp.dispatchAvoiding(cl, ex.ep)
		return
	}
	lp.leave(cl, status >= 500 && !shedByCell)
	ex.uc = nil
	if status >= 500 && !shedByCell {
		lp.e.r.endpointFailed(ex.ep)
	} else {
		ex.ep.fails.Store(0)
	}
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
	lp.settleAnswered(cl, resp, body)
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
	if ex.kind == route.Create {
		rt := t.m.Lookup(bstr(ex.userID))
		u, ex.slot = t.byID[rt.Cell], rt.Slot
	} else {
		u = t.readCell(ex)
	}
	if u == nil {
		r.noCell.shed[guard.NoCell].Inc()
		lp.answer(cl, &probNoCell, time.Second, nil)
		return
	}
	ex.u, ex.version = u, t.m.Version()
	lp.call(cl)
}

// answer sends one of the router's own problem answers.
func (lp *loop) answer(cl *client, p *prob, retry time.Duration, allow []byte) {
	lp.settleProblem(cl, p, retry, allow)
	lp.out = lp.problemAnswer(lp.out[:0], cl, p, retry, allow)
	lp.write(cl, p.status)
}

// requestIDFrom is the client's X-Request-Id if it is a sane one, else a
// new one.
func (r *Router) requestIDFrom(h *h1.Request, buf *[64]byte) []byte {
	if v := h.Get(hdrRequestID); api.ValidRequestID(v) {
		return append(buf[:0], v...)
	}
	return r.newRequestID(buf)
}

// newRequestID is this process's random prefix and a sequence number.
func (r *Router) newRequestID(buf *[64]byte) []byte {
	b := append(buf[:0], r.ridPrefix[:]...)
	return strconv.AppendUint(b, r.ridSeq.Add(1), 36)
}
