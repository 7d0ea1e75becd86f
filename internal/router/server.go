// Package router is the edge router: the one shared component on the
// request path. It authenticates platforms by API key, rate-limits each of
// them, routes every request to the cell that owns its user (or, for a read,
// the cell named in the inquiry id) and proxies it there behind a per-cell
// guard.
//
// The request chain, in order:
//
//  1. Connection limits: at most MaxConns client connections (at the limit
//     the oldest idle one is closed for a new one) and MaxConnsPerAddr from
//     one address; accept errors are retried after a backoff.
//  2. Server limits: header and body read timeouts, write and idle
//     timeouts, maximum header bytes, body at most 64 KiB (413), chunked
//     framing bounded against its data; HTTP/1.1 needs a valid Host (400),
//     an Expect other than 100-continue is 417.
//  3. Auth, from the head alone: X-API-Key, checked against SHA-256 hashes
//     (401 missing, 403 unknown); the connection closes after the answer
//     and the body is never read.
//  4. Rate limit: a token bucket per client (429 with Retry-After;
//     X-RateLimit-Limit and X-RateLimit-Remaining on every answer to a
//     known client).
//  5. Route: POST /v1/inquiries by the user_id in the body (read once,
//     forwarded unchanged), GET /v1/inquiries/{id} by the cell in the id;
//     anything else 404 (405 for a known path with another method), a body
//     without a valid user_id 400. Only a request admitted so far has its
//     body read.
//  6. Guard: a bulkhead and a circuit breaker per cell; full or open is a
//     503 at once with Retry-After and Cellkit-Overloaded: true. A user is
//     never re-routed to another cell.
//  7. Proxy: keep-alive connections to each cell (per event loop), a
//     per-request timeout, the Cellkit-Map-Version, Cellkit-Slot,
//     Cellkit-Client, X-Request-Id and Forwarded headers (a client's own
//     Cellkit-*, X-Forwarded-* and address claims are dropped);
//     a 421 from the cell refreshes the map and retries once. Every answer
//     about a cell carries Cellkit-Cell.
//
// Every error answer is an RFC 9457 problem (see internal/problem).
//
// The router serves HTTP/1.1 from event loops (gnet: epoll, one loop per
// GOMAXPROCS), with its own strict parser (internal/h1), as NGINX does: each
// loop owns its client connections and its own keep-alive connections to
// the cells, and a request is read, routed, forwarded and answered without
// a goroutine hand-off or an allocation (loop.go). Profiled on the router
// benchmark, net/http's ReverseProxy and then fasthttp spent most of their
// time in goroutine hand-offs, allocation and the netpoller, and did not
// reach NGINX's throughput (docs/router.md). The router accepts its
// connections itself (accept.go): gnet's acceptor stops the engine on the
// first accept error.
//
// Static stability: the router routes with the newest map its follower has
// (the last good one while the registry is unreachable) or, after a 421,
// with a newer one it read from the registry itself.
package router

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/apikey"
	"github.com/cellkit/cellkit/internal/breaker"
	"github.com/cellkit/cellkit/internal/guard"
	"github.com/cellkit/cellkit/internal/hotkeys"
	"github.com/cellkit/cellkit/internal/quota"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/slotrate"
)

// MapSource gives the router its cell map; *registry.Follower is one.
type MapSource interface {
	// Map is the newest good map, nil before the first.
	Map() *slotmap.Map
	// Status says how fresh it is, for /readyz.
	Status() registry.FollowerStatus
}

var _ MapSource = (*registry.Follower)(nil)

// Config tunes a Router. Zero values mean the defaults in brackets (see
// DefaultConfig).
type Config struct {
	// RefreshInterval spaces registry reads forced by 421s [100ms].
	RefreshInterval time.Duration
	// RefreshTimeout bounds one such read [1s].
	RefreshTimeout time.Duration
	// Server limits the public listener.
	Server ServerLimits
	// Cell limits each cell.
	Cell CellLimits
	// SlotRateWindow is the time constant of the per-slot request rates
	// the admin API reports [slotrate.DefaultWindow, 1 min].
	SlotRateWindow time.Duration
	// HotKeys sizes the hot user tracker [a 1 min window, 1024 counters].
	HotKeys hotkeys.Config
}

