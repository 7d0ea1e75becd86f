package storage

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellkit/cellkit/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// TestWatermarks: new work is refused from the high watermark on and taken
// again only below the low one; a failed write refuses it until the store
// is open again, whatever the use.
func TestWatermarks(t *testing.T) {
	var free atomic.Int64
	free.Store(500)
	reg := prometheus.NewRegistry()
	g, err := New(Config{Dir: "/x", High: 0.9, Low: 0.8},
		Options{Registerer: reg, Stat: func(string) (Usage, error) { return Usage{Size: 1000, Free: free.Load()}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		free     int64
		refusing bool
	}{
		{500, false}, {110, false}, {100, true}, {150, true}, {200, true}, {210, false}, {150, false}, {50, true},
	}
	for _, s := range steps {
		free.Store(s.free)
		if err := g.Check(); err != nil {
			t.Fatal(err)
		}
		if got := g.Refusing(); got != s.refusing {
			t.Fatalf("free %d of 1000: refusing %v, want %v", s.free, got, s.refusing)
		}
	}
	free.Store(500)
	g.Check()
	failing := g.Failing()
	g.Failed(true, "write: no space left on device")
	select {
	case <-failing:
	default:
		t.Fatal("Failing not closed by a failed write")
	}
	if !g.Refusing() || !g.Room() || g.State().Failed == "" {
		t.Fatalf("after a failed write with room: refusing %v, room %v, state %+v", g.Refusing(), g.Room(), g.State())
	}
	g.Failed(false, "")
	if g.Refusing() {
		t.Fatal("refusing after the store was opened again")
	}
	select {
	case <-g.Failing():
		t.Fatal("Failing closed after the store was opened again")
	default:
	}
	if got := testutil.ToFloat64(g.failures); got != 1 {
		t.Errorf("write failures counted %v, want 1", got)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP cellkit_cell_store_bytes The filesystem of the cell's store, by kind: size, used, free (what the store may still write), and the high watermark as bytes in use (high_watermark).
# TYPE cellkit_cell_store_bytes gauge
cellkit_cell_store_bytes{kind="free"} 500
cellkit_cell_store_bytes{kind="high_watermark"} 900
cellkit_cell_store_bytes{kind="size"} 1000
cellkit_cell_store_bytes{kind="used"} 500
`), "cellkit_cell_store_bytes"); err != nil {
		t.Error(err)
	}
}

func TestBadWatermarks(t *testing.T) {
	stat := func(string) (Usage, error) { return Usage{Size: 1, Free: 1}, nil }
	for _, c := range []Config{{Dir: "/x", High: 0.8, Low: 0.9}, {Dir: "/x", High: 1.2}, {High: 0.9}} {
		if _, err := New(c, Options{Stat: stat}); err == nil {
			t.Errorf("New(%+v) took it", c)
		}
	}
}
