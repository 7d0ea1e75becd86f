// Package cell assembles one cell: its embedded (or external) NATS with the
// work queue and record store, the agency links sized by the cell map, the
// pipeline, the intake API and the admin API, and runs them with a graceful
// lifecycle.
//
// Lifecycle: New opens everything that does not need the cell map (store,
// NATS, streams, registry, listeners). Run serves the admin API and status
// reads at once, waits for a map that names this cell (logging while it
// waits), sizes the session pools to the cell's quota, starts the workers
// and opens the intake. Pools follow every new map version. When Run's
// context ends: the intake closes (readyz false, new inquiries 503), requests
// in flight finish, the workers drain within their timeout and leave the
// rest for redelivery, NATS is flushed and shut down, and Run returns nil.
// A restart on the same store dir resumes where it stopped.
package cell

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/cellkit/cellkit/internal/adminauth"
	"github.com/cellkit/cellkit/internal/agency"
	"github.com/cellkit/cellkit/internal/backoff"
	"github.com/cellkit/cellkit/internal/inflight"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/intake"
	"github.com/cellkit/cellkit/internal/natsembed"
	"github.com/cellkit/cellkit/internal/pipeline"
	"github.com/cellkit/cellkit/internal/problem"
	"github.com/cellkit/cellkit/internal/queue"
	"github.com/cellkit/cellkit/internal/quotalease"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/sessionpool"
	"github.com/cellkit/cellkit/internal/shed"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/storage"
	"github.com/cellkit/cellkit/internal/store"
)

// Options carry the cell's collaborators. The zero value is usable.
type Options struct {
	// Logger receives one line per lifecycle event. Nil means none.
	Logger *slog.Logger
	// Registerer receives the cell's metrics (cellkit_cell_*,
	// cellkit_agency_*, cellkit_pool_*), every one labelled cell=<ID>. Nil
	// means they are not registered.
	Registerer prometheus.Registerer
	// Gatherer is what the admin API serves on /metrics. Nil means the
	// Registerer if it is a Gatherer too (a *prometheus.Registry is), else
	// nothing.
	Gatherer prometheus.Gatherer
	// CSS and Core replace the in-process CSS and core banking steps
	// (tests inject failures).
	CSS  pipeline.CSS
	Core pipeline.CoreBanking
	// IntakeTLS and AdminTLS, if not nil, make the intake and the admin
	// listener speak TLS only (LoadTLS makes them from certificate files,
	// with client certificates required when a client CA is given). Nil:
	// plain HTTP.
	IntakeTLS, AdminTLS *tls.Config
	// AdminGuard, if not nil, authenticates the admin API's requests: all
	// but /healthz and /readyz need a bearer token or a verified client
	// certificate (see internal/adminauth; the caller runs its watcher).
	// Nil: the admin API is open to whoever reaches its listener.
	AdminGuard *adminauth.Guard
	// PeerTLS is the client configuration for other cells' https intake,
	// asked about an inquiry after a slot move (see intake.Options). Nil:
	// Go's defaults.
	PeerTLS *tls.Config
}

// Cell is one running cell.
type Cell struct {
	cfg     Config
	log     *slog.Logger
	metrics prometheus.Registerer // Options.Registerer, labelled cell=<ID>
	reg     prometheus.Gatherer   // served on /metrics
	promReg prometheus.Registerer // Options.Registerer, for /metrics' own error counter

	unlock   func()
	ns       *natsembed.Server // nil with an external NATS
	nc       *nats.Conn
	js       jetstream.JetStream
	store    *store.Store
	queue    *queue.Queue
	registry registry.Registry
	follower *registry.Follower
	moves    *intake.Moves
	clients  map[string]*agency.Client
	names    []string
	pipe     *pipeline.Pipeline
	journal  *inflight.Journal  // the inquiries in flight, for the start after a crash
	crashed  []string           // what the last run had in flight when it crashed
	leaser   *quotalease.Leaser // an instance of a cell of several: its share of the quotas
	shed     *shed.Shedder
	intake   *intake.Handler
	disk     *storage.Guard // the store's filesystem, with the embedded NATS (nil otherwise)

	adminGuard *adminauth.Guard

	intakeLn, adminLn   net.Listener
	intakeTLS, adminTLS bool
	endpointsWarned     string // the last endpoint mismatch logged

	ready    atomic.Bool // map loaded, workers started
	stopping atomic.Bool
	quotaMu  sync.Mutex
	quota    map[string]int
	sample   atomic.Pointer[sample]
}

