// Package console is cellkit's web console for the people on call: the
// cells as cards (state, release, readiness, rates, queue, sessions,
// breakers), the map's 16,384 slots as a grid coloured by cell with a
// lookup and the map's history, the rollout and the drains in progress,
// and the routers — read-only, from nothing but the registry and the
// admin APIs cellctl already uses.
//
// A collector reads them all every Interval, each call bounded by
// CallTimeout, and keeps the newest View; the page gets it at once
// (GET /api/view) and then as it changes (server-sent events on
// /api/events). What cannot be read is shown, never left out: a cell that
// does not answer is a red card with the error and its last good figures
// with their age; a registry that cannot be read keeps the last map read,
// with its age — the static stability the routers have.
//
// Every page and document needs the console's token (a bearer token, or
// once in the URL or the sign-in form for a session cookie that expires
// and can be ended) or, over TLS, a verified client certificate; wrong
// tokens are rate-limited; /healthz, /readyz and the static assets (no
// data) are open. The assets are embedded: the page loads nothing from
// elsewhere.
//
// The console calls an admin API with its credentials only when it
// trusts the endpoint (configured, or https verified against the
// cluster's CA): the admin URLs it reads from the registry are anyone's
// who can write there. A value read that is not a finite number is
// dropped and named on its card: the view is always encodable.
package console

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/registry"
)

// Config is what an operator sets.
type Config struct {
	// Interval spaces two collections [1s].
	Interval time.Duration
	// CallTimeout bounds one collection's calls [2s]: a cell that hangs
	// is a red card after it, and holds nothing else up.
	CallTimeout time.Duration
	// ChangesKept is how far back the change log goes [15m].
	ChangesKept time.Duration
	// MaxStreams bounds the event streams open at once [16].
	MaxStreams int
	// Token is what a request must present (Authorization: Bearer, or
	// ?token= once for a session cookie). Empty: only verified client
	// certificates are let in (ClientCerts).
	Token string
	// ClientCerts says the listener verifies client certificates: a
	// request over a connection with one (naming ClientRole, if set) is
	// let in without the token.
	ClientCerts bool
	ClientRole  string
	// SessionTTL is how long a session cookie lets a browser in after
	// it signed in [12h]; POST /logout ends it sooner.
	SessionTTL time.Duration
	// SignInBurst wrong tokens a client may try at once, one more every
	// SignInEvery [10, 6s]; all clients together ten times as many.
	SignInBurst int
	SignInEvery time.Duration
	// TrustedAdmin are the admin endpoints (URLs: scheme, host and port
	// count) the console calls with its credentials besides, with
	// TrustCA, any https one.
	TrustedAdmin []string
	// TrustCA says the admin client verifies https against the
	// cluster's CA and no other: an https admin URL is trusted.
	TrustCA bool
}

// DefaultConfig is the console's configuration when nothing is set.
func DefaultConfig() Config {
	return Config{Interval: time.Second, CallTimeout: 2 * time.Second, ChangesKept: 15 * time.Minute, MaxStreams: 16,
		SessionTTL: 12 * time.Hour, SignInBurst: 10, SignInEvery: 6 * time.Second}
}

// withDefaults fills the zero fields of c from DefaultConfig, field by
// field.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Interval <= 0 {
		c.Interval = d.Interval
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = d.CallTimeout
	}
	if c.ChangesKept <= 0 {
		c.ChangesKept = d.ChangesKept
	}
	if c.MaxStreams <= 0 {
		c.MaxStreams = d.MaxStreams
	}
	if c.SessionTTL <= 0 {
		c.SessionTTL = d.SessionTTL
	}
	if c.SignInBurst <= 0 {
		c.SignInBurst = d.SignInBurst
	}
	if c.SignInEvery <= 0 {
		c.SignInEvery = d.SignInEvery
	}
	return c
}

// Options are what the program wires in.
type Options struct {
	// Registry holds the map, its history and the rollout's record
	// (required).
	Registry registry.Registry
	// Admin calls the cells' and routers' admin APIs (its HTTP client
	// required), those the console trusts only.
	Admin adminclient.Client
	// Routers lists the routers to show; nil: none.
	Routers func(ctx context.Context) ([]RouterRef, error)
	// Logger, Registerer: the program's (nil: none).
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Gatherer serves /metrics (nil: no /metrics).
	Gatherer prometheus.Gatherer
	// Now is the clock (nil: time.Now).
	Now func() time.Time
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

// Console serves the web console.
type Console struct {
	cfg      Config
	col      *collector
	history  *historyCache
	log      *slog.Logger
	gatherer prometheus.Gatherer
	now      func() time.Time
	sessions *sessions
	signIns  *signIns
	streams  atomic.Int64
	metrics  *metrics
}

// New makes a console; Run collects, Handler serves.
func New(cfg Config, opts Options) (*Console, error) {
	cfg, opts = cfg.withDefaults(), opts.withDefaults()
	if opts.Registry == nil {
		return nil, errors.New("console: no registry")
	}
	if opts.Admin.HTTP == nil {
		return nil, errors.New("console: no admin client")
	}
	if cfg.Token == "" && !cfg.ClientCerts {
		return nil, errors.New("console: neither a token nor client certificates: the console would be open")
	}
	log := opts.Logger
	now := opts.Now
	tr, err := newTrust(cfg)
	if err != nil {
		return nil, err
	}
	admin := opts.Admin
	admin.HTTP = tr.guardRedirects(admin.HTTP)
	m := newMetrics(opts.Registerer)
	c := &Console{cfg: cfg, log: log, gatherer: opts.Gatherer, now: now, metrics: m,
		sessions: newSessions(cfg.SessionTTL), signIns: newSignIns(cfg.SignInEvery, cfg.SignInBurst)}
	c.col = &collector{
		cfg: cfg, reg: opts.Registry, admin: admin, trust: tr, routers: opts.Routers, log: log, now: now, metrics: m,
		ctl:      control.New(opts.Registry, control.Config{Holder: "cellctl console"}, control.Options{Now: now}),
		counters: map[string]counters{}, cells: map[string]goodCell{}, rtrs: map[string]goodRouter{},
		next: make(chan struct{}),
	}
	c.history = newHistoryCache(c.col.ctl.History())
	registerRolloutMetrics(opts.Registerer, c.col.rolloutRecord)
	return c, nil
}

// Collect makes one view now (the first, before serving).
func (c *Console) Collect(ctx context.Context) *View { return c.col.collectOnce(ctx) }

// Run collects every Interval until ctx ends.
func (c *Console) Run(ctx context.Context) { c.col.run(ctx) }

// Serve serves the console on ln until ctx ends, then stops: the event
// streams end, requests in progress get up to 5 s.
func (c *Console) Serve(ctx context.Context, ln net.Listener) error {
	base, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	srv := &http.Server{
		Handler:           c.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          slog.NewLogLogger(c.log.Handler(), slog.LevelDebug),
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	stop() // ends the event streams
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) {
		return serr
	}
	return err
}

// maxHeaderBytes bounds a request's header block (its cookie and token
// included).
const maxHeaderBytes = 16 << 10
