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
	"fmt"
	"log/slog"
	"net"
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

	"github.com/cellkit/cellkit/internal/adminauth"
	"github.com/cellkit/cellkit/internal/agency"
	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/inflight"
	"github.com/cellkit/cellkit/internal/intake"
	"github.com/cellkit/cellkit/internal/move"
	"github.com/cellkit/cellkit/internal/natsembed"
	"github.com/cellkit/cellkit/internal/pipeline"
	"github.com/cellkit/cellkit/internal/queue"
	"github.com/cellkit/cellkit/internal/quotalease"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/sessionpool"
	"github.com/cellkit/cellkit/internal/shed"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/storage"
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
	// Release is the release the process runs (flagenv.Set.Release),
	// reported in its status; zero for a cell in a test.
	Release api.Release
	// PeerTLS is the client configuration for other cells' https intake,
	// asked about an inquiry after a slot move (see intake.Options). Nil:
	// Go's defaults.
	PeerTLS *tls.Config
}

// withDefaults fills the nil collaborators that have a default: Logger
// (none) and Gatherer (the Registerer if it is one, else nothing).
func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Gatherer == nil {
		o.Gatherer, _ = o.Registerer.(prometheus.Gatherer)
	}
	if o.Gatherer == nil {
		o.Gatherer = prometheus.Gatherers{}
	}
	return o
}