// sample is the last observation of the queue.
type sample struct {
	queue.Stats
	Failed, Dead int
	At           time.Time
	Err          error
}

// New opens a cell's parts. On error everything opened is closed again.
func New(ctx context.Context, cfg Config, opts Options) (_ *Cell, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	c := &Cell{
		cfg: cfg, log: opts.Logger, reg: opts.Gatherer, promReg: opts.Registerer, adminGuard: opts.AdminGuard,
		metrics: prometheus.WrapRegistererWith(prometheus.Labels{"cell": cfg.ID}, opts.Registerer),
		clients: map[string]*agency.Client{}, quota: map[string]int{},
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.log = c.log.With("cell", cfg.ID)
	if c.reg == nil {
		c.reg, _ = opts.Registerer.(prometheus.Gatherer)
	}
	if c.reg == nil {
		c.reg = prometheus.Gatherers{}
	}
	defer func() {
		if err != nil {
			c.close()
		}
	}()

	if c.unlock, err = lockDir(cfg.StoreDir); err != nil {
		return nil, err
	}
	if c.journal, c.crashed, err = inflight.Open(filepath.Join(cfg.StoreDir, "inflight.log")); err != nil {
		return nil, err
	}
	if len(c.crashed) > 0 {
		c.log.Warn("the last run crashed: counting the crash in the inquiries it had in flight", "inflight", len(c.crashed))
	}
	if err = c.openNATS(); err != nil {
		return nil, err
	}
	if c.ns != nil {
		scfg := cfg.Storage
		scfg.Dir, scfg.Interval = cfg.StoreDir, cfg.SampleInterval
		if c.disk, err = storage.New(scfg, storage.Options{Registerer: c.metrics, Logger: c.log}); err != nil {
			return nil, err
		}
	}
	if err = c.untilJetStream(ctx, func(ctx context.Context) (err error) {
		c.store, err = store.OpenReplicated(ctx, c.js, cfg.ID, cfg.RecordTTL, cfg.Replicas)
		return err
	}); err != nil {
		return nil, err
	}
	if cfg.Instance != "" {
		lc := quotalease.Config{Instance: cfg.Instance, Lease: cfg.Lease, Grace: cfg.LeaseGrace}
		var kv jetstream.KeyValue
		if err = c.untilJetStream(ctx, func(ctx context.Context) (err error) {
			kv, err = c.js.CreateOrUpdateKeyValue(ctx, quotalease.BucketConfig(cfg.ID, lc, cfg.Replicas))
			return err
		}); err != nil {
			return nil, fmt.Errorf("open the session lease bucket: %w", err)
		}
		if c.leaser, err = quotalease.New(lc, quotalease.Options{KV: kv, Sessions: leasedSessions{c}, Logger: c.log, Registerer: c.metrics}); err != nil {
			return nil, err
		}
	}
	if err = c.untilJetStream(ctx, func(ctx context.Context) (err error) {
		c.queue, err = queue.Setup(ctx, c.js, c.store, queue.Config{
			Cell: cfg.ID, MaxMsgs: cfg.QueueMaxMsgs, MaxBytes: cfg.QueueMaxBytes, AckWait: cfg.AckWait, Replicas: cfg.Replicas,
			MaxAckPending: max(1000, 2*cfg.Pipeline.Workers), Retention: cfg.RecordTTL,
		})
		return err
	}); err != nil {
		return nil, err
	}

	if c.registry, err = registry.Open(registry.Config{URL: cfg.Registry}, registry.Options{}); err != nil {
		return nil, err
	}
	c.follower, err = registry.NewFollower(registry.FollowerConfig{CachePath: filepath.Join(cfg.StoreDir, "map.json")}, registry.FollowerOptions{
		Registry: c.registry, Logger: c.log, Registerer: prometheus.WrapRegistererWithPrefix("cellkit_cell_", c.metrics),
	})
	if err != nil {
		return nil, err
	}

	am := agency.NewMetrics(c.metrics)
	var agencies []pipeline.Agency
	for _, a := range cfg.Agencies {
		cl, err := agency.New(agency.Config{
			Name: a.Name, Addr: a.Addr, Sessions: 0, CallTimeout: cfg.CallTimeout,
			Pool: sessionpool.Config{BorrowTimeout: cfg.BorrowTimeout}, Breaker: cfg.Breaker,
		}, agency.Options{Logger: c.log, Metrics: am})
		if err != nil {
			return nil, err
		}
		c.clients[a.Name] = cl
		c.names = append(c.names, a.Name)
		agencies = append(agencies, pipeline.Agency{Name: a.Name, Client: cl, Sessions: 0})
	}

	c.shed = shed.New(cfg.Shed, shed.Options{})
	css, core := opts.CSS, opts.Core
	if css == nil {
		css = pipeline.LocalCSS{Latency: max(cfg.CSSLatency, 0)}
	}
	if core == nil {
		core = pipeline.LocalCore{Latency: max(cfg.CoreLatency, 0)}
	}
	c.pipe, err = pipeline.New(cfg.Pipeline, pipeline.Options{
		Queue: c.queue, Agencies: agencies, Logger: c.log, Registerer: c.metrics,
		Drained: func(service time.Duration) { c.shed.Drained(1); c.shed.Served(service) }, CSS: css, Core: core,
		Journal: c.journal, Paused: c.storeFailed,
	})
	if err != nil {
		return nil, err
	}
	iopts := intake.Options{
		Queue: c.queue, Shedder: c.shed, Map: c.follower.Map, Logger: c.log, Registerer: c.metrics, PeerTLS: opts.PeerTLS,
	}
	if c.disk != nil {
		iopts.Storage = c.disk
	}
	c.intake, err = intake.New(intake.Config{Cell: cfg.ID, TrustedCIDRs: cfg.TrustedRouterCIDRs, RouterRole: cfg.RouterRole,
		LeaderWait: cfg.LeaderWait, Timeout: max(cfg.LeaderWait+2*time.Second, intake.DefaultConfig().Timeout)}, iopts)
	if err != nil {
		return nil, err
	}
	if c.moves, err = intake.NewMoves(intake.MovesConfig{Cell: cfg.ID, Path: filepath.Join(cfg.StoreDir, "moves.json")}, intake.MovesOptions{Logger: c.log}); err != nil {
		return nil, err
	}
	c.intake.TrackMoves(c.moves)
	c.registerMetrics()
	if c.intakeLn, err = net.Listen("tcp", cfg.IntakeAddr); err != nil {
		return nil, fmt.Errorf("intake listener: %w", err)
	}
	if c.adminLn, err = net.Listen("tcp", cfg.AdminAddr); err != nil {
		return nil, fmt.Errorf("admin listener: %w", err)
	}
	if opts.IntakeTLS != nil {
		c.intakeLn, c.intakeTLS = tls.NewListener(c.intakeLn, opts.IntakeTLS), true
	}
	if opts.AdminTLS != nil {
		c.adminLn, c.adminTLS = tls.NewListener(c.adminLn, opts.AdminTLS), true
	}
	return c, nil
}

func (c *Cell) openNATS() error {
	var err error
	opts := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond)}
	if c.cfg.NATSURL != "" {
		// A server across the network: a dead route or host is noticed
		// within two missed pings (about 3 s), and the client then moves
		// to another server of the URL list, which it tries in the order
		// given (the instance's own node first).
		opts = append(opts, nats.Name("cell-"+c.cfg.ID), nats.PingInterval(1500*time.Millisecond), nats.MaxPingsOutstanding(2), nats.DontRandomize())
		if c.cfg.NATSTokenFile != "" {
			tok, err := readToken(c.cfg.NATSTokenFile)
			if err != nil {
				return err
			}
			opts = append(opts, nats.Token(tok))
		}
		c.nc, err = nats.Connect(c.cfg.NATSURL, opts...)
		if err != nil {
			return fmt.Errorf("connect to nats %s: %w", c.cfg.NATSURL, err)
		}
	} else {
		c.ns, err = natsembed.Start(natsembed.Config{
			Name: "cell-" + c.cfg.ID, StoreDir: c.cfg.StoreDir, Port: c.cfg.NATSPort,
		}, natsembed.Options{Logger: c.log})
		if err != nil {
			return err
		}
		if c.nc, err = c.ns.Connect(); err != nil {
			return err
		}
		c.log.Info("embedded nats started", "store", c.cfg.StoreDir, "url", c.ns.ClientURL())
	}
	c.js, err = jetstream.New(c.nc)
	return err
}

