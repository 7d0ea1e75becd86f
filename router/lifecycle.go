package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"time"

	rungroup "github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/adminauth"
	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/apikey"
	"github.com/cellkit/cellkit/internal/handoff"
	"github.com/cellkit/cellkit/internal/program"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/reload"
	"github.com/cellkit/cellkit/internal/router"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

// process is one router process's components: start builds them in the
// order they must exist (a predecessor's sockets and state taken before
// anything listens, the files and their watchers, the registry, the
// router, the listeners), serve runs them as one group, close releases
// what start opened.
type process struct {
	o       options
	log     *slog.Logger
	metrics *prometheus.Registry

	succ *handoff.Succession // the predecessor's sockets, nil for a router that listened afresh
	pred handoffData         // and its state
	hm   *handoffMetrics

	watchers        []*reload.Watcher // the files read at runtime
	publicTLS       *tls.Config
	publicTLSServer *tlsconf.Server
	adminTLS        *tlsconf.Server
	guard           *adminauth.Guard

	reg      registry.Registry
	follower *registry.Follower
	rt       *router.Router
	adminRaw net.Listener // the admin socket as listened: what a successor is offered
	admin    *http.Server
	publicLn net.Listener // a predecessor's, else nil until the router has a map

	handedOver atomic.Bool    // a successor serves these sockets
	handedTo   *handoff.Hello // which one, set before the group stops
}

// start builds a router process; on an error it has closed what it
// opened (a predecessor whose sockets were taken serves on).
func start(ctx context.Context, o options, log *slog.Logger, metrics *prometheus.Registry) (_ *process, err error) {
	p := &process{o: o, log: log, metrics: metrics}
	if p.succ, p.pred, err = takeOver(ctx, o, log); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	p.hm = newHandoffMetrics(metrics, p.succ)
	keys, cellLimits, err := p.loadFiles()
	if err != nil {
		return nil, err
	}
	if p.reg, err = registry.Open(registry.Config{URL: o.registryURL}, registry.Options{}); err != nil {
		return nil, err
	}
	p.follower, err = registry.NewFollower(registry.FollowerConfig{StaleAfter: o.staleAfter, CachePath: o.mapCache}, registry.FollowerOptions{
		Registry: p.reg, Logger: log, Registerer: prometheus.WrapRegistererWithPrefix(api.MetricPrefixRouter, metrics),
	})
	if err != nil {
		return nil, err
	}
	p.adminRaw, err = takeOrListen(p.succ, "admin", o.adminListen, log, func(a string) (net.Listener, error) { return net.Listen("tcp", a) })
	if err != nil {
		return nil, fmt.Errorf("admin: listen: %w", err)
	}
	p.o.quota.Router = routerID(o, p.adminRaw.Addr())
	var sharing *router.QuotaSharing
	if board, ok := p.reg.(registry.LeaseBoard); ok {
		sharing = &router.QuotaSharing{Board: board, Config: p.o.quota}
	}
	p.rt, err = router.New(router.Config{Server: o.server, Cell: cellLimits, SlotRateWindow: o.slotRateWindow}, router.Options{
		Maps:       p.follower,
		Refresh:    p.reg.Load,
		Keys:       keys,
		Quota:      sharing,
		Logger:     log,
		Registerer: metrics,
		TLS:        p.publicTLS,
		Release:    o.release,
		Generation: p.hm.generation,
	})
	if err != nil {
		return nil, err
	}
	if err := carryQuota(p.pred, p.rt); err != nil {
		return nil, err
	}
	// The public socket a predecessor handed over is held from now on;
	// a fresh one is opened only once there is a map (serve).
	if p.publicLn, err = takeOrListen(p.succ, "public", o.listen, log, nil); err != nil {
		return nil, err
	}
	p.admin = p.adminServer()
	return p, nil
}