// Options carry the router's collaborators.
type Options struct {
	// Maps is where the cell map comes from. Required.
	Maps MapSource
	// Release is the release the process runs, reported on /readyz.
	Release api.Release
	// Generation is the process's place in the line of routers that
	// served its listening sockets (see Readiness) [1].
	Generation int
	// Refresh reads the newest map straight from the registry; the router
	// calls it when a cell answers 421. Nil: a 421 waits for the follower.
	Refresh func(context.Context) (*slotmap.Map, error)
	// Keys are the clients' API keys and limits. Required; SetKeys
	// replaces them.
	Keys *apikey.Keys
	// Quota, if not nil, shares the clients' quotas with the other
	// routers. Nil: this router holds each client's quota whole.
	Quota *QuotaSharing
	// Logger receives one line per event that matters, never one per
	// request. Nil means none.
	Logger *slog.Logger
	// Registerer receives the router's metrics (cellkit_router_*). Nil
	// means they are not registered.
	Registerer prometheus.Registerer
	// Now is the clock of the rate limiter and the hot keys. Nil means
	// time.Now.
	Now func() time.Time
	// TLS, if not nil, makes the public listener speak TLS only, with
	// this configuration (its GetConfigForClient may swap certificates;
	// see internal/tlsconf). Nil: plain HTTP.
	TLS *tls.Config
}

// withDefaults fills the nil collaborators that have a default: Logger
// (none) and Now (time.Now).
func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// ServerLimits bound what a client can make the router hold. Zero values
// mean the defaults in brackets.
type ServerLimits struct {
	ReadHeaderTimeout time.Duration // from a request's first byte to the end of its header [5s]
	ReadTimeout       time.Duration // for the body, once the header is in [10s]
	WriteTimeout      time.Duration // to write an answer [10s]
	IdleTimeout       time.Duration // a kept-alive connection may wait for its next request [60s]
	MaxHeaderBytes    int           // request line and header [8 KiB]
	MaxBodyBytes      int           // request body; more is 413 [64 KiB]
	MaxConns          int           // client connections served at once; at the limit the oldest idle one is closed for a new one [16384, or fewer to fit the open-file limit; a value the limit cannot hold fails ListenAndServe]
	MaxConnsPerAddr   int           // client connections from one IPv4 address or IPv6 /64 [1024]
	// StallTimeout: an event loop that has not run its timers for this
	// long is taken as dead or stuck; readiness fails and ListenAndServe
	// returns an error, so that the process ends and is restarted [10s].
	StallTimeout time.Duration
}

// CellLimits bound what one cell can take from the router. Zero values mean
// the defaults in brackets.
type CellLimits struct {
	// MaxConcurrent is the bulkhead: requests in flight to one cell; more
	// are refused with 503 at once. The cell's connection pool has as many
	// connections [1024: a cell's users wait out an election of its
	// streams, up to its leader wait of 10 s, so the bulkhead holds the
	// cell's rate times that; a cell that hangs is found by the health
	// checks within a second, so a large bulkhead holds little].
	MaxConcurrent int
	// Timeout bounds one request to a cell, retries of stale connections
	// included; past it the answer is 504 [15s: above the cells' leader
	// wait (10 s), which an election takes up to; a cell that hangs is
	// found by the health checks within a second, not by this].
	Timeout time.Duration
	// DialTimeout bounds connecting to a cell [1s].
	DialTimeout time.Duration
	// UnackedTimeout closes a connection to a cell whose sent bytes stay
	// unacknowledged this long (TCP_USER_TIMEOUT): a cell cut off by the
	// network fails the requests written to it after this, not after
	// Timeout [1s]. Keep it above the round trip between hosts.
	UnackedTimeout time.Duration
	// IdleConnTimeout closes pooled connections unused this long; keep it
	// below the cells' own idle timeout [30s].
	IdleConnTimeout time.Duration
	// MaxResponseBytes bounds a cell's answer; more is a failed call [1 MiB].
	MaxResponseBytes int
	// Breaker is each cell's circuit breaker [Window 50, MinCalls 10,
	// FailureRate 0.5, SlowCall Timeout, SlowRate 0.5, OpenFor 5s,
	// HalfOpenProbes 3] (see internal/breaker for the rule).
	Breaker breaker.Config
	// EjectAfter consecutive failed calls take an instance of a cell of
	// several out of the rotation for EjectFor [3, 5s] (see endpoints.go).
	EjectAfter int
	EjectFor   time.Duration
	// ProbeInterval is how often the router checks each instance it
	// routes to, and ProbeTimeout how long a check may take; a negative
	// ProbeInterval checks none [200ms, 250ms] (see health.go).
	ProbeInterval time.Duration
	ProbeTimeout  time.Duration
	// TLS is the client configuration for cells whose intake is https
	// [nil: the system's roots]: their CA and the client certificate
	// presented to them (mutual TLS). https cells are served by the event
	// loops as plain ones are (see tls.go).
	TLS *tls.Config
}