// untilJetStream runs a setup step of the cell's streams and buckets, each
// try bounded by 2 s, again while it fails as a JetStream cluster does
// when it is not ready yet (no answer, no responders, a leader still
// being elected, too few peers: all nodes starting at once), until
// Config.StartTimeout. Any other error ends it at once. (Instances that
// create the same stream at once see the cluster drop the answers of all
// but one: the next try finds it made.)
func (c *Cell) untilJetStream(ctx context.Context, step func(context.Context) error) error {
	deadline := time.Now().Add(c.cfg.StartTimeout)
	for n := 1; ; n++ {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := step(sctx)
		cancel()
		if err == nil || !queue.NotReady(err) || ctx.Err() != nil {
			return err
		}
		wait := backoff.Jittered(250*time.Millisecond, 2*time.Second, n)
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("%w (JetStream not ready within %v)", err, c.cfg.StartTimeout)
		}
		c.log.Warn("JetStream not ready, trying again", "err", err, "attempt", n, "in", wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// readToken reads a token file: its first line, which must not be empty.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("nats token file: %w", err)
	}
	tok, _, _ := strings.Cut(string(b), "\n")
	if tok = strings.TrimSpace(tok); tok == "" {
		return "", fmt.Errorf("nats token file %s: empty", path)
	}
	return tok, nil
}

