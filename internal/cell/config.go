package cell

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/cellkit/cellkit/internal/agency"
	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/breaker"
	"github.com/cellkit/cellkit/internal/pipeline"
	"github.com/cellkit/cellkit/internal/queue"
	"github.com/cellkit/cellkit/internal/quotalease"
	"github.com/cellkit/cellkit/internal/sessionpool"
	"github.com/cellkit/cellkit/internal/shed"
	"github.com/cellkit/cellkit/internal/storage"
	"github.com/cellkit/cellkit/internal/store"
)

// AgencyAddr is one agency the cell calls.
type AgencyAddr struct {
	Name string // as in the cell map ("nice", "kcb"); also picks the telegram profile
	Addr string // host:port
}

// Config is everything a cell needs. Zero values mean the defaults in
// brackets (see DefaultConfig).
type Config struct {
	// ID is the cell id, as in the cell map. Required.
	ID string
	// IntakeAddr is the public API's listen address [127.0.0.1:8081].
	IntakeAddr string
	// AdminAddr is the admin API's listen address [127.0.0.1:9081].
	AdminAddr string
	// TrustedRouterCIDRs are the peer addresses whose requests the intake
	// serves as a router's on a connection without a verified client
	// certificate: plain HTTP, or TLS without a client CA [127.0.0.0/8,
	// ::1/128]. Anything else not from a router is refused with 403 (see
	// internal/intake). An empty, non-nil list trusts no address.
	TrustedRouterCIDRs []netip.Prefix
	// RouterRole is the role a verified client certificate of the intake
	// names to be a router's [router] (intake.AnyRole: any certificate the
	// client CA signed). LoadTLS gives it.
	RouterRole string
	// Registry is the cell map registry URL (file:PATH, consul://...);
	// empty means $CELLKIT_REGISTRY.
	Registry string
	// StoreDir holds the embedded NATS store, the map cache and the lock
	// [var/cells/<ID>].
	StoreDir string
	// NATSURL, if set, is an external NATS server or cluster with JetStream;
	// otherwise NATS runs embedded with its store under StoreDir.
	NATSURL string
	// StartTimeout bounds how long the start waits for JetStream to set up
	// the cell's streams and buckets: a cluster whose nodes start with the
	// cell may need seconds to elect its leaders [60s].
	StartTimeout time.Duration
	// NATSTokenFile, with NATSURL, holds the token the NATS servers
	// require (authorization { token } in their configuration); it is read
	// once, at start. Empty means none.
	NATSTokenFile string
	// Replicas is the replica count of the cell's streams and record
	// bucket [1]. More than 1 needs NATSURL: a JetStream cluster (3 is the
	// usual: acknowledged work survives the loss of a node).
	Replicas int
	// Instance, if set, names this process among the instances of a cell
	// that runs as several (on different hosts, over one JetStream cluster:
	// NATSURL). The instances share the cell's agency quotas through
	// leases (internal/quotalease) instead of each taking all of them.
	Instance string
	// Lease is how long an instance counts on a session lease after
	// renewing it; leases are renewed every Lease/3 [6s]. With Instance
	// only.
	Lease time.Duration
	// LeaseGrace is how much longer than its holder counts on it a session
	// lease outlives the holder's last renewal: at least the agencies'
	// idle timeout [30s]. With Instance only.
	LeaseGrace time.Duration
	// NATSPort is the embedded server's loopback port: 0 a free one, -1 no
	// listener (in-process clients only).
	NATSPort int
	// Agencies are the agencies to call; the pool size of each is this
	// cell's quota in the map. Required.
	Agencies []AgencyAddr
	// CallTimeout bounds one agency call [2s, agency.DefaultConfig].
	CallTimeout time.Duration
	// BorrowTimeout bounds the wait for an agency session [1s,
	// sessionpool.DefaultConfig].
	BorrowTimeout time.Duration
	// Breaker tunes every agency's circuit breaker [breaker.DefaultConfig].
	Breaker breaker.Config
	// Pipeline tunes the workers and the callbacks [pipeline.DefaultConfig,
	// but GateWait: Shed.MaxAge]. Pipeline.CallbackAllow lists the internal
	// prefixes callbacks may reach [none: callbacks to loopback, private,
	// link-local or CGNAT addresses are refused].
	Pipeline pipeline.Config
	// Shed holds the intake budgets: oldest pending age [60s] and queue
	// depth [10000] (shed.DefaultConfig).
	Shed shed.Config
	// QueueMaxMsgs is the queue's hard depth limit, QueueMaxBytes the
	// records layout's work stream's size limit [10 × Shed.MaxDepth,
	// 256 MiB].
	QueueMaxMsgs  int64
	QueueMaxBytes int64
	// QueueLayout is the layout a new cell keeps its inquiries in
	// [ledger]; records makes it as a release before the ledger did, for
	// the benchmarks that compare the two and the tests of an upgrade
	// (a cell with data keeps the layout it has; see queue.Switch).
	QueueLayout string
	// AckWait is the work consumers' ack wait [30s].
	AckWait time.Duration
	// RecordTTL is how long inquiry records, failures and dead letters are
	// kept [7 days].
	RecordTTL time.Duration
	// CSSLatency and CoreLatency are the latencies of the in-process CSS
	// and core banking steps [5ms, 10ms]; negative means none.
	CSSLatency, CoreLatency time.Duration
	// Storage holds the watermarks of the store's filesystem, with the
	// embedded NATS only: above High (the share in use) new inquiries are
	// refused until below Low [0.95, 0.90] (see internal/storage). Its Dir
	// is StoreDir.
	Storage storage.Config
	// SampleInterval is how often the queue is sampled for shedding,
	// readiness and metrics [250ms].
	SampleInterval time.Duration
	// LeaderWait is how long a new inquiry waits for the cell's streams
	// to have a leader again (a JetStream cluster electing one after losing
	// a node) instead of failing [10s; intake.DefaultConfig].
	LeaderWait time.Duration
	// StallTimeout is how long the pipeline may have work in flight and
	// settle none of it: then readiness fails, and a second later the cell
	// exits non-zero for its supervisor to start it again (a deadlock does
	// not heal) [2m; every attempt is bounded by the gate wait and the step
	// timeouts, about the age budget].
	StallTimeout time.Duration
	// ShutdownTimeout bounds each shutdown phase other than the pipeline's
	// drain (Pipeline.DrainTimeout) [10s].
	ShutdownTimeout time.Duration
	// ShutdownDelay is how long a stopping cell instance goes on serving
	// with its health check (api.PathHealth) failing before its intake
	// closes, so that the routers take it out of rotation first (two of
	// their checks) and no request meets a connection the instance closes
	// [0: the intake closes at once].
	ShutdownDelay time.Duration
}

