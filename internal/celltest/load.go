package celltest

import (
	"context"
	"sync"
	"testing"

	"github.com/cellkit/cellkit/internal/loadtest"
)

// Load runs cfg's load (loadtest.Runner) in the background until ctx ends
// or the test does; the test's cleanup stops it and waits for it.
func Load(t testing.TB, ctx context.Context, cfg loadtest.Config) {
	t.Helper()
	load, err := loadtest.NewRunner(cfg, loadtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(ctx)
	var running sync.WaitGroup
	running.Go(func() { _, _ = load.Run(lctx) })
	t.Cleanup(func() { stop(); running.Wait() })
}
