// Package netstack runs cellkit on a network lab (internal/netlab): every
// process on a host of its own, with its own address, as it would be on
// separate machines. It is `loadtest net up|down|status`, and the base of
// the partition drills.
//
// The topology, for N cells of M instances each (addresses in the lab's
// subnet, in this order from .2):
//
//	consul    a Consul agent (server, dev mode, ACLs on, default deny)  :8500
//	agency    agencysim: admin :7000, NICE :7001, KCB :7002
//	router1   a router: public :8080, admin :9080
//	router2   a router: public :8080, admin :9080
//	cIiJ      instance iJ of cell cI (process cI-iJ): the cell (intake :8081, admin :9081)
//	          and node cI-nJ of the cell's JetStream cluster, a nats-server
//	          (clients :4222, routes :6222, monitoring :8222)
//
// A cell's M nodes form a JetStream cluster of its own ("cell-cI"); its
// streams and record bucket have min(M, 3) replicas, so a cell of three
// survives the loss of any one host. Each instance connects to its own
// host's node first, then the others, and the instances share the cell's
// agency quotas by leases (internal/quotalease). The NATS servers require
// a token (DIR/nats-token) of clients and a password of each other's routes.
//
// Every listener is bound to its host's address (or its loopback), never to
// a wildcard. The map is in Consul (consul://CONSUL:8500/cellkit), made in
// process with cellctl's own commands (init, provision); every cellkit
// process gets the Consul management token as CONSUL_HTTP_TOKEN. The admin
// APIs, which listen on a host address, take the bearer token of
// DIR/admin-token; the cells serve as routers' the requests from the
// routers' and the cells' addresses (--trusted-router-cidrs), as they serve
// loopback in the local stack.
//
// DIR keeps net.json (the stack: hosts, processes, URLs, key and tokens;
// 0600), netlab-PREFIX.json (the lab's own record, for a sweep after a
// crash), the tokens, the router's keys file, the cells' stores and the
// processes' logs (DIR/logs/NAME.log). The binaries come from a directory,
// ./bin by default (`make build`; consul from `make tools`).
package netstack

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/atomicfile"
	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/netlab"
)

// StateFile is the stack's record in its directory.
const StateFile = "net.json"

// Family is the prefix family of the labs `loadtest net up` makes.
const Family = "ckn"

// The ports on each host.
const (
	agencyAdmin  = 7000
	agencyNICE   = 7001
	agencyKCB    = 7002
	routerPublic = 8080
	routerAdmin  = 9080
	cellIntake   = 8081
	cellAdmin    = 9081
	natsClient   = 4222
	natsRoute    = 6222
	natsMonitor  = 8222
)

// The agency cuts sessions silent for agencyIdle (a firewall's idle
// timeout): the cells heartbeat sessions idle for 30 s, checked every
// 7.5 s. A lease outlives its holder's last renewal by leaseGrace, more
// than agencyIdle: the sessions of a host that vanished without a FIN are
// gone at the agency before their leases go to the survivors.
const (
	agencyIdle = 45 * time.Second
	leaseGrace = 50 * time.Second
)

// Config describes the stack. Zero values mean the defaults in brackets.
type Config struct {
	// Dir keeps the stack's record, tokens, stores and logs [var/net].
	Dir string
	// Bin holds consul, cell, router and agencysim [bin].
	Bin string
	// Cells is the number of cells, c1..cN [2].
	Cells int
	// Instances is the number of instances of each cell, each on a host
	// with a node of the cell's JetStream cluster [3].
	Instances int
	// Lab is the network lab's configuration. An empty StateDir means Dir.
	// [DefaultConfig: family ckn, detached, so that it outlives net up]
	Lab netlab.Config
	// ReadyWait bounds the wait for every process to be ready [60s].
	ReadyWait time.Duration
}

// DefaultConfig is `loadtest net up` without flags.
func DefaultConfig() Config {
	return Config{Dir: "var/net", Bin: "bin", Cells: 2, Instances: 3, Lab: netlab.Config{Family: Family, Detached: true}, ReadyWait: 60 * time.Second}
}

// withDefaults fills the zero fields of c from DefaultConfig, field by
// field; the lab fills Lab's.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Dir == "" {
		c.Dir = d.Dir
	}
	if c.Bin == "" {
		c.Bin = d.Bin
	}
	if c.Cells == 0 {
		c.Cells = d.Cells
	}
	if c.Instances == 0 {
		c.Instances = d.Instances
	}
	if c.ReadyWait <= 0 {
		c.ReadyWait = d.ReadyWait
	}
	return c
}