// IntakeAddr is the intake listener's address.
func (c *Cell) IntakeAddr() net.Addr { return c.intakeLn.Addr() }

// AdminAddr is the admin listener's address.
func (c *Cell) AdminAddr() net.Addr { return c.adminLn.Addr() }

// IntakeURL is the intake's base URL: https when it speaks TLS. The map
// must name the cell's intake with this scheme (cellctl provision or
// endpoints --intake), since routers call the URL the map gives.
func (c *Cell) IntakeURL() string { return baseURL(c.intakeTLS, c.IntakeAddr()) }

// AdminURL is the admin API's base URL: https when it speaks TLS.
func (c *Cell) AdminURL() string { return baseURL(c.adminTLS, c.AdminAddr()) }

func baseURL(tls bool, addr net.Addr) string {
	if tls {
		return "https://" + addr.String()
	}
	return "http://" + addr.String()
}

// checkEndpoints logs, once per mismatch, a map that names this cell's
// intake or admin API with a scheme other than the one it serves: routers
// (or cellctl) would fail to reach it.
func (c *Cell) checkEndpoints(m *slotmap.Map) {
	entry, ok := m.Cell(c.cfg.ID)
	if !ok {
		return
	}
	var bad []any
	for _, e := range []struct {
		name, inMap string
		tls         bool
	}{{"intake", entry.Intake, c.intakeTLS}, {"admin", entry.Admin, c.adminTLS}} {
		want := map[bool]string{true: "https", false: "http"}[e.tls]
		if u, err := url.Parse(e.inMap); err == nil && u.Scheme != want {
			bad = append(bad, e.name, e.inMap, e.name+"_serves", want)
		}
	}
	key := fmt.Sprint(bad...)
	if len(bad) == 0 || key == c.endpointsWarned {
		c.endpointsWarned = key
		return
	}
	c.endpointsWarned = key
	c.log.Warn("the cell map names this cell with a URL scheme it does not serve; fix it with cellctl endpoints",
		append(bad, "map_version", m.Version())...)
}

// NATSURL is the embedded server's URL ("" if external or not listening).
func (c *Cell) NATSURL() string {
	if c.ns == nil {
		return c.cfg.NATSURL
	}
	return c.ns.ClientURL()
}

