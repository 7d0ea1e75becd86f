package registry

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellkit/cellkit/internal/atomicfile"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/testkit"
)

// runFollower starts f and stops it at cleanup.
func runFollower(t *testing.T, f *Follower) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestFollowerStalenessFollowsTheClock(t *testing.T) {
	clock := testkit.NewClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	dir := t.TempDir()
	r, err := NewFile(FileConfig{Path: filepath.Join(dir, "map.json"), PollInterval: 10 * time.Millisecond}, Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t, 2*time.Minute)
	if err := r.CompareAndSwap(ctx, 0, firstMap(t)); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	f, err := NewFollower(FollowerConfig{StaleAfter: 30 * time.Second}, FollowerOptions{Registry: r, Now: clock.Now, Registerer: prometheus.WrapRegistererWithPrefix("cellkit_router_", reg)})
	if err != nil {
		t.Fatal(err)
	}
	runFollower(t, f)
	if err := f.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if st := f.Status(); st.Stale || st.Version != 1 || st.Age != 0 {
		t.Fatalf("Status() = %+v, want fresh version 1", st)
	}
	// The registry goes away; time passes.
	if err := os.Rename(dir, dir+"-away"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Rename(dir+"-away", dir) })
	testkit.WaitFor(t, 5*time.Second, "a failed round", func() bool { return f.Status().LastError != "" })
	clock.Advance(29 * time.Second)
	if st := f.Status(); st.Stale {
		t.Fatalf("after 29s: Status() = %+v, want not yet stale", st)
	}
	clock.Advance(2 * time.Second)
	st := f.Status()
	if !st.Stale || st.Age != 31*time.Second || st.Version != 1 {
		t.Fatalf("after 31s: Status() = %+v, want stale, age 31s, still version 1", st)
	}
	if got := testutil.ToFloat64(f.versionGauge); got != 1 {
		t.Errorf("cellkit_router_map_version = %v, want 1", got)
	}
	n, err := testutil.GatherAndCount(reg, "cellkit_router_map_age_seconds", "cellkit_router_map_stale", "cellkit_router_map_sync_errors_total")
	if err != nil || n != 3 {
		t.Errorf("gathered %d of the 3 follower metrics: %v", n, err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP cellkit_router_map_age_seconds Seconds since the last successful registry round trip.
# TYPE cellkit_router_map_age_seconds gauge
cellkit_router_map_age_seconds 31
# HELP cellkit_router_map_stale 1 when the map has not been confirmed by the registry for longer than the stale threshold.
# TYPE cellkit_router_map_stale gauge
cellkit_router_map_stale 1
`), "cellkit_router_map_age_seconds", "cellkit_router_map_stale"); err != nil {
		t.Error(err)
	}
}

func TestFollowerNeverGoesBackwardsOrTakesAnInvalidMap(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "map.json")
	r, err := NewFile(FileConfig{Path: path, PollInterval: 10 * time.Millisecond}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t, 2*time.Minute)
	v1 := firstMap(t)
	v2 := pin(t, v1, "a")
	if err := r.CompareAndSwap(ctx, 0, v1); err != nil {
		t.Fatal(err)
	}
	if err := r.CompareAndSwap(ctx, 1, v2); err != nil {
		t.Fatal(err)
	}
	f, err := NewFollower(FollowerConfig{}, FollowerOptions{Registry: r})
	if err != nil {
		t.Fatal(err)
	}
	runFollower(t, f)
	testkit.WaitFor(t, 5*time.Second, "version 2", func() bool { return f.Map() != nil && f.Map().Version() == 2 })

	// Someone puts version 1 back by hand, then garbage.
	old, _ := v1.Encode()
	if err := atomicfile.WriteFile(path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "a successful round over the old version", func() bool {
		m, _ := r.Load(ctx)
		return m != nil && m.Version() == 1
	})
	time.Sleep(50 * time.Millisecond) // several poll rounds
	if got := f.Map().Version(); got != 2 {
		t.Fatalf("follower went back to version %d", got)
	}
	if err := atomicfile.WriteFile(path, []byte(`{"version":3,"slots":64,`), 0o600); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "the follower to report the corrupt file", func() bool {
		return strings.Contains(f.Status().LastError, "holds no valid map")
	})
	if got := f.Map().Version(); got != 2 {
		t.Fatalf("follower map = version %d after a corrupt write, want 2", got)
	}
}

func TestFollowerStartsFromItsCacheWhenTheRegistryIsDown(t *testing.T) {
	dir := t.TempDir()
	regDir := filepath.Join(dir, "registry")
	cache := filepath.Join(dir, "cache", "map.json")
	if err := os.MkdirAll(filepath.Dir(cache), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := NewFile(FileConfig{Path: filepath.Join(regDir, "map.json"), PollInterval: 10 * time.Millisecond}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t, 2*time.Minute)
	if err := r.CompareAndSwap(ctx, 0, firstMap(t)); err != nil {
		t.Fatal(err)
	}
	first, err := NewFollower(FollowerConfig{CachePath: cache}, FollowerOptions{Registry: r})
	if err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); first.Run(fctx) }()
	if err := first.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done

	// The registry is gone; a restarted process still gets a map at once.
	if err := os.RemoveAll(regDir); err != nil {
		t.Fatal(err)
	}
	second, err := NewFollower(FollowerConfig{CachePath: cache}, FollowerOptions{Registry: r})
	if err != nil {
		t.Fatal(err)
	}
	runFollower(t, second)
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
	defer wcancel()
	if err := second.WaitReady(wctx); err != nil {
		t.Fatalf("WaitReady with the registry down and a cache = %v", err)
	}
	if st := second.Status(); st.Version != 1 || !st.FromCache || !st.Stale {
		t.Fatalf("Status() = %+v, want version 1 from the cache, stale", st)
	}
}

func TestFollowerWaitReadyNamesTheRegistryError(t *testing.T) {
	r, err := NewFile(FileConfig{Path: filepath.Join(t.TempDir(), "none", "map.json"), PollInterval: 10 * time.Millisecond}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFollower(FollowerConfig{}, FollowerOptions{Registry: r})
	if err != nil {
		t.Fatal(err)
	}
	runFollower(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = f.WaitReady(ctx)
	if err == nil || !strings.Contains(err.Error(), "registry holds no map") || !strings.Contains(err.Error(), "file:") {
		t.Fatalf("WaitReady = %v, want an error naming the registry and ErrNoMap", err)
	}
}

func TestFollowerChangedIsClosedOnNewVersion(t *testing.T) {
	r, f, v1 := readyFollower(t, 10*time.Millisecond)
	ctx := testkit.Context(t, 2*time.Minute)
	ch := f.Changed()
	if err := r.CompareAndSwap(ctx, 1, pin(t, v1, "z")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
		if v := f.Map().Version(); v != 2 {
			t.Fatalf("Changed closed with version %d, want 2", v)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Changed not closed after a new version")
	}
}

// readyFollower is a running follower of a file registry polled every
// poll, ready with the registry's first map v1.
func readyFollower(t *testing.T, poll time.Duration) (Registry, *Follower, *slotmap.Map) {
	t.Helper()
	r, err := NewFile(FileConfig{Path: filepath.Join(t.TempDir(), "map.json"), PollInterval: poll}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t, 2*time.Minute)
	v1 := firstMap(t)
	if err := r.CompareAndSwap(ctx, 0, v1); err != nil {
		t.Fatal(err)
	}
	f, err := NewFollower(FollowerConfig{}, FollowerOptions{Registry: r})
	if err != nil {
		t.Fatal(err)
	}
	runFollower(t, f)
	if err := f.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return r, f, v1
}

// TestFollowerTakesAnOfferedMapAtOnce: a map offered (read from the
// registry by its caller) is current at once, without the watch, if it is
// newer; an older one is not.
func TestFollowerTakesAnOfferedMapAtOnce(t *testing.T) {
	_, f, v1 := readyFollower(t, time.Hour)
	v2 := pin(t, v1, "z")
	ch := f.Changed()
	f.Offer(v2)
	select {
	case <-ch:
	default:
		t.Fatal("Changed not closed by a newer map offered")
	}
	f.Offer(v1)
	if v := f.Map().Version(); v != 2 {
		t.Fatalf("version %d after offers of 2 then 1, want 2", v)
	}
}

// TestFollowerSaysWhenTheRegistryIsOlderThanItsCache: a registry rebuilt
// from empty (version 1) behind a cache at version 3: the cache stays in
// use (a map never goes back) and the status says so, with the registry's
// version; once the registry passes it, it is followed again.
func TestFollowerSaysWhenTheRegistryIsOlderThanItsCache(t *testing.T) {
	dir := t.TempDir()
	cache := filepath.Join(dir, "map-cache.json")
	p, err := firstMap(t).AddCell(slotmap.Cell{ID: "c3", Weight: 1, Intake: "http://127.0.0.1:8003", Admin: "http://127.0.0.1:9003"})
	if err != nil {
		t.Fatal(err)
	}
	p, err = p.After.AddCell(slotmap.Cell{ID: "c4", Weight: 1, Intake: "http://127.0.0.1:8004", Admin: "http://127.0.0.1:9004"})
	if err != nil {
		t.Fatal(err)
	}
	cached := p.After
	data, err := cached.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cache, data, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := NewFile(FileConfig{Path: filepath.Join(dir, "registry", "map.json"), PollInterval: 10 * time.Millisecond}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t, time.Minute)
	first := firstMap(t)
	if err := r.CompareAndSwap(ctx, 0, first); err != nil {
		t.Fatal(err)
	}
	f, err := NewFollower(FollowerConfig{CachePath: cache}, FollowerOptions{Registry: r})
	if err != nil {
		t.Fatal(err)
	}
	runFollower(t, f)
	testkit.WaitFor(t, 5*time.Second, "the registry's older map noticed", func() bool { return f.Status().RegistryOlder == first.Version() })
	if st := f.Status(); st.Version != cached.Version() || !st.FromCache {
		t.Fatalf("Status() = %+v, want the cache's version %d in use, from the cache", st, cached.Version())
	}
	// The registry moves past the cache: followed again, nothing older.
	m := first
	for m.Version() <= cached.Version() {
		p, err := m.SetAgency("nice", int(m.Version())+10)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.CompareAndSwap(ctx, m.Version(), p.After); err != nil {
			t.Fatal(err)
		}
		m = p.After
	}
	testkit.WaitFor(t, 5*time.Second, "the registry followed again", func() bool {
		st := f.Status()
		return st.Version == m.Version() && st.RegistryOlder == 0
	})
}
