// Package celltest starts the real things a cell test needs — agency
// simulators over TCP, a file registry holding a cell map, an embedded NATS
// server — on top of internal/testkit, which holds what is not particular
// to cellkit (waiting, clocks, leak checks, HTTP requests). It predicts
// every inquiry's result, and checks a load run like a queue checker: every
// accepted inquiry settled (lost = 0), none with two results
// (duplicated = 0).
package celltest

import (
	"context"
	"errors"
	"maps"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellkit/cellkit/internal/agencysim"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/natsembed"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/telegram"
	"github.com/cellkit/cellkit/internal/testkit"
)

// StartSim serves a simulated agency on a free loopback port until the
// test ends.
func StartSim(t testing.TB, profile telegram.Profile, cfg agencysim.Config) *agencysim.Server {
	t.Helper()
	return ServeSim(t, testkit.Listen(t), profile, cfg)
}

// ServeSim serves a simulated agency on ln until the test ends; cleanup
// closes it and checks that Serve ended with ErrServerClosed. Its logs go to
// testkit.Logger.
func ServeSim(t testing.TB, ln net.Listener, profile telegram.Profile, cfg agencysim.Config) *agencysim.Server {
	t.Helper()
	srv, err := agencysim.New(cfg, agencysim.Options{Profile: profile, Logger: testkit.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-served; !errors.Is(err, agencysim.ErrServerClosed) {
			t.Errorf("agency simulator: Serve() = %v, want ErrServerClosed", err)
		}
	})
	testkit.WaitFor(t, 5*time.Second, "the simulator to listen", func() bool { return srv.Addr() != nil })
	return srv
}

// SetSim changes a running simulator's configuration.
func SetSim(t testing.TB, sim *agencysim.Server, change func(*agencysim.Config)) {
	t.Helper()
	cfg := sim.Config()
	change(&cfg)
	if err := sim.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
}

// Registry is a file registry in a test's temporary directory.
type Registry struct {
	t    testing.TB
	Path string
	Reg  registry.Registry
}

// NewRegistry writes the first map: the given agency limits and cells.
func NewRegistry(t testing.TB, agencies map[string]int, cells ...slotmap.Cell) *Registry {
	t.Helper()
	r := &Registry{t: t, Path: filepath.Join(t.TempDir(), "map.json")}
	var err error
	if r.Reg, err = registry.Open(registry.Config{URL: "file:" + r.Path}, registry.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Reg.Close() })
	m, err := slotmap.New(0, agencies)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Reg.CompareAndSwap(context.Background(), 0, m); err != nil {
		t.Fatal(err)
	}
	for _, c := range cells {
		r.Change(func(m *slotmap.Map) (*slotmap.Plan, error) { return m.AddCell(c) })
	}
	return r
}

// KeyID is the id a cell following a map of NewRegistry's makes for an
// Idempotency-Key (the default slot count).
func KeyID(cell, client, user, key string) string {
	return inquiry.KeyID(cell, int(slotmap.HashUser(user)%slotmap.DefaultSlots), client, user, key)
}

// URL is the registry URL to give a cell.
func (r *Registry) URL() string { return "file:" + r.Path }