// DefaultConfig returns the defaults. Two follow other values and are left
// zero: Server.MaxConns (16384, or fewer to fit the open-file limit) and
// Cell.Breaker.SlowCall (Cell.Timeout).
func DefaultConfig() Config {
	return Config{
		RefreshInterval: 100 * time.Millisecond,
		RefreshTimeout:  time.Second,
		Server: ServerLimits{
			ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
			WriteTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second,
			MaxHeaderBytes: 8 << 10, MaxBodyBytes: 64 << 10,
			MaxConnsPerAddr: 1024, StallTimeout: 10 * time.Second,
		},
		Cell: CellLimits{
			MaxConcurrent: 1024, Timeout: 15 * time.Second, DialTimeout: time.Second, UnackedTimeout: time.Second,
			IdleConnTimeout: 30 * time.Second, MaxResponseBytes: 1 << 20,
			EjectAfter: 3, EjectFor: 5 * time.Second,
			ProbeInterval: 200 * time.Millisecond, ProbeTimeout: 250 * time.Millisecond,
			Breaker: breaker.Config{
				Window: 50, MinCalls: 10, FailureRate: 0.5, SlowRate: 0.5,
				OpenFor: 5 * time.Second, HalfOpenProbes: 3,
			},
		},
		SlotRateWindow: slotrate.DefaultWindow,
		HotKeys:        hotkeys.DefaultConfig(),
	}
}

// withDefaults fills the zero fields of c from DefaultConfig, field by
// field; MaxConns from defaultMaxConns, lowered to fit the open-file
// limit, and the breakers' SlowCall from Cell.Timeout.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.RefreshInterval = or(c.RefreshInterval, d.RefreshInterval)
	c.RefreshTimeout = or(c.RefreshTimeout, d.RefreshTimeout)
	c.SlotRateWindow = or(c.SlotRateWindow, d.SlotRateWindow)
	s, ds := &c.Server, d.Server
	s.ReadHeaderTimeout = or(s.ReadHeaderTimeout, ds.ReadHeaderTimeout)
	s.ReadTimeout = or(s.ReadTimeout, ds.ReadTimeout)
	s.WriteTimeout = or(s.WriteTimeout, ds.WriteTimeout)
	s.IdleTimeout = or(s.IdleTimeout, ds.IdleTimeout)
	s.MaxHeaderBytes = or(s.MaxHeaderBytes, ds.MaxHeaderBytes)
	s.MaxBodyBytes = or(s.MaxBodyBytes, ds.MaxBodyBytes)
	if s.MaxConns <= 0 {
		s.MaxConns = defaultMaxConns
		if fit := fileLimitRoom(); fit > 0 && fit < s.MaxConns {
			s.MaxConns = fit
		}
	}
	s.MaxConnsPerAddr = or(s.MaxConnsPerAddr, ds.MaxConnsPerAddr)
	s.StallTimeout = or(s.StallTimeout, ds.StallTimeout)
	l, dl := &c.Cell, d.Cell
	l.MaxConcurrent = or(l.MaxConcurrent, dl.MaxConcurrent)
	l.Timeout = or(l.Timeout, dl.Timeout)
	l.DialTimeout = or(l.DialTimeout, dl.DialTimeout)
	l.UnackedTimeout = or(l.UnackedTimeout, dl.UnackedTimeout)
	l.IdleConnTimeout = or(l.IdleConnTimeout, dl.IdleConnTimeout)
	l.MaxResponseBytes = or(l.MaxResponseBytes, dl.MaxResponseBytes)
	l.EjectAfter = or(l.EjectAfter, dl.EjectAfter)
	l.EjectFor = or(l.EjectFor, dl.EjectFor)
	if l.ProbeInterval == 0 {
		l.ProbeInterval = dl.ProbeInterval
	}
	l.ProbeTimeout = or(l.ProbeTimeout, dl.ProbeTimeout)
	b, db := &l.Breaker, dl.Breaker
	b.Window = or(b.Window, db.Window)
	b.MinCalls = or(b.MinCalls, db.MinCalls)
	b.FailureRate = or(b.FailureRate, db.FailureRate)
	b.SlowRate = or(b.SlowRate, db.SlowRate)
	b.SlowCall = or(b.SlowCall, l.Timeout)
	b.OpenFor = or(b.OpenFor, db.OpenFor)
	b.HalfOpenProbes = or(b.HalfOpenProbes, db.HalfOpenProbes)
	return c
}

