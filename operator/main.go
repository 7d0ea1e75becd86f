// Command operator is cellkit's Kubernetes operator: it reconciles each
// Cell resource (cellkit.io/v1alpha1) into the cell's StatefulSet,
// Services, disruption budget and network policy, puts the cell in the
// cell map once its instances are ready, keeps it there as its spec says
// (weight, capacity, the agencies' shares, drained), drains it before it
// is deleted, and puts a new image or settings out cell by cell through
// the rollout and its gates. See internal/operator and docs/kubernetes.md.
//
//	operator [flags]                 reconcile (one leader among replicas)
//	operator render [flags] FILE     print the objects a Cell (YAML) is made of
//
// A flag not on the command line is read from CELLKIT_OPERATOR_<FLAG>, else
// CELLKIT_<FLAG> (CELLKIT_REGISTRY); see internal/flagenv.
//
// Admin listener: /healthz, /readyz (its caches synced), /metrics (the
// operator's and controller-runtime's).
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
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	// The Mozilla roots, used only where the system has none (the images'
	// empty base).
	_ "golang.org/x/crypto/x509roots/fallback"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/flagenv"
	"github.com/cellkit/cellkit/internal/gate"
	"github.com/cellkit/cellkit/internal/operator"
	"github.com/cellkit/cellkit/internal/program"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

func main() {
	program.Main("operator", func(ctx context.Context) error {
		if len(os.Args) > 1 && os.Args[1] == "render" {
			return render(os.Args[2:], os.Stdout, os.Stderr)
		}
		return run(ctx, os.Args[1:], os.Stderr)
	})
}

// options are the command line.
type options struct {
	release         api.Release
	registry        string
	namespace       string
	leaderElect     bool
	leaderNamespace string
	adminListen     string
	adminTokenFile  string
	tls             tlsconf.ClientFiles
	workers         int
	bake            time.Duration
	latencyFactor   float64
	latencyMargin   time.Duration
	moveRate        int
	shutdownTimeout time.Duration
	logLevel        slog.Level
}

func parseFlags(args []string, getenv func(string) string, output io.Writer) (o options, err error) {
	fs := flagenv.NewSet("operator", output)
	defer func() { err = fs.Checked(err) }()
	fs.StringVar(&o.registry, "registry", "", "the cell map's registry: consul://HOST:PORT/PREFIX or file:PATH")
	fs.StringVar(&o.namespace, "namespace", "", "the one namespace whose cells are reconciled (default: all)")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "elect one leader among the operator's replicas (a Lease named "+operator.LeaderElectionID+")")
	fs.StringVar(&o.leaderNamespace, "leader-namespace", "", "the Lease's namespace (default: --namespace, else the pod's)")
	fs.StringVar(&o.adminListen, "admin-listen", "127.0.0.1:9082", "HTTP address of /healthz, /readyz and /metrics")
	fs.StringVar(&o.adminTokenFile, "admin-token-file", "", "file holding the bearer token for the cells' admin APIs")
	o.tls.RegisterFlags(fs.FlagSet, "", "the cells' admin APIs")
	fs.IntVar(&o.workers, "workers", operator.DefaultConfig().Workers, "cells reconciled at once")
	fs.DurationVar(&o.bake, "bake", operator.DefaultReleaseConfig().Bake, "how long each wave of a release bakes, judged by the rollout's gates, before the next")
	g := gate.DefaultConfig()
	fs.Float64Var(&o.latencyFactor, "gate-latency-factor", g.LatencyFactor, "the latency gate fails a wave whose p99 is this many times its baseline's (and by --gate-latency-margin more), beside significance")
	fs.DurationVar(&o.latencyMargin, "gate-latency-margin", time.Duration(g.LatencyMargin*float64(time.Second)), "and by this much more")
	fs.IntVar(&o.moveRate, "move-rate", 0, "the most messages a second a data move copies between two cells (0: as fast as the cells take them)")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long a reconcile in flight may finish at shutdown")
	fs.TextVar(&o.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	if err := fs.Parse(args, getenv); err != nil {
		return o, err
	}
	if o.workers < 1 || o.workers > 64 {
		return o, fmt.Errorf("--workers %d: want 1..64", o.workers)
	}
	if o.bake < time.Second {
		return o, fmt.Errorf("--bake %v: want at least 1s", o.bake)
	}
	if !(o.latencyFactor >= 1 && o.latencyFactor <= 100) {
		return o, fmt.Errorf("--gate-latency-factor %v: want 1..100", o.latencyFactor)
	}
	if o.latencyMargin < time.Millisecond || o.latencyMargin > time.Minute {
		return o, fmt.Errorf("--gate-latency-margin %v: want 1ms..1m", o.latencyMargin)
	}
	if o.moveRate < 0 {
		return o, fmt.Errorf("--move-rate %d: want 0 or more", o.moveRate)
	}
	if o.leaderNamespace == "" {
		o.leaderNamespace = o.namespace
	}
	o.release, err = fs.Release()
	return o, err
}

