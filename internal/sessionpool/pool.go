// Package sessionpool keeps a bounded set of pre-established sessions to a
// scarce external system and lends them out one borrower at a time.
//
// Guarantees:
//   - Never more than Size sessions exist, counting those being dialled,
//     heartbeated or retired; when Size shrinks, idle sessions close first
//     and busy ones as they come back.
//   - Borrow hands a session to exactly one borrower, waiting in FIFO order
//     behind earlier borrowers, for at most BorrowTimeout (then
//     ErrPoolExhausted) or until ctx is done (then ctx's error). It never
//     waits unboundedly.
//   - A session returned broken is closed and replaced in the background,
//     with exponential backoff and jitter while dials fail. The pool starts
//     even when the far side is down and fills as soon as it can.
//   - Idle sessions are heartbeated (so firewalls do not cut them) and
//     sessions older than MaxLifetime are replaced one at a time.
package sessionpool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cellkit/cellkit/internal/api"
)

var (
	// ErrPoolExhausted means no session became free within the borrow
	// deadline.
	ErrPoolExhausted = errors.New("session pool exhausted")
	// ErrClosed means the pool was closed.
	ErrClosed = errors.New("session pool closed")
)

// Conn is one session to the far side.
type Conn interface {
	// Heartbeat proves the session alive within ctx; an error means broken.
	Heartbeat(ctx context.Context) error
	Close() error
}

// Checker is implemented by connections that can tell, without a round
// trip, that they are dead (the far side closed them). The pool asks on
// borrow and on return.
type Checker interface {
	Alive() bool
}

// Dialer opens a new session.
type Dialer[C Conn] func(ctx context.Context) (C, error)

// Config tunes a pool. Zero values mean the defaults in brackets (see
// DefaultConfig).
type Config struct {
	// Name labels the pool in logs (the agency name).
	Name string
	// Size is the number of sessions to keep (the cell's quota); 0 keeps
	// none and every Borrow fails after BorrowTimeout.
	Size int
	// BorrowTimeout bounds how long Borrow waits for a free session [1s].
	BorrowTimeout time.Duration
	// DialTimeout bounds one dial [5s].
	DialTimeout time.Duration
	// HeartbeatIdle is how long a session may sit idle before it is
	// heartbeated [30s]; negative disables heartbeats.
	HeartbeatIdle time.Duration
	// HeartbeatTimeout bounds one heartbeat [2s].
	HeartbeatTimeout time.Duration
	// MaxLifetime retires sessions older than this, one at a time [none:
	// sessions live until they break].
	MaxLifetime time.Duration
	// BackoffBase and BackoffMax shape the wait between failed dials
	// (doubling from base up to max, half of it random) [100ms, 10s].
	BackoffBase, BackoffMax time.Duration
	// CheckInterval is how often the maintainer looks for idle and old
	// sessions [a quarter of the smaller of HeartbeatIdle and MaxLifetime,
	// within [10ms, 1s]].
	CheckInterval time.Duration
}

// DefaultConfig returns the defaults. CheckInterval is left zero: it
// follows HeartbeatIdle and MaxLifetime.
func DefaultConfig() Config {
	return Config{
		BorrowTimeout: time.Second, DialTimeout: 5 * time.Second,
		HeartbeatIdle: 30 * time.Second, HeartbeatTimeout: 2 * time.Second,
		BackoffBase: 100 * time.Millisecond, BackoffMax: 10 * time.Second,
	}
}

// withDefaults fills the zero fields of c.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.BorrowTimeout <= 0 {
		c.BorrowTimeout = d.BorrowTimeout
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = d.DialTimeout
	}
	if c.HeartbeatIdle == 0 {
		c.HeartbeatIdle = d.HeartbeatIdle
	}
	if c.HeartbeatTimeout <= 0 {
		c.HeartbeatTimeout = d.HeartbeatTimeout
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = d.BackoffBase
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = d.BackoffMax
	}
	if c.CheckInterval <= 0 {
		d := time.Second
		if c.HeartbeatIdle > 0 {
			d = min(d, c.HeartbeatIdle/4)
		}
		if c.MaxLifetime > 0 {
			d = min(d, c.MaxLifetime/4)
		}
		c.CheckInterval = max(d, 10*time.Millisecond)
	}
	return c
}

// Options carry a pool's collaborators.
type Options[C Conn] struct {
	// Dial opens a new session. Required.
	Dial Dialer[C]
	// Logger receives one line per broken session and dial failure wave.
	// Nil means none.
	Logger *slog.Logger
	// Metrics receives the pool's metrics, labelled agency=Config.Name; nil
	// records none. Build it with NewMetrics once per process and share it
	// between pools.
	Metrics *Metrics
	// Now is the clock for every idle, age and backoff decision; tests move
	// it and call Check. Nil means time.Now.
	Now func() time.Time
}

