package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/atomicfile"
	"github.com/cellkit/cellkit/internal/metric"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// Follower keeps the newest good map of a registry for the request path.
//
// Static stability: it holds the last good map for as long as the registry
// is unreachable, never swaps it for an older version or an invalid one, and
// reports how long ago it last heard from the registry. With a CachePath it
// also survives a restart while the registry is down.
type Follower struct {
	reg        Registry
	log        *slog.Logger
	now        func() time.Time
	staleAfter time.Duration
	cachePath  string
	started    time.Time

	cur       atomic.Pointer[slotmap.Map]
	fromCache atomic.Bool  // cur came from the cache, not yet from the registry
	lastSync  atomic.Int64 // unix nanoseconds of the last successful round, 0 if none

	mu      sync.Mutex
	changed chan struct{} // closed when a newer map is installed
	ready   chan struct{} // closed once there is a map
	lastErr error
	older   int64 // the registry's version, when older than the map in use

	versionGauge prometheus.Gauge
	syncErrors   prometheus.Counter
	updates      prometheus.Counter
}

// FollowerConfig tunes a Follower. Zero values mean the defaults in
// brackets.
type FollowerConfig struct {
	// StaleAfter is how long without a successful registry round trip
	// before the map is reported stale [30s].
	StaleAfter time.Duration
	// CachePath, if set, is a local file that keeps a copy of the last good
	// map, used at start when the registry cannot be read [none].
	CachePath string
}

// DefaultFollowerConfig returns the defaults.
func DefaultFollowerConfig() FollowerConfig {
	return FollowerConfig{StaleAfter: 30 * time.Second}
}

// withDefaults fills the zero fields of c from DefaultFollowerConfig,
// field by field.
func (c FollowerConfig) withDefaults() FollowerConfig {
	if c.StaleAfter <= 0 {
		c.StaleAfter = DefaultFollowerConfig().StaleAfter
	}
	return c
}

// FollowerOptions carry a Follower's collaborators.
type FollowerOptions struct {
	// Registry is the registry followed. Required.
	Registry Registry
	// Logger receives one line per new version and per change of registry
	// health. Nil means none.
	Logger *slog.Logger
	// Registerer receives the follower's metrics: map_version,
	// map_sync_errors_total, map_updates_total, map_age_seconds and
	// map_stale. Register them under the process's prefix, as in
	// prometheus.WrapRegistererWithPrefix(api.MetricPrefixRouter, reg). Nil means
	// they are not registered.
	Registerer prometheus.Registerer
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
}

