package cell

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/agencysim"
	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/smallfs"
	"github.com/cellkit/cellkit/internal/testkit"
)

// smallStore is a cell on a 64 MiB filesystem of its own, with a work
// stream small enough to fit it.
func smallStore(t *testing.T, latency time.Duration) *harness {
	t.Helper()
	dir := smallfs.Temp(t, 64<<20)
	return start(t, setup{storeDir: dir, sessions: 8, sim: agencysim.Config{Latency: agencysim.FixedLatency(latency)},
		config: func(c *Config) { c.QueueMaxBytes, c.Storage.High, c.Storage.Low = 8<<20, 0.9, 0.85 }})
}

// TestStoreWatermarks: above the high watermark of its filesystem the cell
// refuses new inquiries at once (503 storage-full, Retry-After,
// Cellkit-Overloaded) and stays ready; below the low one it takes them
// again.
func TestStoreWatermarks(t *testing.T) {
	h := smallStore(t, 2*time.Millisecond)
	h.settled(h.accept(user(1), nil))
	u := h.cell.disk.Usage()
	if _, err := smallfs.Fill(h.cfg.StoreDir, "filler", u.Size/20); err != nil { // 95 % in use
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "the store over its high watermark", h.cell.disk.Refusing)
	r := h.post(user(2), nil)
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" || r.Header.Get("Cellkit-Overloaded") != "true" {
		t.Fatalf("POST above the watermark = %d %v %s", r.Status, r.Header, r.Body)
	}
	var p struct{ Type string }
	r.JSON(t, &p)
	if p.Type != "https://cellkit.dev/problems/storage-full" {
		t.Errorf("problem type %q", p.Type)
	}
	if ok, checks := h.cell.readiness(); !ok {
		t.Errorf("not ready above the watermark (queued work goes on, reads too): %+v", checks)
	}
	if st := h.cell.Status().Store; st == nil || !st.Refusing || st.Used < 0.9 {
		t.Errorf("status store %+v", st)
	}
	os.Remove(filepath.Join(h.cfg.StoreDir, "filler"))
	testkit.WaitFor(t, 5*time.Second, "the store below its low watermark", func() bool { return !h.cell.disk.Refusing() })
	h.settled(h.accept(user(3), nil))
}

// TestFullDiskHealsWithoutARestart: another process fills the store's
// disk while inquiries are being processed. The store fails their writes:
// the cell refuses new inquiries, fails its readiness and fetches no more
// work; once the space is back it restarts its JetStream in process (a
// file store that failed a write refuses every write after it) and every
// inquiry it had accepted ends done.
func TestFullDiskHealsWithoutARestart(t *testing.T) {
	h := smallStore(t, 300*time.Millisecond)
	var ids []string
	for i := range 24 {
		ids = append(ids, h.accept(user(i), nil))
	}
	if _, err := smallfs.Fill(h.cfg.StoreDir, "filler", 0); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 15*time.Second, "a write the store failed, seen by the cell", func() bool { return h.cell.storeFailed() })
	if ok, checks := h.cell.readiness(); ok || checks["store"].OK {
		t.Errorf("ready with a store that failed a write: %+v", checks["store"])
	}
	if r := h.post(user(100), nil); r.Status != http.StatusServiceUnavailable {
		t.Errorf("POST with a failed store = %d %s", r.Status, r.Body)
	}
	// From the room on, new inquiries are refused as the cell's choice
	// (Cellkit-Overloaded: the routers do not count it against the
	// cell), never as a queue it cannot reach, until they are taken.
	stop := make(chan struct{})
	refusals := make(chan string, 1000)
	var posting sync.WaitGroup
	posting.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			r, err := testkit.Send(h.client, "POST", h.intake+"/v1/inquiries", user(1000+i), nil)
			switch {
			case err != nil:
				refusals <- err.Error()
			case r.Status >= 500 && r.Header.Get(api.HeaderOverloaded) != "true":
				refusals <- fmt.Sprintf("%d %s", r.Status, r.Body)
			case r.Status == http.StatusAccepted:
				var a struct{ ID string }
				if json.Unmarshal(r.Body, &a) == nil {
					ids = append(ids, a.ID) // read after posting.Wait
				}
			}
		}
	})
	os.Remove(filepath.Join(h.cfg.StoreDir, "filler"))
	testkit.WaitFor(t, 10*time.Second, "the store open again and the cell ready", func() bool {
		ok, _ := h.cell.readiness()
		return ok && !h.cell.storeFailed()
	})
	time.Sleep(200 * time.Millisecond)
	close(stop)
	posting.Wait()
	close(refusals)
	for r := range refusals {
		t.Errorf("POST while the store healed: %s; want 503 storage-full with Cellkit-Overloaded, or 202", r)
	}
	for _, id := range ids {
		var v inquiry.View
		testkit.WaitFor(t, 90*time.Second, "inquiry "+id+" final", func() bool {
			v = h.view(id)
			return v.Status != inquiry.Pending
		})
		if v.Status != inquiry.Done {
			t.Errorf("%s ended %s (%s), want done", id, v.Status, v.Reason)
		}
	}
	h.settled(h.accept(user(200), nil))
}