func or[T int | float64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Router is the edge router. Serve runs it; it is safe for concurrent use.
type Router struct {
	cfg      Config
	stopping atomic.Bool   // Stopping was called: readiness fails, serving goes on
	downGen  atomic.Uint64 // counts instances found down by the health checks: the loops cut their calls
	maps     MapSource
	release  api.Release
	gen      int
	refresh  func(context.Context) (*slotmap.Map, error)
	keyring  atomic.Pointer[keyring] // the API keys and rate limits (SetKeys)
	keysMu   sync.Mutex              // serialises SetKeys
	now      func() time.Time
	hot      *hotkeys.Tracker
	sharer   *quota.Sharer // nil: quotas held whole
	dedupe   dedupe        // new inquiries with a key in flight
	// slotRates are the request rates per slot of the newest table
	// (replaced when a map's slot count changes), for the admin API.
	slotRates atomic.Pointer[slotrate.Rates]
	metrics   *metrics
	noCell    *cellMetrics
	log       *slog.Logger
	eng       *engine

	tlsConfig *tls.Config // the public listener's, nil for plain HTTP

	ridPrefix [17]byte // 16 hex digits of randomness and '-'
	ridSeq    atomic.Uint64

	tbl       atomic.Pointer[cellTable]
	refreshed atomic.Pointer[slotmap.Map] // newest map read after a 421

	mu     sync.Mutex
	guards map[string]*guard.Guard
	probs  map[string]*cellProbs

	refreshMu   sync.Mutex
	lastRefresh time.Time
}

// New returns a router. It serves nothing until Serve.
func New(cfg Config, opts Options) (*Router, error) {
	if opts.Maps == nil {
		return nil, errors.New("router: no map source")
	}
	if opts.Keys == nil || len(opts.Keys.Clients()) == 0 {
		return nil, errors.New("router: no API keys")
	}
	lowered := cfg.Server.MaxConns <= 0
	cfg, opts = cfg.withDefaults(), opts.withDefaults()
	log, now := opts.Logger, opts.Now
	if lowered && cfg.Server.MaxConns < defaultMaxConns {
		log.Warn("max-conns lowered to what the open-file limit holds", "max_conns", cfg.Server.MaxConns, "default", defaultMaxConns)
	}
	r := &Router{
		cfg:       cfg,
		maps:      opts.Maps,
		release:   opts.Release,
		gen:       max(opts.Generation, 1),
		refresh:   opts.Refresh,
		now:       now,
		hot:       hotkeys.New(cfg.HotKeys, hotkeys.Options{Now: now}),
		log:       log,
		tlsConfig: opts.TLS,
		guards:    map[string]*guard.Guard{},
		probs:     map[string]*cellProbs{},
	}
	var seed [8]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	hex.Encode(r.ridPrefix[:16], seed[:])
	r.ridPrefix[16] = '-'
	m := newMetrics(opts.Registerer, newGuardGauges(r.allGuards), func() loopCounts { return r.eng.loopCounts() })
	r.metrics = m
	r.noCell = m.cell(noCell)
	m.addClients(opts.Keys)
	if opts.TLS != nil {
		m.addTLS()
	}
	if q := opts.Quota; q != nil {
		sh, err := quota.New(q.Config, quota.Options{Board: q.Board, Buckets: buckets{r}, Logger: log, Registerer: opts.Registerer, Now: now})
		if err != nil {
			return nil, fmt.Errorf("router: %w", err)
		}
		r.sharer = sh
		r.keyring.Store(&keyring{keys: opts.Keys, limits: apikey.NewEmptyLimits(opts.Keys, now)})
	}
	r.keyring.Store(newKeyring(r.ring(), opts.Keys, now))
	r.eng = newEngine(r)
	return r, nil
}

// ListenAndServe answers requests on addr (host:port) until Shutdown,
// from one event loop per GOMAXPROCS. Once it listens it calls ready, if
// not nil, with the address it listens on.
func (r *Router) ListenAndServe(addr string, ready func(net.Addr)) error {
	ln, err := Listen(addr)
	if err != nil {
		return err
	}
	return r.Serve(ln, ready)
}

// Listen opens the router's public listening socket at addr.
func Listen(addr string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: 3 * time.Minute}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	return ln, nil
}