// withDefaults fills the nil collaborators that have a default: Logger
// (none) and Now (time.Now).
func (o FollowerOptions) withDefaults() FollowerOptions {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// FollowerStatus describes what a Follower knows.
type FollowerStatus struct {
	Version   int64         `json:"version"`    // 0 before the first map
	Synced    time.Time     `json:"synced"`     // last successful registry round trip (zero: never)
	Age       time.Duration `json:"age"`        // since Synced (since start if never)
	Stale     bool          `json:"stale"`      // Age > StaleAfter
	LastError string        `json:"last_error"` // the registry's last error, "" if the last round succeeded
	Registry  string        `json:"registry"`   // the registry's description
	FromCache bool          `json:"from_cache"` // the map came from CachePath, not yet confirmed by the registry
	// RegistryOlder is the registry's map version when it is older than
	// the map in use (0 otherwise): the registry was rebuilt or restored
	// behind the cache. The newer map is kept (a map never goes back), so
	// the registry's changes are not followed until its version passes it
	// or the cache file is removed and the process restarted.
	RegistryOlder int64 `json:"registry_older,omitempty"`
}

// NewFollower returns a follower of opts.Registry. Call Run to start it.
func NewFollower(cfg FollowerConfig, opts FollowerOptions) (*Follower, error) {
	if opts.Registry == nil {
		return nil, errors.New("follower: no registry")
	}
	cfg, opts = cfg.withDefaults(), opts.withDefaults()
	f := &Follower{
		reg:        opts.Registry,
		log:        opts.Logger,
		now:        opts.Now,
		staleAfter: cfg.StaleAfter,
		cachePath:  cfg.CachePath,
		changed:    make(chan struct{}),
		ready:      make(chan struct{}),
	}
	f.started = f.now()
	reg := opts.Registerer
	f.versionGauge = metric.Gauge(reg, api.MetricMapVersion)
	f.syncErrors = metric.Counter(reg, api.MetricMapSyncErrors)
	f.updates = metric.Counter(reg, api.MetricMapUpdates)
	metric.GaugeFunc(reg, api.MetricMapAgeSeconds, func() float64 { return f.Status().Age.Seconds() })
	metric.GaugeFunc(reg, api.MetricMapStale, func() float64 {
		if f.Status().Stale {
			return 1
		}
		return 0
	})
	return f, nil
}

// Run follows the registry until ctx is done. It first installs the cached
// map, if any, then watches the registry.
func (f *Follower) Run(ctx context.Context) error {
	if f.cachePath != "" && f.Map() == nil {
		if data, err := os.ReadFile(f.cachePath); err == nil {
			if m, err := slotmap.Decode(data); err == nil {
				f.install(m, true)
				f.log.Info("using cached cell map until the registry answers", "version", m.Version(), "cache", f.cachePath)
			} else {
				f.log.Warn("ignoring invalid map cache", "cache", f.cachePath, "err", err)
			}
		}
	}
	var after int64
	if m := f.Map(); m != nil {
		after = m.Version()
	}
	f.reg.Watch(ctx, after, f.observe)
	return nil
}

// observe handles one Watch event.
func (f *Follower) observe(ev Event) {
	if ev.Err != nil {
		f.syncErrors.Inc()
		f.mu.Lock()
		first := f.lastErr == nil
		f.lastErr = ev.Err
		f.mu.Unlock()
		if first {
			f.log.Warn("cannot read the cell map registry; keeping the last good map", "registry", f.reg.Describe(), "version", f.version(), "err", ev.Err)
		}
		return
	}
	f.lastSync.Store(ev.At.UnixNano())
	f.mu.Lock()
	recovered := f.lastErr != nil
	f.lastErr = nil
	f.mu.Unlock()
	if recovered {
		f.log.Info("cell map registry reachable again", "registry", f.reg.Describe())
	}
	if ev.Map != nil {
		f.install(ev.Map, false)
	}
	if ev.Current > 0 {
		cur := f.version()
		f.mu.Lock()
		switch {
		case ev.Current >= cur:
			f.older = 0
		case f.older != ev.Current:
			f.older = ev.Current
			f.log.Warn("the registry's cell map is older than the one in use (from the cache): keeping it; if the registry was rebuilt, remove the cache file and restart, or make the registry's version pass it",
				"registry_version", ev.Current, "version", cur, "cache", f.cachePath)
		}
		f.mu.Unlock()
	}
}

func (f *Follower) version() int64 {
	if m := f.Map(); m != nil {
		return m.Version()
	}
	return 0
}

// install makes m current if it is newer, and wakes waiters.
func (f *Follower) install(m *slotmap.Map, fromCache bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur := f.cur.Load(); cur != nil && m.Version() <= cur.Version() {
		return
	}
	f.cur.Store(m)
	f.fromCache.Store(fromCache)
	f.versionGauge.Set(float64(m.Version()))
	f.updates.Inc()
	close(f.changed)
	f.changed = make(chan struct{})
	select {
	case <-f.ready:
	default:
		close(f.ready)
	}
	if !fromCache {
		f.log.Info("cell map updated", "version", m.Version(), "change", m.Change())
		if f.cachePath != "" {
			if data, err := m.Encode(); err == nil {
				if err := atomicfile.WriteFile(f.cachePath, data, 0o600); err != nil {
					f.log.Warn("cannot write map cache", "cache", f.cachePath, "err", err)
				}
			}
		}
	}
}

// Offer installs m, the registry's map read by another path than the
// watch (for a caller that must act on the registry's current map at
// once), if it is newer than the current one.
func (f *Follower) Offer(m *slotmap.Map) { f.install(m, false) }

// Map returns the current map, nil before the first one.
func (f *Follower) Map() *slotmap.Map { return f.cur.Load() }

// Changed returns a channel that is closed when a map newer than the current
// one is installed.
func (f *Follower) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

// WaitReady blocks until the follower has a map or ctx is done.
func (f *Follower) WaitReady(ctx context.Context) error {
	select {
	case <-f.ready:
		return nil
	case <-ctx.Done():
		f.mu.Lock()
		lastErr := f.lastErr
		f.mu.Unlock()
		if lastErr != nil {
			return fmt.Errorf("no cell map from %s: %w", f.reg.Describe(), errors.Join(ctx.Err(), lastErr))
		}
		return fmt.Errorf("no cell map from %s: %w", f.reg.Describe(), ctx.Err())
	}
}

// Status reports the follower's view.
func (f *Follower) Status() FollowerStatus {
	now := f.now()
	st := FollowerStatus{Version: f.version(), Registry: f.reg.Describe(), FromCache: f.fromCache.Load()}
	f.mu.Lock()
	st.RegistryOlder = f.older
	f.mu.Unlock()
	if ns := f.lastSync.Load(); ns != 0 {
		st.Synced = time.Unix(0, ns)
		st.Age = now.Sub(st.Synced)
	} else {
		st.Age = now.Sub(f.started)
	}
	st.Stale = st.Synced.IsZero() || st.Age > f.staleAfter
	f.mu.Lock()
	if f.lastErr != nil {
		st.LastError = f.lastErr.Error()
	}
	f.mu.Unlock()
	return st
}
