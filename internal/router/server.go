// Package router is the edge router: the one shared component on the
// request path. It authenticates platforms by API key, rate-limits each of
// them, routes every request to the cell that owns its user (or, for a read,
// the cell named in the inquiry id) and proxies it there behind a per-cell
// guard.
//
// The request chain, in order:
//
//  1. Server limits: header and body read timeouts, write and idle
//     timeouts, maximum header bytes, body at most 64 KiB (413).
//  2. Auth: X-API-Key, checked against SHA-256 hashes (401 missing, 403
//     unknown).
//  3. Rate limit: a token bucket per client (429 with Retry-After;
//     X-RateLimit-Limit and X-RateLimit-Remaining on every answer to a
//     known client).
//  4. Route: POST /v1/inquiries by the user_id in the body (read once,
//     forwarded unchanged), GET /v1/inquiries/{id} by the cell in the id;
//     anything else 404 (405 for a known path with another method), a body
//     without a valid user_id 400.
//  5. Guard: a bulkhead and a circuit breaker per cell; full or open is a
//     503 at once with Retry-After and Cellkit-Overloaded: true. A user is
//     never re-routed to another cell.
//  6. Proxy: one keep-alive pool per cell, a per-request timeout, the
//     Cellkit-Map-Version, Cellkit-Slot, X-Request-Id and Forwarded headers;
//     a 421 from the cell refreshes the map and retries once. Every answer
//     about a cell carries Cellkit-Cell.
//
// Every error answer is an RFC 9457 problem (see internal/problem).
//
// The HTTP stack is valyala/fasthttp, not net/http: profiled on the
// benchmark of issue 7, a net/http ReverseProxy spent most of its time in
// the Transport's per-connection goroutines and in allocation, and did not
// reach half of NGINX's throughput before any feature was added (README,
// "The router"). The behaviour is the one specified for net/http.
//
// Static stability: the router routes with the newest map its follower has
// (the last good one while the registry is unreachable) or, after a 421,
// with a newer one it read from the registry itself.
package router

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/cellkit/cellkit/internal/breaker"
	"github.com/cellkit/cellkit/internal/hotkeys"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// MapSource gives the router its cell map; *registry.Follower is one.
type MapSource interface {
	// Map is the newest good map, nil before the first.
	Map() *slotmap.Map
	// Status says how fresh it is, for /readyz.
	Status() registry.FollowerStatus
}

var _ MapSource = (*registry.Follower)(nil)

// Config configures a Router. Zero values mean the defaults in brackets.
type Config struct {
	// Maps is where the cell map comes from. Required.
	Maps MapSource
	// Refresh reads the newest map straight from the registry; the router
	// calls it when a cell answers 421. Nil: a 421 waits for the follower.
	Refresh func(context.Context) (*slotmap.Map, error)
	// RefreshInterval spaces registry reads forced by 421s [100ms].
	RefreshInterval time.Duration
	// RefreshTimeout bounds one such read [1s].
	RefreshTimeout time.Duration
	// Keys are the clients' API keys and limits. Required.
	Keys *Keys
	// Server limits the public listener.
	Server ServerLimits
	// Cell limits each cell.
	Cell CellLimits
	// HotKeys sizes the hot user tracker [a 1 min window, 1024 counters].
	HotKeys hotkeys.Config
	// Logger receives one line per event that matters, never one per
	// request [slog.Default()].
	Logger *slog.Logger
	// Registerer receives the router's metrics [none].
	Registerer prometheus.Registerer
	// Now is the clock of the rate limiter and the hot keys [time.Now].
	Now func() time.Time
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
	MaxConns          int           // client connections served at once [16384]
}

