// Package agency is the client a cell uses to call one credit agency: a
// bounded pool of pre-established TCP sessions, guarded by a circuit breaker
// and an adaptive concurrency limit.
//
// Guarantees: a call never waits unboundedly. It is refused at once while the
// breaker is open (ErrCircuitOpen) or when the adaptive limit is reached
// (ErrLimited); it waits at most the pool's borrow deadline for a session
// (ErrPoolExhausted) and at most CallTimeout for the answer. The limit never
// exceeds the pool size, so admitted calls almost never queue for sessions:
// when the agency slows down, excess calls are rejected, not queued.
package agency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"

	"github.com/cellkit/cellkit/internal/breaker"
	"github.com/cellkit/cellkit/internal/sessionpool"
	"github.com/cellkit/cellkit/internal/telegram"
)

// Typed rejections, so that a cell can answer its callers correctly.
var (
	ErrCircuitOpen   = errors.New("agency circuit open")
	ErrLimited       = errors.New("agency concurrency limit reached")
	ErrPoolExhausted = sessionpool.ErrPoolExhausted
)

// Config describes one agency link. Zero values mean the defaults in
// brackets (see DefaultConfig).
type Config struct {
	Name    string           // agency name, as in the cell map ("nice")
	Addr    string           // host:port of the agency
	Profile telegram.Profile // framing and layout
	// Sessions is the pool size: the cell's quota for this agency.
	Sessions int
	// CallTimeout bounds one call on a session [2s].
	CallTimeout time.Duration
	// Pool tunes the session pool; Name and Size are taken from above
	// [sessionpool.DefaultConfig].
	Pool sessionpool.Config
	// Breaker tunes the circuit breaker [breaker.DefaultConfig: window 100,
	// 20% failures or 50% slower than 5 s, min 20 calls, 30 s open, 3
	// probes].
	Breaker breaker.Config
	// MinLimit is the floor of the adaptive concurrency limit [1]; the
	// ceiling is always the pool size.
	MinLimit int
}

// DefaultConfig returns the defaults, those of the pool and the breaker
// included.
func DefaultConfig() Config {
	return Config{
		CallTimeout: 2 * time.Second, MinLimit: 1,
		Pool: sessionpool.DefaultConfig(), Breaker: breaker.DefaultConfig(),
	}
}

// Options carry the client's collaborators. The zero value is usable.
type Options struct {
	// Logger receives breaker changes and the pool's events. Nil means
	// none.
	Logger *slog.Logger
	// Metrics receives the client's metrics; nil records none. Build it
	// with NewMetrics once per process and share it between clients.
	Metrics *Metrics
	// Now is the clock of the breaker and the pool. Nil means time.Now.
	Now func() time.Time
}

// withDefaults fills the zero fields of c from DefaultConfig, field by
// field; the pool and the breaker fill theirs.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.CallTimeout <= 0 {
		c.CallTimeout = d.CallTimeout
	}
	if c.MinLimit <= 0 {
		c.MinLimit = d.MinLimit
	}
	return c
}

// withDefaults fills the nil collaborators: Logger (none) and Now.
func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Result is a successful answer.
type Result struct {
	Agency string
	Score  int
	Text   string
	Took   time.Duration
}

// Client calls one agency. It is safe for concurrent use.
type Client struct {
	cfg     Config
	log     *slog.Logger
	now     func() time.Time
	metrics *Metrics
	pool    *sessionpool.Pool[*Conn]
	breaker *breaker.Breaker
	limiter atomic.Pointer[limiter]
}

type limiter struct {
	adaptivelimiter.AdaptiveLimiter[any]
}

// New starts a client: its pool begins dialling at once in the background.
// Close stops it.
func New(cfg Config, opts Options) (*Client, error) {
	if cfg.Name == "" || cfg.Addr == "" {
		return nil, fmt.Errorf("agency client: name and address are required")
	}
	if cfg.Profile.Name == "" {
		p, err := telegram.ProfileByName(cfg.Name)
		if err != nil {
			return nil, fmt.Errorf("agency client %s: no profile given and %w", cfg.Name, err)
		}
		cfg.Profile = p
	}
	cfg, opts = cfg.withDefaults(), opts.withDefaults()
	c := &Client{cfg: cfg, log: opts.Logger.With("agency", cfg.Name), now: opts.Now, metrics: opts.Metrics}
	c.breaker = breaker.New(cfg.Breaker, breaker.Options{Now: c.now, OnChange: func(from, to breaker.State) {
		c.log.Warn("agency circuit breaker changed state", "from", from.String(), "to", to.String())
		c.metrics.breakerChanged(cfg.Name, from, to)
	}})
	c.metrics.add(cfg.Name)
	c.metrics.breakerChanged(cfg.Name, breaker.Closed, breaker.Closed)
	c.limiter.Store(c.newLimiter(cfg.Sessions))
	pcfg := cfg.Pool
	pcfg.Name, pcfg.Size = cfg.Name, cfg.Sessions
	var pm *sessionpool.Metrics
	if opts.Metrics != nil {
		pm = opts.Metrics.pool
	}
	pool, err := sessionpool.New(pcfg, sessionpool.Options[*Conn]{
		Dial: func(ctx context.Context) (*Conn, error) {
			return Dial(ctx, cfg.Addr, cfg.Profile)
		},
		Logger: c.log, Metrics: pm, Now: opts.Now,
	})
	if err != nil {
		return nil, fmt.Errorf("agency client %s: %w", cfg.Name, err)
	}
	c.pool = pool
	return c, nil
}

