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
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
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
	// MaxStore caps the JetStream file store in bytes [no limit beyond the
	// streams' own].
	MaxStore int64
	// ReadyTimeout bounds how long Start waits for the server [10s].
	ReadyTimeout time.Duration
	// Debug logs the server's debug lines.
	Debug bool
}

// Server is a running embedded NATS server.
type Server struct {
	ns  *server.Server
	cfg Config
}

// Start starts the server and waits until it accepts connections.
func Start(cfg Config, log *slog.Logger) (*Server, error) {
	if cfg.Name == "" || cfg.StoreDir == "" {
		return nil, errors.New("embedded nats: name and store dir are required")
	}
	if log == nil {
		log = slog.Default()
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if ip := net.ParseIP(cfg.Host); ip == nil || !ip.IsLoopback() {
		if cfg.Host != "localhost" {
			return nil, fmt.Errorf("embedded nats: host %q is not a loopback address", cfg.Host)
		}
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 10 * time.Second
	}
	dir, err := filepath.Abs(cfg.StoreDir)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: store dir: %w", err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("embedded nats: store dir: %w", err)
	}
	opts := &server.Options{
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
	if opts.DontListen {
		opts.Port = 0
	} else if cfg.Port == 0 {
		opts.Port = server.RANDOM_PORT
	}
	if opts.JetStreamMaxStore == 0 {
		opts.JetStreamMaxStore = -1
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	ns.SetLoggerV2(logger{log.With("component", "nats")}, cfg.Debug, false, false)
	ns.Start()
	if !ns.ReadyForConnections(cfg.ReadyTimeout) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("embedded nats: not ready within %v (store %s)", cfg.ReadyTimeout, dir)
	}
	return &Server{ns: ns, cfg: cfg}, nil
}

// ClientURL is the server's nats:// URL, "" when it does not listen.
func (s *Server) ClientURL() string {
	if s.cfg.Port < 0 {
		return ""
	}
	return s.ns.ClientURL()
}

// Connect opens a client connection in process (no TCP), with the given
// extra options.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.InProcessServer(s.ns), nats.Name(s.cfg.Name)}, opts...)
	nc, err := nats.Connect("", opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to embedded nats: %w", err)
	}
	return nc, nil
}

// Shutdown stops the server after its store is flushed, and waits for it.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}

// logger sends the server's log lines to slog; its notices (the start
// banner, one line per stream) at debug level.
type logger struct{ l *slog.Logger }

func (l logger) Noticef(format string, v ...any) { l.l.Debug(fmt.Sprintf(format, v...)) }
func (l logger) Warnf(format string, v ...any)   { l.l.Warn(fmt.Sprintf(format, v...)) }
func (l logger) Fatalf(format string, v ...any)  { l.l.Error(fmt.Sprintf(format, v...)) }
func (l logger) Errorf(format string, v ...any)  { l.l.Error(fmt.Sprintf(format, v...)) }
func (l logger) Debugf(format string, v ...any)  { l.l.Debug(fmt.Sprintf(format, v...)) }
func (l logger) Tracef(format string, v ...any)  { l.l.Debug(fmt.Sprintf(format, v...)) }