// DefaultConfig returns the defaults: the cell's own and those of the parts
// it configures. Those that follow other fields are left zero: StoreDir
// (var/cells/<ID>), Pipeline.GateWait (Shed.MaxAge) and QueueMaxMsgs
// (10 × Shed.MaxDepth).
func DefaultConfig() Config {
	q := queue.DefaultConfig()
	l := quotalease.DefaultConfig()
	p := pipeline.DefaultConfig()
	p.GateWait = 0
	return Config{
		IntakeAddr: "127.0.0.1:8081", AdminAddr: "127.0.0.1:9081", Replicas: q.Replicas,
		Lease: l.Lease, LeaseGrace: l.Grace,
		CallTimeout:   agency.DefaultConfig().CallTimeout,
		BorrowTimeout: sessionpool.DefaultConfig().BorrowTimeout,
		Breaker:       breaker.DefaultConfig(),
		Pipeline:      p,
		Shed:          shed.DefaultConfig(),
		Storage:       storage.DefaultConfig(),
		QueueMaxBytes: q.MaxBytes, AckWait: q.AckWait, RecordTTL: store.DefaultTTL, StartTimeout: 60 * time.Second,
		CSSLatency: 5 * time.Millisecond, CoreLatency: 10 * time.Millisecond,
		SampleInterval: 250 * time.Millisecond, ShutdownTimeout: 10 * time.Second, StallTimeout: 2 * time.Minute,
	}
}

