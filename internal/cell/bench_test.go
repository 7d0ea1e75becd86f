package cell

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"

	"github.com/cellkit/cellkit/internal/agencysim"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/queue"
	"github.com/cellkit/cellkit/internal/store"
	"github.com/cellkit/cellkit/internal/testkit"
)

// benchStore is where benchmark cells keep their store: $CELLKIT_BENCH_DIR
// (for instance /dev/shm, to see what the disk costs) or a temporary
// directory on the test's disk.
func benchStore(b *testing.B) string { return celltest.BenchDir(b) }

func benchClient() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 512}}
}

// intakeParallelism is how many clients per GOMAXPROCS send at once in
// the intake's benchmarks, and publish in the raw JetStream one beside
// them (RunParallel's).
const intakeParallelism = 16

// BenchmarkIntake measures accepted inquiries per second, each 202 after
// its writes are synced, from as many clients in each variant, on the
// same store directory:
//   - publish: a raw JetStream client publishing one synced message per
//     request to an embedded server as a cell runs it — the limit one
//     synced write sets;
//   - accept: the ledger's acceptance alone (store.Ledger.Accept: the
//     record marshalled, one publish expecting no message of the id);
//   - http-publish: the least an HTTP intake with one synced write does
//     (publishOverHTTP) — what the HTTP hop costs any intake;
//   - ledger: a cell on the ledger (one write per acceptance);
//   - records: a cell on the layout before it (a KV record, then the work
//     message).
//
// The cells' workers are held so that only the intake writes.
//
//	make bench-cell BENCHCOUNT=5                    # BENCH_DIR=/dev/shm: tmpfs
func BenchmarkIntake(b *testing.B) {
	b.Run("publish", func(b *testing.B) {
		js := benchJetStream(b)
		if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "bench", Subjects: []string{"bench.>"}, Storage: jetstream.FileStorage}); err != nil {
			b.Fatal(err)
		}
		body := make([]byte, 420) // a pending record's size
		acceptedPerSecond(b, func(n int64) error {
			_, err := js.Publish(context.Background(), "bench."+strconv.FormatInt(n, 10), body)
			return err
		})
	})
	b.Run("accept", func(b *testing.B) {
		l, err := store.OpenLedger(context.Background(), benchJetStream(b), store.LedgerConfig{Cell: "c1"})
		if err != nil {
			b.Fatal(err)
		}
		acceptedPerSecond(b, func(int64) error {
			rec := inquiry.NewRecord(inquiry.NewID("c1", 0), "c1", inquiry.Request{UserID: "u", Product: "p", Amount: 1, Priority: inquiry.Normal}, time.Now())
			_, err := l.Accept(context.Background(), &rec)
			return err
		})
	})
	b.Run("http-publish", func(b *testing.B) {
		postEach(b, publishOverHTTP(b, benchJetStream(b)))
	})
	for _, layout := range []string{queue.LayoutLedger, queue.LayoutRecords} {
		b.Run(layout, func(b *testing.B) {
			postEach(b, heldIntake(b, layout).intake+"/v1/inquiries")
		})
	}
}

// acceptedPerSecond runs send from intakeParallelism clients per
// GOMAXPROCS (n counts the sends from 1) and reports the sends a second.
func acceptedPerSecond(b *testing.B, send func(n int64) error) {
	var n atomic.Int64
	b.SetParallelism(intakeParallelism)
	b.ResetTimer()
	began := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := send(n.Add(1)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(began).Seconds(), "accepted/s")
}

// postEach posts one inquiry per send to url, each to be answered 202.
func postEach(b *testing.B, url string) {
	client := benchClient()
	defer client.CloseIdleConnections()
	acceptedPerSecond(b, func(n int64) error {
		r, err := testkit.Send(client, "POST", url, user(int(n)), nil)
		if err == nil && r.Status != http.StatusAccepted {
			err = fmt.Errorf("POST = %d %s", r.Status, r.Body)
		}
		return err
	})
}