// run reconciles until ctx ends.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	o, err := parseFlags(args, os.Getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	log, reg := program.Start(stderr, o.logLevel)
	program.BuildInfo(reg, "operator", o.release)
	ctrl.SetLogger(logr.FromSlogHandler(log.Handler()))

	admin, err := adminClient(o)
	if err != nil {
		return err
	}
	mapReg, err := registry.Open(registry.Config{URL: o.registry}, registry.Options{})
	if err != nil {
		return err
	}
	defer mapReg.Close()
	rc, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubernetes: %w", err)
	}
	mgr, err := operator.NewManager(rc, operator.ManagerConfig{Namespace: o.namespace, LeaderElection: o.leaderElect, LeaderNamespace: o.leaderNamespace})
	if err != nil {
		return err
	}
	cfg := operator.DefaultConfig()
	cfg.Workers = o.workers
	r := operator.New(cfg, operator.Options{
		Client: mgr.GetClient(),
		Control: control.New(mapReg, control.Config{Holder: control.Holder("cellkit-operator"), Origin: "operator"},
			control.Options{Moves: control.NewMover(moveClient(admin), control.MoveConfig{Rate: o.moveRate}, func(n control.Note) {
				log.Info(n.Text, "warning", n.Warning)
			}, nil)}),
		Admin:  admin,
		Events: mgr.GetEventRecorder("cellkit-operator"),
		Log:    log,
	})
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	rel := operator.DefaultReleaseConfig()
	rel.Bake = o.bake
	rel.Rollout.Gate.LatencyFactor, rel.Rollout.Gate.LatencyMargin = o.latencyFactor, o.latencyMargin.Seconds()
	if err := mgr.Add(r.Releaser(rel)); err != nil {
		return err
	}

	ln, err := net.Listen("tcp", o.adminListen)
	if err != nil {
		return fmt.Errorf("--admin-listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !mgr.GetCache().WaitForCacheSync(r.Context()) {
			http.Error(w, "caches not synced", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(prometheus.Gatherers{reg, ctrlmetrics.Registry}, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	log.Info("operator starting", "registry", mapReg.Describe(), "namespace", o.namespace, "leader_elect", o.leaderElect, "admin", ln.Addr().String())

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return mgr.Start(gctx) })
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(gctx), o.shutdownTimeout)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	return g.Wait()
}

// moveClient is admin for the steps of data moves: each bounded by two
// minutes (a step reads a slot set's whole ledger), not admin's five
// seconds.
func moveClient(admin adminclient.Client) adminclient.Client {
	hc := *admin.HTTP
	hc.Timeout = 0
	admin.HTTP, admin.Timeout = &hc, 2*time.Minute
	return admin
}

// adminClient is the client of the cells' admin APIs: the token of
// --admin-token-file, the TLS of --tls-*.
func adminClient(o options) (adminclient.Client, error) {
	c := adminclient.Client{HTTP: &http.Client{Timeout: adminclient.CallTimeout}}
	if o.adminTokenFile != "" {
		tok, err := adminclient.ReadToken(o.adminTokenFile)
		if err != nil {
			return c, fmt.Errorf("--admin-token-file: %w", err)
		}
		c.Token = tok
	}
	if o.tls.Enabled() {
		cl, err := tlsconf.NewClient(o.tls, tlsconf.Options{What: "admin_tls"})
		if err != nil {
			return c, fmt.Errorf("the cells' admin TLS: %w", err)
		}
		c = c.WithTLS(cl.Config())
	}
	return c, nil
}
