package cell

import (
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/cellkit/cellkit/internal/agencysim"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/inquiry"
)

// benchStore is where benchmark cells keep their store: $CELLKIT_BENCH_DIR
// (for instance /dev/shm, to see what the disk costs) or a temporary
// directory on the test's disk.
func benchStore(b *testing.B) string {
	if d := os.Getenv("CELLKIT_BENCH_DIR"); d != "" {
		dir, err := os.MkdirTemp(d, "cellbench")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return b.TempDir()
}

func benchClient() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 512}}
}

// BenchmarkIntake measures accepted inquiries per second: each 202 waits for
// the record write and the PubAck, both synced to disk. The workers are held
// so that only the intake writes.
func BenchmarkIntake(b *testing.B) {
	css := blockingCSS{release: make(chan struct{})}
	b.Cleanup(func() { close(css.release) })
	h := start(b, setup{storeDir: benchStore(b), opts: Options{CSS: css}, config: func(c *Config) {
		c.Pipeline.Workers = 1
		c.Pipeline.StepTimeout = time.Hour
		c.Pipeline.DrainTimeout = 100 * time.Millisecond
		c.Shed.MaxAge = time.Hour
		c.Shed.MaxDepth = 10_000_000
		c.QueueMaxMsgs = 10_000_000
		c.QueueMaxBytes = 4 << 30
	}})
	client := benchClient()
	defer client.CloseIdleConnections()
	var n atomic.Int64
	b.SetParallelism(16)
	b.ResetTimer()
	began := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			r, err := celltest.Send(client, "POST", h.intake+"/v1/inquiries", user(int(i)), nil)
			if err != nil || r.Status != http.StatusAccepted {
				b.Errorf("POST = %v %d %s", err, r.Status, r.Body)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(began).Seconds(), "accepted/s")
}

// BenchmarkPipelineAgencyBound offers twice what the agencies can take —
// each simulator answers in 50 ms on 20 sessions, a bound of 400 inquiries/s
// — for 20 s (CELLKIT_BENCH_SECONDS), open loop, and reports the done rate
// against the bound, the oldest pending age (budget 5 s, so that shedding
// shows within the run) and the share shed with 503. Run it once:
//
//	go test -run '^$' -bench PipelineAgencyBound -benchtime 1x ./internal/cell/
func BenchmarkPipelineAgencyBound(b *testing.B) {
	const (
		sessions = 20
		latency  = 50 * time.Millisecond
		bound    = sessions * float64(time.Second/latency) // 400/s
		offered  = 2 * bound
		budget   = 5 * time.Second
	)
	secs := 20
	if v, err := strconv.Atoi(os.Getenv("CELLKIT_BENCH_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	window := time.Duration(secs) * time.Second
	h := start(b, setup{
		sessions: sessions, storeDir: benchStore(b),
		sim: agencysim.Config{MaxSessions: sessions, Latency: agencysim.FixedLatency(latency)},
		config: func(c *Config) {
			c.Shed.MaxAge = budget
			c.CSSLatency, c.CoreLatency = 5*time.Millisecond, 10*time.Millisecond
			c.SampleInterval = 100 * time.Millisecond
			c.Pipeline.Backoff = nil
			c.Breaker.MinCalls, c.Breaker.Window = 0, 0
		},
	})
	client := benchClient()
	defer client.CloseIdleConnections()

	for b.Loop() {
		var accepted, shed, other, dropped atomic.Int64
		jobs := make(chan int, 1024)
		var wg sync.WaitGroup
		for range 256 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range jobs {
					r, err := celltest.Send(client, "POST", h.intake+"/v1/inquiries",
						inquiry.Request{UserID: "bench-" + strconv.Itoa(i), Product: "loan", Amount: 1_000_000}, nil)
					switch {
					case err == nil && r.Status == http.StatusAccepted:
						accepted.Add(1)
					case err == nil && r.Status == http.StatusServiceUnavailable:
						shed.Add(1)
					default:
						other.Add(1)
					}
				}
			}()
		}
		doneBefore := counter(b, h, "cellkit_cell_deliveries_total", "outcome", "done")
		began := time.Now()
		var maxAge time.Duration
		tick := time.NewTicker(10 * time.Millisecond)
		sent := 0
		for now := range tick.C {
			el := now.Sub(began)
			if el >= window {
				break
			}
			for want := int(el.Seconds() * offered); sent < want; sent++ {
				select {
				case jobs <- sent:
				default:
					dropped.Add(1) // the load generator itself is saturated
				}
			}
			if s := h.cell.sample.Load(); s != nil && !s.Oldest.IsZero() {
				maxAge = max(maxAge, now.Sub(s.Oldest))
			}
		}
		tick.Stop()
		elapsed := time.Since(began)
		done := counter(b, h, "cellkit_cell_deliveries_total", "outcome", "done") - doneBefore
		close(jobs)
		wg.Wait()
		rate := done / elapsed.Seconds()
		b.ReportMetric(rate, "done/s")
		b.ReportMetric(rate/bound, "done/bound")
		b.ReportMetric(float64(accepted.Load())/elapsed.Seconds(), "accepted/s")
		b.ReportMetric(float64(shed.Load())/float64(max(int64(sent), 1)), "shed_share")
		b.ReportMetric(maxAge.Seconds(), "max_oldest_age_s")
		b.Logf("window %v: offered %d (%.0f/s), accepted %d, shed %d, other %d, generator dropped %d, done %.0f (%.1f/s = %.3f of the bound %.0f/s), oldest pending at most %v (budget %v)",
			elapsed.Round(time.Millisecond), sent, float64(sent)/elapsed.Seconds(), accepted.Load(), shed.Load(), other.Load(), dropped.Load(),
			done, rate, rate/bound, bound, maxAge.Round(time.Millisecond), budget)
		b.Logf("deliveries %v, failures %v", series(b, h, "cellkit_cell_deliveries_total", "outcome"), series(b, h, "cellkit_cell_failures_total", "kind"))
	}
}

// counter reads one series of a counter from the cell's registry.
func counter(tb testing.TB, h *harness, name, label, value string) float64 {
	tb.Helper()
	mfs, err := h.cell.reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			if hasLabel(m, label, value) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// series reads every series of a counter by one label.
func series(tb testing.TB, h *harness, name, label string) map[string]float64 {
	tb.Helper()
	out := map[string]float64{}
	mfs, err := h.cell.reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == label {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.Label {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}