// newLimiter builds the adaptive limit for a pool of n sessions: it starts at
// n and never goes above it.
func (c *Client) newLimiter(n int) *limiter {
	ceiling := uint(max(n, 1))
	floor := min(uint(c.cfg.MinLimit), ceiling)
	l := adaptivelimiter.NewBuilder[any]().
		WithLimits(floor, ceiling, ceiling).
		OnLimitChanged(func(e adaptivelimiter.LimitChangedEvent) {
			c.metrics.limitChanged(c.cfg.Name, int(e.NewLimit))
		}).
		Build()
	c.metrics.limitChanged(c.cfg.Name, int(ceiling))
	return &limiter{l}
}

// Inquire asks the agency for a user's score.
func (c *Client) Inquire(ctx context.Context, userKey string) (Result, error) {
	start := c.now()
	res, outcome, err := c.inquire(ctx, userKey)
	took := c.now().Sub(start)
	c.metrics.observe(c.cfg.Name, outcome, took)
	res.Took = took
	return res, err
}

func (c *Client) inquire(ctx context.Context, userKey string) (Result, string, error) {
	res := Result{Agency: c.cfg.Name}
	bp, err := c.breaker.Acquire()
	if err != nil {
		return res, "circuit_open", fmt.Errorf("%w: %s", ErrCircuitOpen, c.cfg.Name)
	}
	lim := c.limiter.Load()
	lp, ok := lim.TryAcquirePermit()
	if !ok {
		bp.Cancel()
		return res, "limited", fmt.Errorf("%w: %s at %d in flight", ErrLimited, c.cfg.Name, lim.Limit())
	}
	s, err := c.pool.Borrow(ctx)
	if err != nil {
		lp.Drop()
		bp.Cancel() // our own shortage, not the agency's failure
		if errors.Is(err, ErrPoolExhausted) {
			return res, "exhausted", err
		}
		return res, "canceled", err
	}
	callCtx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	// Whose deadline binds: the caller's (its own business) or ours (the
	// agency was too slow). The socket timer can fire before ctx's does.
	dl, _ := callCtx.Deadline()
	callerDL, ok := ctx.Deadline()
	callerBinds := ok && !callerDL.After(dl)
	began := c.now()
	// A panic in the call (reading the agency's answer, say) gives back
	// what it holds on its way up: the session, whose state is unknown, is
	// discarded, and the call counts as a failure.
	returned := false
	defer func() {
		if !returned {
			cancel()
			c.pool.Return(s, false)
			lp.Drop()
			bp.Done(true, c.now().Sub(began))
		}
	}()
	msg, err := s.Conn().Inquire(callCtx, userKey)
	took := c.now().Sub(began)
	cancel()

	var codeErr *CodeError
	broken := err != nil && !errors.As(err, &codeErr)
	c.pool.Return(s, !broken)
	returned = true
	switch {
	case err == nil:
		lp.Record()
		bp.Done(false, took)
		res.Score, res.Text = msg.Score, msg.Text
		return res, "ok", nil
	case codeErr != nil:
		lp.Record()
		bp.Done(true, took)
		return res, "code_error", err
	case ctx.Err() != nil || (callerBinds && errors.Is(err, context.DeadlineExceeded)):
		// The caller gave up: says nothing about the agency.
		lp.Drop()
		bp.Cancel()
		return res, "canceled", err
	case errors.Is(err, context.DeadlineExceeded):
		lp.Drop()
		bp.Done(true, took)
		return res, "timeout", fmt.Errorf("%s call timed out after %v: %w", c.cfg.Name, c.cfg.CallTimeout, err)
	default:
		lp.Drop()
		bp.Done(true, took)
		return res, "transport_error", err
	}
}

// Breaker is the agency's circuit breaker, for manual force-open,
// force-close and reset.
func (c *Client) Breaker() *breaker.Breaker { return c.breaker }

// Resize changes the session quota at run time: the pool grows or shrinks
// and the concurrency limit follows. Calls admitted under the old limit
// finish normally; for their duration, new calls may wait (up to the borrow
// deadline) for a session.
func (c *Client) Resize(sessions int) {
	c.pool.Resize(sessions)
	c.limiter.Store(c.newLimiter(sessions))
}

// Status is a snapshot of the link.
type Status struct {
	Agency   string            `json:"agency"`
	Breaker  string            `json:"breaker"`
	Limit    int               `json:"limit"`
	Inflight int               `json:"inflight"`
	Pool     sessionpool.Stats `json:"pool"`
}

// Status reports the breaker, limit and pool.
func (c *Client) Status() Status {
	lim := c.limiter.Load()
	return Status{
		Agency:   c.cfg.Name,
		Breaker:  c.breaker.State().String(),
		Limit:    lim.Limit(),
		Inflight: lim.Inflight(),
		Pool:     c.pool.Stats(),
	}
}

// Close closes the pool's sessions. Call it after the callers are done.
func (c *Client) Close() error { return c.pool.Close() }

// Limit is the adaptive concurrency limit now: callers that queue for the
// agency (the pipeline's gate) hold themselves to it.
func (c *Client) Limit() int { return c.limiter.Load().Limit() }