// validate refuses a configuration the cell cannot run, before its
// defaults are filled (a zero field is never wrong: it means the default).
func (c Config) validate() error {
	if !api.ValidCellID(c.ID) {
		return fmt.Errorf("cell id %q: want 1–32 of [a-z0-9-], starting and ending with a letter or digit", c.ID)
	}
	if len(c.Agencies) == 0 {
		return errors.New("no agencies: give at least one (--agency nice=HOST:PORT)")
	}
	switch {
	case c.Replicas > 1 && c.NATSURL == "":
		return fmt.Errorf("--replicas %d needs --nats-url (a JetStream cluster): the embedded server is one node", c.Replicas)
	case c.Replicas > 5:
		return fmt.Errorf("--replicas %d: JetStream allows at most 5", c.Replicas)
	}
	if c.NATSTokenFile != "" && c.NATSURL == "" {
		return errors.New("--nats-token-file needs --nats-url: the embedded server takes no token")
	}
	if c.Instance != "" {
		if !api.ValidCellID(c.Instance) {
			return fmt.Errorf("instance %q: want 1–32 of [a-z0-9-], starting and ending with a letter or digit", c.Instance)
		}
		if c.NATSURL == "" {
			return fmt.Errorf("--instance %s needs --nats-url: a cell's instances share one JetStream cluster", c.Instance)
		}
	}
	seen := map[string]bool{}
	for _, a := range c.Agencies {
		if a.Name == "" || a.Addr == "" || seen[a.Name] {
			return fmt.Errorf("agency %q at %q: want a unique name and an address", a.Name, a.Addr)
		}
		seen[a.Name] = true
	}
	if r := c.Shed.HighReserve; r != 0 && !(r > 0 && r < 1) {
		return fmt.Errorf("--high-reserve %g: want a share between 0 and 1 (exclusive)", r)
	}
	if c.Shed.MaxAgeHigh < 0 {
		return fmt.Errorf("--age-budget-high %v: want a positive duration (0: the --age-budget)", c.Shed.MaxAgeHigh)
	}
	return nil
}

// withDefaults fills the zero fields of c from DefaultConfig, field by
// field, and those that follow other fields from them; the parts fill
// the rest of their own.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Replicas <= 0 {
		c.Replicas = d.Replicas
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = d.StartTimeout
	}
	if c.IntakeAddr == "" {
		c.IntakeAddr = d.IntakeAddr
	}
	if c.AdminAddr == "" {
		c.AdminAddr = d.AdminAddr
	}
	if c.StoreDir == "" {
		c.StoreDir = filepath.Join("var", "cells", c.ID)
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = d.CallTimeout
	}
	if c.BorrowTimeout <= 0 {
		c.BorrowTimeout = d.BorrowTimeout
	}
	if c.Shed.MaxAge <= 0 {
		c.Shed.MaxAge = d.Shed.MaxAge
	}
	if c.Shed.MaxDepth <= 0 {
		c.Shed.MaxDepth = d.Shed.MaxDepth
	}
	if c.Shed.HighReserve == 0 {
		c.Shed.HighReserve = d.Shed.HighReserve
	}
	if c.Pipeline.GateWait <= 0 {
		// An inquiry that waited its whole age budget for an agency is
		// retried later rather than holding a worker for ever.
		c.Pipeline.GateWait = c.Shed.MaxAge
	}
	if c.QueueMaxMsgs <= 0 {
		c.QueueMaxMsgs = 10 * int64(c.Shed.MaxDepth)
	}
	if c.CSSLatency == 0 {
		c.CSSLatency = d.CSSLatency
	}
	if c.CoreLatency == 0 {
		c.CoreLatency = d.CoreLatency
	}
	if c.SampleInterval <= 0 {
		c.SampleInterval = d.SampleInterval
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = d.StallTimeout
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = d.ShutdownTimeout
	}
	return c
}
