// Command router is cellkit's edge router: it authenticates platforms by API
// key, rate-limits them, routes each request to the cell that owns its user
// (the cell map comes from the registry) and proxies it there behind a
// per-cell bulkhead, circuit breaker and timeout. See internal/router.
//
//	router [flags]                 serve
//	router keygen [flags]          make an API key and its keys-file entry
//
// A flag not on the command line is read from CELLKIT_ROUTER_<FLAG>, else
// CELLKIT_<FLAG> (upper case, '-' as '_': CELLKIT_ROUTER_CELL_TIMEOUT,
// CELLKIT_REGISTRY); see internal/flagenv.
//
// Admin listener: /healthz, /readyz (ready once there is a cell map; says
// when it is stale), /metrics, /v1/admin/hotkeys, /v1/admin/cells.
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
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/cellkit/cellkit/internal/atomicfile"
	"github.com/cellkit/cellkit/internal/flagenv"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/router"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "router: %v\n", err)
		os.Exit(1)
	}
}

// options are the command line.
type options struct {
	listen, adminListen string
	registryURL         string
	keysPath            string
	mapCache            string
	staleAfter          time.Duration
	mapWait             time.Duration
	shutdownTimeout     time.Duration
	logLevel            slog.Level
	pprof               bool
	server              router.ServerLimits
	cell                router.CellLimits
}

func parseFlags(args []string, getenv func(string) string, output io.Writer) (options, error) {
	var o options
	d := router.DefaultConfig()
	fs := flag.NewFlagSet("router", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "public HTTP address")
	fs.StringVar(&o.adminListen, "admin-listen", "127.0.0.1:9080", "admin HTTP address: health, readiness, metrics, hot keys")
	fs.StringVar(&o.registryURL, "registry", "", "cell map registry: file:PATH or consul://HOST:PORT/PREFIX (default $"+registry.EnvRegistry+")")
	fs.StringVar(&o.keysPath, "keys", "", "API keys file: a JSON array of {client, key_sha256, rate, burst} (make one with `router keygen`)")
	fs.StringVar(&o.mapCache, "map-cache", "", "file keeping the last good cell map, to start while the registry is down (empty: none)")
	fs.DurationVar(&o.staleAfter, "stale-after", registry.DefaultFollowerConfig().StaleAfter, "report the map stale after this long without the registry")
	fs.DurationVar(&o.mapWait, "map-wait", 0, "give up if no cell map arrives within this time (0: wait until stopped)")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 15*time.Second, "how long requests in flight may finish at shutdown")
	fs.TextVar(&o.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	fs.BoolVar(&o.pprof, "pprof", false, "serve /debug/pprof/ on the admin listener")

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
	fs.DurationVar(&o.cell.IdleConnTimeout, "cell-idle-conn-timeout", d.Cell.IdleConnTimeout, "close connections to a cell idle this long")
	fs.IntVar(&o.cell.Breaker.Window, "breaker-window", d.Cell.Breaker.Window, "circuit breaker: outcomes remembered per cell")
	fs.IntVar(&o.cell.Breaker.MinCalls, "breaker-min-calls", d.Cell.Breaker.MinCalls, "circuit breaker: outcomes needed before it can open")
	fs.Float64Var(&o.cell.Breaker.FailureRate, "breaker-failure-rate", d.Cell.Breaker.FailureRate, "circuit breaker: open at this share of failures (5xx, errors, timeouts)")
	fs.DurationVar(&o.cell.Breaker.OpenFor, "breaker-open-for", d.Cell.Breaker.OpenFor, "circuit breaker: refuse this long before probing")

	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := flagenv.Fill(fs, "router", getenv); err != nil {
		return o, err
	}
	if o.keysPath == "" {
		return o, errors.New("no keys file: pass --keys (make a key with `router keygen`)")
	}
	return o, nil
}

// addrs are where run listens.
type addrs struct{ Public, Admin net.Addr }

