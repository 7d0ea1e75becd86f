package hotkeys

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/cellkit/cellkit/internal/testkit"
)

func newClock() *testkit.Clock { return testkit.NewClock(time.Unix(1_800_000_000, 0)) }

func add(t *Tracker, key string, n int) {
	for range n {
		t.Add([]byte(key), xxhash.Sum64String(key))
	}
}

func TestExactWhenFewKeys(t *testing.T) {
	clk := newClock()
	tr := New(Config{}, Options{Now: clk.Now})
	add(tr, "alice", 5)
	add(tr, "bob", 3)
	add(tr, "carol", 9)
	rep := tr.Top(2)
	if rep.Total != 17 {
		t.Errorf("Total = %d, want 17", rep.Total)
	}
	want := []Key{{Key: "carol", Count: 9}, {Key: "alice", Count: 5}}
	if fmt.Sprint(rep.Keys) != fmt.Sprint(want) {
		t.Errorf("Top(2) = %v, want %v", rep.Keys, want)
	}
	if got := tr.Top(0); len(got.Keys) != 3 {
		t.Errorf("Top(0) has %d keys, want 3", len(got.Keys))
	}
}

func TestWindowSlides(t *testing.T) {
	clk := newClock()
	tr := New(Config{Window: time.Minute, Buckets: 6}, Options{Now: clk.Now})
	add(tr, "old", 100)
	clk.Advance(30 * time.Second)
	add(tr, "mid", 10)
	if got := tr.Top(1).Keys[0]; got.Key != "old" || got.Count != 100 {
		t.Fatalf("after 30s Top(1) = %v, want old:100", got)
	}
	// Once a full window has passed since "old" was counted, it is gone.
	clk.Advance(40 * time.Second)
	rep := tr.Top(0)
	if len(rep.Keys) != 1 || rep.Keys[0].Key != "mid" || rep.Total != 10 {
		t.Fatalf("after 70s Top = %+v, want only mid:10", rep)
	}
	clk.Advance(time.Minute)
	if rep := tr.Top(0); len(rep.Keys) != 0 || rep.Total != 0 {
		t.Fatalf("after 130s Top = %+v, want empty", rep)
	}
}

// TestHeavyHittersFound: in a skewed stream far larger than the capacity,
// every key above the guarantee threshold is reported, counts never below the
// truth and never above it by more than the reported error.
func TestHeavyHittersFound(t *testing.T) {
	clk := newClock()
	cfg := Config{Capacity: 256, Shards: 4}
	tr := New(cfg, Options{Now: clk.Now})
	r := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(rand.New(rand.NewPCG(3, 4)), 1.2, 1, 100_000)
	truth := map[string]int64{}
	const n = 200_000
	for i := range n {
		var key string
		if i%50 == 0 {
			key = "vip-user" // 2% of the traffic
		} else {
			key = fmt.Sprintf("user-%d", zipf.Uint64()+uint64(r.IntN(2))*1_000_000)
		}
		truth[key]++
		tr.Add([]byte(key), xxhash.Sum64String(key))
	}
	rep := tr.Top(0)
	if rep.Total != n {
		t.Fatalf("Total = %d, want %d", rep.Total, n)
	}
	got := map[string]Key{}
	for _, k := range rep.Keys {
		got[k.Key] = k
	}
	perShard := int64(cfg.Capacity / cfg.Shards)
	threshold := 2 * n / perShard // generous: shards are unevenly loaded
	for key, c := range truth {
		k, ok := got[key]
		if c > threshold && !ok {
			t.Errorf("key %q with true count %d (> %d) not reported", key, c, threshold)
		}
		if ok && (k.Count < c || k.Count-k.Error > c) {
			t.Errorf("key %q: Count %d Error %d, true count %d", key, k.Count, k.Error, c)
		}
	}
	var heaviest string
	for key, c := range truth {
		if heaviest == "" || c > truth[heaviest] {
			heaviest = key
		}
	}
	if top := tr.Top(1).Keys[0]; top.Key != heaviest {
		t.Errorf("Top(1) = %v, want %s (true count %d) first", top, heaviest, truth[heaviest])
	}
	if k, ok := got["vip-user"]; !ok || k.Count < truth["vip-user"] {
		t.Errorf("vip-user (2%% of traffic) reported as %+v, %v", k, ok)
	}
	if len(rep.Keys) > cfg.Capacity {
		t.Errorf("%d keys tracked, capacity %d", len(rep.Keys), cfg.Capacity)
	}
}

func TestConcurrentAdd(t *testing.T) {
	tr := New(Config{Capacity: 64}, Options{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 5000 {
				add(tr, fmt.Sprintf("k%d", (i*7+g)%100), 1)
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			tr.Top(10)
		}
	})
	wg.Wait()
	if got := tr.Top(0).Total; got != 20000 {
		t.Fatalf("Total = %d, want 20000", got)
	}
}

func TestAddKnownKeyDoesNotAllocate(t *testing.T) {
	tr := New(Config{}, Options{Now: newClock().Now})
	key := []byte("user-123")
	h := xxhash.Sum64(key)
	tr.Add(key, h)
	if n := testing.AllocsPerRun(1000, func() { tr.Add(key, h) }); n != 0 {
		t.Fatalf("Add of a known key allocates %.1f times, want 0", n)
	}
}

func BenchmarkAdd(b *testing.B) {
	tr := New(Config{}, Options{})
	keys := make([][]byte, 4096)
	hashes := make([]uint64, len(keys))
	zipf := rand.NewZipf(rand.New(rand.NewPCG(1, 1)), 1.1, 1, 1_000_000)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "user-%d", zipf.Uint64())
		hashes[i] = xxhash.Sum64(keys[i])
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := rand.IntN(len(keys))
		for pb.Next() {
			i = (i + 1) % len(keys)
			tr.Add(keys[i], hashes[i])
		}
	})
}
