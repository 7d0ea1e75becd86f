// Command router is cellkit's edge router: it authenticates platforms by API
// key, rate-limits them, routes each request to the cell that owns its user
// (the cell map comes from the registry) and proxies it there behind a
// per-cell bulkhead, circuit breaker and timeout. See internal/router.
//
//	router [flags]                 serve
//	router keygen [flags]          make an API key and its keys-file entry
//	router keys add|revoke|list    edit or show the keys file
//
// A flag not on the command line is read from CELLKIT_ROUTER_<FLAG>, else
// CELLKIT_<FLAG> (upper case, '-' as '_': CELLKIT_ROUTER_CELL_TIMEOUT,
// CELLKIT_REGISTRY); see internal/flagenv.
//
// Files read at runtime are reloaded when they change (checked every
// --reload-interval) and at once on SIGHUP: the keys file (a revoked key is
// refused from the next request on), the admin token file and the TLS
// certificates. A file that does not load is refused with one log line
// naming it, and what was loaded before stays in use.
//
// Admin listener: /healthz, /readyz (ready once there is a cell map; says
// when it is stale), /metrics, /v1/admin/hotkeys, /v1/admin/cells. With
// --admin-token-file or --admin-tls-client-ca, all but /healthz and /readyz
// need a bearer token or a client certificate (internal/adminauth); without
// either, the router refuses an --admin-listen address other than loopback.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	// The Mozilla roots, used only where the system has none (the images'
	// empty base): callbacks and registries on public certificates verify.
	_ "golang.org/x/crypto/x509roots/fallback"

	"github.com/cellkit/cellkit/internal/adminauth"
	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/apikey"
	"github.com/cellkit/cellkit/internal/flagenv"
	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/program"
	"github.com/cellkit/cellkit/internal/quota"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/reload"
	"github.com/cellkit/cellkit/internal/router"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

func main() {
	program.Main("router", func(ctx context.Context) error { return run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil) })
}

// options are the command line.
type options struct {
	release             api.Release
	listen, adminListen string
	registryURL         string
	keysPath            string
	mapCache            string
	staleAfter          time.Duration
	mapWait             time.Duration
	shutdownTimeout     time.Duration
	shutdownDelay       time.Duration
	slotRateWindow      time.Duration
	id                  string
	adminAdvertise      string
	reloadInterval      time.Duration
	logLevel            slog.Level
	pprof               bool
	server              router.ServerLimits
	cell                router.CellLimits
	adminTokenFile      string
	handoffSocket       string
	handoffWait         time.Duration
	quota               quota.Config
	publicTLS, adminTLS tlsconf.ServerFiles
	cellTLS             tlsconf.ClientFiles
}

