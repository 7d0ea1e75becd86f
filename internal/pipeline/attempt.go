package pipeline

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/cellkit/cellkit/internal/agency"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/queue"
	"golang.org/x/sync/errgroup"
)

// attempt runs the pipeline for rec, journaled as in flight, with a panic
// recovered as a failure that dead-letters it.
func (p *Pipeline) attempt(ctx context.Context, rec *inquiry.Record, service *time.Duration) (res inquiry.Result, f *failure) {
	p.journal.Begin(rec.ID)
	defer p.journal.End(rec.ID)
	p.attempting.Store(rec.ID, rec.UserID)
	defer p.attempting.Delete(rec.ID)
	defer func() {
		if r := recover(); r != nil {
			res, f = inquiry.Result{}, p.panicked("pipeline", rec.ID, r)
		}
	}()
	return p.run(ctx, rec, service)
}

// keepAlive tells the server the message is in progress every third of the
// ack wait, until stopped (stop may be called more than once).
func (p *Pipeline) keepAlive(m *queue.Delivery) (stop func()) {
	every := p.q.AckWait() / 3
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				m.InProgress()
			}
		}
	}()
	return sync.OnceFunc(func() { close(done); wg.Wait() })
}

// run computes the result: every agency and CSS at once (scores kept from
// an earlier attempt are not asked again), then core banking. It sets
// *service to the slowest call plus core banking. One piece: the steps
// share the scores being gathered, the group's context and the service
// time, and core banking needs the decision of them all.
func (p *Pipeline) run(ctx context.Context, rec *inquiry.Record, service *time.Duration) (inquiry.Result, *failure) {
	var mu sync.Mutex
	var slowest time.Duration // the slowest call, gate waits excluded
	served := func(d time.Duration) {
		mu.Lock()
		slowest = max(slowest, d)
		mu.Unlock()
	}
	defer func() { *service += slowest }()
	scores := maps.Clone(rec.Scores)
	if scores == nil {
		scores = map[string]int{}
	}
	known := maps.Clone(scores)
	have := func(name string) bool { _, ok := known[name]; return ok }
	put := func(name string, s int) {
		mu.Lock()
		scores[name] = s
		mu.Unlock()
	}
	g, gctx := errgroup.WithContext(ctx)
	key := inquiry.AgencyKey(rec.UserID)
	// step runs f on the group, under its guard, timed.
	step := func(name string, f func() error) {
		g.Go(func() error {
			return p.guard(name, rec.ID, func() error {
				began := p.now()
				defer func() { p.m.steps.WithLabelValues(name).Observe(p.now().Sub(began).Seconds()) }()
				return f()
			})
		})
	}
	for _, a := range p.agencies {
		if have(a.Name) {
			continue
		}
		step(a.Name, func() error {
			gt := p.gates[a.Name]
			wctx, cancelWait := context.WithTimeout(gctx, p.cfg.GateWait)
			err := gt.acquire(wctx, rec.Priority == inquiry.High)
			cancelWait()
			if err != nil {
				return &failure{kind: kindBusy, reason: fmt.Sprintf("%s: no session free within %v", a.Name, p.cfg.GateWait), retry: true}
			}
			sctx, cancel := context.WithTimeout(gctx, p.cfg.StepTimeout)
			defer cancel()
			called := p.now()
			gt.began(called)
			// Deferred: the place is given back even if the call panics.
			defer func() {
				took := p.now().Sub(called)
				gt.ended(called, took)
				gt.release()
				served(took)
			}()
			faultHook(rec.UserID, a.Name)
			res, err := a.Client.Inquire(sctx, key)
			if err != nil {
				if errors.Is(err, agency.ErrPoolExhausted) {
					p.countUnreachable(a)
				}
				return agencyFailure(a.Name, err)
			}
			put(a.Name, res.Score)
			return nil
		})
	}
	if !have("css") {
		step("css", func() error {
			began := p.now()
			sctx, cancel := context.WithTimeout(gctx, p.cfg.StepTimeout)
			defer cancel()
			s, err := p.css.Score(sctx, rec.UserID)
			served(p.now().Sub(began))
			if err != nil {
				return &failure{kind: kindCSS, reason: "css: " + err.Error()}
			}
			put("css", s)
			return nil
		})
	}
	err := g.Wait()
	rec.Scores = scores // partial scores survive a failed attempt
	if err != nil {
		var f *failure
		if !errors.As(err, &f) {
			f = &failure{kind: kindInternal, reason: err.Error(), retry: true}
		}
		return inquiry.Result{}, f
	}
	var res inquiry.Result
	if err := p.guard("scoring", rec.ID, func() error {
		rate, limit := inquiry.Decide(scores, rec.Amount)
		res = inquiry.Result{Scores: maps.Clone(scores), RateBps: rate, Limit: limit}
		return nil
	}); err != nil {
		return inquiry.Result{}, err.(*failure)
	}
	var ref string
	err = p.guard("core_banking", rec.ID, func() error {
		began := p.now()
		sctx, cancel := context.WithTimeout(ctx, p.cfg.StepTimeout)
		defer cancel()
		defer func() {
			p.m.steps.WithLabelValues("core_banking").Observe(p.now().Sub(began).Seconds())
			*service += p.now().Sub(began)
		}()
		var err error
		ref, err = p.core.Register(sctx, *rec, res)
		if err != nil {
			return &failure{kind: kindCoreBanking, reason: "core banking: " + err.Error(), retry: true}
		}
		return nil
	})
	if err != nil {
		return inquiry.Result{}, err.(*failure)
	}
	res.CoreRef = ref
	return res, nil
}

// countUnreachable records an exhausted pool as a failure in the agency's
// breaker. The agency client does not (a pool can run dry from its callers'
// own excess), but behind the gate the pipeline never asks for more sessions
// than the pool holds: an exhausted pool means its sessions broke and cannot
// be redialled, that is the agency is down, and the breaker must open so
// that inquiries fail at once instead of after the borrow timeout.
func (p *Pipeline) countUnreachable(a Agency) {
	b, ok := a.Client.(BreakerOwner)
	if !ok {
		return
	}
	if permit, err := b.Breaker().Acquire(); err == nil {
		permit.Done(true, 0)
	}
}
