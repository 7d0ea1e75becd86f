package sessionpool

import (
	"context"
	"time"

	"github.com/cellkit/cellkit/internal/backoff"
)

// openLocked counts every session that exists or is being dialled: what
// the agency may see, so what a dial is weighed against.
func (p *Pool[C]) openLocked() int {
	return len(p.idle) + p.inUse + p.pending + p.checking + p.retiring + p.closing
}

// liveLocked counts the sessions the pool keeps: idle, lent out or out for
// a heartbeat. Whether to keep a session is weighed against these, not
// against the ones on their way out (closing, retiring): those are going
// whatever happens, and after a shrink, counting them closed sessions the
// pool needed.
func (p *Pool[C]) liveLocked() int {
	return len(p.idle) + p.inUse + p.checking
}

// fillLocked dials as many sessions as are missing, unless backing off.
func (p *Pool[C]) fillLocked() {
	if p.closed {
		return
	}
	missing := p.size - p.openLocked()
	if missing <= 0 || p.now().Before(p.dialAt) {
		return
	}
	if p.failures > 0 {
		// The far side was failing: probe with one dial, not a storm.
		if p.pending > 0 {
			return
		}
		missing = 1
	}
	for i := 0; i < missing; i++ {
		p.pending++
		p.wg.Add(1)
		go p.dialOne()
	}
}

func (p *Pool[C]) dialOne() {
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DialTimeout)
	go func() {
		select {
		case <-p.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	conn, err := p.dial(ctx)
	cancel()

	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending--
	if err != nil {
		p.stats.DialErrors++
		if !p.now().Before(p.dialAt) { // the first failure of a wave counts, not each dial of it
			p.failures++
			wait := backoff.Jittered(p.cfg.BackoffBase, p.cfg.BackoffMax, p.failures)
			p.dialAt = p.now().Add(wait)
			if p.failures == 1 || p.failures%10 == 0 {
				p.log.Warn("cannot open session", "failures", p.failures, "retry_in", wait.Round(time.Millisecond), "err", err)
			}
		}
		p.signal()
		return
	}
	recovered := p.failures > 0
	if recovered {
		p.log.Info("sessions open again", "after_failures", p.failures)
	}
	p.failures = 0
	p.dialAt = time.Time{}
	now := p.now()
	p.nextID++
	s := &Session[C]{conn: conn, id: p.nextID, created: now, lastUsed: now}
	p.stats.Created++
	if p.closed || p.liveLocked() >= p.size {
		p.stats.Retired++
		p.closeLocked(s, "")
		return
	}
	p.offerLocked(s)
	if recovered {
		p.fillLocked() // the probe got through: open the rest
	}
}

// signal wakes the maintainer.
func (p *Pool[C]) signal() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// maintain refills after backoff, heartbeats idle sessions and retires old
// ones, until Close.
func (p *Pool[C]) maintain() {
	defer p.wg.Done()
	timer := time.NewTimer(p.cfg.CheckInterval)
	defer timer.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-timer.C:
		case <-p.kick:
		}
		p.Check()
		// Wake for the next check, or sooner when a backoff ends.
		wait := p.cfg.CheckInterval
		p.mu.Lock()
		if !p.dialAt.IsZero() {
			wait = min(wait, max(p.dialAt.Sub(p.now()), time.Millisecond))
		}
		p.mu.Unlock()
		timer.Reset(wait)
	}
}

// Check runs one round of maintenance now: refill (unless backing off),
// heartbeat sessions idle for HeartbeatIdle, retire one session older than
// MaxLifetime. The pool calls it every CheckInterval; tests that move the
// clock call it directly.
func (p *Pool[C]) Check() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	now := p.now()
	keep := p.idle[:0]
	var probe, retire []*Session[C]
	for _, s := range p.idle {
		switch {
		case p.cfg.MaxLifetime > 0 && now.Sub(s.created) >= p.cfg.MaxLifetime && p.retiring+len(retire) == 0:
			retire = append(retire, s)
		case p.cfg.HeartbeatIdle > 0 && now.Sub(s.lastUsed) >= p.cfg.HeartbeatIdle:
			probe = append(probe, s)
		default:
			keep = append(keep, s)
		}
	}
	clear(p.idle[len(keep):])
	p.idle = keep
	for _, s := range retire {
		p.retireLocked(s)
	}
	for _, s := range probe {
		p.checking++
		p.stats.Heartbeats++
		p.wg.Add(1)
		go p.heartbeat(s)
	}
	p.fillLocked()
}

func (p *Pool[C]) heartbeat(s *Session[C]) {
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.HeartbeatTimeout)
	err := s.conn.Heartbeat(ctx)
	cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.checking--
	switch {
	case err != nil:
		p.stats.Broken++
		p.log.Info("heartbeat failed; replacing session", "session", s.id, "err", err)
		p.closeLocked(s, "")
	case p.closed || p.liveLocked() >= p.size:
		p.stats.Retired++
		p.closeLocked(s, "")
	default:
		s.lastUsed = p.now()
		p.offerLocked(s)
	}
}