// BenchmarkIntakeLatency offers 1,000 inquiries a second for 5 s
// (CELLKIT_BENCH_SECONDS), open loop, to a cell on each layout, and
// reports the intake's latency as its clients see it. Run it once:
//
//	go test -run '^$' -bench IntakeLatency -benchtime 1x ./internal/cell/
func BenchmarkIntakeLatency(b *testing.B) {
	const rate = 1000
	secs := 5
	if v, err := strconv.Atoi(os.Getenv("CELLKIT_BENCH_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	for _, layout := range []string{queue.LayoutLedger, queue.LayoutRecords} {
		b.Run(layout, func(b *testing.B) {
			h := heldIntake(b, layout)
			client := benchClient()
			defer client.CloseIdleConnections()
			for b.Loop() {
				var mu sync.Mutex
				var took []time.Duration
				var failed atomic.Int64
				var wg sync.WaitGroup
				slots := make(chan struct{}, 512) // requests in flight at most
				began := time.Now()
				for i := range rate * secs {
					at := began.Add(time.Duration(i) * time.Second / rate)
					time.Sleep(time.Until(at))
					select {
					case slots <- struct{}{}:
					default:
						failed.Add(1) // the cell fell 512 behind
						continue
					}
					wg.Go(func() {
						defer func() { <-slots }()
						r, err := testkit.Send(client, "POST", h.intake+"/v1/inquiries", user(i), nil)
						d := time.Since(at)
						if err != nil || r.Status != http.StatusAccepted {
							failed.Add(1)
							return
						}
						mu.Lock()
						took = append(took, d)
						mu.Unlock()
					})
				}
				wg.Wait()
				slices.Sort(took)
				q := func(p float64) float64 {
					if len(took) == 0 {
						return 0
					}
					return float64(took[min(len(took)-1, int(p*float64(len(took))))].Microseconds()) / 1000
				}
				b.ReportMetric(q(0.50), "p50_ms")
				b.ReportMetric(q(0.99), "p99_ms")
				b.ReportMetric(q(0.999), "p99.9_ms")
				b.ReportMetric(float64(failed.Load()), "failed")
			}
		})
	}
}

// heldIntake is a cell on layout whose workers are held, so that only its
// intake writes.
func heldIntake(b *testing.B, layout string) *harness {
	css := blockingCSS{release: make(chan struct{})}
	b.Cleanup(func() { close(css.release) })
	return start(b, setup{storeDir: benchStore(b), opts: Options{CSS: css}, config: func(c *Config) {
		c.QueueLayout = layout
		c.Pipeline.Workers = 1
		c.Pipeline.StepTimeout = time.Hour
		c.Pipeline.DrainTimeout = 100 * time.Millisecond
		c.Shed.MaxAge = time.Hour
		c.Shed.MaxDepth = 10_000_000
		c.QueueMaxMsgs = 10_000_000
		c.QueueMaxBytes = 4 << 30
	}})
}

// publishOverHTTP serves the least an HTTP intake with one synced write
// can do — read a request, make its pending record, publish it synced,
// answer 202 with its id — on loopback, and returns its URL: the floor
// the intake's own work is measured against, the HTTP both pay included.
func publishOverHTTP(b *testing.B, js jetstream.JetStream) string {
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "bench", Subjects: []string{"bench.>"}, Storage: jetstream.FileStorage}); err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req inquiry.Request
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rec := inquiry.NewRecord(inquiry.NewID("c1", 0), "c1", req, time.Now())
		data, err := json.Marshal(rec)
		if err == nil {
			_, err = js.Publish(r.Context(), "bench."+rec.ID, data)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(map[string]string{"id": rec.ID})
	})}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// benchJetStream is an embedded server on the benchmarks' store, synced
// as a cell's is, and a client of it in process.
func benchJetStream(b *testing.B) jetstream.JetStream {
	_, js := celltest.NATSIn(b, benchStore(b))
	return js
}

// BenchmarkPipelineAgencyBound offers twice what the agencies can take —
// each simulator answers in 50 ms on 20 sessions, a bound of 400 inquiries/s
// — for 20 s (CELLKIT_BENCH_SECONDS), open loop, and reports the done rate
// against the bound, the oldest pending age (budget 5 s, so that shedding
// shows within the run) and the share shed with 503, on each layout. Run
// it once:
//
//	go test -run '^$' -bench PipelineAgencyBound -benchtime 1x ./internal/cell/
func BenchmarkPipelineAgencyBound(b *testing.B) {
	for _, layout := range []string{queue.LayoutLedger, queue.LayoutRecords} {
		b.Run(layout, func(b *testing.B) { pipelineAgencyBound(b, layout) })
	}
}

