// Package natsembed runs a NATS server with JetStream inside the process, the
// default queue and store of a cell.
//
// Guarantees: JetStream keeps its data in files under the given directory and
// every write is synced to disk before it is acknowledged (SyncAlways), so a
// single-replica stream loses no message it acknowledged, even when the
// process is killed. The server listens on loopback only (127.0.0.1, a free
// port unless one is given), or not at all; Conn always works, in process.
package natsembed

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/cellkit/cellkit/internal/freeport"
	"github.com/cellkit/cellkit/internal/storage"
)

// Config describes the embedded server. Zero values mean the defaults in
// brackets.
type Config struct {
	// Name is the server name, shown in logs and monitoring ("cell-c1").
	// Required.
	Name string
	// StoreDir holds the JetStream file store. Required.
	StoreDir string
	// Host is the listen address [127.0.0.1]. Anything but a loopback
	// address is refused: the server has no authentication.
	Host string
	// Port is the client port; 0 means a free port chosen by the kernel, -1
	// means no listener at all (in-process connections only).
	Port int
	// MaxStore caps the JetStream file store in bytes [the size of the
	// filesystem holding StoreDir: no limit beyond the streams' own and
	// the disk's]. (Left to the server, the cap would be three quarters of
	// the space free at its start, and a server started again on a disk
	// that was nearly full would refuse every write from then on, however
	// much room came back.)
	MaxStore int64
	// ReadyTimeout bounds how long Start waits for the server [10s].
	ReadyTimeout time.Duration
	// Debug logs the server's debug lines.
	Debug bool
	// Cluster, when its Name is set, makes the server a node of a
	// JetStream cluster (to run replicated streams, as in production, on
	// one machine: tests and drills). Its listener is on Host too.
	Cluster Cluster
}

// Cluster is the clustering of an embedded server.
type Cluster struct {
	Name string // the cluster's name, the same on every node
	// Port is the route port; 0 a free one (see RouteURL).
	Port int
	// Routes are other nodes' route URLs (nats-route://127.0.0.1:PORT);
	// one seed is enough, the nodes gossip the rest.
	Routes []string
}

// Options carry the server's collaborators. The zero value is usable.
type Options struct {
	// Logger receives the server's notices, warnings and errors (its debug
	// lines with Config.Debug). Nil means none.
	Logger *slog.Logger
}

// withDefaults fills the nil collaborators that have a default: Logger
// (none).
func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Server is a running embedded NATS server.
type Server struct {
	ns    atomic.Pointer[server.Server] // the one running (Restart replaces it)
	cfg   Config
	opts  *server.Options
	log   *slog.Logger
	state *storeState
	mu    sync.Mutex // serialises Restart and Shutdown
}

// storeState is what the server's log said of its file store: a write it
// could not make. A JetStream file store that fails a write (a full disk)
// refuses every write after it, even once there is room again, until the
// store is opened again: Restart.
type storeState struct {
	failed atomic.Int64 // write errors logged since the start or the last restart
	last   atomic.Value // string: the last one
}

// DefaultConfig returns the defaults in brackets above.
func DefaultConfig() Config {
	return Config{Host: "127.0.0.1", ReadyTimeout: 10 * time.Second}
}

// withDefaults fills the zero fields of c from DefaultConfig, field by
// field.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Host == "" {
		c.Host = d.Host
	}
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = d.ReadyTimeout
	}
	return c
}

// Start starts the server and waits until it accepts connections.
func Start(cfg Config, opts Options) (*Server, error) {
	if cfg.Name == "" || cfg.StoreDir == "" {
		return nil, errors.New("embedded nats: name and store dir are required")
	}
	cfg, opts = cfg.withDefaults(), opts.withDefaults()
	log := opts.Logger
	if ip := net.ParseIP(cfg.Host); ip == nil || !ip.IsLoopback() {
		if cfg.Host != "localhost" {
			return nil, fmt.Errorf("embedded nats: host %q is not a loopback address", cfg.Host)
		}
	}
	dir, err := filepath.Abs(cfg.StoreDir)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: store dir: %w", err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("embedded nats: store dir: %w", err)
	}
	sopts := &server.Options{
		ServerName:         cfg.Name,
		Host:               cfg.Host,
		Port:               cfg.Port,
		DontListen:         cfg.Port < 0,
		JetStream:          true,
		StoreDir:           dir,
		SyncAlways:         true,
		JetStreamMaxMemory: 64 << 20,
		JetStreamMaxStore:  cfg.MaxStore,
		NoSigs:             true,
		NoSystemAccount:    true,
	}
	if sopts.DontListen {
		sopts.Port = 0
	} else if cfg.Port == 0 {
		sopts.Port = server.RANDOM_PORT
	}
	if sopts.JetStreamMaxStore == 0 {
		u, err := storage.Stat(dir)
		if err != nil {
			return nil, fmt.Errorf("embedded nats: store dir: %w", err)
		}
		sopts.JetStreamMaxStore = u.Size
	}
	if cl := cfg.Cluster; cl.Name != "" {
		sopts.Cluster = server.ClusterOpts{Name: cl.Name, Host: cfg.Host, Port: cl.Port}
		if cl.Port == 0 {
			sopts.Cluster.Port = server.RANDOM_PORT
		}
		for _, r := range cl.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("embedded nats: route %q: %w", r, err)
			}
			sopts.Routes = append(sopts.Routes, u)
		}
		// Clustered JetStream talks over the system account.
		sopts.NoSystemAccount = false
	}
	s := &Server{cfg: cfg, opts: sopts, state: &storeState{}, log: log.With("component", "nats")}
	ns, err := s.boot()
	if err != nil {
		return nil, err
	}
	s.ns.Store(ns)
	return s, nil
}