// withDefaults fills the nil collaborators that have a default: Logger
// (none) and Now (time.Now).
func (o Options[C]) withDefaults() Options[C] {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Session is a borrowed session. It belongs to one borrower until Return.
type Session[C Conn] struct {
	conn     C
	id       uint64
	created  time.Time
	lastUsed time.Time
	uses     int
}

// Conn is the session's connection, for the borrower's exclusive use.
func (s *Session[C]) Conn() C { return s.conn }

// ID identifies the session (unique within the pool), for tests and logs.
func (s *Session[C]) ID() uint64 { return s.id }

// Pool is a bounded pool of sessions.
type Pool[C Conn] struct {
	dial    Dialer[C]
	cfg     Config
	log     *slog.Logger
	now     func() time.Time
	metrics *Metrics

	mu       sync.Mutex
	size     int
	idle     []*Session[C] // FIFO: the least recently used first, so all stay warm
	inUse    int
	pending  int // being dialled
	checking int // being heartbeated
	retiring int // closing for age, counted until closed
	closing  int // closing for any other reason, counted until closed
	waiters  []*waiter[C]
	nextID   uint64
	failures int       // consecutive failed dials
	dialAt   time.Time // no dial before this (backoff)
	closed   bool
	stats    Stats

	kick chan struct{}
	stop chan struct{}
	wg   sync.WaitGroup
}

type waiter[C Conn] struct {
	ch    chan *Session[C] // cap 1: a hand-off never blocks
	since time.Time
}

// Stats is a snapshot of a pool: the document a cell's admin status shows
// for each agency.
type Stats = api.PoolStats

// New starts a pool: it dials Size sessions concurrently in the background
// and returns at once, whether or not the far side answers. Close stops it.
func New[C Conn](cfg Config, opts Options[C]) (*Pool[C], error) {
	if opts.Dial == nil {
		return nil, errors.New("session pool: no dialer")
	}
	cfg, opts = cfg.withDefaults(), opts.withDefaults()
	p := &Pool[C]{
		dial:    opts.Dial,
		cfg:     cfg,
		log:     opts.Logger.With("pool", cfg.Name),
		now:     opts.Now,
		metrics: opts.Metrics,
		size:    max(cfg.Size, 0),
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
	}
	p.metrics.add(cfg.Name, p.Stats)
	p.mu.Lock()
	p.fillLocked()
	p.mu.Unlock()
	p.wg.Add(1)
	go p.maintain()
	return p, nil
}

// Borrow returns a session for exclusive use. Every successful Borrow must
// be followed by exactly one Return.
func (p *Pool[C]) Borrow(ctx context.Context) (*Session[C], error) {
	start := p.now()
	deadline := time.Now().Add(p.cfg.BorrowTimeout)
	for {
		s, err := p.borrowOnce(ctx, start, deadline)
		if err != nil || p.alive(s) {
			return s, err
		}
		p.Return(s, false) // dead on arrival: replace it and try the next
	}
}

func (p *Pool[C]) alive(s *Session[C]) bool {
	c, ok := any(s.conn).(Checker)
	return !ok || c.Alive()
}

func (p *Pool[C]) borrowOnce(ctx context.Context, start, deadline time.Time) (*Session[C], error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	if len(p.waiters) == 0 && len(p.idle) > 0 {
		s := p.idle[0]
		p.idle = p.idle[1:]
		p.lendLocked(s)
		p.mu.Unlock()
		p.metrics.observeWait(p.cfg.Name, 0)
		return s, nil
	}
	w := &waiter[C]{ch: make(chan *Session[C], 1), since: start}
	p.waiters = append(p.waiters, w)
	p.mu.Unlock()

	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var err error
	select {
	case s := <-w.ch:
		p.metrics.observeWait(p.cfg.Name, p.now().Sub(start))
		if s == nil {
			return nil, ErrClosed
		}
		return s, nil
	case <-timer.C:
		err = ErrPoolExhausted
	case <-ctx.Done():
		err = ctx.Err()
	case <-p.stop:
		err = ErrClosed
	}
	p.mu.Lock()
	removed := p.removeWaiterLocked(w)
	if errors.Is(err, ErrPoolExhausted) {
		p.stats.Exhausted++
	}
	p.mu.Unlock()
	if !removed {
		// A session was handed over just as we gave up: take it after all
		// rather than lose the race twice.
		if s := <-w.ch; s != nil {
			p.metrics.observeWait(p.cfg.Name, p.now().Sub(start))
			return s, nil
		}
		return nil, ErrClosed
	}
	p.metrics.observeWait(p.cfg.Name, p.now().Sub(start))
	if errors.Is(err, ErrPoolExhausted) {
		return nil, fmt.Errorf("%w: no %s session free within %v", ErrPoolExhausted, p.cfg.Name, p.cfg.BorrowTimeout)
	}
	return nil, err
}

func (p *Pool[C]) removeWaiterLocked(w *waiter[C]) bool {
	for i, x := range p.waiters {
		if x == w {
			p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
			return true
		}
	}
	return false
}

// lendLocked records that s goes to a borrower.
func (p *Pool[C]) lendLocked(s *Session[C]) {
	p.inUse++
	p.stats.Borrows++
	if s.uses > 0 {
		p.stats.Reused++
	}
	s.uses++
}

// Return gives a session back. ok=false means the borrower saw it break (an
// I/O error, a garbled frame, a timeout mid-call): it is closed and replaced.
func (p *Pool[C]) Return(s *Session[C], ok bool) {
	p.mu.Lock()
	p.inUse--
	s.lastUsed = p.now()
	switch {
	case !ok || !p.alive(s):
		p.stats.Broken++
		p.closeLocked(s, "broken")
	case p.closed || p.liveLocked() >= p.size:
		p.stats.Retired++
		p.closeLocked(s, "")
	case p.cfg.MaxLifetime > 0 && p.now().Sub(s.created) >= p.cfg.MaxLifetime && p.retiring == 0:
		p.retireLocked(s)
	default:
		p.offerLocked(s)
	}
	p.mu.Unlock()
}

// offerLocked gives an available session to the first waiter, or keeps it
// idle.
func (p *Pool[C]) offerLocked(s *Session[C]) {
	if len(p.waiters) > 0 {
		w := p.waiters[0]
		p.waiters = p.waiters[1:]
		p.lendLocked(s)
		w.ch <- s
		return
	}
	p.idle = append(p.idle, s)
}

// closeLocked closes a session that is no longer counted anywhere else. It
// stays counted (as closing) until its Close returns, and only then is a
// replacement dialled: a connection's Close may wait for the far side to
// acknowledge it, and an agency that counts sessions must never see one more
// than the quota.
func (p *Pool[C]) closeLocked(s *Session[C], why string) {
	if why != "" {
		p.log.Debug("closing session", "session", s.id, "reason", why)
	}
	if p.closed {
		_ = s.conn.Close() // nobody waits for stragglers after Close
		return
	}
	p.closeAsync(s, &p.closing)
}

// retireLocked replaces an old session, one at a time.
func (p *Pool[C]) retireLocked(s *Session[C]) {
	p.stats.Retired++
	p.closeAsync(s, &p.retiring)
}

// closeAsync closes s in the background. *counter (closing or retiring)
// counts it against Size until its Close returns; then a replacement is
// dialled.
func (p *Pool[C]) closeAsync(s *Session[C], counter *int) {
	*counter++
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_ = s.conn.Close() // a session given up: its replacement is what matters
		p.mu.Lock()
		*counter--
		p.fillLocked()
		p.mu.Unlock()
	}()
}

