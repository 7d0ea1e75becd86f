// Package reload keeps a process's view of files it reads at runtime (API
// keys, certificates, tokens) current without a restart.
//
// A Watcher looks at its files every Interval (size, modification time and
// inode, through symbolic links: an atomic rename, an in-place write and a
// Kubernetes secret's symlink swap are all seen) and calls its Load once
// a change has settled: the files are loaded when two looks in a row
// found them the same and different from the last load, so a writer
// caught between its truncate and its write (an empty file, or the first
// half of a list that parses) is not taken, and it is taken at the next
// look after the writer finishes. Trigger (a process calls it on SIGHUP)
// loads at once. Load parses and swaps in the new state; when it fails,
// the process keeps the state it had, the failure is logged and counted,
// and the same files are tried again once they change again or on the
// next Trigger. A write slower than a look is therefore refused, or taken
// whole once it is done.
package reload

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/metric"
)

// Config tunes a Watcher. Zero values mean the defaults in brackets.
type Config struct {
	// What names the files in logs and in the metrics' "what" label, e.g.
	// "keys" or "tls_certificate". Required.
	What string
	// Interval spaces two looks at the files [1s].
	Interval time.Duration
}

// DefaultConfig returns the defaults in brackets above.
func DefaultConfig() Config {
	return Config{Interval: time.Second}
}

// withDefaults fills the zero fields of c from DefaultConfig, field by
// field.
func (c Config) withDefaults() Config {
	if c.Interval <= 0 {
		c.Interval = DefaultConfig().Interval
	}
	return c
}

// Options carry a Watcher's collaborators.
type Options struct {
	// Logger hears of every reload and every refused file. Nil: none.
	Logger *slog.Logger
	// Registerer receives cellkit_reloads_total{what,result},
	// cellkit_reload_refused{what} and
	// cellkit_reload_last_success_timestamp_seconds{what}: pass the
	// process's registry unwrapped (the names are whole). Nil: not
	// registered.
	Registerer prometheus.Registerer
}

// withDefaults fills the nil collaborators that have a default: Logger
// (none).
func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Watcher reloads a set of files when they change. Run drives it.
type Watcher struct {
	cfg   Config
	paths []string
	load  func() error
	log   *slog.Logger

	trigger chan struct{}

	mu      sync.Mutex // serialises loads
	seen    []stamp    // the files as of the last load, good or refused
	pending []stamp    // a change seen by the last look, loaded if the next finds it unchanged

	ok, failed      prometheus.Counter
	lastOK, refused prometheus.Gauge
}

// stamp is what says a file changed.
type stamp struct {
	size  int64
	mtime time.Time
	ino   uint64
	err   bool // the file could not be read
}

func stampOf(path string) stamp {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{err: true}
	}
	s := stamp{size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ino = st.Ino
	}
	return s
}

// New returns a watcher of paths that calls load when they change. The
// caller has loaded them once already (and refused to start if that
// failed): New records them as they are now.
func New(paths []string, load func() error, cfg Config, opts Options) *Watcher {
	cfg, opts = cfg.withDefaults(), opts.withDefaults()
	log := opts.Logger
	// Several watchers of one process share the two metrics.
	reloads := Shared(opts.Registerer, metric.CounterVec(nil, api.MetricReloads))
	last := Shared(opts.Registerer, metric.GaugeVec(nil, api.MetricReloadLastSuccessTimestampSeconds))
	refused := Shared(opts.Registerer, metric.GaugeVec(nil, api.MetricReloadRefused))
	w := &Watcher{
		cfg: cfg, paths: paths, load: load, log: log.With("what", cfg.What),
		trigger: make(chan struct{}, 1),
		ok:      reloads.WithLabelValues(cfg.What, "ok"),
		failed:  reloads.WithLabelValues(cfg.What, "refused"),
		lastOK:  last.WithLabelValues(cfg.What),
		refused: refused.WithLabelValues(cfg.What),
	}
	w.refused.Set(0)
	w.seen = w.stamps()
	w.lastOK.SetToCurrentTime()
	return w
}

// Shared registers c with reg, or returns the collector of the same
// description registered before it: metrics that several parts of one
// process share, told apart by a label. Nil reg: c, unregistered.
func Shared[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if prev, ok := are.ExistingCollector.(C); ok {
				return prev
			}
		}
		panic(err)
	}
	return c
}

func (w *Watcher) stamps() []stamp {
	s := make([]stamp, len(w.paths))
	for i, p := range w.paths {
		s[i] = stampOf(p)
	}
	return s
}

// Trigger asks Run to load the files now, changed or not.
func (w *Watcher) Trigger() {
	select {
	case w.trigger <- struct{}{}:
	default:
	}
}

// Reload loads the files now and says whether they were taken.
func (w *Watcher) Reload() error { return w.reload(true) }

// reload loads the files if forced, or if they changed since the last
// load and the previous look found them as they are now (the change has
// settled).
func (w *Watcher) reload(force bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.stamps()
	if !force {
		if equal(now, w.seen) {
			w.pending = nil
			return nil
		}
		if !equal(now, w.pending) {
			w.pending = now
			return nil
		}
	}
	w.seen, w.pending = now, nil
	if err := w.load(); err != nil {
		w.failed.Inc()
		w.refused.Set(1)
		w.log.Error("refused the new files; keeping the ones loaded before", "files", w.paths, "err", err)
		return err
	}
	w.ok.Inc()
	w.refused.Set(0)
	w.lastOK.SetToCurrentTime()
	w.log.Info("reloaded", "files", w.paths)
	return nil
}

func equal(a, b []stamp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Run looks at the files every Interval and on Trigger until ctx ends;
// it returns nil then.
func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			_ = w.reload(false) // logged and counted by reload
		case <-w.trigger:
			_ = w.reload(true) // logged and counted by reload
		}
	}
}

// OnSignal triggers every watcher on each of sigs (SIGHUP, usually) until
// ctx ends; it returns nil then.
func OnSignal(ctx context.Context, sigs []os.Signal, ws ...*Watcher) error {
	if len(ws) == 0 {
		<-ctx.Done()
		return nil
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	defer signal.Stop(ch)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ch:
			for _, w := range ws {
				w.Trigger()
			}
		}
	}
}
