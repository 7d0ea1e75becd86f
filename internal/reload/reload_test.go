package reload_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellkit/cellkit/internal/atomicfile"
	"github.com/cellkit/cellkit/internal/reload"
	"github.com/cellkit/cellkit/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// TestWatcherFollowsTheFile: an atomic replace and an in-place write are
// both loaded; a file the load refuses keeps the state and is counted; a
// trigger loads at once.
func TestWatcherFollowsTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	os.WriteFile(path, []byte("one"), 0o600)
	var mu sync.Mutex
	state := "one"
	load := func() error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if string(b) == "bad" {
			return errors.New("bad content")
		}
		mu.Lock()
		state = string(b)
		mu.Unlock()
		return nil
	}
	get := func() string { mu.Lock(); defer mu.Unlock(); return state }
	reg := prometheus.NewRegistry()
	w := reload.New([]string{path}, load, reload.Config{What: "test", Interval: 10 * time.Millisecond}, reload.Options{Registerer: reg})
	// A second watcher on the same registry shares the metrics.
	reload.New([]string{path}, load, reload.Config{What: "other"}, reload.Options{Registerer: reg})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	atomicfile.WriteFile(path, []byte("two"), 0o600)
	testkit.WaitFor(t, 5*time.Second, "the atomic replace to be loaded", func() bool { return get() == "two" })
	os.WriteFile(path, []byte("bad"), 0o600)
	testkit.WaitFor(t, 5*time.Second, "the bad file to be refused", func() bool {
		return testutil.ToFloat64(refused(t, reg)) == 1
	})
	if got := get(); got != "two" {
		t.Fatalf("state after a refused file = %q, want two", got)
	}
	os.WriteFile(path, []byte("three!"), 0o600)
	testkit.WaitFor(t, 5*time.Second, "the in-place write to be loaded", func() bool { return get() == "three!" })

	// A trigger loads even though nothing changed.
	mu.Lock()
	state = "stale"
	mu.Unlock()
	w.Trigger()
	testkit.WaitFor(t, 5*time.Second, "the trigger to load", func() bool { return get() == "three!" })
}

func refused(t *testing.T, reg *prometheus.Registry) prometheus.Collector {
	t.Helper()
	return prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Error(err)
			return
		}
		for _, mf := range mfs {
			if mf.GetName() != "cellkit_reloads_total" {
				continue
			}
			for _, m := range mf.Metric {
				lbl := map[string]string{}
				for _, l := range m.Label {
					lbl[l.GetName()] = l.GetValue()
				}
				if lbl["what"] == "test" && lbl["result"] == "refused" {
					ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("x", "x", nil, nil), prometheus.CounterValue, m.GetCounter().GetValue())
				}
			}
		}
	})
}