// loadFiles reads the files the router reads at runtime, each with its
// watcher: a bad one stops the start, with an error naming it. The keys'
// watcher records the file before it is read, so that a change made
// meanwhile is seen; it runs once the router exists.
func (p *process) loadFiles() (*apikey.Keys, router.CellLimits, error) {
	o, log, metrics := p.o, p.log, p.metrics
	cellLimits := o.cell
	keysWatcher := reload.New([]string{o.keysPath}, func() error {
		k, err := apikey.Load(o.keysPath)
		if err != nil {
			return err
		}
		return p.rt.SetKeys(k)
	}, reload.Config{What: "keys", Interval: o.reloadInterval}, reload.Options{Logger: log, Registerer: metrics})
	keys, err := apikey.Load(o.keysPath)
	if err != nil {
		return keys, cellLimits, err
	}
	p.watchers = []*reload.Watcher{keysWatcher}
	watch := func(w *reload.Watcher) {
		if w != nil {
			p.watchers = append(p.watchers, w)
		}
	}
	tlsOpts := func(what string) tlsconf.Options {
		return tlsconf.Options{What: what, Interval: o.reloadInterval, Logger: log, Registerer: metrics}
	}
	if o.publicTLS.Enabled() {
		srv, err := tlsconf.NewServer(o.publicTLS, tlsOpts("public_tls"))
		if err != nil {
			return keys, cellLimits, fmt.Errorf("public listener: %w", err)
		}
		if err := carryTicketKeys(p.pred, srv); err != nil {
			return keys, cellLimits, err
		}
		p.publicTLS, p.publicTLSServer = srv.Config(), srv
		watch(srv.Watcher())
	}
	if o.adminTLS.Enabled() {
		if p.adminTLS, err = tlsconf.NewServer(o.adminTLS, tlsOpts("admin_tls")); err != nil {
			return keys, cellLimits, fmt.Errorf("admin listener: %w", err)
		}
		watch(p.adminTLS.Watcher())
	}
	if o.cellTLS.Enabled() {
		c, err := tlsconf.NewClient(o.cellTLS, tlsOpts("cell_tls"))
		if err != nil {
			return keys, cellLimits, fmt.Errorf("cells: %w", err)
		}
		cellLimits.TLS = c.Config()
		watch(c.Watcher())
	}
	p.guard, err = program.AdminGuard(adminauth.Config{
		TokenFile:   o.adminTokenFile,
		ClientCerts: o.adminTLS.ClientCA != "",
		ClientRole:  o.adminTLS.ClientRole,
		Interval:    o.reloadInterval,
	}, o.adminListen, p.adminTLS != nil, log, metrics)
	if err != nil {
		return keys, cellLimits, err
	}
	watch(p.guard.Watcher())
	return keys, cellLimits, nil
}

// adminServer is the admin listener's server: the router's admin
// handler (with pprof under --pprof) behind the admin guard.
func (p *process) adminServer() *http.Server {
	var h http.Handler = p.rt.AdminHandler(p.metrics)
	if p.o.pprof {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux.Handle("/", h)
		h = mux
	}
	return &http.Server{
		Handler:           p.guard.Handler(h),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelWarn),
	}
}

// close releases what start opened, the last opened first.
func (p *process) close() {
	if p.publicLn != nil {
		_ = p.publicLn.Close() // closed already once served: the error says so
	}
	if p.rt != nil {
		p.rt.Close()
	}
	if p.adminRaw != nil {
		_ = p.adminRaw.Close() // closed already once served: the error says so
	}
	if p.reg != nil {
		p.reg.Close()
	}
	if p.succ != nil {
		p.succ.Close() // a start that fails leaves the predecessor serving
	}
}

