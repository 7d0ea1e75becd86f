package router

import (
	"context"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/panjf2000/gnet/v2"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/h1"
)

// Edge dedupe: a new inquiry with an Idempotency-Key while the same
// client's inquiry with that key and the same body is still in flight at
// this router is not sent to the cell again: it waits for the first and
// gets its answer (the cell's, or the router's own problem), with its own
// request id and rate-limit fields. The cell would answer it from its
// record anyway (its idempotency), after a second trip; a client that
// retries while the first try is slow is the one that sends it. A body
// that differs goes to the cell, which says the key was used for another
// body. At most one entry per request in flight: bounded by the
// connections.

// dedupeKey names an inquiry in flight: its client and key.
type dedupeKey struct{ client, key string }

// inFlight is the first request of a key and the ones waiting for it.
type inFlight struct {
	body      uint64 // the first request's body's hash
	followers []follower
}

// follower is a request waiting on its loop for the first's answer.
type follower struct {
	lp  *loop
	cl  *client
	seq uint64 // its request, to tell it from a later one on its connection
}

// dedupe holds the inquiries with a key in flight, router-wide: the two
// requests may come on connections of different loops.
type dedupe struct {
	mu sync.Mutex
	m  map[dedupeKey]*inFlight
}

// lead makes cl's request the first of its key, or a follower of the
// first: true when it must wait for the first's answer (it then does
// nothing more until it gets it).
func (lp *loop) lead(cl *client) (follows bool) {
	key := cl.head.Get(hdrIdempotencyKey)
	if len(key) == 0 || !api.ValidIdempotencyKey(string(key)) {
		return false
	}
	d := &lp.e.r.dedupe
	k := dedupeKey{client: cl.ex.client.ID, key: string(key)}
	h := xxhash.Sum64(cl.body)
	d.mu.Lock()
	defer d.mu.Unlock()
	if f := d.m[k]; f != nil {
		if f.body != h {
			return false // another body: the cell says what it thinks of it
		}
		f.followers = append(f.followers, follower{lp: lp, cl: cl, seq: cl.seq})
		cl.ex.follows = f
		return true
	}
	if d.m == nil {
		d.m = map[dedupeKey]*inFlight{}
	}
	f := &inFlight{body: h}
	d.m[k] = f
	cl.ex.leads, cl.ex.dedupeKey = f, k
	return false
}

// settle ends the key cl's request led, once its answer is known: each
// follower is answered the same on its own loop, by answer.
func (lp *loop) settle(cl *client, answer func(lp *loop, cl *client)) {
	ex := &cl.ex
	f := ex.leads
	if f == nil {
		return
	}
	ex.leads = nil
	d := &lp.e.r.dedupe
	d.mu.Lock()
	if d.m[ex.dedupeKey] == f {
		delete(d.m, ex.dedupeKey)
	}
	fs := f.followers
	f.followers = nil
	d.mu.Unlock()
	for _, fw := range fs {
		lp.e.r.metrics.deduped.Inc()
		fw.lp.el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			defer func() { fw.lp.e.panicked("dedupe", recover()) }()
			if fw.cl.state == stBusy && fw.cl.seq == fw.seq {
				fw.cl.ex.follows = nil
				answer(fw.lp, fw.cl)
			}
			return nil
		}))
	}
}

// settleAnswered settles with a cell's answer: copied, for the followers'
// loops read it after this one has reused its buffers.
func (lp *loop) settleAnswered(cl *client, resp *h1.Response, body []byte) {
	if cl.ex.leads == nil {
		return
	}
	r := &h1.Response{Status: resp.Status, Minor: resp.Minor, ContentLength: resp.ContentLength, Fields: make([]h1.Field, len(resp.Fields))}
	for i, f := range resp.Fields {
		r.Fields[i] = h1.Field{Name: append([]byte(nil), f.Name...), Value: append([]byte(nil), f.Value...)}
	}
	b := append([]byte(nil), body...)
	cell, cm := cl.ex.cell, cl.ex.cm
	lp.settle(cl, func(flp *loop, fcl *client) {
		fcl.ex.cell, fcl.ex.cm = cell, cm
		flp.out = flp.proxyAnswer(flp.out[:0], fcl, r, b)
		flp.write(fcl, r.Status)
	})
}

// settleProblem settles with one of the router's own answers.
func (lp *loop) settleProblem(cl *client, p *prob, retry time.Duration, allow []byte) {
	if cl.ex.leads == nil {
		return
	}
	cell, cm := cl.ex.cell, cl.ex.cm
	lp.settle(cl, func(flp *loop, fcl *client) {
		fcl.ex.cell, fcl.ex.cm = cell, cm
		flp.answer(fcl, p, retry, allow)
	})
}

// unfollow: a follower's client went away before the first was answered.
func (lp *loop) unfollow(cl *client) {
	f := cl.ex.follows
	if f == nil {
		return
	}
	cl.ex.follows = nil
	d := &lp.e.r.dedupe
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, fw := range f.followers {
		if fw.cl == cl {
			f.followers = append(f.followers[:i], f.followers[i+1:]...)
			return
		}
	}
}

// orphan: the first's client went away while the cell has its request;
// its answer will be dropped, so its followers go to the cell themselves
// (the cell answers them from its record), each on its own loop.
func (lp *loop) orphanLead(cl *client) {
	lp.settle(cl, func(flp *loop, fcl *client) { flp.call(fcl) })
}
