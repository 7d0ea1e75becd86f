// Command cell runs one cell: the intake API, its own JetStream queue and
// store (NATS embedded by default), the inquiry pipeline with its agency
// session pools sized by the cell map, and the admin API.
//
// A flag not on the command line is read from CELLKIT_CELL_<FLAG>, else
// CELLKIT_<FLAG>, in upper snake case (--age-budget: CELLKIT_AGE_BUDGET;
// --agency: CELLKIT_AGENCY, comma-separated); see internal/flagenv.
//
//	cell --cell c1 --registry file:var/map.json \
//	     --agency nice=127.0.0.1:7001 --agency kcb=127.0.0.1:7002
//
// SIGTERM or SIGINT stops it gracefully: intake closes, work in flight
// finishes (or is left for redelivery after --drain-timeout), NATS is flushed
// and shut down, exit 0.
//
// TLS: --tls-cert and --tls-key make the intake speak TLS, and
// --tls-client-ca makes it mutual (routers' certificates only, see
// --tls-client-role); --admin-tls-* do the same for the admin listener
// (operators' certificates). The files are reloaded when they change and
// on SIGHUP; a bad file stops the start with one line naming it, before
// anything listens.
//
// Admin API: /healthz and /readyz answer anyone. With --admin-token-file or
// --admin-tls-client-ca, everything else (/metrics, /v1/admin/*) needs a
// bearer token of the file or a verified client certificate
// (internal/adminauth; the token file is reloaded like the certificates);
// without either, the cell refuses an --admin address other than loopback.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"

	// The Mozilla roots, used only where the system has none (the images'
	// empty base): callbacks and registries on public certificates verify.
	_ "golang.org/x/crypto/x509roots/fallback"

	"github.com/cellkit/cellkit/internal/adminauth"
	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/cell"
	"github.com/cellkit/cellkit/internal/flagenv"
	"github.com/cellkit/cellkit/internal/intake"
	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/program"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

func main() {
	program.Main("cell", func(ctx context.Context) error { return run(ctx, os.Args[1:], os.Getenv, os.Stderr) })
}

// agencyFlag collects --agency name=host:port.
type agencyFlag []cell.AgencyAddr

func (a *agencyFlag) String() string {
	var parts []string
	for _, x := range *a {
		parts = append(parts, x.Name+"="+x.Addr)
	}
	return strings.Join(parts, ",")
}

func (a *agencyFlag) Set(v string) error {
	for _, item := range strings.Split(v, ",") {
		name, addr, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || name == "" || addr == "" {
			return fmt.Errorf("want name=host:port, got %q", item)
		}
		*a = append(*a, cell.AgencyAddr{Name: name, Addr: addr})
	}
	return nil
}

// prefixFlag collects --callback-allow CIDR[,CIDR...].
type prefixFlag []netip.Prefix

func (p *prefixFlag) String() string {
	var parts []string
	for _, x := range *p {
		parts = append(parts, x.String())
	}
	return strings.Join(parts, ",")
}

func (p *prefixFlag) Set(v string) error {
	for _, item := range strings.Split(v, ",") {
		prefix, err := netip.ParsePrefix(strings.TrimSpace(item))
		if err != nil {
			return fmt.Errorf("want CIDR[,CIDR...], got %q", item)
		}
		*p = append(*p, prefix.Masked())
	}
	return nil
}

// extra are the settings that are not the cell's Config.
type extra struct {
	release        api.Release
	level          slog.Level
	tls            cell.TLSFiles
	adminTokenFile string
}