// serve runs the components as one group until ctx ends, one of them
// fails or a successor takes the sockets over; ready, if not nil, is
// called once the public listener accepts. Each component's start is
// beside its stop, and the group stops them in the order they are added:
// the loops that only follow (the map, rollouts, the announcement, the
// files, the handoff) at once, then the public listener's notice
// period, the quota sharer (once the drain begins), the public
// listener's drain and the admin listener, within one --shutdown-timeout.
func (p *process) serve(ctx context.Context, ready func(addrs)) error {
	var g rungroup.Group
	handedTo := make(chan handoff.Hello, 1)
	listening := make(chan struct{}) // closed once the public listener accepts
	st := &stopping{timeout: p.o.shutdownTimeout}

	// The end: ctx's, or a successor's taking the sockets over.
	ectx, end := context.WithCancel(ctx)
	g.Add(func() error {
		select {
		case <-ectx.Done():
		case to := <-handedTo:
			p.handedOver.Store(true)
			p.handedTo = &to
		}
		return nil
	}, func(error) { end() })

	p.addFollowers(&g, ctx, listening, handedTo)
	pub := &publicListener{p: p, st: st, listening: listening, ready: ready}
	program.OnStop(&g, pub.notice)
	if q := p.rt.Quota(); q != nil {
		// The quota sharer runs past the start of a stop: it stops (its
		// buckets no longer refill, its lease is withdrawn) once the
		// drain begins, or once a successor has taken its buckets over.
		qctx, stopQuota := context.WithCancel(context.WithoutCancel(ctx))
		defer stopQuota()
		g.Add(func() error { return q.Run(qctx, p.handedOver.Load) }, func(error) { stopQuota() })
	}
	pctx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	g.Add(func() error { return pub.serve(pctx) }, func(error) { stopWaiting(); pub.drain() })
	adminLn := p.adminRaw
	if p.adminTLS != nil {
		adminLn = tls.NewListener(adminLn, p.adminTLS.Config())
	}
	g.Add(func() error {
		if err := p.admin.Serve(adminLn); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("admin: %w", err)
		}
		return nil
	}, func(error) {
		if p.handedTo != nil {
			// The successor answers on the admin socket already.
			actx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st.fail(p.admin.Shutdown(actx), "admin: ")
			return
		}
		sctx, cancel := st.drainContext()
		defer cancel()
		st.fail(p.admin.Shutdown(sctx), "")
	})

	err := g.Run()
	if p.handedTo != nil {
		if err := st.err(); err != nil {
			return fmt.Errorf("after the handoff: %w", err)
		}
		return program.ErrHandedOver
	}
	if err != nil {
		return err
	}
	if err := st.err(); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// addFollowers adds the loops that follow others and stop at once when
// the group stops: the cell map, the rollouts, the announcement in the
// registry, the files' watchers and, with --handoff-socket, the
// upgrade signal and the offer of the sockets to a successor.
func (p *process) addFollowers(g *rungroup.Group, ctx context.Context, listening <-chan struct{}, handedTo chan<- handoff.Hello) {
	follow := program.Followers(ctx, g)
	follow(p.follower.Run)
	if rw := registry.NewRolloutWatch(p.reg, registry.RolloutWatchEvery, prometheus.WrapRegistererWithPrefix(api.MetricPrefixRouter, p.metrics), p.log); rw != nil {
		follow(rw.Run)
	}
	if ann, ok := p.reg.(registry.Announcer); ok && p.o.adminAdvertise != "none" {
		if a, err := announcement(p.o, p.adminRaw.Addr(), p.adminTLS != nil); err != nil {
			p.log.Warn("the router is not announced in the registry: cellctl finds it only with --routers", "why", err)
		} else {
			follow(func(ctx context.Context) error {
				registry.AnnounceLoop(ctx, ann, a, func() bool { return !p.handedOver.Load() }, func(err error) { p.log.Warn("cannot announce the router in the registry", "err", err) })
				return nil
			})
			p.log.Info("announcing the router in the registry", "id", a.ID, "admin", a.Admin)
		}
	}
	follow(func(ctx context.Context) error { return program.Watch(ctx, p.watchers) })
	if p.o.handoffSocket == "" {
		return
	}
	follow(func(ctx context.Context) error { return upgradeOnSignal(ctx, p.log, listening) })
	follow(func(ctx context.Context) error {
		select {
		case <-listening:
		case <-ctx.Done():
			return nil
		}
		return offerSockets(ctx, p.o, p.log, p.hm, p.succ, p.pred, p.rt, handedTo, func() (handoff.Offer, error) {
			return offer(p.hm.generation, p.o.release.ID, p.publicLn, p.adminRaw, p.publicTLSServer, p.rt) // set before listening closed
		})
	})
}

