// Package program is what every cellkit program does the same way: how
// main ends, the JSON log and the process's own metrics registry, the
// admin API's guard, and the watchers that reload its files.
package program

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/cellkit/cellkit/internal/adminauth"
	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/buildinfo"
	"github.com/cellkit/cellkit/internal/metric"
	"github.com/cellkit/cellkit/internal/reload"
)

// Main runs run with a context that SIGINT or SIGTERM ends (the graceful
// shutdown); an error is printed as "name: error" and the process exits 1.
func Main(name string, run func(ctx context.Context) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if errors.Is(err, ErrHandedOver) {
		os.Exit(ExitHandedOver)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// ErrHandedOver is what a program's run returns when it stopped because
// a successor took its sockets over (internal/handoff): Main then exits
// with ExitHandedOver, which a supervisor does not restart.
var ErrHandedOver = errors.New("handed over to a successor")

// ExitHandedOver is the exit status of a program that handed its sockets
// to a successor and drained: its end is not a failure, and restarting it
// would take the sockets back from the successor.
const ExitHandedOver = 98

// Start is the first thing a program does once its flags are read: its
// log, JSON lines at level on w, and its own registry (never the global
// one) with the Go and process collectors.
func Start(w io.Writer, level slog.Level) (*slog.Logger, *prometheus.Registry) {
	log := slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return log, reg
}

// AdminGuard builds the admin API's guard from its flags (cfg) for the
// listener at listen, and warns when bearer tokens would cross the
// network in clear text (tokens, no certificate on the listener, an
// address that is not loopback).
func AdminGuard(cfg adminauth.Config, listen string, listenerTLS bool, log *slog.Logger, reg prometheus.Registerer) (*adminauth.Guard, error) {
	guard, err := adminauth.New(cfg, adminauth.Options{Logger: log, Registerer: reg})
	if err != nil {
		return nil, err
	}
	if cfg.TokenFile != "" && !listenerTLS && !adminauth.Loopback(listen) {
		log.Warn("admin bearer tokens cross the network in clear text: give the admin listener a certificate (--admin-tls-cert, --admin-tls-key)", "admin", listen)
	}
	return guard, nil
}

// Watch reloads the files of ws until ctx ends: each watcher on its own
// interval, all of them on SIGHUP. A refused reload is logged and counted
// by its watcher, which keeps the files it had. It returns nil once every
// watcher has stopped.
func Watch(ctx context.Context, ws []*reload.Watcher) error {
	ws = slices.DeleteFunc(slices.Clone(ws), func(w *reload.Watcher) bool { return w == nil })
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() { _ = w.Run(ctx) }) // it returns nil when ctx ends
	}
	_ = reload.OnSignal(ctx, []os.Signal{syscall.SIGHUP}, ws...) // as Run
	wg.Wait()
	return nil
}

// BuildInfo exports the release the process runs on reg, as
// cellkit_build_info{program, version, revision, release} 1: the figure
// a rollout's gates and a dashboard group processes by.
func BuildInfo(reg prometheus.Registerer, name string, rel api.Release) {
	metric.Gauge(reg, api.MetricBuildInfo, prometheus.Labels{api.LabelProgram: name, api.LabelVersion: rel.Version,
		api.LabelRevision: buildinfo.Get().Revision, api.LabelRelease: rel.ID}).Set(1)
}