// Resize changes the number of sessions to keep: growing dials at once;
// shrinking closes idle sessions now and busy ones when they return.
func (p *Pool[C]) Resize(n int) {
	n = max(n, 0)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || n == p.size {
		return
	}
	p.log.Info("resizing session pool", "from", p.size, "to", n)
	p.size = n
	// The excess is of the sessions kept: one closed here stays counted as
	// closing until its Close returns (no dial replaces it before), and
	// taking those for sessions still to close closed every idle one.
	for p.liveLocked() > p.size && len(p.idle) > 0 {
		s := p.idle[len(p.idle)-1] // the most recently used: others are older and warmer
		p.idle = p.idle[:len(p.idle)-1]
		p.stats.Retired++
		p.closeLocked(s, "")
	}
	p.fillLocked()
}

// Stats returns a snapshot.
func (p *Pool[C]) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.stats
	st.Size = p.size
	st.Idle = len(p.idle)
	st.InUse = p.inUse
	st.Checking = p.checking
	st.Dialing = p.pending
	st.Waiters = len(p.waiters)
	st.Open = len(p.idle) + p.inUse + p.checking + p.retiring + p.closing
	return st
}

// Close stops the pool: waiting borrowers get ErrClosed, idle sessions are
// closed now and lent ones when they are returned. It waits for the pool's
// goroutines, so call it after the borrowers are done.
func (p *Pool[C]) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.stop)
	// Closes started before this point finish in their goroutines (waited
	// for below); from here on closeLocked closes synchronously.
	for _, w := range p.waiters {
		close(w.ch)
	}
	p.waiters = nil
	for _, s := range p.idle {
		p.closeLocked(s, "")
	}
	p.idle = nil
	p.mu.Unlock()
	p.wg.Wait()
	p.metrics.remove(p.cfg.Name)
	return nil
}