// Map loads the current map.
func (r *Registry) Map() *slotmap.Map {
	r.t.Helper()
	m, err := r.Reg.Load(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	return m
}

// Change plans and commits one change.
func (r *Registry) Change(plan func(*slotmap.Map) (*slotmap.Plan, error)) *slotmap.Map {
	r.t.Helper()
	m := r.Map()
	p, err := plan(m)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.Reg.CompareAndSwap(context.Background(), m.Version(), p.After); err != nil {
		r.t.Fatal(err)
	}
	return p.After
}

// TestCell is a cell entry for a map.
func TestCell(id string) slotmap.Cell {
	return slotmap.Cell{ID: id, Weight: 1, Intake: "http://127.0.0.1:1", Admin: "http://127.0.0.1:2"}
}

// Expected is the result a cell must compute for a request, with agencies
// answering agencysim.Score and the in-process CSS and core banking.
func Expected(id string, req inquiry.Request, agencies ...string) inquiry.Result {
	scores := map[string]int{"css": inquiry.CSSScore(req.UserID)}
	for _, a := range agencies {
		scores[a] = agencysim.Score(inquiry.AgencyKey(req.UserID))
	}
	rate, limit := inquiry.Decide(scores, req.Amount)
	return inquiry.Result{Scores: scores, RateBps: rate, Limit: limit, CoreRef: inquiry.CoreRef(id)}
}

// SameResult compares two results.
func SameResult(a, b *inquiry.Result) bool {
	if a == nil || b == nil {
		return a == b
	}
	return maps.Equal(a.Scores, b.Scores) && a.RateBps == b.RateBps && a.Limit == b.Limit && a.CoreRef == b.CoreRef
}

// Checker records what a load run was told and checks it afterwards.
type Checker struct {
	Requests map[string]inquiry.Request // idempotency key → request
	IDs      map[string][]string        // idempotency key → distinct ids answered with 202
}

// NewChecker returns an empty checker.
func NewChecker() *Checker {
	return &Checker{Requests: map[string]inquiry.Request{}, IDs: map[string][]string{}}
}

// Accepted records a 202 for key.
func (c *Checker) Accepted(key string, req inquiry.Request, id string) {
	c.Requests[key] = req
	for _, x := range c.IDs[key] {
		if x == id {
			return
		}
	}
	c.IDs[key] = append(c.IDs[key], id)
}

// Report is a checker's verdict.
type Report struct {
	Accepted   int // distinct inquiries answered 202
	Done       int
	Failed     int
	Lost       int // accepted but unknown or still pending
	Duplicated int // one request with two ids, or a result that is not the expected one
	Problems   []string
}

// ErrPending is returned by a Lookup for an inquiry not settled yet.
var ErrPending = errors.New("pending")

// Check looks every accepted inquiry up once.
func (c *Checker) Check(lookup func(id string) (inquiry.View, error), agencies ...string) Report {
	var r Report
	for key, ids := range c.IDs {
		if len(ids) > 1 {
			r.Duplicated++
			r.Problems = append(r.Problems, "key "+key+" has several ids")
		}
		for _, id := range ids {
			r.Accepted++
			v, err := lookup(id)
			switch {
			case err != nil:
				r.Lost++
				r.Problems = append(r.Problems, id+": "+err.Error())
			case v.Status == inquiry.Done:
				r.Done++
				want := Expected(id, c.Requests[key], agencies...)
				if !SameResult(v.Result, &want) {
					r.Duplicated++
					r.Problems = append(r.Problems, id+": unexpected result")
				}
			case v.Status == inquiry.Failed:
				r.Failed++
			default:
				r.Lost++
				r.Problems = append(r.Problems, id+": still "+string(v.Status))
			}
		}
	}
	return r
}

// NATS starts an embedded NATS server with its store in a temporary
// directory, without a listener, and connects to it; both end with the test.
func NATS(t testing.TB) (*natsembed.Server, jetstream.JetStream) {
	t.Helper()
	return NATSIn(t, t.TempDir())
}

// NATSIn is NATS with its store in dir.
func NATSIn(t testing.TB, dir string) (*natsembed.Server, jetstream.JetStream) {
	t.Helper()
	srv, err := natsembed.Start(natsembed.Config{Name: "test", StoreDir: dir, Port: -1}, natsembed.Options{Logger: testkit.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	_, js := Connect(t, srv)
	return srv, js
}

// EnvBenchDir names the directory benchmarks keep their stores in
// (/dev/shm: what the disk costs); unset, a temporary directory on the
// test's disk.
const EnvBenchDir = "CELLKIT_BENCH_DIR"

// BenchDir is a new directory for a benchmark's store under
// $CELLKIT_BENCH_DIR, removed when the benchmark ends.
func BenchDir(b testing.TB) string {
	d := os.Getenv(EnvBenchDir)
	if d == "" {
		return b.TempDir()
	}
	dir, err := os.MkdirTemp(d, "cellkit-bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) }) // a temporary directory: nothing to do if it stays
	return dir
}

// Connect opens a client connection to srv, closed when the test ends, and
// its JetStream context.
func Connect(t testing.TB, srv *natsembed.Server, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := srv.Connect(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}