func parseFlags(args []string, getenv func(string) string, output io.Writer) (o options, err error) {
	d := router.DefaultConfig()
	fs := flagenv.NewSet("router", output)
	defer func() { err = fs.Checked(err) }() // with --check: the report, then ErrChecked
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "public HTTP address")
	fs.StringVar(&o.adminListen, "admin-listen", "127.0.0.1:9080", "admin HTTP address: health, readiness, metrics, hot keys (not a loopback address: needs --admin-token-file or --admin-tls-client-ca)")
	fs.StringVar(&o.registryURL, "registry", "", "cell map registry: file:PATH or consul://HOST:PORT/PREFIX (default $"+registry.EnvRegistry+")")
	fs.StringVar(&o.keysPath, "keys", "", "API keys file: a JSON array of {client, key_sha256, rate, burst} (edit it with `router keys`; reloaded when it changes or on SIGHUP)")
	fs.StringVar(&o.mapCache, "map-cache", "", "file keeping the last good cell map, to start while the registry is down (empty: none)")
	fs.DurationVar(&o.staleAfter, "stale-after", registry.DefaultFollowerConfig().StaleAfter, "report the map stale after this long without the registry")
	fs.DurationVar(&o.mapWait, "map-wait", 0, "give up if no cell map arrives within this time (0: wait until stopped)")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 15*time.Second, "how long requests in flight may finish at shutdown")
	fs.DurationVar(&o.shutdownDelay, "shutdown-delay", 0, "at SIGTERM, how long to go on serving with /readyz failing before the listener closes, so that load balancers and Kubernetes endpoints stop sending new connections first")
	fs.StringVar(&o.id, "id", "", "this router's id in the registry's list of routers, 1-64 of [A-Za-z0-9._-] (default: the host name, the admin address if a specific one, and the admin port; each router's must differ: routers sharing one share one quota lease and each takes the whole quota)")
	fs.StringVar(&o.adminAdvertise, "admin-advertise", "", "the admin URL announced in the registry, for cellctl to find the router (default: http(s)://the admin address; 'none': not announced)")
	fs.DurationVar(&o.slotRateWindow, "slot-rate-window", d.SlotRateWindow, "time constant of the per-slot request rates on /v1/admin/slots (cellctl's traffic projections)")
	fs.DurationVar(&o.reloadInterval, "reload-interval", reload.DefaultConfig().Interval, "how often the keys, admin token and certificate files are checked for changes (SIGHUP: at once)")
	fs.TextVar(&o.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	fs.BoolVar(&o.pprof, "pprof", false, "serve /debug/pprof/ on the admin listener")
	fs.StringVar(&o.handoffSocket, "handoff-socket", "", "Unix socket where the router hands its listening sockets to a successor on this host, and where it takes them from a predecessor at its start: a restart or an upgrade with no connection refused; SIGUSR2 starts this program's path again as the successor. Its directory is private: made 0700 if missing, refused if group or others have access, another user owns it or it is a symbolic link; only a process of the router's user takes part (empty: none; see docs/router.md)")
	fs.DurationVar(&o.handoffWait, "handoff-wait", time.Minute, "how long a successor that took the sockets has to become ready; after that this router refuses it and serves on")
	fs.DurationVar(&o.quota.Round, "quota-round", quota.DefaultConfig().Round, "how often the router writes its lease of the clients' quotas in the registry and reads the other routers' (a client's quota holds across all routers; see docs/router.md)")
	fs.DurationVar(&o.quota.Lease, "quota-lease", quota.DefaultConfig().Lease, "how long the router counts on its last written quota lease when it cannot reach the registry; past it, each quota is split evenly over the routers it last counted (the same on every router)")
	fs.IntVar(&o.quota.ColdRouters, "quota-cold-routers", quota.DefaultConfig().ColdRouters, "how many routers a router that never reached the registry splits each quota evenly over once --quota-lease has passed: the number that usually serve")
	fs.StringVar(&o.adminTokenFile, "admin-token-file", "", "admin listener: file of bearer tokens, one per line ('#' comments); every admin path but /healthz and /readyz then needs Authorization: Bearer TOKEN (reloaded when it changes or on SIGHUP)")
	o.publicTLS.RegisterFlags(fs.FlagSet, "", "public listener", "")
	o.adminTLS.RegisterFlags(fs.FlagSet, "admin-", "admin listener", pki.RoleOperator)
	o.cellTLS.RegisterFlags(fs.FlagSet, "cell-", "the cells")

	fs.DurationVar(&o.server.ReadHeaderTimeout, "read-header-timeout", d.Server.ReadHeaderTimeout, "time to read a request's header")
	fs.DurationVar(&o.server.ReadTimeout, "read-timeout", d.Server.ReadTimeout, "time to read a request's body after its header")
	fs.DurationVar(&o.server.WriteTimeout, "write-timeout", d.Server.WriteTimeout, "time to write an answer")
	fs.DurationVar(&o.server.IdleTimeout, "idle-timeout", d.Server.IdleTimeout, "how long a kept-alive client connection may idle")
	fs.IntVar(&o.server.MaxHeaderBytes, "max-header-bytes", d.Server.MaxHeaderBytes, "largest request header")
	fs.IntVar(&o.server.MaxBodyBytes, "max-body-bytes", d.Server.MaxBodyBytes, "largest request body (413 above)")
	fs.IntVar(&o.server.MaxConns, "max-conns", d.Server.MaxConns, "client connections served at once; at the limit the oldest idle one is closed for a new one (0: 16384, or fewer to fit the open-file limit; a value the limit cannot hold with 1024 to spare refuses to start)")
	fs.IntVar(&o.server.MaxConnsPerAddr, "max-conns-per-addr", d.Server.MaxConnsPerAddr, "client connections from one IPv4 address or IPv6 /64")
	fs.DurationVar(&o.server.StallTimeout, "stall-timeout", d.Server.StallTimeout, "an event loop silent this long is taken as dead: readiness fails and the process exits non-zero")

	fs.IntVar(&o.cell.MaxConcurrent, "cell-max-concurrent", d.Cell.MaxConcurrent, "bulkhead: requests in flight to one cell (503 above)")
	fs.DurationVar(&o.cell.Timeout, "cell-timeout", d.Cell.Timeout, "time a cell has to answer one request (504 after)")
	fs.DurationVar(&o.cell.DialTimeout, "cell-dial-timeout", d.Cell.DialTimeout, "time to connect to a cell")
	fs.DurationVar(&o.cell.UnackedTimeout, "cell-unacked-timeout", d.Cell.UnackedTimeout, "close a connection to a cell whose sent bytes stay unacknowledged this long (TCP_USER_TIMEOUT): a cell cut off by the network fails requests after this, not after --cell-timeout")
	fs.DurationVar(&o.cell.IdleConnTimeout, "cell-idle-conn-timeout", d.Cell.IdleConnTimeout, "close connections to a cell idle this long")
	fs.IntVar(&o.cell.Breaker.Window, "breaker-window", d.Cell.Breaker.Window, "circuit breaker: outcomes remembered per cell")
	fs.IntVar(&o.cell.Breaker.MinCalls, "breaker-min-calls", d.Cell.Breaker.MinCalls, "circuit breaker: outcomes needed before it can open")
	fs.Float64Var(&o.cell.Breaker.FailureRate, "breaker-failure-rate", d.Cell.Breaker.FailureRate, "circuit breaker: open at this share of failures (5xx, errors, timeouts)")
	fs.DurationVar(&o.cell.Breaker.OpenFor, "breaker-open-for", d.Cell.Breaker.OpenFor, "circuit breaker opened by failed calls: refuse this long before the health checks may close it")
	fs.DurationVar(&o.cell.ProbeInterval, "cell-probe-interval", d.Cell.ProbeInterval, "check each instance of each cell this often (GET /v1/health on a connection of its own); 2 misses in a row take it out of rotation and answer its calls in flight 504, and when a cell has none left its breaker opens (0: no checks, the breaker's trials are users' requests)")
	fs.DurationVar(&o.cell.ProbeTimeout, "cell-probe-timeout", d.Cell.ProbeTimeout, "time one health check may take before it is a miss")

	// Where the router runs and who it is, not what it does: not its release.
	fs.Placement("listen", "admin-listen", "registry", "keys", "map-cache", "id", "admin-advertise", "admin-token-file", "handoff-socket",
		"tls-cert", "tls-key", "tls-client-ca", "admin-tls-cert", "admin-tls-key", "admin-tls-client-ca",
		"cell-tls-ca", "cell-tls-cert", "cell-tls-key")
	if err := fs.Parse(args, getenv); err != nil {
		return o, err
	}
	if o.cell.ProbeInterval == 0 {
		o.cell.ProbeInterval = -1 // no checks (a zero Config field is the default)
	}
	if o.cell.ProbeInterval < 0 && o.cell.ProbeInterval != -1 {
		return o, errors.New("--cell-probe-interval must not be negative")
	}
	if o.keysPath == "" {
		return o, errors.New("no keys file: pass --keys (make a key with `router keys add`)")
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, l := range []struct {
		prefix string
		files  *tlsconf.ServerFiles
	}{{"", &o.publicTLS}, {"admin-", &o.adminTLS}} {
		if err := checkServerFiles(l.prefix, l.files, given); err != nil {
			return o, err
		}
	}
	if o.reloadInterval <= 0 {
		return o, errors.New("--reload-interval must be > 0")
	}
	if o.handoffWait <= 0 {
		return o, errors.New("--handoff-wait must be > 0")
	}
	if o.quota.Round <= 0 || o.quota.Lease < 2*o.quota.Round || o.quota.ColdRouters < 1 {
		return o, errors.New("--quota-round must be > 0, --quota-lease at least two rounds and --quota-cold-routers ≥ 1")
	}
	if o.shutdownDelay < 0 || o.shutdownTimeout <= 0 {
		return o, errors.New("--shutdown-delay must be ≥ 0 and --shutdown-timeout > 0")
	}
	// An admin API open to the network would hand out the cells' map,
	// hot users and profiles to anyone who asks.
	if err := adminauth.CheckListen(o.adminListen, o.adminTokenFile != "" || o.adminTLS.ClientCA != ""); err != nil {
		return o, fmt.Errorf("--admin-listen %w: set --admin-token-file or --admin-tls-client-ca, or listen on a loopback address", err)
	}
	o.release, err = fs.Release()
	return o, err
}

// checkServerFiles checks a listener's TLS flags go together. A client
// role set by default (the admin listener's) applies only with a client CA.
func checkServerFiles(prefix string, f *tlsconf.ServerFiles, given map[string]bool) error {
	if f.ClientCA == "" && f.ClientRole != "" {
		if given[prefix+"tls-client-role"] {
			return fmt.Errorf("--%stls-client-role needs --%stls-client-ca", prefix, prefix)
		}
		f.ClientRole = ""
	}
	if f.ClientCA != "" && !f.Enabled() {
		return fmt.Errorf("--%stls-client-ca needs --%stls-cert and --%stls-key", prefix, prefix, prefix)
	}
	return nil
}

// addrs are where run listens.
type addrs struct{ Public, Admin net.Addr }

// run serves until ctx ends, then shuts down gracefully (the process's
// components: lifecycle.go). ready, if not nil, is called once the public
// listener accepts requests.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(addrs)) error {
	if len(args) > 0 {
		switch args[0] {
		case "keygen":
			return keygen(args[1:], stdout, stderr)
		case "keys":
			return keysCommand(args[1:], stdout, stderr)
		}
	}
	o, err := parseFlags(args, os.Getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	log, metrics := program.Start(stderr, o.logLevel)
	program.BuildInfo(metrics, "router", o.release)
	p, err := start(ctx, o, log, metrics)
	if err != nil {
		return err
	}
	defer p.close()
	return p.serve(ctx, ready)
}

// keygen makes a new API key: the key goes to stdout (it is shown once and
// never stored), its entry to the keys file named by -keys (added, or the
// file created: `router keys add`) or, without -keys, to stderr.
func keygen(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("router keygen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := fs.String("client", "", "client id the key belongs to (required)")
	rate := fs.Float64("rate", 100, "the client's sustained limit, requests per second (with -keys, default: the client's, for a client with keys already)")
	burst := fs.Int("burst", 200, "the client's burst (with -keys, default: the client's, for a client with keys already)")
	keysPath := fs.String("keys", "", "keys file to add the entry to (created if missing)")
	var lanes lanesFlag
	fs.Var(&lanes, "lanes", "the priorities the client may send, `high,normal` or one of them (with -keys, default: the client's, for a client with keys already; else normal)")
	defLane := fs.String("default-lane", "", "the lane of an inquiry that names no priority (default: normal if allowed, else high)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *client == "" {
		return errors.New("keygen: -client is required")
	}
	entry := api.KeyEntry{Client: *client, Rate: *rate, Burst: *burst, Lanes: lanes, DefaultLane: *defLane}
	if *keysPath != "" {
		given := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
		key, _, _, err := addKey(*keysPath, entry, given["rate"], given["burst"])
		if err != nil {
			return fmt.Errorf("keygen: %w", err)
		}
		fmt.Fprintln(stdout, key)
		return nil
	}
	key, sum, err := apikey.Generate()
	if err != nil {
		return err
	}
	entry.KeySHA256 = sum
	line, err := json.Marshal(entry)
	if err == nil {
		_, err = apikey.Parse([]byte("[" + string(line) + "]"))
	}
	if err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	fmt.Fprintf(stderr, "keys file entry: %s\n", line)
	fmt.Fprintln(stdout, key)
	return nil
}

// routerID is the router's id in the registry (its announcement, its
// quota lease): --id, or its host name, its admin listener's address when
// it is a specific one, and its admin port. Two routers must not share
// one: they would write one quota lease, each counting itself alone and
// taking the whole of every quota. Routers in network namespaces of one
// host share its name; their admin addresses tell them apart. A successor
// in a handoff takes over the admin listener, and with it the id.
func routerID(o options, admin net.Addr) string {
	if o.id != "" {
		return o.id
	}
	host, _ := os.Hostname()
	if tcp, ok := admin.(*net.TCPAddr); ok {
		if !tcp.IP.IsUnspecified() && !tcp.IP.IsLoopback() {
			host += "-" + tcp.IP.String()
		}
		host += "-" + strconv.Itoa(tcp.Port)
	}
	id := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' {
			return r
		}
		return '-'
	}, host)
	return strings.Trim(id[max(0, len(id)-64):], ".-")
}

// announcement is what the router announces in the registry: its id and
// the admin URL cellctl reaches it at. Without --admin-advertise the URL is
// the admin listener's address, which must then be a specific one.
func announcement(o options, admin net.Addr, useTLS bool) (registry.Announcement, error) {
	a := registry.Announcement{ID: routerID(o, admin), Admin: o.adminAdvertise}
	tcp, _ := admin.(*net.TCPAddr)
	if a.Admin == "" {
		if tcp == nil || tcp.IP.IsUnspecified() {
			return a, fmt.Errorf("the admin listener %s has no specific address to announce: give the URL cellctl should use with --admin-advertise (or 'none')", admin)
		}
		scheme := "http"
		if useTLS {
			scheme = "https"
		}
		a.Admin = scheme + "://" + tcp.String()
	}
	return a, nil
}