// pipelineAgencyBound runs BenchmarkPipelineAgencyBound on one layout.
// One piece: the open-loop load, its measures and the report of what bound
// the run belong to one window.
func pipelineAgencyBound(b *testing.B, layout string) {
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
	dir := benchStore(b)
	h := start(b, setup{
		sessions: sessions, storeDir: dir,
		sim: agencysim.Config{MaxSessions: sessions, Latency: agencysim.FixedLatency(latency)},
		config: func(c *Config) {
			c.QueueLayout = layout
			c.Shed.MaxAge = budget
			c.CSSLatency, c.CoreLatency = 5*time.Millisecond, 10*time.Millisecond
			c.SampleInterval = 100 * time.Millisecond
			c.Pipeline.Backoff = nil
			if v, err := strconv.Atoi(os.Getenv("CELLKIT_BENCH_WORKERS")); err == nil {
				c.Pipeline.Workers = v
			}
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
					r, err := testkit.Send(client, "POST", h.intake+"/v1/inquiries",
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
		probe := startFsyncProbe(b, dir)
		doneBefore := counter(b, h, "cellkit_cell_deliveries_total", "outcome", "done")
		began := time.Now()
		var maxAge time.Duration
		// Per agency, summed over the ticks: places at the gate (the
		// adaptive limit), calls holding one, inquiries waiting for one.
		gates := map[string]*[3]float64{}
		ticks := 0
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
			ticks++
			for name, g := range h.cell.pipe.GateStats() {
				if gates[name] == nil {
					gates[name] = &[3]float64{}
				}
				for i := range g {
					gates[name][i] += float64(g[i])
				}
			}
		}
		tick.Stop()
		elapsed := time.Since(began)
		fsyncs := probe()
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
		for name, g := range gates {
			b.Logf("%s: mean places %.1f, busy %.1f (%.0f%% of %d sessions), waiting %.1f",
				name, g[0]/float64(ticks), g[1]/float64(ticks), 100*g[1]/float64(ticks)/sessions, sessions, g[2]/float64(ticks))
		}
		for _, name := range []string{"nice", "kcb"} {
			b.Logf("%s: mean call %.2f ms (the simulator's latency %v; the rest is the link's own cost)", name, 1000*meanOf(b, h, "cellkit_agency_call_seconds", "agency", name), latency)
		}
		b.Logf("the store's disk meanwhile: %s", fsyncs)
		b.Logf("deliveries %v, failures %v", series(b, h, "cellkit_cell_deliveries_total", "outcome"), series(b, h, "cellkit_cell_failures_total", "kind"))
	}
}

// startFsyncProbe writes and fsyncs 4 KiB in dir every 20 ms until the
// returned function is called, which reports the fsync latencies: the
// on-disk figures depend on them (every JetStream write is synced), and on a
// shared machine they move with the neighbours' I/O.
func startFsyncProbe(tb testing.TB, dir string) func() string {
	tb.Helper()
	f, err := os.CreateTemp(dir, "fsync-probe")
	if err != nil {
		tb.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan []time.Duration)
	go func() {
		defer f.Close()
		defer os.Remove(f.Name())
		var lat []time.Duration
		buf := make([]byte, 4096)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				done <- lat
				return
			case <-t.C:
			}
			t0 := time.Now()
			if _, err := f.Write(buf); err == nil && f.Sync() == nil {
				lat = append(lat, time.Since(t0))
			}
		}
	}()
	return func() string {
		close(stop)
		lat := <-done
		if len(lat) == 0 {
			return "no fsync measured"
		}
		slices.Sort(lat)
		q := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))].Round(time.Microsecond) }
		return fmt.Sprintf("4 KiB write+fsync p50 %v, p99 %v, max %v (%d probes)", q(0.5), q(0.99), lat[len(lat)-1].Round(time.Microsecond), len(lat))
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

// meanOf is the mean of a histogram's series with the label (all outcomes).
func meanOf(tb testing.TB, h *harness, name, label, value string) float64 {
	tb.Helper()
	mfs, err := h.cell.reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	var sum, n float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			if hasLabel(m, label, value) {
				sum += m.GetHistogram().GetSampleSum()
				n += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum / max(n, 1)
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.Label {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}
