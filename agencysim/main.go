// Command agencysim runs simulated credit agencies, NICE and KCB, over real
// TCP, for `make run`, load tests and chaos drills, with an HTTP admin API to
// change their behaviour while they run:
//
//	GET  /healthz, /readyz, /metrics
//	GET  /v1/agencies                     every agency's status
//	GET  /v1/agencies/{nice|kcb}/         one agency's status
//	GET  /v1/agencies/{nice|kcb}/config   its configuration
//	PUT  /v1/agencies/{nice|kcb}/config   replace it (PATCH: change some fields)
//	GET  /v1/agencies/{nice|kcb}/stats    its counters
//
// A flag not on the command line is read from CELLKIT_AGENCYSIM_<FLAG>, else
// CELLKIT_<FLAG> (upper case, '-' as '_': CELLKIT_AGENCYSIM_NICE_SESSIONS);
// see internal/flagenv.
//
// Example drill: the NICE agency gets ten times slower.
//
//	curl -X PATCH -d '{"latency":{"dist":"lognormal","p50":"5s","p99":"15s"}}' \
//	    http://127.0.0.1:7000/v1/agencies/nice/config
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/cellkit/cellkit/internal/agencysim"
	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/flagenv"
	"github.com/cellkit/cellkit/internal/httpx"
	"github.com/cellkit/cellkit/internal/program"
	"github.com/cellkit/cellkit/internal/telegram"
)

func main() {
	program.Main("agencysim", func(ctx context.Context) error { return run(ctx, os.Args[1:], os.Stderr, nil) })
}

// options are the command line.
type options struct {
	release                            api.Release
	niceListen, kcbListen, adminListen string
	niceSessions, kcbSessions          int
	p50, p99                           time.Duration
	errorRate, garbageRate, resetRate  float64
	idleTimeout                        time.Duration
	bandwidth                          int
	seed                               int64
	shutdownTimeout                    time.Duration
	logLevel                           slog.Level
	nice, kcb                          agencysim.Config // from the flags above, checked
}