// Serve is ListenAndServe on a listening socket of the caller's (one a
// predecessor handed over); Serve closes it when it returns.
func (r *Router) Serve(ln net.Listener, ready func(net.Addr)) error {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if src, ok := r.maps.(changeNotifier); ok {
		wg.Go(func() { r.prebuild(src, stop) })
	}
	wg.Go(func() { r.checks(stop) })
	defer wg.Wait()
	defer close(stop)
	return r.eng.serve(ln, ready)
}

// changeNotifier is a MapSource that says when it has a newer map
// (registry.Follower does).
type changeNotifier interface{ Changed() <-chan struct{} }

// prebuild builds the routing table of every new map as soon as the
// source has it, off the event loops: the first request after a change
// finds the table built instead of building it (per cell: the cell's copy,
// its intakes, an upstream for a new or changed one) while the requests
// of the other loops wait for the lock. A request may still get there
// first; it then builds it, as without this.
func (r *Router) prebuild(src changeNotifier, stop <-chan struct{}) {
	for {
		ch := src.Changed()
		r.table()
		select {
		case <-ch:
		case <-stop:
			return
		}
	}
}

// Shutdown stops taking connections, closes idle ones and waits for the
// requests in flight until ctx ends; then it closes every connection.
func (r *Router) Shutdown(ctx context.Context) error { return r.eng.shutdown(ctx) }

// HandOver stops the router once a successor accepts from its listening
// socket: no more accepts here, the connections it has are served to
// their next answer (Connection: close), kept-alive ones idle for a
// second are closed, and it stops when none is left or ctx ends (what is
// left then is cut, and counted in the report).
func (r *Router) HandOver(ctx context.Context) (Drained, error) {
	r.stopping.Store(true)
	return r.eng.handOver(ctx)
}

// Close marks every cell's connections for closing; ListenAndServe's end
// closes them all in any case.
func (r *Router) Close() {
	if t := r.tbl.Load(); t != nil {
		for _, u := range t.byID {
			u.retire()
		}
	}
}

func (r *Router) newGuard(cell string) *guard.Guard {
	return guard.New(cell, r.cfg.Cell.MaxConcurrent, r.cfg.Cell.Breaker, r.cfg.Cell.ProbeInterval > 0, func(from, to breaker.State) {
		r.log.Warn("cell circuit breaker changed state", "cell", cell, "from", from.String(), "to", to.String())
	})
}

func (r *Router) allGuards() []*guard.Guard {
	r.mu.Lock()
	defer r.mu.Unlock()
	gs := make([]*guard.Guard, 0, len(r.guards))
	for _, g := range r.guards {
		gs = append(gs, g)
	}
	return gs
}

// cellProbsLocked returns the cell's answers, made once; r.mu is held.
func (r *Router) cellProbsLocked(cell string) *cellProbs {
	p := r.probs[cell]
	if p == nil {
		cp := newCellProbs(cell)
		p = &cp
		r.probs[cell] = p
	}
	return p
}

var (
	hdrCell     = []byte(api.HeaderCell)
	hdrRLLimit  = []byte("X-RateLimit-Limit")
	hdrRLRemain = []byte("X-RateLimit-Remaining")
	hdrAllow    = []byte("Allow")
)