func parseFlags(args []string, getenv func(string) string, output io.Writer) (c cell.Config, x extra, err error) {
	d := cell.DefaultConfig()
	level := &x.level
	var agencies agencyFlag
	var callbackAllow, trusted prefixFlag
	fs := flagenv.NewSet("cell", output)
	defer func() { err = fs.Checked(err) }() // with --check: the report, then ErrChecked
	fs.StringVar(&c.ID, "cell", "", "cell id, as in the cell map (required)")
	fs.StringVar(&c.IntakeAddr, "intake", d.IntakeAddr, "listen address of the intake API")
	fs.StringVar(&c.AdminAddr, "admin", d.AdminAddr, "listen address of the admin API, probes and metrics (not a loopback address: needs --admin-token-file or --admin-tls-client-ca)")
	fs.StringVar(&x.adminTokenFile, "admin-token-file", "", "admin listener: file of bearer tokens, one per line ('#' comments); every admin path but /healthz and /readyz then needs Authorization: Bearer TOKEN (reloaded when it changes or on SIGHUP)")
	fs.StringVar(&c.Registry, "registry", "", "cell map registry: file:PATH or consul://HOST:PORT/PREFIX (default $CELLKIT_REGISTRY)")
	fs.StringVar(&c.StoreDir, "store", "", "store dir of the embedded NATS, the map cache and the lock (default var/cells/<cell>)")
	fs.StringVar(&c.NATSURL, "nats-url", "", "external NATS with JetStream, one or more `URL`s separated by commas, tried in that order (this host's node first); empty: embedded")
	fs.StringVar(&c.NATSTokenFile, "nats-token-file", "", "with --nats-url: `FILE` whose first line is the token the NATS servers require (read at start)")
	fs.StringVar(&c.Instance, "instance", "", "this process's id among the instances of a cell that runs as several over one JetStream cluster (needs --nats-url); they share the cell's agency quotas by leases (empty: the cell is this one process)")
	fs.DurationVar(&c.LeaseGrace, "lease-grace", d.LeaseGrace, "with --instance: how long a session lease outlives its holder's last renewal, beyond the 6 s it counts on it: at least the agencies' idle timeout")
	fs.IntVar(&c.NATSPort, "nats-port", 0, "loopback port of the embedded NATS (0: a free one, -1: none)")
	fs.Var(&agencies, "agency", "an agency as name=host:port (repeat; name nice or kcb picks the telegram profile)")
	fs.IntVar(&c.Pipeline.Workers, "workers", d.Pipeline.Workers, "inquiries processed at once")
	fs.DurationVar(&c.CallTimeout, "call-timeout", d.CallTimeout, "timeout of one agency call")
	fs.DurationVar(&c.BorrowTimeout, "borrow-timeout", d.BorrowTimeout, "wait for an agency session from the pool")
	fs.DurationVar(&c.Pipeline.StepTimeout, "step-timeout", d.Pipeline.StepTimeout, "budget of each pipeline step (agency call with its wait for a session, CSS, core banking)")
	fs.IntVar(&c.Pipeline.MaxDeliver, "max-deliver", d.Pipeline.MaxDeliver, "attempts before a transiently failing inquiry is dead-lettered")
	fs.IntVar(&c.Pipeline.QuarantineAfter, "quarantine-after", d.Pipeline.QuarantineAfter, "crashes of the cell process an inquiry may be in flight at before it is quarantined as suspected poison (failed, dead-lettered) at the next start; each crash makes the inquiries in flight suspects, which run one at a time")
	fs.DurationVar(&c.AckWait, "ack-wait", d.AckWait, "ack wait of the work consumers (in-progress acks keep slow work alive)")
	fs.DurationVar(&c.Shed.MaxAge, "age-budget", d.Shed.MaxAge, "shed new intake when the oldest pending inquiry is older than this")
	fs.DurationVar(&c.Shed.MaxAgeHigh, "age-budget-high", 0, "the same budget for the high lane (0: --age-budget)")
	fs.Float64Var(&c.Shed.HighReserve, "high-reserve", d.Shed.HighReserve, "share of the pipeline's pace guaranteed to high-priority inquiries, the rest being normal's (each lane uses what the other leaves), and of the depth limit normal ones never fill (0 < share < 1)")
	fs.BoolVar(&c.Shed.LaneBlind, "lane-blind", false, "shed both lanes alike on the whole queue (no reserve for high priority; for comparison)")
	fs.IntVar(&c.Shed.MaxDepth, "depth-limit", d.Shed.MaxDepth, "shed new intake when this many inquiries are queued")
	fs.Int64Var(&c.QueueMaxMsgs, "queue-max-msgs", 0, "hard depth limit of the queue (0: 10 × depth limit)")
	fs.Float64Var(&c.Storage.High, "store-high-watermark", d.Storage.High, "with the embedded NATS: refuse new inquiries (503 storage-full) while this share of the store's filesystem is in use, until it is below --store-low-watermark; queued work goes on")
	fs.Float64Var(&c.Storage.Low, "store-low-watermark", d.Storage.Low, "take new inquiries again below this share in use (and restart JetStream there after a write it failed for lack of space)")
	fs.DurationVar(&c.RecordTTL, "record-ttl", d.RecordTTL, "how long records, failures and dead letters are kept")
	fs.DurationVar(&c.CSSLatency, "css-latency", d.CSSLatency, "latency of the in-process CSS step")
	fs.DurationVar(&c.CoreLatency, "core-latency", d.CoreLatency, "latency of the in-process core banking step")
	fs.DurationVar(&c.Pipeline.DrainTimeout, "drain-timeout", d.Pipeline.DrainTimeout, "at shutdown, how long work in flight may finish")
	fs.DurationVar(&c.LeaderWait, "leader-wait", intake.DefaultConfig().LeaderWait, "how long a new inquiry waits for the cell's streams to have a leader again (a JetStream cluster electing one after losing a node) instead of failing; keep the routers' --cell-timeout above it")
	fs.DurationVar(&c.StallTimeout, "stall-timeout", d.StallTimeout, "a pipeline with work in flight that settles none of it this long is stuck: readiness fails, and a second later the cell exits non-zero for its supervisor to restart it")
	fs.IntVar(&c.Pipeline.CallbackAttempts, "callback-attempts", d.Pipeline.CallbackAttempts, "tries of a callback POST (connection errors, timeouts, 5xx and 429 are retried after up to 1s, 2s, 4s..., half of each wait random)")
	fs.Var(&callbackAllow, "callback-allow", "internal prefixes callbacks may reach, as `CIDR[,CIDR...]`; callbacks to other loopback, private, link-local or CGNAT addresses are refused (cellctl dev up passes 127.0.0.0/8,::1/128 for a receiver on the same machine)")
	fs.IntVar(&c.Replicas, "replicas", d.Replicas, "replicas of the cell's streams and record bucket; more than 1 needs --nats-url (a JetStream cluster; 3 survives losing a node)")
	fs.IntVar(&c.Breaker.Window, "breaker-window", d.Breaker.Window, "agency circuit breaker: outcomes remembered per agency")
	fs.IntVar(&c.Breaker.MinCalls, "breaker-min-calls", d.Breaker.MinCalls, "agency circuit breaker: outcomes needed before it can open")
	fs.Float64Var(&c.Breaker.FailureRate, "breaker-failure-rate", d.Breaker.FailureRate, "agency circuit breaker: open at this share of failed calls (agency errors, timeouts, broken sessions)")
	fs.Float64Var(&c.Breaker.SlowRate, "breaker-slow-rate", d.Breaker.SlowRate, "agency circuit breaker: open at this share of slow calls")
	fs.DurationVar(&c.Breaker.SlowCall, "breaker-slow-call", d.Breaker.SlowCall, "agency circuit breaker: a call this long or longer is slow")
	fs.DurationVar(&c.Breaker.OpenFor, "breaker-open-for", d.Breaker.OpenFor, "agency circuit breaker: refuse calls this long, then probe")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", d.ShutdownTimeout, "at shutdown, how long requests in flight may finish")
	fs.DurationVar(&c.ShutdownDelay, "shutdown-delay", d.ShutdownDelay, "at SIGTERM, how long to go on serving with the routers' health check (GET /v1/health) failing before the intake closes, so that the routers take the instance out of rotation first: more than two of their --cell-probe-interval (0: close at once)")
	fs.TextVar(level, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	x.tls.Intake.RegisterFlags(fs.FlagSet, "", "intake listener", pki.RoleRouter)
	x.tls.Admin.RegisterFlags(fs.FlagSet, "admin-", "admin listener", pki.RoleOperator)
	fs.Lookup("tls-client-role").Usage = "intake listener: with --tls-client-ca, the role (certificate Subject OU) of the routers' certificates (empty: any); a certificate naming the role cell (another cell) may only read inquiries, any other is refused"
	x.tls.Peer.RegisterFlags(fs.FlagSet, "peer-", "the other cells' intake")
	fs.Lookup("peer-tls-cert").Usage += "; it is asked about an inquiry after a slot move (default with --tls-client-ca and no --peer-tls-*: --tls-cert, --tls-key and --tls-client-ca as CA)"
	fs.Var(&trusted, "trusted-router-cidrs", "peer addresses served as routers on intake connections without a client certificate, as `CIDR[,CIDR...]` (default 127.0.0.0/8,::1/128); other callers that are not routers get 403")
	// Where the cell runs and who it is, not what it does: not its release.
	fs.Placement("cell", "instance", "intake", "admin", "admin-token-file", "registry", "store", "nats-url",
		"nats-token-file", "nats-port", "agency", "tls-cert", "tls-key", "tls-client-ca", "admin-tls-cert",
		"admin-tls-key", "admin-tls-client-ca", "peer-tls-cert", "peer-tls-key", "peer-tls-ca")
	if err := fs.Parse(args, getenv); err != nil {
		return c, x, err
	}
	c.Agencies = agencies
	c.Pipeline.CallbackAllow = callbackAllow
	c.TrustedRouterCIDRs = intake.DefaultTrustedCIDRs()
	if len(trusted) > 0 {
		c.TrustedRouterCIDRs = trusted
	}
	if c.ID == "" {
		return c, x, errors.New("--cell (or CELLKIT_CELL) is required")
	}
	if c.Pipeline.QuarantineAfter < 1 {
		return c, x, fmt.Errorf("--quarantine-after must be at least 1, got %d", c.Pipeline.QuarantineAfter)
	}
	b := c.Breaker
	switch {
	case b.FailureRate <= 0 || b.FailureRate > 1 || b.SlowRate <= 0 || b.SlowRate > 1:
		return c, x, fmt.Errorf("--breaker-failure-rate and --breaker-slow-rate must be in (0, 1], got %g and %g", b.FailureRate, b.SlowRate)
	case b.Window < 1 || b.MinCalls < 1 || b.MinCalls > b.Window:
		return c, x, fmt.Errorf("--breaker-min-calls must be in [1, --breaker-window], got %d of %d", b.MinCalls, b.Window)
	case b.SlowCall <= 0 || b.OpenFor <= 0:
		return c, x, errors.New("--breaker-slow-call and --breaker-open-for must be positive")
	}
	// An admin API open to the network would let anyone close the intake,
	// force breakers and re-enqueue failed inquiries.
	if c.AdminAddr == "" {
		c.AdminAddr = d.AdminAddr
	}
	if err := adminauth.CheckListen(c.AdminAddr, x.adminTokenFile != "" || x.tls.Admin.ClientCA != ""); err != nil {
		return c, x, fmt.Errorf("--admin %w: set --admin-token-file or --admin-tls-client-ca, or listen on a loopback address", err)
	}
	x.release, err = fs.Release()
	return c, x, err
}

// run starts the cell and serves until ctx ends.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, x, err := parseFlags(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	log, reg := program.Start(stderr, x.level)
	program.BuildInfo(reg, "cell", x.release)
	// Certificates first: a bad file stops the start before anything
	// listens.
	certs, err := cell.LoadTLS(x.tls, tlsconf.Options{Logger: log, Registerer: reg})
	if err != nil {
		return err
	}
	if certs.RouterRole != "" {
		cfg.RouterRole = certs.RouterRole
	}
	guard, err := program.AdminGuard(adminauth.Config{
		TokenFile:   x.adminTokenFile,
		ClientCerts: x.tls.Admin.ClientCA != "",
		ClientRole:  x.tls.Admin.ClientRole,
	}, cfg.AdminAddr, x.tls.Admin.Enabled(), log, reg)
	if err != nil {
		return err
	}
	files := append(certs.Watchers, guard.Watcher())
	c, err := cell.New(ctx, cfg, cell.Options{Logger: log, Registerer: reg, Gatherer: reg,
		IntakeTLS: certs.Intake, AdminTLS: certs.Admin, PeerTLS: certs.Peer, AdminGuard: guard, Release: x.release})
	if err != nil {
		return err
	}
	log.Info("cell started", "cell", cfg.ID, "intake", c.IntakeURL(), "admin", c.AdminURL(), "nats", c.NATSURL(), "admin_auth", guard.Enabled())
	// The watchers reload the certificates and the admin tokens until the
	// cell has stopped.
	wctx, stopWatchers := context.WithCancel(context.WithoutCancel(ctx))
	watching := make(chan struct{})
	go func() { _ = program.Watch(wctx, files); close(watching) }()
	err = c.Run(ctx)
	stopWatchers()
	<-watching
	return err
}