func parseFlags(args []string, getenv func(string) string, output io.Writer) (o options, err error) {
	fs := flagenv.NewSet("agencysim", output)
	defer func() { err = fs.Checked(err) }() // with --check: the report, then ErrChecked
	fs.StringVar(&o.niceListen, "nice-listen", "127.0.0.1:7001", "TCP address of the NICE agency")
	fs.StringVar(&o.kcbListen, "kcb-listen", "127.0.0.1:7002", "TCP address of the KCB agency")
	fs.StringVar(&o.adminListen, "admin-listen", "127.0.0.1:7000", "HTTP address of the admin API, health and metrics")
	fs.IntVar(&o.niceSessions, "nice-sessions", 80, "NICE's global session limit (0: none)")
	fs.IntVar(&o.kcbSessions, "kcb-sessions", 40, "KCB's global session limit (0: none)")
	fs.DurationVar(&o.p50, "latency-p50", 500*time.Millisecond, "median latency of a call, log-normal (0 with -latency-p99 0: none)")
	fs.DurationVar(&o.p99, "latency-p99", 1500*time.Millisecond, "99th percentile latency of a call (0: the median)")
	fs.Float64Var(&o.errorRate, "error-rate", 0, "fraction of calls answered with an error code")
	fs.Float64Var(&o.garbageRate, "garbage-rate", 0, "fraction of calls answered with a garbage frame")
	fs.Float64Var(&o.resetRate, "reset-rate", 0, "fraction of calls answered by resetting the connection")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", 0, "firewall: cut sessions silent for longer than this (0: off)")
	fs.IntVar(&o.bandwidth, "bandwidth", 0, "line limit of each agency in bytes/s (0: unlimited)")
	fs.Int64Var(&o.seed, "seed", 1, "seed of the random latencies and faults (KCB uses seed+1)")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long calls in flight may finish at shutdown")
	fs.TextVar(&o.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	fs.Placement("nice-listen", "kcb-listen", "admin-listen")
	if err := fs.Parse(args, getenv); err != nil {
		return o, err
	}
	// The agencies' settings, checked as they will be used.
	if o.nice, err = o.config(o.niceSessions, o.seed); err != nil {
		return o, err
	}
	if o.kcb, err = o.config(o.kcbSessions, o.seed+1); err != nil {
		return o, err
	}
	o.release, err = fs.Release()
	return o, err
}

// config is an agency's starting configuration from the flags.
func (o options) config(sessions int, seed int64) (agencysim.Config, error) {
	cfg := agencysim.Config{
		MaxSessions: sessions, ErrorRate: o.errorRate, GarbageRate: o.garbageRate, ResetRate: o.resetRate,
		IdleTimeout: o.idleTimeout, BandwidthBytesPerSec: o.bandwidth, Seed: seed,
	}
	if o.p50 != 0 || o.p99 != 0 {
		p99 := o.p99
		if p99 == 0 {
			p99 = o.p50
		}
		cfg.Latency = agencysim.LogNormalLatency(o.p50, p99)
	}
	return cfg, cfg.Validate()
}

// addrs are where run listens.
type addrs struct{ Admin, NICE, KCB net.Addr }

// run serves the agencies and the admin API until ctx ends, then shuts them
// down gracefully. ready, if not nil, is called once everything listens.
// One piece: the listeners it opens are closed on every way out, and the
// serving goroutines, their shutdown and the ready signal share them.
func run(ctx context.Context, args []string, stderr io.Writer, ready func(addrs)) error {
	o, err := parseFlags(args, os.Getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	log, reg := program.Start(stderr, o.logLevel)
	program.BuildInfo(reg, "agencysim", o.release)

	type agency struct {
		srv *agencysim.Server
		ln  net.Listener
	}
	var agencies []agency
	defer func() {
		for _, a := range agencies {
			a.ln.Close() // no-op once served
		}
	}()
	for _, a := range []struct {
		p    telegram.Profile
		addr string
		cfg  agencysim.Config
	}{
		{telegram.NICE(), o.niceListen, o.nice},
		{telegram.KCB(), o.kcbListen, o.kcb},
	} {
		ln, err := net.Listen("tcp", a.addr)
		if err != nil {
			return fmt.Errorf("%s: listen: %w", a.p.Name, err)
		}
		srv, err := agencysim.New(a.cfg, agencysim.Options{Profile: a.p, Logger: log, Registerer: reg})
		if err != nil {
			ln.Close()
			return err
		}
		agencies = append(agencies, agency{srv, ln})
	}
	adminLn, err := net.Listen("tcp", o.adminListen)
	if err != nil {
		return fmt.Errorf("admin: listen: %w", err)
	}
	servers := make([]*agencysim.Server, len(agencies))
	for i, a := range agencies {
		servers[i] = a.srv
	}
	var stopping atomic.Bool
	admin := &http.Server{
		Handler:           adminMux(servers, reg, &stopping),
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	g, gctx := errgroup.WithContext(ctx)
	for _, a := range agencies {
		g.Go(func() error {
			if err := a.srv.Serve(a.ln); !errors.Is(err, agencysim.ErrServerClosed) {
				return fmt.Errorf("%s: %w", a.srv.Profile().Name, err)
			}
			return nil
		})
	}
	g.Go(func() error {
		if err := admin.Serve(adminLn); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("admin: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		stopping.Store(true)
		log.Info("shutting down", "timeout", o.shutdownTimeout)
		// A fresh context: the one that ended must not cut the drain short.
		sctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
		defer cancel()
		errs := []error{admin.Shutdown(sctx)}
		for _, a := range agencies {
			errs = append(errs, a.srv.Shutdown(sctx))
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("shutdown: %w", err)
		}
		return nil
	})
	// Ready only once each agency serves on its listener (its Serve has
	// taken it): from then on /readyz says ready, as the log line and
	// the ready callback do. An agency whose Serve failed ends the run.
	for _, a := range agencies {
		for a.srv.Addr() == nil {
			if gctx.Err() != nil {
				return g.Wait()
			}
			time.Sleep(time.Millisecond)
		}
	}
	log.Info("agencysim ready", "admin", adminLn.Addr().String(),
		"nice", agencies[0].ln.Addr().String(), "kcb", agencies[1].ln.Addr().String())
	if ready != nil {
		ready(addrs{Admin: adminLn.Addr(), NICE: agencies[0].ln.Addr(), KCB: agencies[1].ln.Addr()})
	}
	return g.Wait()
}

// adminMux routes the admin API: health, metrics, and each agency's admin
// handler under /v1/agencies/{name}/.
func adminMux(servers []*agencysim.Server, reg *prometheus.Registry, stopping *atomic.Bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		httpx.JSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		detail := map[string]string{}
		ready := !stopping.Load()
		for _, s := range servers {
			if a := s.Addr(); a != nil {
				detail[s.Profile().Name] = a.String()
			} else {
				detail[s.Profile().Name] = "not listening"
				ready = false
			}
		}
		status, code := "ready", http.StatusOK
		if !ready {
			status, code = "not ready", http.StatusServiceUnavailable
		}
		httpx.JSON(w, code, map[string]any{"status": status, "agencies": detail})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET "+api.PathAgencies, func(w http.ResponseWriter, r *http.Request) {
		out := make([]agencysim.Status, 0, len(servers))
		for _, s := range servers {
			out = append(out, s.Status())
		}
		httpx.JSON(w, http.StatusOK, out)
	})
	for _, s := range servers {
		prefix := api.PathAgencies + "/" + s.Profile().Name
		mux.Handle(prefix+"/", http.StripPrefix(prefix, s.AdminHandler()))
	}
	return mux
}