// boot starts a server with s's options and waits until it is ready.
func (s *Server) boot() (*server.Server, error) {
	ns, err := server.NewServer(s.opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	ns.SetLoggerV2(logger{l: s.log, store: s.state}, s.cfg.Debug, false, false)
	ns.Start()
	if !ns.ReadyForConnections(s.cfg.ReadyTimeout) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("embedded nats: not ready within %v (store %s)", s.cfg.ReadyTimeout, s.opts.StoreDir)
	}
	return ns, nil
}

// StoreFailed reports whether the file store failed a write (the server
// logged it) since the start or the last Restart, with the server's words
// for the last one.
func (s *Server) StoreFailed() (bool, string) {
	if s.state.failed.Load() == 0 {
		return false, ""
	}
	last, _ := s.state.last.Load().(string)
	return true, last
}

// Restart shuts the server down (its stores flushed) and starts it again
// on the same store dir, port and limits, in process: every stream's file
// store is opened again, which clears a write error it held (a file store
// that failed a write refuses every write after it). Connections made
// with Connect reconnect to the new server by themselves (their in-process
// dialer follows it), with their subscriptions; their requests fail
// meanwhile. JetStream alone is not restarted in place: the server's
// EnableJetStream races with requests arriving meanwhile. Clustered
// servers are not restarted.
func (s *Server) Restart() error {
	if s.cfg.Cluster.Name != "" {
		return errors.New("embedded nats: a clustered server is not restarted in process")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.ns.Load()
	if s.opts.Port == server.RANDOM_PORT {
		if a, ok := old.Addr().(*net.TCPAddr); ok {
			s.opts.Port = a.Port // the same port again: a client across TCP finds it
		}
	}
	before := s.state.failed.Load()
	old.Shutdown()
	old.WaitForShutdown()
	ns, err := s.boot()
	if err != nil {
		return fmt.Errorf("embedded nats: start again: %w", err)
	}
	s.ns.Store(ns)
	s.state.failed.Add(-before) // what the new server logged stays counted
	return nil
}

// ClusterConfig describes a cluster of embedded servers.
type ClusterConfig struct {
	// Name is the cluster's; the nodes are Name-0, Name-1, … Required.
	Name string
	// Dirs are the nodes' store dirs, one per node. Required.
	Dirs []string
	// Timeout bounds the wait for JetStream on every node [30s].
	Timeout time.Duration
}

// DefaultClusterConfig returns the defaults in brackets above.
func DefaultClusterConfig() ClusterConfig {
	return ClusterConfig{Timeout: 30 * time.Second}
}

// withDefaults fills the zero fields of c from DefaultClusterConfig,
// field by field.
func (c ClusterConfig) withDefaults() ClusterConfig {
	if c.Timeout <= 0 {
		c.Timeout = DefaultClusterConfig().Timeout
	}
	return c
}

// StartCluster starts len(cfg.Dirs) clustered nodes on loopback, each with
// its store in its dir, and waits until JetStream is usable on every node.
// Clustered JetStream wants every node's routes configured from the start,
// so free route ports are chosen first (freePort); should another
// process take one before its node listens on it (the node is then never
// ready), the cluster is started again on new ports, three times at
// most. On error the nodes started are shut down.
func StartCluster(cfg ClusterConfig, opts Options) ([]*Server, error) {
	cfg = cfg.withDefaults()
	if cfg.Name == "" || len(cfg.Dirs) == 0 {
		return nil, errors.New("embedded nats cluster: a name and store dirs are required")
	}
	var err error
	for range 3 {
		var nodes []*Server
		if nodes, err = tryCluster(cfg, opts); !errors.Is(err, errNodeStart) {
			return nodes, err
		}
	}
	return nil, err
}

// freePort is a loopback port free for a node started later
// (freeport: below the kernel's ephemeral range, so no connection or
// other server takes it meanwhile); a variable: the tests make it answer
// a taken one.
var freePort = func() (int, error) {
	addr, err := freeport.Addr()
	if err != nil {
		return 0, err
	}
	_, port, _ := net.SplitHostPort(addr)
	return strconv.Atoi(port)
}

// errNodeStart is a cluster's node that did not start.
var errNodeStart = errors.New("a node did not start")

// tryCluster is one try of StartCluster, on route ports chosen anew.
func tryCluster(cfg ClusterConfig, opts Options) ([]*Server, error) {
	name, dirs, timeout := cfg.Name, cfg.Dirs, cfg.Timeout
	var routes []string
	var ports []int
	for range dirs {
		port, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("embedded nats cluster: %w", err)
		}
		ports = append(ports, port)
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", port))
	}
	var nodes []*Server
	fail := func(err error) ([]*Server, error) {
		for _, n := range nodes {
			n.Shutdown()
		}
		return nil, err
	}
	for i, dir := range dirs {
		n, err := Start(Config{
			Name: fmt.Sprintf("%s-%d", name, i), StoreDir: dir,
			Cluster: Cluster{Name: name, Port: ports[i], Routes: routes},
		}, opts)
		if err != nil {
			return fail(fmt.Errorf("embedded nats cluster %s: %w: %w", name, errNodeStart, err))
		}
		nodes = append(nodes, n)
	}
	deadline := time.Now().Add(timeout)
	for _, n := range nodes {
		for !n.JetStreamReady() {
			if time.Now().After(deadline) {
				return fail(fmt.Errorf("embedded nats cluster %s: JetStream not ready within %v", name, timeout))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// And the meta leader sees every node online with its stats: until
	// then, a replicated stream may be refused ("no suitable peers for
	// placement, peer offline").
	for {
		for _, n := range nodes {
			if len(n.ns.Load().JetStreamClusterPeers()) == len(nodes) {
				return nodes, nil
			}
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("embedded nats cluster %s: the meta leader did not see all %d nodes online within %v", name, len(nodes), timeout))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// RouteURL is the server's cluster route URL, "" when not clustered.
func (s *Server) RouteURL() string {
	a := s.ns.Load().ClusterAddr()
	if a == nil {
		return ""
	}
	return "nats-route://" + a.String()
}

// JetStreamReady reports whether the server's JetStream is usable: in a
// cluster, once the nodes have elected a meta leader.
func (s *Server) JetStreamReady() bool {
	ns := s.ns.Load()
	if !ns.JetStreamEnabled() {
		return false
	}
	if s.cfg.Cluster.Name == "" {
		return true
	}
	return ns.JetStreamIsClustered() && ns.JetStreamIsCurrent()
}

// ClientURL is the server's nats:// URL, "" when it does not listen.
func (s *Server) ClientURL() string {
	if s.cfg.Port < 0 {
		return ""
	}
	return s.ns.Load().ClientURL()
}

// Connect opens a client connection in process (no TCP), with the given
// extra options. It dials the server running at each (re)connection, so
// it follows a Restart.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.InProcessServer(inProcess{s}), nats.Name(s.cfg.Name)}, opts...)
	nc, err := nats.Connect("", opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to embedded nats: %w", err)
	}
	return nc, nil
}

// inProcess dials the server running now.
type inProcess struct{ s *Server }

func (p inProcess) InProcessConn() (net.Conn, error) { return p.s.ns.Load().InProcessConn() }

// Shutdown stops the server after its store is flushed, and waits for it.
func (s *Server) Shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := s.ns.Load()
	ns.Shutdown()
	ns.WaitForShutdown()
}

// logger sends the server's log lines to slog; its notices (the start
// banner, one line per stream) at debug level. An error line telling of a
// write the file store could not make is also recorded in store.
type logger struct {
	l     *slog.Logger
	store *storeState
}

func (l logger) Noticef(format string, v ...any) { l.l.Debug(fmt.Sprintf(format, v...)) }
func (l logger) Warnf(format string, v ...any)   { l.l.Warn(fmt.Sprintf(format, v...)) }
func (l logger) Fatalf(format string, v ...any)  { l.Errorf(format, v...) }
func (l logger) Errorf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	if strings.Contains(msg, "Critical write error") || strings.Contains(msg, "no space left on device") {
		l.store.last.Store(msg)
		l.store.failed.Add(1)
	}
	l.l.Error(msg)
}
func (l logger) Debugf(format string, v ...any) { l.l.Debug(fmt.Sprintf(format, v...)) }
func (l logger) Tracef(format string, v ...any) { l.l.Debug(fmt.Sprintf(format, v...)) }