// Run serves until ctx ends, then shuts down gracefully (see the package
// doc). It closes the cell: a Cell runs once.
func (c *Cell) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	// net/http's own errors (a failed TLS handshake, mostly) go to the
	// cell's log.
	errLog := slog.NewLogLogger(c.log.Handler(), slog.LevelWarn)
	intakeSrv := &http.Server{Handler: c.contained("intake", c.intake), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, IdleTimeout: time.Minute, ErrorLog: errLog}
	adminSrv := &http.Server{Handler: c.contained("admin", c.adminHandler()), ReadHeaderTimeout: 5 * time.Second, ErrorLog: errLog}
	g.Go(func() error { return c.follower.Run(gctx) })
	g.Go(func() error { c.moves.Follow(gctx, c.follower.Map, c.follower.Changed, time.Now); return nil })
	g.Go(func() error { return serve(adminSrv, c.adminLn) })
	g.Go(func() error { return serve(intakeSrv, c.intakeLn) })
	g.Go(func() error { c.sampleLoop(gctx); return nil })
	g.Go(func() error { return c.watchStall(gctx) })
	if c.disk != nil {
		g.Go(func() error { c.disk.Run(gctx); return nil })
		g.Go(func() error { return c.healStore(gctx) })
	}

	pctx, stopPipeline := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPipeline()
	pipeDone := make(chan struct{})
	started := make(chan struct{})
	g.Go(func() error {
		defer close(pipeDone)
		if !c.waitForMap(gctx) {
			return nil
		}
		c.countCrash(gctx)
		close(started)
		return c.pipe.Run(pctx)
	})
	g.Go(func() error {
		select {
		case <-started:
		case <-gctx.Done():
			return nil
		}
		c.ready.Store(true)
		c.intake.Open()
		c.log.Info("cell ready", "intake", c.IntakeURL(), "admin", c.AdminURL(), "map_version", c.follower.Map().Version())
		c.followQuotas(gctx)
		return nil
	})

	// The leases outlive the pipeline: its work in flight keeps its
	// sessions until it stops, then the leases are given back.
	lctx, stopLeases := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLeases()
	leasesDone := make(chan struct{})
	if c.leaser != nil {
		g.Go(func() error {
			defer close(leasesDone)
			select {
			case <-started:
			case <-gctx.Done():
				return nil
			}
			return c.leaser.Run(lctx)
		})
	} else {
		close(leasesDone)
	}
	g.Go(func() error {
		<-gctx.Done()
		c.shutdown(intakeSrv, adminSrv, stopPipeline, pipeDone)
		stopLeases()
		<-leasesDone
		return nil
	})
	err := g.Wait()
	c.close()
	if err != nil {
		return err
	}
	c.log.Info("cell stopped")
	return nil
}

// contained serves h with a panic recovered: logged with its stack,
// counted (cellkit_cell_panics_total{step}) and answered 500 with a
// problem body, or, when the answer had begun, cut off as net/http does.
func (c *Cell) contained(step string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &startedWriter{ResponseWriter: w}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			c.pipe.Recovered(step, v, "method", r.Method, "path", r.URL.Path)
			if cw.started {
				panic(http.ErrAbortHandler)
			}
			problem.Write(w, problem.New(http.StatusInternalServerError, problem.Internal, "internal error"))
		}()
		h.ServeHTTP(cw, r)
	})
}

// startedWriter notes whether an answer has begun.
type startedWriter struct {
	http.ResponseWriter
	started bool
}

func (w *startedWriter) WriteHeader(code int) { w.started = true; w.ResponseWriter.WriteHeader(code) }
func (w *startedWriter) Write(b []byte) (int, error) {
	w.started = true
	return w.ResponseWriter.Write(b)
}