// Cell is one running cell.
type Cell struct {
	cfg     Config
	release api.Release
	log     *slog.Logger
	metrics prometheus.Registerer // Options.Registerer, labelled cell=<ID>
	reg     prometheus.Gatherer   // served on /metrics
	promReg prometheus.Registerer // Options.Registerer, for /metrics' own error counter

	unlock   func()
	ns       *natsembed.Server // nil with an external NATS
	nc       *nats.Conn
	js       jetstream.JetStream
	queue    *queue.Queue
	registry registry.Registry
	follower *registry.Follower
	mover    *move.Mover // the cell's part in moving users' inquiries between cells
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

// New opens a cell's parts. On error everything opened is closed again.
// One piece: each part is opened with those before it (the store, NATS,
// the queue, the registry, the agencies, the pipeline, the intake), and
// the deferred close on error must see all that was opened.
func New(ctx context.Context, cfg Config, opts Options) (_ *Cell, err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg, opts = cfg.withDefaults(), opts.withDefaults()
	c := &Cell{release: opts.Release,
		cfg: cfg, log: opts.Logger.With("cell", cfg.ID), reg: opts.Gatherer, promReg: opts.Registerer, adminGuard: opts.AdminGuard,
		metrics: prometheus.WrapRegistererWith(prometheus.Labels{api.LabelCell: cfg.ID}, opts.Registerer),
		clients: map[string]*agency.Client{}, quota: map[string]int{},
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
	if err = c.openStreams(ctx); err != nil {
		return nil, err
	}
	if c.registry, err = registry.Open(registry.Config{URL: cfg.Registry}, registry.Options{}); err != nil {
		return nil, err
	}
	c.follower, err = registry.NewFollower(registry.FollowerConfig{CachePath: filepath.Join(cfg.StoreDir, "map.json")}, registry.FollowerOptions{
		Registry: c.registry, Logger: c.log, Registerer: prometheus.WrapRegistererWithPrefix(api.MetricPrefixCell, c.metrics),
	})
	if err != nil {
		return nil, err
	}

	agencies, err := c.openAgencies()
	if err != nil {
		return nil, err
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
		Journal: c.journal, Paused: c.storeFailed, Held: c.mover.Fenced,
	})
	if err != nil {
		return nil, err
	}
	iopts := intake.Options{
		Queue: c.queue, Shedder: c.shed, Map: c.follower.Map, Logger: c.log, Registerer: c.metrics, PeerTLS: opts.PeerTLS,
		Moving: c.mover.Fenced,
	}
	if c.disk != nil {
		iopts.Storage = c.disk
	}
	c.intake, err = intake.New(intake.Config{Cell: cfg.ID, TrustedCIDRs: cfg.TrustedRouterCIDRs, RouterRole: cfg.RouterRole,
		LeaderWait: cfg.LeaderWait, Timeout: max(cfg.LeaderWait+2*time.Second, intake.DefaultConfig().Timeout)}, iopts)
	if err != nil {
		return nil, err
	}
	c.registerMetrics()
	if err = c.listen(opts); err != nil {
		return nil, err
	}
	return c, nil
}

// openStreams opens what the cell keeps in JetStream beside its NATS
// connection: an instance's session lease bucket, the queue (the ledger,
// and the records layout's streams if the cell has them) and the moves'
// bucket.
func (c *Cell) openStreams(ctx context.Context) (err error) {
	cfg := c.cfg
	if cfg.Instance != "" {
		lc := quotalease.Config{Instance: cfg.Instance, Lease: cfg.Lease, Grace: cfg.LeaseGrace}
		var kv jetstream.KeyValue
		if err = c.untilJetStream(ctx, func(ctx context.Context) (err error) {
			kv, err = c.js.CreateOrUpdateKeyValue(ctx, quotalease.BucketConfig(cfg.ID, lc, cfg.Replicas))
			return err
		}); err != nil {
			return fmt.Errorf("open the session lease bucket: %w", err)
		}
		if c.leaser, err = quotalease.New(lc, quotalease.Options{KV: kv, Sessions: leasedSessions{c}, Logger: c.log, Registerer: c.metrics}); err != nil {
			return err
		}
	}
	if err = c.untilJetStream(ctx, func(ctx context.Context) (err error) {
		c.queue, err = queue.Setup(ctx, c.js, queue.Config{
			Cell: cfg.ID, MaxMsgs: cfg.QueueMaxMsgs, MaxBytes: cfg.QueueMaxBytes, AckWait: cfg.AckWait, Replicas: cfg.Replicas, Layout: cfg.QueueLayout,
			MaxAckPending: max(1000, 2*cfg.Pipeline.Workers), Retention: cfg.RecordTTL,
		})
		return err
	}); err != nil {
		return err
	}
	return c.untilJetStream(ctx, func(ctx context.Context) (err error) {
		c.mover, err = move.Open(ctx, c.js, move.Config{Cell: cfg.ID, Replicas: cfg.Replicas, TTL: cfg.RecordTTL}, move.Options{
			Ledger: c.queue.Ledger(), SlotOf: c.slotOf, Logger: c.log,
		})
		return err
	})
}

// openAgencies makes a client per agency, its sessions sized later by
// the map.
func (c *Cell) openAgencies() ([]pipeline.Agency, error) {
	cfg := c.cfg
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
	return agencies, nil
}

// listen opens the intake and admin listeners, with TLS when given.
func (c *Cell) listen(opts Options) (err error) {
	cfg := c.cfg
	if c.intakeLn, err = net.Listen("tcp", cfg.IntakeAddr); err != nil {
		return fmt.Errorf("intake listener: %w", err)
	}
	if c.adminLn, err = net.Listen("tcp", cfg.AdminAddr); err != nil {
		return fmt.Errorf("admin listener: %w", err)
	}
	if opts.IntakeTLS != nil {
		c.intakeLn, c.intakeTLS = tls.NewListener(c.intakeLn, opts.IntakeTLS), true
	}
	if opts.AdminTLS != nil {
		c.adminLn, c.adminTLS = tls.NewListener(c.adminLn, opts.AdminTLS), true
	}
	return nil
}

// slotOf is user's slot in the map the cell follows (false: no map yet).
func (c *Cell) slotOf(user string) (int, bool) {
	m := c.follower.Map()
	if m == nil {
		return 0, false
	}
	return m.SlotOf(user), true
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