// CellLimits bound what one cell can take from the router. Zero values mean
// the defaults in brackets.
type CellLimits struct {
	// MaxConcurrent is the bulkhead: requests in flight to one cell; more
	// are refused with 503 at once. The cell's connection pool has as many
	// connections [256].
	MaxConcurrent int
	// Timeout bounds one request to a cell, retries of stale connections
	// included; past it the answer is 504 [5s].
	Timeout time.Duration
	// DialTimeout bounds connecting to a cell [1s].
	DialTimeout time.Duration
	// IdleConnTimeout closes pooled connections unused this long; keep it
	// below the cells' own idle timeout [30s].
	IdleConnTimeout time.Duration
	// MaxResponseBytes bounds a cell's answer; more is a failed call [1 MiB].
	MaxResponseBytes int
	// Breaker is each cell's circuit breaker. Zero fields mean: Window 50,
	// MinCalls 10, FailureRate 0.5, SlowCall Timeout, SlowRate 0.5, OpenFor
	// 5s, HalfOpenProbes 3 (see internal/breaker for the rule).
	Breaker breaker.Config
}

func (c *Config) defaults() {
	if c.RefreshInterval <= 0 {
		c.RefreshInterval = 100 * time.Millisecond
	}
	if c.RefreshTimeout <= 0 {
		c.RefreshTimeout = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	s := &c.Server
	s.ReadHeaderTimeout = or(s.ReadHeaderTimeout, 5*time.Second)
	s.ReadTimeout = or(s.ReadTimeout, 10*time.Second)
	s.WriteTimeout = or(s.WriteTimeout, 10*time.Second)
	s.IdleTimeout = or(s.IdleTimeout, 60*time.Second)
	s.MaxHeaderBytes = or(s.MaxHeaderBytes, 8<<10)
	s.MaxBodyBytes = or(s.MaxBodyBytes, 64<<10)
	s.MaxConns = or(s.MaxConns, 16384)
	l := &c.Cell
	l.MaxConcurrent = or(l.MaxConcurrent, 256)
	l.Timeout = or(l.Timeout, 5*time.Second)
	l.DialTimeout = or(l.DialTimeout, time.Second)
	l.IdleConnTimeout = or(l.IdleConnTimeout, 30*time.Second)
	l.MaxResponseBytes = or(l.MaxResponseBytes, 1<<20)
	b := &l.Breaker
	b.Window = or(b.Window, 50)
	b.MinCalls = or(b.MinCalls, 10)
	b.FailureRate = or(b.FailureRate, 0.5)
	b.SlowCall = or(b.SlowCall, l.Timeout)
	b.SlowRate = or(b.SlowRate, 0.5)
	b.OpenFor = or(b.OpenFor, 5*time.Second)
	b.HalfOpenProbes = or(b.HalfOpenProbes, 3)
}

func or[T int | float64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Router is the edge router. Serve runs it; it is safe for concurrent use.
type Router struct {
	cfg     Config
	maps    MapSource
	refresh func(context.Context) (*slotmap.Map, error)
	keys    *Keys
	limits  *limits
	hot     *hotkeys.Tracker
	metrics *metrics
	noCell  *cellMetrics
	log     *slog.Logger
	srv     *fasthttp.Server

	ridPrefix [17]byte // 16 hex digits of randomness and '-'
	ridSeq    atomic.Uint64

	tbl       atomic.Pointer[cellTable]
	refreshed atomic.Pointer[slotmap.Map] // newest map read after a 421

	mu     sync.Mutex
	guards map[string]*guard
	probs  map[string]*cellProbs

	refreshMu   sync.Mutex
	lastRefresh time.Time
}

// New returns a router. It serves nothing until Serve.
func New(cfg Config) (*Router, error) {
	if cfg.Maps == nil {
		return nil, errors.New("router: no map source")
	}
	if cfg.Keys == nil || len(cfg.Keys.clients) == 0 {
		return nil, errors.New("router: no API keys")
	}
	cfg.defaults()
	r := &Router{
		cfg:     cfg,
		maps:    cfg.Maps,
		refresh: cfg.Refresh,
		keys:    cfg.Keys,
		limits:  newLimits(cfg.Keys, cfg.Now),
		hot:     hotkeys.New(cfg.HotKeys, cfg.Now),
		log:     cfg.Logger,
		guards:  map[string]*guard{},
		probs:   map[string]*cellProbs{},
	}
	var seed [8]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	hex.Encode(r.ridPrefix[:16], seed[:])
	r.ridPrefix[16] = '-'
	m, err := newMetrics(cfg.Registerer, newGuardGauges(r.allGuards))
	if err != nil {
		return nil, fmt.Errorf("router: register metrics: %w", err)
	}
	r.metrics = m
	r.noCell = m.cell(noCell)
	s := cfg.Server
	r.srv = &fasthttp.Server{
		Handler:      r.handle,
		ErrorHandler: r.handleServerError,
		HeaderReceived: func(*fasthttp.RequestHeader) fasthttp.RequestConfig {
			return fasthttp.RequestConfig{ReadTimeout: s.ReadTimeout}
		},
		ReadTimeout:                   s.ReadHeaderTimeout,
		WriteTimeout:                  s.WriteTimeout,
		IdleTimeout:                   s.IdleTimeout,
		ReadBufferSize:                s.MaxHeaderBytes,
		MaxRequestBodySize:            s.MaxBodyBytes,
		Concurrency:                   s.MaxConns,
		NoDefaultServerHeader:         true,
		NoDefaultContentType:          true,
		DisablePreParseMultipartForm:  true,
		DisableHeaderNamesNormalizing: false,
		CloseOnShutdown:               true,
		SecureErrorLogMessage:         true,
		Logger:                        fasthttpLogger{cfg.Logger},
	}
	return r, nil
}

// Serve answers requests on ln until Shutdown.
func (r *Router) Serve(ln net.Listener) error { return r.srv.Serve(ln) }

// Shutdown stops accepting connections, closes idle ones and waits for the
// requests in flight until ctx ends.
func (r *Router) Shutdown(ctx context.Context) error { return r.srv.ShutdownWithContext(ctx) }

// Close releases the connections to the cells.
func (r *Router) Close() {
	if t := r.tbl.Load(); t != nil {
		for _, u := range t.byID {
			u.hc.CloseIdleConnections()
		}
	}
}

func (r *Router) newGuard(cell string) *guard {
	return newGuard(cell, r.cfg.Cell.MaxConcurrent, r.cfg.Cell.Breaker, func(from, to breaker.State) {
		r.log.Warn("cell circuit breaker changed state", "cell", cell, "from", from.String(), "to", to.String())
	})
}

func (r *Router) allGuards() []*guard {
	r.mu.Lock()
	defer r.mu.Unlock()
	gs := make([]*guard, 0, len(r.guards))
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

// exchange is one request's state through the chain.
type exchange struct {
	start       time.Time
	client      *Client
	v           verdict
	rid         []byte
	cm          *cellMetrics
	cell        string
	clientClose bool
}

var (
	hdrCell       = []byte("Cellkit-Cell")
	hdrRLLimit    = []byte("X-RateLimit-Limit")
	hdrRLRemain   = []byte("X-RateLimit-Remaining")
	hdrAllow      = []byte("Allow")
	allowCreate   = []byte("POST")
	allowRead     = []byte("GET, HEAD")
	pathPrefixLen = len(pathInquiryPre)
)

// handle is the request chain.
func (r *Router) handle(ctx *fasthttp.RequestCtx) {
	var ridBuf [64]byte
	ex := exchange{start: time.Now(), cm: r.noCell}
	ex.rid = r.requestID(ctx, &ridBuf)
	defer r.finish(ctx, &ex)

	client, res := r.keys.Authenticate(ctx.Request.Header.PeekBytes(hdrAPIKey))
	switch res {
	case authMissing:
		r.metrics.authFail.WithLabelValues("missing").Inc()
		probMissingKey.write(&ctx.Response)
		return
	case authUnknown:
		r.metrics.authFail.WithLabelValues("unknown").Inc()
		probUnknownKey.write(&ctx.Response)
		return
	}
	ex.client = client
	ex.v = r.limits.take(client)
	if !ex.v.ok {
		r.metrics.limited.WithLabelValues(client.ID).Inc()
		probRateLimit.writeRetry(&ctx.Response, ex.v.retryAfter)
		return
	}

	kind, cellID := classify(ctx.Method(), ctx.Path())
	switch kind {
	case routeNotFound:
		probNotFound.write(&ctx.Response)
		return
	case routeBadInquiry:
		probBadInquiry.write(&ctx.Response)
		return
	case routeBadMethod:
		probBadMethod.write(&ctx.Response)
		if len(ctx.Path()) >= pathPrefixLen {
			ctx.Response.Header.SetBytesKV(hdrAllow, allowRead)
		} else {
			ctx.Response.Header.SetBytesKV(hdrAllow, allowCreate)
		}
		return
	}
	t := r.table()
	if t == nil {
		probNoMap.writeRetry(&ctx.Response, time.Second)
		return
	}

	var userID []byte
	var u *upstream
	slot := -1
	if kind == routeCreate {
		var ok bool
		if userID, ok = userIDFrom(ctx.PostBody()); !ok {
			probBadUser.write(&ctx.Response)
			return
		}
		rt := t.m.Lookup(bstr(userID))
		r.hot.Add(userID, uint64(rt.Slot)) // the slot's low bits are the hash's
		if u = t.byID[rt.Cell]; u == nil {
			r.noCell.shed[shedNoCell].Inc()
			probNoCell.writeRetry(&ctx.Response, time.Second)
			return
		}
		slot = rt.Slot
	} else if u = t.byID[bstr(cellID)]; u == nil {
		probBadInquiry.write(&ctx.Response)
		return
	}

	ex.clientClose = prepare(ctx, client, ex.rid)
	path, cloned := ctx.Path(), false
	for attempt := 0; ; attempt++ {
		ex.cell, ex.cm = u.cell, u.m
		if u.prefix != "" && !cloned {
			// target rewrites the URI's path buffer, which path views.
			path, cloned = bytes.Clone(path), true
		}
		target(&ctx.Request, u, t.m.Version(), slot, path)
		status := r.call(ctx, u)
		if status != fasthttp.StatusMisdirectedRequest {
			return
		}
		u.m.misdir.Inc()
		var newer *slotmap.Map
		if attempt == 0 {
			newer = r.refreshAfter(t.m.Version())
		}
		if newer == nil {
			u.probs.misdirected.writeRetry(&ctx.Response, time.Second)
			return
		}
		t = r.table()
		if kind == routeCreate {
			rt := t.m.Lookup(bstr(userID))
			u, slot = t.byID[rt.Cell], rt.Slot
		} else {
			u = t.byID[bstr(cellID)]
		}
		if u == nil {
			r.noCell.shed[shedNoCell].Inc()
			probNoCell.writeRetry(&ctx.Response, time.Second)
			return
		}
	}
}

// call sends the prepared request through u's guard and returns the
// status of the answer now in ctx.Response (the cell's, or the router's
// problem when the guard refused or the call failed).
func (r *Router) call(ctx *fasthttp.RequestCtx, u *upstream) int {
	permit, why := u.guard.enter()
	if why != admitted {
		u.m.shed[why].Inc()
		p := &u.probs.bulkhead
		if why == shedBreaker {
			p = &u.probs.breaker
		}
		p.writeRetry(&ctx.Response, u.guard.retryAfter(why))
		return p.status
	}
	t0 := time.Now()
	err := u.hc.DoTimeout(&ctx.Request, &ctx.Response, r.cfg.Cell.Timeout)
	took := time.Since(t0)
	if err != nil {
		u.guard.leave(permit, true, took)
		if isTimeout(err) {
			u.m.timeout.Inc()
			p := u.probs.timeout
			p.write(&ctx.Response)
			return p.status
		}
		u.m.connErr.Inc()
		p := u.probs.unavailable
		p.writeRetry(&ctx.Response, time.Second)
		return p.status
	}
	status := ctx.Response.StatusCode()
	// A 503 marked Cellkit-Overloaded is the cell shedding its own load:
	// a quick, deliberate answer from a healthy cell. Counted as a failure
	// it would open the breaker and refuse all of the cell's users, the
	// share it still admits included, for OpenFor.
	shedByCell := status == fasthttp.StatusServiceUnavailable && bytes.Equal(ctx.Response.Header.PeekBytes(hdrOverloaded), valTrue)
	u.guard.leave(permit, status >= 500 && !shedByCell, took)
	cleanResponse(&ctx.Response)
	return status
}

// finish stamps the headers every answer carries and counts it.
func (r *Router) finish(ctx *fasthttp.RequestCtx, ex *exchange) {
	h := &ctx.Response.Header
	h.SetBytesKV(hdrRequestID, ex.rid)
	if ex.client != nil {
		var b [20]byte
		h.SetBytesKV(hdrRLLimit, ex.client.limitText)
		h.SetBytesKV(hdrRLRemain, strconv.AppendInt(b[:0], int64(ex.v.remaining), 10))
	}
	if ex.cell != "" {
		h.SetBytesK(hdrCell, ex.cell)
	}
	if ex.clientClose {
		ctx.SetConnectionClose()
	}
	ex.cm.answered(ctx.Response.StatusCode(), time.Since(ex.start).Seconds())
}

// requestID is the client's X-Request-Id if it is a sane one, else a new
// one: this process's random prefix and a sequence number.
func (r *Router) requestID(ctx *fasthttp.RequestCtx, buf *[64]byte) []byte {
	if v := ctx.Request.Header.PeekBytes(hdrRequestID); validRequestID(v) {
		return append(buf[:0], v...)
	}
	b := append(buf[:0], r.ridPrefix[:]...)
	return strconv.AppendUint(b, r.ridSeq.Add(1), 36)
}

func validRequestID(v []byte) bool {
	if len(v) == 0 || len(v) > 64 {
		return false
	}
	for _, c := range v {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return false
		}
	}
	return true
}

// handleServerError answers what fasthttp could not read (too large, too
// slow, malformed); the connection is closed after it.
func (r *Router) handleServerError(ctx *fasthttp.RequestCtx, err error) {
	p := serverError(ctx, err)
	if p.status == probTooLarge.status {
		// The client may still be sending the body: read it away (a
		// bounded amount, for a bounded time) before the answer, or closing
		// on unread data resets the connection and the client never sees
		// the 413.
		drain(ctx.Conn(), 4*int64(r.cfg.Server.MaxBodyBytes), time.Second)
	}
	p.write(&ctx.Response)
	var buf [64]byte
	ctx.Response.Header.SetBytesKV(hdrRequestID, r.requestID(ctx, &buf))
	r.noCell.answered(p.status, 0)
}

// drain discards what the peer sends, up to limit bytes and for at most
// max, stopping once it has been silent for 50 ms.
func drain(c net.Conn, limit int64, max time.Duration) {
	end := time.Now().Add(max)
	buf := make([]byte, 16<<10)
	for limit > 0 && time.Now().Before(end) {
		d := time.Now().Add(50 * time.Millisecond)
		if d.After(end) {
			d = end
		}
		c.SetReadDeadline(d)
		n, err := c.Read(buf)
		limit -= int64(n)
		if err != nil {
			return
		}
	}
}

// fasthttpLogger sends fasthttp's own messages (broken client connections
// and the like) to the debug level.
type fasthttpLogger struct{ log *slog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...), "component", "fasthttp")
}