// Unwrap gives http.ResponseController the writer underneath.
func (w *startedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func serve(srv *http.Server, ln net.Listener) error {
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// shutdown runs the graceful stop, each phase with its own fresh timeout.
func (c *Cell) shutdown(intakeSrv, adminSrv *http.Server, stopPipeline func(), pipeDone <-chan struct{}) {
	c.stopping.Store(true)
	c.ready.Store(false)
	c.intake.Close()
	c.log.Info("cell stopping: intake closed")
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ShutdownTimeout)
	if err := intakeSrv.Shutdown(ctx); err != nil {
		c.log.Warn("intake requests did not finish", "err", err)
		intakeSrv.Close()
	}
	cancel()
	stopPipeline()
	<-pipeDone
	if n := c.pipe.Inflight(); n > 0 {
		// Stuck work the pipeline could not stop: not a clean stop. The
		// journal stays, so that the next start counts a crash for them.
		c.log.Warn("inflight journal kept: the next start counts a crash for the inquiries still in flight", "inflight", n)
	} else if err := c.journal.Close(); err != nil { // a clean stop: the next start finds no crash
		c.log.Warn("inflight journal", "err", err)
	}
	for _, cl := range c.clients {
		cl.Close()
	}
	if err := c.nc.FlushTimeout(c.cfg.ShutdownTimeout); err != nil {
		c.log.Warn("nats flush", "err", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), c.cfg.ShutdownTimeout)
	if err := adminSrv.Shutdown(ctx); err != nil {
		adminSrv.Close()
	}
	cancel()
}

// close releases everything New opened; safe on a partly built cell.
func (c *Cell) close() {
	for _, ln := range []net.Listener{c.intakeLn, c.adminLn} {
		if ln != nil {
			ln.Close()
		}
	}
	for _, cl := range c.clients {
		cl.Close()
	}
	if c.nc != nil {
		c.nc.Close()
	}
	if c.ns != nil {
		c.ns.Shutdown()
		c.ns = nil
	}
	if c.registry != nil {
		c.registry.Close()
	}
	if c.unlock != nil {
		c.unlock()
		c.unlock = nil
	}
}

// countCrash counts the last run's crash in the inquiries it had in
// flight, quarantining those in flight at too many crashes, before the
// pipeline takes work. A store that fails leaves the list for the next
// start: the crash loop then ends at MaxDeliver as it would without.
func (c *Cell) countCrash(ctx context.Context) {
	if len(c.crashed) == 0 {
		return
	}
	q, err := c.pipe.Crashed(ctx, c.crashed, c.journal.Forget)
	if err != nil {
		c.log.Error("cannot count the crash in the inquiries in flight", "err", err)
	}
	if len(q) > 0 {
		c.log.Error("quarantined suspected poison: failed and dead-lettered", "ids", q)
	}
	c.crashed = nil
}

// waitForMap blocks until the follower has a map that names this cell.
func (c *Cell) waitForMap(ctx context.Context) bool {
	logEvery := time.NewTicker(10 * time.Second)
	defer logEvery.Stop()
	logged := false
	for {
		changed := c.follower.Changed()
		m := c.follower.Map()
		if m != nil {
			if _, ok := m.Cell(c.cfg.ID); ok {
				c.applyQuotas(m)
				return true
			}
		}
		if !logged {
			if m == nil {
				c.log.Info("waiting for the cell map", "registry", c.registry.Describe())
			} else {
				c.log.Warn("waiting for a cell map that names this cell", "registry", c.registry.Describe(), "map_version", m.Version())
			}
			logged = true
		}
		select {
		case <-changed:
		case <-logEvery.C:
			logged = false
		case <-ctx.Done():
			return false
		}
	}
}

// followQuotas resizes the session pools to every new map's quotas.
func (c *Cell) followQuotas(ctx context.Context) {
	for {
		select {
		case <-c.follower.Changed():
			if m := c.follower.Map(); m != nil {
				c.applyQuotas(m)
			}
		case <-ctx.Done():
			return
		}
	}
}

func (c *Cell) applyQuotas(m *slotmap.Map) {
	c.quotaMu.Lock()
	defer c.quotaMu.Unlock()
	c.checkEndpoints(m)
	for _, name := range c.names {
		q := m.Quota(c.cfg.ID, name)
		if old, ok := c.quota[name]; ok && old == q {
			continue
		}
		c.log.Info("agency session quota", "agency", name, "sessions", q, "map_version", m.Version())
		c.quota[name] = q
		if c.leaser == nil {
			c.clients[name].Resize(q)
			c.pipe.Resize(name, q)
		}
	}
	if c.leaser != nil {
		c.leaser.SetQuota(c.quota) // its rounds size the pools to this instance's leases
	}
}

// leasedSessions lets the quota leaser size an instance's session pools.
type leasedSessions struct{ c *Cell }

func (s leasedSessions) Limit(agency string, n int) int {
	cl := s.c.clients[agency]
	if cl == nil {
		return 0
	}
	cl.Resize(n)
	s.c.pipe.Resize(agency, n)
	return cl.Status().Pool.Open
}

// sampleLoop observes the queue for the shedder, readiness and metrics.
func (c *Cell) sampleLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.SampleInterval)
	defer t.Stop()
	var lastFailed time.Time
	var failed, dead int
	for {
		s := &sample{At: time.Now()}
		mark := c.shed.Mark()
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		s.Stats, s.Err = c.queue.Stats(qctx)
		if s.Err == nil && time.Since(lastFailed) >= time.Second {
			if f, d, err := c.queue.FailedCounts(qctx); err == nil {
				failed, dead, lastFailed = f, d, time.Now()
			}
		}
		cancel()
		s.Failed, s.Dead = failed, dead
		if s.Err == nil {
			depth := 0
			for _, n := range s.Depth {
				depth += n
			}
			instances := 1
			if c.leaser != nil {
				instances = c.leaser.Live()
			}
			c.shed.Observe(shed.Sample{
				Depth: depth, Oldest: s.Oldest, At: s.At, Mark: mark, Capacity: c.pipe.Capacity(), Instances: instances, Idle: c.pipe.Inflight() == 0,
				High: s.Depth[inquiry.High], OldestHigh: s.OldestByLane[inquiry.High], OldestNormal: s.OldestByLane[inquiry.Normal],
			})
		}
		c.sample.Store(s)
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}