// Options carry the stack's collaborators. The zero value is usable.
type Options struct {
	// Logger gets the lab's lines. Nil means none.
	Logger *slog.Logger
	// Progress gets a line for each step of Up. Nil means none.
	Progress io.Writer
}

// Stack is DIR/net.json: the lab and what runs on it. Its devstack part
// names the processes (each with its namespace), the registry, router1's
// URLs and the API key, as dev.json does for the local stack.
type Stack struct {
	devstack.Stack
	Lab            Lab                `json:"lab"`
	Hosts          []netlab.HostState `json:"hosts"`
	Routers        []string           `json:"routers"` // every router's public base URL
	CellSet        []Cell             `json:"cells"`
	ConsulToken    string             `json:"consul_token"` // the cellkit policy's
	ConsulRoot     string             `json:"consul_root"`  // the management token
	AdminTokenFile string             `json:"admin_token_file"`
	NATSTokenFile  string             `json:"nats_token_file"`
}

// Cell is a cell of the stack and where its instances run.
type Cell struct {
	ID        string     `json:"id"`
	Instances []Instance `json:"instances"`
}

// Instance is one instance of a cell: its host, its cell process and the
// JetStream node beside it.
type Instance struct {
	ID   string `json:"id"`   // i1
	Host string `json:"host"` // c1i1
	Proc string `json:"proc"` // c1-i1
	NATS string `json:"nats"` // c1-n1
}

// Lab locates the stack's network lab.
type Lab struct {
	Prefix   string       `json:"prefix"`
	StateDir string       `json:"state_dir"`
	Subnet   netip.Prefix `json:"subnet"`
	Gateway  netip.Addr   `json:"gateway"`
	Bridge   string       `json:"bridge"`
}

// StatePath is the stack's record in dir.
func StatePath(dir string) string { return filepath.Join(dir, StateFile) }

// Read reads DIR/net.json.
func Read(dir string) (*Stack, error) {
	b, err := os.ReadFile(StatePath(dir))
	if err != nil {
		return nil, err
	}
	var st Stack
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("read %s: %w", StatePath(dir), err)
	}
	return &st, nil
}

func write(st *Stack) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(StatePath(st.Dir), append(b, '\n'), 0o600)
}

// Cells are the cell processes, c1's instances first (the embedded
// devstack.Stack's Cells would count Consul and the routers among them).
func (st *Stack) Cells() []devstack.Process {
	var cells []devstack.Process
	for _, p := range st.Processes {
		if p.Addrs["intake"] != "" {
			cells = append(cells, p)
		}
	}
	return cells
}

// Cell returns the cell of that id.
func (st *Stack) Cell(id string) (Cell, bool) {
	for _, c := range st.CellSet {
		if c.ID == id {
			return c, true
		}
	}
	return Cell{}, false
}

// Host returns the host named name.
func (st *Stack) Host(name string) (netlab.HostState, bool) {
	for _, h := range st.Hosts {
		if h.Name == name {
			return h, true
		}
	}
	return netlab.HostState{}, false
}

// OpenLab opens the stack's network lab, to cut its hosts apart or look at
// them.
func (st *Stack) OpenLab(opts netlab.Options) (*netlab.Lab, error) {
	return netlab.Open(st.Lab.StateDir, st.Lab.Prefix, opts)
}