// run serves until ctx ends, then shuts down gracefully. ready, if not nil,
// is called once the public listener accepts requests.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(addrs)) error {
	if len(args) > 0 && args[0] == "keygen" {
		return keygen(args[1:], stdout, stderr)
	}
	o, err := parseFlags(args, os.Getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: o.logLevel}))
	keys, err := router.LoadKeys(o.keysPath)
	if err != nil {
		return err
	}
	reg, err := registry.Open(registry.Config{URL: o.registryURL}, registry.Options{})
	if err != nil {
		return err
	}
	defer reg.Close()

	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	follower, err := registry.NewFollower(registry.FollowerConfig{StaleAfter: o.staleAfter, CachePath: o.mapCache}, registry.FollowerOptions{
		Registry: reg, Logger: log, Registerer: prometheus.WrapRegistererWithPrefix("cellkit_router_", metrics),
	})
	if err != nil {
		return err
	}
	rt, err := router.New(router.Config{Server: o.server, Cell: o.cell}, router.Options{
		Maps:       follower,
		Refresh:    reg.Load,
		Keys:       keys,
		Logger:     log,
		Registerer: metrics,
	})
	if err != nil {
		return err
	}
	defer rt.Close()

	adminLn, err := net.Listen("tcp", o.adminListen)
	if err != nil {
		return fmt.Errorf("admin: listen: %w", err)
	}
	var adminHandler http.Handler = rt.AdminHandler(metrics)
	if o.pprof {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux.Handle("/", adminHandler)
		adminHandler = mux
	}
	admin := &http.Server{
		Handler:           adminHandler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return follower.Run(gctx) })
	g.Go(func() error {
		if err := admin.Serve(adminLn); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("admin: %w", err)
		}
		return nil
	})
	serving := make(chan struct{})
	g.Go(func() error {
		// The router starts only once it has a map.
		wctx := gctx
		if o.mapWait > 0 {
			var cancel context.CancelFunc
			wctx, cancel = context.WithTimeout(gctx, o.mapWait)
			defer cancel()
		}
		log.Info("waiting for the cell map", "registry", reg.Describe())
		if err := follower.WaitReady(wctx); err != nil {
			if gctx.Err() != nil {
				return nil
			}
			return err
		}
		close(serving)
		return rt.ListenAndServe(o.listen, func(a net.Addr) {
			log.Info("router ready", "listen", a.String(), "admin", adminLn.Addr().String(),
				"map_version", follower.Map().Version(), "clients", len(keys.Clients()))
			if ready != nil {
				ready(addrs{Public: a, Admin: adminLn.Addr()})
			}
		})
	})
	g.Go(func() error {
		<-gctx.Done()
		log.Info("shutting down", "timeout", o.shutdownTimeout)
		// A fresh context: the one that ended must not cut the drain short.
		sctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
		defer cancel()
		var errs []error
		select {
		case <-serving:
			errs = append(errs, rt.Shutdown(sctx))
		default:
		}
		errs = append(errs, admin.Shutdown(sctx))
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("shutdown: %w", err)
		}
		return nil
	})
	return g.Wait()
}

// keygen makes a new API key: the key goes to stdout (it is shown once and
// never stored), its entry to the keys file named by -keys (added, or the
// file created) or, without -keys, to stderr.
func keygen(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("router keygen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := fs.String("client", "", "client id the key belongs to (required)")
	rate := fs.Float64("rate", 100, "the client's sustained limit, requests per second")
	burst := fs.Int("burst", 200, "the client's burst")
	keysPath := fs.String("keys", "", "keys file to add the entry to (created if missing)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *client == "" {
		return errors.New("keygen: -client is required")
	}
	key, sum, err := router.GenerateKey()
	if err != nil {
		return err
	}
	entry := router.KeyEntry{Client: *client, KeySHA256: sum, Rate: *rate, Burst: *burst}
	if *keysPath == "" {
		line, _ := json.Marshal(entry)
		fmt.Fprintf(stderr, "keys file entry: %s\n", line)
	} else if err := addKey(*keysPath, entry); err != nil {
		return err
	}
	fmt.Fprintln(stdout, key)
	return nil
}

// addKey adds entry to the keys file at path, checking the result parses.
func addKey(path string, entry router.KeyEntry) error {
	var entries []router.KeyEntry
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("keygen: %w", err)
	default:
		if err := json.Unmarshal(data, &entries); err != nil {
			return fmt.Errorf("keygen: %s: %w", path, err)
		}
	}
	entries = append(entries, entry)
	out, err := json.MarshalIndent(entries, "", "  ")
	if err != nil {
		return err
	}
	out = append(out, '\n')
	if _, err := router.ParseKeys(out); err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	return atomicfile.WriteFile(path, out, 0o600)
}
