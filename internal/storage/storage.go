// Package storage keeps a cell's store from filling its disk. A JetStream
// file store that meets a full disk does not acknowledge the write (the
// publisher waits out its timeout) and then refuses every write, even once
// there is room again, until the store is opened again; so the disk must
// not fill, and intake is what fills it.
//
// A Guard watches the filesystem that holds the store (statfs, every
// Interval): above the High watermark (the share of the filesystem in use)
// it refuses new work until the use is below Low again, while queued work
// goes on (records and acks are small next to new inquiries). The cell
// also tells it when the store failed a write anyway (another process
// filled the disk): it refuses new work until the cell has opened the
// store again (Failed(false)), which the cell does once the use is below
// Low (Room).
package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/metric"
)

// Usage is a filesystem's size and what is left of it, in bytes.
type Usage struct {
	Size int64 `json:"size_bytes"`
	Free int64 `json:"free_bytes"`
}

// Used is the share of the filesystem in use, 0–1.
func (u Usage) Used() float64 {
	if u.Size <= 0 {
		return 0
	}
	return float64(u.Size-u.Free) / float64(u.Size)
}

// Stat reads the usage of the filesystem holding path. Free counts what
// an unprivileged process may still write (f_bavail): the root reserve of
// ext4 is not the store's.
func Stat(path string) (Usage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return Usage{}, fmt.Errorf("statfs %s: %w", path, err)
	}
	bs := int64(st.Bsize)
	return Usage{Size: int64(st.Blocks) * bs, Free: int64(st.Bavail) * bs}, nil
}

// Config sets the watermarks. Zero values mean the defaults in brackets.
type Config struct {
	// Dir is a directory on the store's filesystem. Required.
	Dir string
	// High is the share in use at which new work is refused [0.95].
	High float64
	// Low is the share in use below which it is taken again [0.90].
	Low float64
	// Interval is how often the filesystem is read [250ms].
	Interval time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{High: 0.95, Low: 0.90, Interval: 250 * time.Millisecond}
}

// Options carry the guard's collaborators. The zero value is usable.
type Options struct {
	// Registerer receives cellkit_cell_store_* (callers add the cell
	// label). Nil: not registered.
	Registerer prometheus.Registerer
	// Logger hears of every change of state. Nil: none.
	Logger *slog.Logger
	// Stat reads the filesystem. Nil: Stat.
	Stat func(dir string) (Usage, error)
}

// Guard is safe for concurrent use.
type Guard struct {
	cfg  Config
	log  *slog.Logger
	stat func(string) (Usage, error)

	usage     atomic.Pointer[Usage]
	over      atomic.Bool // above High, not yet below Low
	failed    atomic.Bool // the store failed a write and is not open again
	mu        sync.Mutex
	statErr   error
	failedWhy string
	failing   chan struct{} // closed when the store fails a write; a new one once open again

	bytes    *prometheus.GaugeVec
	refusing prometheus.Gauge
	failures prometheus.Counter
}

// withDefaults fills the zero fields of c from DefaultConfig, field by
// field.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.High == 0 {
		c.High = d.High
	}
	if c.Low == 0 {
		c.Low = d.Low
	}
	if c.Interval <= 0 {
		c.Interval = d.Interval
	}
	return c
}

// withDefaults fills the nil collaborators: Logger (none) and Stat.
func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Stat == nil {
		o.Stat = Stat
	}
	return o
}

// New builds a guard and reads the filesystem once.
func New(cfg Config, opts Options) (*Guard, error) {
	cfg, opts = cfg.withDefaults(), opts.withDefaults()
	switch {
	case cfg.Dir == "":
		return nil, errors.New("storage: no directory")
	case cfg.High <= 0 || cfg.High > 1 || cfg.Low <= 0 || cfg.Low >= cfg.High:
		return nil, fmt.Errorf("storage: watermarks low %g and high %g: want 0 < low < high ≤ 1", cfg.Low, cfg.High)
	}
	g := &Guard{cfg: cfg, log: opts.Logger, stat: opts.Stat, failing: make(chan struct{})}
	g.bytes = metric.GaugeVec(opts.Registerer, api.MetricCellStoreBytes)
	g.refusing = metric.Gauge(opts.Registerer, api.MetricCellStoreRefusing)
	g.failures = metric.Counter(opts.Registerer, api.MetricCellStoreWriteFailures)
	if err := g.Check(); err != nil {
		return nil, err
	}
	return g, nil
}