// Up makes the lab and starts the stack on it; it returns once every
// process is ready. On a failure it takes down what it made, keeping the
// logs. A stack recorded in cfg.Dir whose processes still run is refused;
// one that crashed is swept first. One piece: the lab's hosts, then the
// processes in the order they need each other, under one cleanup that
// takes down what was made when a later step fails.
func Up(ctx context.Context, cfg Config, opts Options) (*Stack, error) {
	cfg = cfg.withDefaults()
	if cfg.Cells < 1 || cfg.Cells > 99 {
		return nil, fmt.Errorf("%d cells: want 1 to 99", cfg.Cells)
	}
	if cfg.Instances < 1 || cfg.Instances > 5 {
		return nil, fmt.Errorf("%d instances: want 1 to 5 (JetStream replicates over at most 5 nodes)", cfg.Instances)
	}
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	if old, err := Read(dir); err == nil {
		for _, p := range old.Processes {
			if devstack.Alive(p.PID) {
				return nil, fmt.Errorf("a stack is up in %s (%s pid %d): 'loadtest net down --dir %s' first", dir, p.Name, p.PID, cfg.Dir)
			}
		}
	}
	if sw, err := sweepDir(dir); err != nil {
		return nil, fmt.Errorf("sweep the crashed lab in %s: %w", dir, err)
	} else if !sw.Empty() {
		fmt.Fprintf(progress, "net: swept a crashed lab %v: %d processes, %d namespaces, %d links\n", sw.Prefixes, len(sw.Killed), len(sw.Namespaces), len(sw.Links))
	}
	bins, err := devstack.FindBinaries([]string{cfg.Bin}, "consul", "cell", "router", "agencysim", "nats-server", "cellctl")
	if err != nil {
		return nil, err
	}
	// The cells' stores and the routers' map caches belong to the map of
	// a Consul that is gone: a cached map newer than the new Consul's
	// would be kept over it.
	for _, stale := range []string{"cells", "router1", "router2"} {
		if err := os.RemoveAll(filepath.Join(dir, stale)); err != nil {
			return nil, err
		}
	}
	if err := os.RemoveAll(filepath.Join(dir, "nats")); err != nil {
		return nil, err
	}
	for _, sub := range []string{"logs", "router", "cells", "nats", "run"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, err
		}
	}
	consulRoot, adminToken, natsToken := uuid(), randomHex(16), randomHex(16)
	adminTokenFile, natsTokenFile := filepath.Join(dir, "admin-token"), filepath.Join(dir, "nats-token")
	for path, v := range map[string]string{adminTokenFile: adminToken, filepath.Join(dir, "consul-root-token"): consulRoot, natsTokenFile: natsToken} {
		if err := atomicfile.WriteFile(path, []byte(v+"\n"), 0o600); err != nil {
			return nil, err
		}
	}
	key, err := devstack.APIKey(ctx, bins["router"], dir, "lab", false)
	if err != nil {
		return nil, err
	}

	labCfg := cfg.Lab
	if labCfg.StateDir == "" {
		labCfg.StateDir = dir
	}
	lab, err := netlab.New(labCfg, netlab.Options{Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	st := &Stack{
		Stack: devstack.Stack{Dir: dir, APIKey: key, StartedAt: time.Now().UTC()},
		Lab: Lab{Prefix: lab.Prefix(), StateDir: filepath.Dir(lab.StatePath()), Subnet: lab.Subnet(),
			Gateway: lab.Gateway(), Bridge: lab.Bridge()},
		ConsulRoot: consulRoot, AdminTokenFile: adminTokenFile, NATSTokenFile: natsTokenFile,
	}
	fail := func(err error) error {
		devstack.StopAll(context.WithoutCancel(ctx), st.Processes, 5*time.Second, nil)
		if cerr := lab.Close(); cerr != nil {
			err = fmt.Errorf("%w (and removing the lab: %v)", err, cerr)
		}
		_ = os.Remove(StatePath(dir))
		return err
	}
	if err := write(st); err != nil {
		return nil, fail(err)
	}
	fmt.Fprintf(progress, "net: lab %s on %s (gateway %s, bridge %s)\n", lab.Prefix(), lab.Subnet(), lab.Gateway(), lab.Bridge())

	names := []string{"consul", "agency", "router1", "router2"}
	for i := 1; i <= cfg.Cells; i++ {
		c := Cell{ID: "c" + strconv.Itoa(i)}
		for j := 1; j <= cfg.Instances; j++ {
			id := "i" + strconv.Itoa(j)
			in := Instance{ID: id, Host: fmt.Sprintf("%si%d", c.ID, j), Proc: devstack.InstanceName(c.ID, id), NATS: fmt.Sprintf("%s-n%d", c.ID, j)}
			c.Instances = append(c.Instances, in)
			names = append(names, in.Host)
		}
		st.CellSet = append(st.CellSet, c)
	}
	hosts := map[string]*netlab.Host{}
	for _, n := range names {
		h, err := lab.AddHost(n)
		if err != nil {
			return nil, fail(err)
		}
		hosts[n] = h
		st.Hosts = append(st.Hosts, netlab.HostState{Name: n, Netns: h.Netns(), Link: h.Link(), Addr: h.Addr()})
	}
	if err := write(st); err != nil {
		return nil, fail(err)
	}

	hc := &http.Client{Timeout: 2 * time.Second}
	defer hc.CloseIdleConnections()
	launch := devstack.Launcher{Dir: dir, Cellctl: bins["cellctl"], Record: &st.Stack, Save: func() error { return write(st) }}
	start := func(h *netlab.Host, p devstack.Process) (*devstack.Child, error) { return launch.Start(p, h.Start) }

	// Consul first: the map goes into it before anything reads it.
	consul := hosts["consul"]
	c, err := start(consul, devstack.ConsulProcess(bins["consul"], consul.Addr(), consulRoot, ""))
	if err != nil {
		return nil, fail(err)
	}
	if err := devstack.WaitReady(ctx, hc, cfg.ReadyWait, c); err != nil {
		return nil, fail(err)
	}
	if err := devstack.WaitConsul(ctx, hc, consul.HostPort(devstack.ConsulHTTP), consulRoot, cfg.ReadyWait); err != nil {
		return nil, fail(err)
	}
	if st.ConsulToken, err = devstack.CellkitConsulToken(consul.HostPort(devstack.ConsulHTTP), consulRoot); err != nil {
		return nil, fail(err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, "consul-token"), []byte(st.ConsulToken+"\n"), 0o600); err != nil {
		return nil, fail(err)
	}
	st.Registry = "consul://" + consul.HostPort(devstack.ConsulHTTP) + "/cellkit"
	fmt.Fprintf(progress, "net: consul ready on %s\n", consul.HostPort(devstack.ConsulHTTP))
	if err := provision(ctx, st, hosts); err != nil {
		return nil, fail(err)
	}
	fmt.Fprintf(progress, "net: map with %d cells in %s\n", cfg.Cells, st.Registry)

	env := []string{"CONSUL_HTTP_TOKEN=" + st.ConsulToken}
	agency := hosts["agency"]
	type hostProc struct {
		host *netlab.Host
		p    devstack.Process
	}
	procs := []hostProc{{agency, devstack.Process{
		Name: "agencysim", Bin: bins["agencysim"],
		Args: []string{"-admin-listen", agency.HostPort(agencyAdmin), "-nice-listen", agency.HostPort(agencyNICE), "-kcb-listen", agency.HostPort(agencyKCB),
			"-nice-sessions", "80", "-kcb-sessions", "40", "-latency-p50", "50ms", "-latency-p99", "150ms",
			"-idle-timeout", agencyIdle.String()},
		Ready: "http://" + agency.HostPort(agencyAdmin) + "/readyz",
		Addrs: map[string]string{"admin": agency.HostPort(agencyAdmin), "nice": agency.HostPort(agencyNICE), "kcb": agency.HostPort(agencyKCB)},
	}}}
	var trusted []string
	for _, n := range names {
		if n != "consul" && n != "agency" {
			trusted = append(trusted, hosts[n].Addr().String()+"/32")
		}
	}
	// Each cell's JetStream cluster first: its instances need it to start.
	var natsNodes []*devstack.Child
	for _, c := range st.CellSet {
		for _, in := range c.Instances {
			p, err := natsProcess(bins["nats-server"], dir, c, in, hosts, natsToken)
			if err != nil {
				return nil, fail(err)
			}
			n, err := start(hosts[in.Host], p)
			if err != nil {
				return nil, fail(err)
			}
			natsNodes = append(natsNodes, n)
		}
	}
	fmt.Fprintf(progress, "net: started %d JetStream nodes; waiting until each cell's cluster has a leader...\n", len(natsNodes))
	if err := devstack.WaitReady(ctx, hc, cfg.ReadyWait, natsNodes...); err != nil {
		return nil, fail(err)
	}
	replicas := strconv.Itoa(min(cfg.Instances, 3))
	for _, c := range st.CellSet {
		for j, in := range c.Instances {
			h := hosts[in.Host]
			// The instance's own node first, then the others in turn.
			var urls []string
			for k := range c.Instances {
				other := c.Instances[(j+k)%len(c.Instances)]
				urls = append(urls, "nats://"+hosts[other.Host].HostPort(natsClient))
			}
			procs = append(procs, hostProc{h, devstack.Process{
				Name: in.Proc, Cell: c.ID, Instance: in.ID, Bin: bins["cell"], Env: env,
				Args: []string{"--cell", c.ID, "--instance", in.ID, "--registry", st.Registry, "--store", filepath.Join(dir, "cells", in.Proc),
					"--intake", h.HostPort(cellIntake), "--admin", h.HostPort(cellAdmin), "--admin-token-file", adminTokenFile,
					"--nats-url", strings.Join(urls, ","), "--nats-token-file", natsTokenFile, "--replicas", replicas,
					"--lease-grace", leaseGrace.String(),
					"--agency", "nice=" + agency.HostPort(agencyNICE), "--agency", "kcb=" + agency.HostPort(agencyKCB),
					"--trusted-router-cidrs", strings.Join(trusted, ",")},
				Ready: "http://" + h.HostPort(cellAdmin) + "/readyz",
				Addrs: map[string]string{"intake": h.HostPort(cellIntake), "admin": h.HostPort(cellAdmin), "cell": c.ID},
			}})
		}
	}
	for _, n := range []string{"router1", "router2"} {
		h := hosts[n]
		if err := os.MkdirAll(filepath.Join(dir, n), 0o755); err != nil {
			return nil, fail(err)
		}
		procs = append(procs, hostProc{h, devstack.Process{
			Name: n, Bin: bins["router"], Env: env,
			Args: []string{"--listen", h.HostPort(routerPublic), "--admin-listen", h.HostPort(routerAdmin), "--admin-token-file", adminTokenFile,
				"--registry", st.Registry, "--keys", filepath.Join(dir, "router", "keys.json"),
				"--map-cache", filepath.Join(dir, n, "map-cache.json"), "--handoff-socket", filepath.Join(dir, n, "handoff", "router.sock"),
				// Two routers serve: one that never reached the
				// registry splits each quota over both.
				"--quota-cold-routers", "2"},
			Ready: "http://" + h.HostPort(routerAdmin) + "/readyz",
			Addrs: map[string]string{"listen": h.HostPort(routerPublic), "admin": h.HostPort(routerAdmin)},
		}})
		st.Routers = append(st.Routers, "http://"+h.HostPort(routerPublic))
	}
	r1 := hosts["router1"]
	st.Router, st.RouterAdmin = st.Routers[0], "http://"+r1.HostPort(routerAdmin)
	st.AgencyAdmin = "http://" + agency.HostPort(agencyAdmin)
	var children []*devstack.Child
	for _, x := range procs {
		c, err := start(x.host, x.p)
		if err != nil {
			return nil, fail(err)
		}
		children = append(children, c)
	}
	fmt.Fprintf(progress, "net: started %d processes (logs in %s); waiting until they are ready...\n", len(children)+1, filepath.Join(dir, "logs"))
	if err := devstack.WaitReady(ctx, hc, cfg.ReadyWait, children...); err != nil {
		return nil, fail(err)
	}
	return st, nil
}

// natsProcess is node in.NATS of cell c's JetStream cluster, on in's
// host: its configuration (with the client token and the route password,
// so 0600) in DIR/nats/NODE.conf, its store in DIR/nats/NODE. Every write
// is synced to disk before it is acknowledged, as in the embedded server.
func natsProcess(bin, dir string, c Cell, in Instance, hosts map[string]*netlab.Host, token string) (devstack.Process, error) {
	h := hosts[in.Host]
	// The route password is derived from the client token: one secret to
	// keep for the stack, distinct on the wire.
	routePass := fmt.Sprintf("%x", sha256.Sum256([]byte("route:"+token)))[:32]
	var routes []string
	for _, other := range c.Instances {
		routes = append(routes, strconv.Quote("nats-route://route:"+routePass+"@"+hosts[other.Host].HostPort(natsRoute)))
	}
	conf := fmt.Sprintf(`server_name: %q
listen: %q
http: %q
jetstream {
  store_dir: %q
  sync_interval: always
  max_memory_store: 64MB
}
authorization { token: %q }
cluster {
  name: %q
  listen: %q
  authorization { user: route, password: %q }
  routes: [%s]
  ping_interval: "1s"
  ping_max: 2
  write_deadline: "2s"
}
`, in.NATS, h.HostPort(natsClient), h.HostPort(natsMonitor), filepath.Join(dir, "nats", in.NATS),
		token, "cell-"+c.ID, h.HostPort(natsRoute), routePass, strings.Join(routes, ", "))
	path := filepath.Join(dir, "nats", in.NATS+".conf")
	if err := atomicfile.WriteFile(path, []byte(conf), 0o600); err != nil {
		return devstack.Process{}, err
	}
	return devstack.Process{
		Name: in.NATS, Bin: bin, Args: []string{"-c", path},
		// 200 once JetStream is current: the cluster has a meta leader.
		Ready: "http://" + h.HostPort(natsMonitor) + "/healthz",
		Addrs: map[string]string{"nats": h.HostPort(natsClient), "route": h.HostPort(natsRoute), "monitor": h.HostPort(natsMonitor), "cell": c.ID},
	}, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// uuid is a random (version 4) UUID, the form Consul wants for tokens.
func uuid() string {
	b := make([]byte, 16)
	rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