// publicListener is the public listener's start (once the router has a
// map and its quota shares) and its stop (a notice period with readiness
// failing, then the drain, or the drain after a handoff).
type publicListener struct {
	p         *process
	st        *stopping
	listening chan struct{}
	ready     func(addrs)

	mu      sync.Mutex
	serving bool // Serve was or is about to be called
	stopped bool // the drain began: Serve must not be called
}

// serve waits for a map and the quota's first lease (at most --map-wait,
// and at most --quota-lease for the lease), listens unless a predecessor
// handed the socket over, and serves until drained.
func (l *publicListener) serve(ctx context.Context) error {
	p := l.p
	wctx := ctx
	if p.o.mapWait > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, p.o.mapWait)
		defer cancel()
	}
	p.log.Info("waiting for the cell map", "registry", p.reg.Describe())
	if err := p.follower.WaitReady(wctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if q := p.rt.Quota(); q != nil {
		if err := q.WaitReady(wctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return nil
	}
	if p.publicLn == nil {
		ln, err := router.Listen(p.o.listen)
		if err != nil {
			l.mu.Unlock()
			return err
		}
		p.publicLn = ln
	}
	l.serving = true
	l.mu.Unlock()
	return p.rt.Serve(p.publicLn, func(a net.Addr) {
		p.log.Info("router ready", "listen", a.String(), "admin", p.adminRaw.Addr().String(),
			"map_version", p.follower.Map().Version(), "clients", len(p.rt.Keys().Clients()),
			"tls", p.publicTLS != nil, "admin_tls", p.adminTLS != nil, "admin_auth", p.guard.Enabled(),
			"generation", p.hm.generation)
		close(l.listening)
		if l.ready != nil {
			l.ready(addrs{Public: a, Admin: p.adminRaw.Addr()})
		}
	})
}

// isServing is whether Serve was called.
func (l *publicListener) isServing() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.serving
}

// notice is the stop's first phase for a router that serves and was not
// handed over: readiness fails while it serves on for --shutdown-delay,
// the load balancers' time to notice.
func (l *publicListener) notice() {
	p := l.p
	if p.handedTo != nil || !l.isServing() || p.o.shutdownDelay <= 0 {
		return
	}
	p.rt.Stopping()
	p.log.Info("stopping: readiness fails, serving on", "delay", p.o.shutdownDelay)
	time.Sleep(p.o.shutdownDelay) // bounded by the flag
}

// drain stops the public listener: after a handoff the connections drain
// within --shutdown-timeout and what happened to them is logged (the
// successor accepts now); else a graceful shutdown within what is left
// of --shutdown-timeout.
func (l *publicListener) drain() {
	l.mu.Lock()
	l.stopped = true
	serving := l.serving
	l.mu.Unlock()
	p := l.p
	if p.handedTo != nil {
		l.st.fail(handOver(p.rt, p.o, p.log, p.hm, *p.handedTo), "")
		return
	}
	p.log.Info("shutting down", "timeout", p.o.shutdownTimeout)
	if !serving {
		return
	}
	sctx, cancel := l.st.drainContext()
	defer cancel()
	l.st.fail(p.rt.Shutdown(sctx), "")
}

// stopping is what the stop's phases share: one --shutdown-timeout for
// the drains, counted from the first, and their errors.
type stopping struct {
	timeout time.Duration
	once    sync.Once
	until   time.Time
	errs    []error // the group calls the stops one after the other
}

// drainContext is a fresh context (the one that ended must not cut the
// drain short) ending at the first drain's start + the timeout.
func (s *stopping) drainContext() (context.Context, context.CancelFunc) {
	s.once.Do(func() { s.until = time.Now().Add(s.timeout) })
	return context.WithDeadline(context.Background(), s.until)
}

// fail records a phase's error, if any, prefixed.
func (s *stopping) fail(err error, prefix string) {
	if err != nil {
		s.errs = append(s.errs, fmt.Errorf("%s%w", prefix, err))
	}
}

func (s *stopping) err() error { return errors.Join(s.errs...) }