// Config returns the guard's configuration, defaults filled in.
func (g *Guard) Config() Config { return g.cfg }

// Check reads the filesystem once and moves the watermark state.
func (g *Guard) Check() error {
	u, err := g.stat(g.cfg.Dir)
	g.mu.Lock()
	g.statErr = err
	g.mu.Unlock()
	if err != nil {
		return err
	}
	g.usage.Store(&u)
	used := u.Used()
	switch {
	case used >= g.cfg.High && !g.over.Swap(true):
		g.log.Warn("store above its high watermark: new inquiries refused until below the low one",
			"used", fmt.Sprintf("%.1f%%", 100*used), "free_bytes", u.Free, "high", g.cfg.High, "low", g.cfg.Low)
	case used < g.cfg.Low && g.over.Swap(false):
		g.log.Info("store below its low watermark: new inquiries taken again", "used", fmt.Sprintf("%.1f%%", 100*used), "free_bytes", u.Free)
	}
	g.bytes.WithLabelValues("size").Set(float64(u.Size))
	g.bytes.WithLabelValues("used").Set(float64(u.Size - u.Free))
	g.bytes.WithLabelValues("free").Set(float64(u.Free))
	g.bytes.WithLabelValues("high_watermark").Set(g.cfg.High * float64(u.Size))
	g.refusing.Set(map[bool]float64{true: 1, false: 0}[g.Refusing()])
	return nil
}

// Run checks the filesystem every Interval until ctx ends.
func (g *Guard) Run(ctx context.Context) {
	t := time.NewTicker(g.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := g.Check(); err != nil {
				g.log.Warn("cannot read the store's filesystem", "err", err)
			}
		}
	}
}

// Usage is the last reading.
func (g *Guard) Usage() Usage {
	if u := g.usage.Load(); u != nil {
		return *u
	}
	return Usage{}
}

// Refusing says whether new work is refused: above the watermark, or the
// store failed a write.
func (g *Guard) Refusing() bool { return g.over.Load() || g.failed.Load() }

// Room says whether the use is below the low watermark: a store that
// failed a write may be opened again.
func (g *Guard) Room() bool { return g.Usage().Used() < g.cfg.Low }

// Failed records that the store failed a write (failed, with why) or was
// opened again (!failed).
func (g *Guard) Failed(failed bool, why string) {
	g.mu.Lock()
	g.failedWhy = why
	changed := g.failed.Swap(failed) != failed
	switch {
	case changed && failed:
		close(g.failing)
	case changed:
		g.failing = make(chan struct{})
	}
	g.mu.Unlock()
	if changed {
		if failed {
			g.failures.Inc()
			g.log.Error("the store failed a write: new inquiries refused, the store opened again once there is room",
				"why", why, "used", fmt.Sprintf("%.1f%%", 100*g.Usage().Used()), "low", g.cfg.Low)
		} else {
			g.log.Info("the store is open again and takes writes")
		}
	}
	g.refusing.Set(map[bool]float64{true: 1, false: 0}[g.Refusing()])
}

// Failing is closed when the store fails a write (at once if it has and is
// not open again): work waiting on the store (an intake's publish waiting
// for an acknowledgement that will not come) stops waiting.
func (g *Guard) Failing() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.failing
}

// State is the guard's view, for readiness and status.
type State struct {
	Usage
	High, Low float64
	Over      bool   // above High, not yet below Low
	Failed    string // why the store failed a write ("" when it did not, or was opened again)
	Err       string // the filesystem could not be read
}

// State reports the guard's view.
func (g *Guard) State() State {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := State{Usage: g.Usage(), High: g.cfg.High, Low: g.cfg.Low, Over: g.over.Load()}
	if g.failed.Load() {
		st.Failed = g.failedWhy
	}
	if g.statErr != nil {
		st.Err = g.statErr.Error()
	}
	return st
}
