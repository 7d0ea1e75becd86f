package rollout

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/gate"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/testkit"
)

// doneBounds are the bounds of the fake cells' latency histograms.
var doneBounds = []string{"0.01", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "+Inf"}

// traffic is what a fake cell serves between two scrapes: POSTs
// accepted and refused (503), and inquiries done per latency bucket
// (of doneBounds).
type traffic struct {
	accepted, refused int64
	done              []int64
}

var (
	healthy = traffic{accepted: 40, done: []int64{4, 16, 12, 6, 2}}
	// refusing answers 45 % of its POSTs 503.
	refusing = traffic{accepted: 22, refused: 18, done: []int64{2, 9, 6, 3, 2}}
	// slowTail serves its inquiries as healthy does but one in twenty a
	// second slower.
	slowTail = traffic{accepted: 40, done: []int64{4, 15, 11, 6, 2, 0, 2}}
	// slower serves each inquiry a bucket slower than healthy does.
	slower = traffic{accepted: 40, done: []int64{0, 4, 16, 12, 6, 2}}
)

// fakeCell is a cell process's admin API whose /metrics counts what its
// traffic adds at each scrape (500 while down): the running totals a
// real cell exports.
type fakeCell struct {
	mu      sync.Mutex
	t       traffic
	down    bool
	total   traffic
	scrapes int
	hook    func(scrapes int) // called at each scrape (nil: none)
	started float64           // its process_start_time_seconds (0: 1.7e9)
}

func (c *fakeCell) set(t traffic, down bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t, c.down = t, down
}

func (c *fakeCell) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.URL.Path != "/metrics" || c.down {
		http.Error(w, "down", http.StatusInternalServerError)
		return
	}
	c.scrapes++
	if c.hook != nil {
		c.hook(c.scrapes)
	}
	c.total.accepted += c.t.accepted
	c.total.refused += c.t.refused
	if c.total.done == nil {
		c.total.done = make([]int64, len(doneBounds))
	}
	for i, n := range c.t.done {
		c.total.done[i] += n
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# TYPE cellkit_cell_intake_requests_total counter\n")
	fmt.Fprintf(&b, "cellkit_cell_intake_requests_total{code=\"202\",route=\"post\"} %d\n", c.total.accepted)
	fmt.Fprintf(&b, "cellkit_cell_intake_requests_total{code=\"503\",route=\"post\"} %d\n", c.total.refused)
	var all int64
	for _, n := range c.total.done {
		all += n
	}
	fmt.Fprintf(&b, "# TYPE cellkit_cell_deliveries_total counter\ncellkit_cell_deliveries_total{outcome=\"done\"} %d\n", all)
	posts := c.total.accepted + c.total.refused
	fmt.Fprintf(&b, "# TYPE cellkit_cell_intake_seconds histogram\n")
	for _, le := range doneBounds {
		fmt.Fprintf(&b, "cellkit_cell_intake_seconds_bucket{route=\"post\",le=%q} %d\n", le, posts)
	}
	fmt.Fprintf(&b, "cellkit_cell_intake_seconds_sum{route=\"post\"} 0\ncellkit_cell_intake_seconds_count{route=\"post\"} %d\n", posts)
	fmt.Fprintf(&b, "# TYPE cellkit_cell_inquiry_seconds histogram\n")
	var cum int64
	for i, le := range doneBounds {
		cum += c.total.done[i]
		fmt.Fprintf(&b, "cellkit_cell_inquiry_seconds_bucket{le=%q} %d\n", le, cum)
	}
	fmt.Fprintf(&b, "cellkit_cell_inquiry_seconds_sum 0\ncellkit_cell_inquiry_seconds_count %d\n", cum)
	fmt.Fprintf(&b, "# TYPE cellkit_cell_ready gauge\ncellkit_cell_ready 1\n# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %g\n", cmp.Or(c.started, 1.7e9))
	_, _ = w.Write([]byte(b.String()))
}

// fakeRouter is a router's admin API whose /metrics counts 40 answers
// 202 per cell at each scrape (500 while down).
type fakeRouter struct {
	mu    sync.Mutex
	cells []string
	down  bool
	n     int64
}

func (f *fakeRouter) setDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

func (f *fakeRouter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		http.Error(w, "down", http.StatusInternalServerError)
		return
	}
	f.n += 40
	var b strings.Builder
	b.WriteString("# TYPE cellkit_router_requests_total counter\n")
	for _, c := range f.cells {
		fmt.Fprintf(&b, "cellkit_router_requests_total{cell=%q,code=\"202\"} %d\n", c, f.n)
	}
	b.WriteString("# TYPE cellkit_router_request_duration_seconds histogram\n")
	for _, c := range f.cells {
		fmt.Fprintf(&b, "cellkit_router_request_duration_seconds_bucket{cell=%q,le=\"0.1\"} %d\n", c, f.n)
		fmt.Fprintf(&b, "cellkit_router_request_duration_seconds_bucket{cell=%q,le=\"+Inf\"} %d\n", c, f.n)
		fmt.Fprintf(&b, "cellkit_router_request_duration_seconds_count{cell=%q} %d\n", c, f.n)
	}
	_, _ = w.Write([]byte(b.String()))
}

// gateBench is a map of fake cells (each's admin API in it) and a fake
// router, in a real file registry, and a runner that judges them.
type gateBench struct {
	cells  map[string]*fakeCell
	router *fakeRouter
	r      *Runner
	said   []string
}

func newGateBench(t *testing.T, ids ...string) *gateBench {
	t.Helper()
	b := &gateBench{cells: map[string]*fakeCell{}, router: &fakeRouter{cells: ids}}
	reg := celltest.NewRegistry(t, map[string]int{"nice": 80})
	for _, id := range ids {
		c := &fakeCell{t: healthy}
		srv := httptest.NewServer(c)
		t.Cleanup(srv.Close)
		b.cells[id] = c
		cell := celltest.TestCell(id)
		cell.Admin = srv.URL
		reg.Change(func(m *slotmap.Map) (*slotmap.Plan, error) { return m.AddCell(cell) })
	}
	rs := httptest.NewServer(b.router)
	t.Cleanup(rs.Close)
	cfg := Config{Gate: gate.Config{Alpha: 0.01, MinSamples: 100, FailureMargin: 0.005, RefusalMargin: 0.005,
		LatencyFactor: 1.25, LatencyMargin: 0.010, TailMargin: 0.005}, Scrape: 20 * time.Millisecond, WaitLimit: 100 * time.Millisecond}
	b.r = &Runner{cfg: cfg, reference: map[int]ownBefore{}, opts: Options{
		Control: control.New(reg.Reg, control.Config{Holder: "gate bench"}, control.Options{}),
		Admin:   adminclient.Client{HTTP: &http.Client{Timeout: time.Second}},
		Routers: func(context.Context) ([]string, error) { return []string{rs.URL}, nil },
		Now:     time.Now, Progress: func(s string) { b.said = append(b.said, s) },
	}}
	return b
}

// bake judges the record's wave in progress (its cells marked baking)
// as a bake of d does: the last judgement.
func (b *gateBench) bake(t *testing.T, ro *control.Rollout, d time.Duration) step {
	t.Helper()
	ctx := testkit.Context(t, 20*time.Second)
	for _, id := range ro.Waves[ro.Wave].Cells {
		ro.SetProgress(false, id, control.CellRollout{Phase: control.PhaseBaking})
	}
	pn, err := b.r.panel(ctx, ro)
	if err != nil {
		t.Fatal(err)
	}
	s, err := b.r.watch(ctx, ro.Wave, pn, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func verdictOf(s step, g string) gate.Verdict {
	for _, v := range s.verdicts {
		if v.Gate == g {
			return v
		}
	}
	return gate.Verdict{Gate: g, Text: "absent"}
}

// TestRefusingCanaryFails: a canary that answers 45 % of its POSTs 503
// while the other cells refuse none is halted by the refusals gate; its
// 5xx gate, which leaves 503s out (the only gate a refusal met before),
// passes.
func TestRefusingCanaryFails(t *testing.T) {
	b := newGateBench(t, "c1", "c2", "c3")
	b.cells["c1"].set(refusing, false)
	ro := &control.Rollout{Waves: []control.Wave{{Cells: []string{"c1"}, Bake: 300 * time.Millisecond}, {Cells: []string{"c2", "c3"}}}}
	s := b.bake(t, ro, 300*time.Millisecond)
	if v := verdictOf(s, gate.GateIntakeRefused); s.decision != gate.Fail || v.Decision != gate.Fail || v.Baseline != gate.BaselineOld {
		t.Errorf("the refusing canary: %v, %s", s.decision, v.Text)
	}
	if v := verdictOf(s, gate.GateIntake5xx); v.Decision != gate.Pass {
		t.Errorf("its 5xx: %s", v.Text)
	}
}

// TestEarlyLooksHaltOnlyThePlainlyWorse: a canary that refused 2 of 40
// POSTs at its first three scrapes in the window, none after (Fisher p≈0.0014 against
// the two other cells at every look: between the gates' InterimAlpha and
// Alpha), is not halted by the looks before its bake's end — where a
// test at Alpha at every look halted it at its first — and fails at the
// end; a canary that refuses 45 % is halted at a look before it.
func TestEarlyLooksHaltOnlyThePlainlyWorse(t *testing.T) {
	b := newGateBench(t, "c1", "c2", "c3")
	c1 := b.cells["c1"]
	c1.mu.Lock()
	c1.t = traffic{accepted: 38, refused: 2, done: healthy.done}
	c1.hook = func(n int) {
		if n == 5 { // the first scrape is the window's start
			c1.t = healthy
		}
	}
	c1.mu.Unlock()
	const bake = 400 * time.Millisecond
	ro := &control.Rollout{Waves: []control.Wave{{Cells: []string{"c1"}, Bake: bake}, {Cells: []string{"c2", "c3"}}}}
	ro.SetProgress(false, "c1", control.CellRollout{Phase: control.PhaseBaking})
	ctx := testkit.Context(t, 20*time.Second)
	judge := func() (early []gate.Decision, last step) {
		pn, err := b.r.panel(ctx, ro)
		if err != nil {
			t.Fatal(err)
		}
		last, err = b.r.watch(ctx, 0, pn, bake, func(s step) error {
			if s.elapsed < bake {
				early = append(early, verdictOf(s, gate.GateIntakeRefused).Decision)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return early, last
	}
	early, last := judge()
	if v := verdictOf(last, gate.GateIntakeRefused); last.decision != gate.Fail || v.Decision != gate.Fail || last.elapsed < bake || v.P < 0.001 || v.P > 0.01 {
		t.Errorf("the mildly refusing canary at its bake's end (%v): %v; %s", last.elapsed, last.decision, v.Text)
	}
	if slices.Contains(early, gate.Fail) || !slices.Contains(early, gate.Pass) {
		t.Errorf("the looks before its bake's end: %v, want passes and no fail", early)
	}

	b.cells["c1"].set(refusing, false)
	b.cells["c1"].mu.Lock()
	b.cells["c1"].hook = nil
	b.cells["c1"].mu.Unlock()
	if _, last = judge(); last.decision != gate.Fail || last.elapsed >= bake {
		t.Errorf("the canary refusing 45 %%: %v after %v, want a fail before %v", last.decision, last.elapsed, bake)
	}
}

// TestACanarySlowerByItsCell: a canary whose cell was as much slower
// than the others before it was replaced (its users, its agencies) as
// on the new release passes — against the old release the cells'
// difference is shown by the figures from before, and against its own
// before it is no slower; a canary the release slowed fails.
func TestACanarySlowerByItsCell(t *testing.T) {
	b := newGateBench(t, "c1", "c2", "c3")
	ro := &control.Rollout{Waves: []control.Wave{{Cells: []string{"c1"}, Bake: 300 * time.Millisecond}, {Cells: []string{"c2", "c3"}}}}
	ctx := testkit.Context(t, 20*time.Second)
	b.cells["c1"].set(slower, false)
	if err := b.r.measureReference(ctx, ro); err != nil {
		t.Fatal(err)
	}
	s := b.bake(t, ro, 300*time.Millisecond)
	if v := verdictOf(s, gate.GateDoneLatency); s.decision != gate.Pass || v.Decision != gate.Pass || !strings.Contains(v.Text, "the wave's cells were as far from these before") {
		t.Errorf("the canary slower by its cell: %v; %s", s.decision, v.Text)
	}

	delete(b.r.reference, 0)
	b.cells["c1"].set(healthy, false)
	if err := b.r.measureReference(ctx, ro); err != nil {
		t.Fatal(err)
	}
	b.cells["c1"].set(slower, false)
	s = b.bake(t, ro, 300*time.Millisecond)
	if v := verdictOf(s, gate.GateDoneLatency); s.decision != gate.Fail || v.Decision != gate.Fail {
		t.Errorf("the canary slowed by its release: %v; %s", s.decision, v.Text)
	}
}

// TestWarmUp: a canary slower for its first looks after its
// replacement, as a restarted process is, and as fast as the others
// after, fails a bake whose window opens at once and passes one that
// warms up past them; a crash restart while it warms up still halts it.
func TestWarmUp(t *testing.T) {
	const bake = 300 * time.Millisecond
	run := func(warm time.Duration, hook func(c *fakeCell, n int)) step {
		b := newGateBench(t, "c1", "c2", "c3")
		b.r.cfg.WarmUp = warm
		c1 := b.cells["c1"]
		c1.mu.Lock()
		c1.t = slower
		c1.hook = func(n int) { hook(c1, n) }
		c1.mu.Unlock()
		ro := &control.Rollout{Waves: []control.Wave{{Cells: []string{"c1"}, Bake: bake}, {Cells: []string{"c2", "c3"}}}}
		return b.bake(t, ro, bake)
	}
	slowFirst := func(c *fakeCell, n int) {
		if n == 6 { // 5 scrapes of 20 ms
			c.t = healthy
		}
	}
	if s := run(0, slowFirst); s.decision != gate.Fail {
		t.Errorf("no warm-up: %v, want the canary's first looks to fail it: %s", s.decision, verdictOf(s, gate.GateDoneLatency).Text)
	}
	if s := run(200*time.Millisecond, slowFirst); s.decision != gate.Pass {
		t.Errorf("a warm-up past its slow start: %v; %s", s.decision, verdictText(s.verdicts))
	}
	crash := func(c *fakeCell, n int) {
		slowFirst(c, n)
		if n == 3 {
			c.started = 1.7e9 + 1
		}
	}
	if s := run(200*time.Millisecond, crash); s.decision != gate.Fail || verdictOf(s, gate.GateCrashRestarts).Decision != gate.Fail {
		t.Errorf("a crash restart while it warms up: %v; %s", s.decision, verdictOf(s, gate.GateCrashRestarts).Text)
	}
}

// TestLastWaveAgainstItsOwnBefore: the last wave, with no cell left on
// the old release, is judged against its own cells' figures from before
// they were replaced (and the earlier waves', baked): a release that
// slows the slowest 5 % of its inquiries by a second, which the
// Mann-Whitney test does not see, fails by the tail gate against them.
// Before, it was compared with nothing and passed. Without any baseline
// at all (the figures from before not read: a resume) it waits and the
// bake ends undecided, never passed.
func TestLastWaveAgainstItsOwnBefore(t *testing.T) {
	b := newGateBench(t, "c1", "c2")
	ro := &control.Rollout{Waves: []control.Wave{{Cells: []string{"c1", "c2"}, Bake: 300 * time.Millisecond}}}
	ctx := testkit.Context(t, 20*time.Second)
	if err := b.r.measureReference(ctx, ro); err != nil {
		t.Fatal(err)
	}
	ref, ok := b.r.reference[0]
	if len(ref.othersAt) != 0 {
		t.Errorf("the last wave has other cells: %v", ref.othersAt)
	}
	if !ok || ref.wave.Inquiries.Total < 100 || ref.wave.Routers != 1 || ref.wave.Edge.Total < 100 {
		t.Fatalf("the figures from before: %+v", ref)
	}
	for _, c := range b.cells {
		c.set(slowTail, false)
	}
	s := b.bake(t, ro, 300*time.Millisecond)
	tail, lat := verdictOf(s, gate.GateDoneTail), verdictOf(s, gate.GateDoneLatency)
	if s.decision != gate.Fail || tail.Decision != gate.Fail || tail.Baseline != gate.BaselineBefore {
		t.Errorf("the slow tail against its own before: %v; %s", s.decision, tail.Text)
	}
	if lat.Decision != gate.Pass {
		t.Errorf("Mann-Whitney saw the tail: %s", lat.Text)
	}

	delete(b.r.reference, 0)
	for _, c := range b.cells {
		c.set(healthy, false)
	}
	s = b.bake(t, ro, 100*time.Millisecond)
	if v := verdictOf(s, gate.GateDoneLatency); s.decision != gate.Wait || v.Decision != gate.Wait || !strings.Contains(v.Text, "no baseline") {
		t.Errorf("no baseline at all: %v; %s", s.decision, v.Text)
	}
}

// TestEdgeGatesWaitForUnreadRouters: a router that cannot be read when
// the bake begins leaves its edge gates waiting, not dropped for the
// whole bake; once read, its window counts from its first good look; a
// router never read keeps them waiting, and the bake ends undecided
// (it halts: fail closed).
func TestEdgeGatesWaitForUnreadRouters(t *testing.T) {
	b := newGateBench(t, "c1", "c2")
	ro := &control.Rollout{Waves: []control.Wave{{Cells: []string{"c1"}}, {Cells: []string{"c2"}}}}
	b.router.setDown(true)
	s := b.bake(t, ro, 300*time.Millisecond)
	if v := verdictOf(s, gate.GateEdge5xx); s.decision != gate.Wait || v.Decision != gate.Wait || !strings.Contains(v.Text, "500 Internal Server Error") {
		t.Errorf("a router never read: %v; %s", s.decision, v.Text)
	}
	if v := verdictOf(s, gate.GateIntake5xx); v.Decision != gate.Pass {
		t.Errorf("the cells' own gates: %s", v.Text)
	}

	b.router.setDown(true)
	c1 := b.cells["c1"]
	c1.mu.Lock()
	from := c1.scrapes
	c1.hook = func(n int) {
		if n == from+3 {
			b.router.setDown(false) // read from the bake's third look on
		}
	}
	c1.mu.Unlock()
	s = b.bake(t, ro, 400*time.Millisecond)
	v := verdictOf(s, gate.GateEdge5xx)
	b.router.mu.Lock()
	read := b.router.n // 40 more at each read, the first good one's included
	b.router.mu.Unlock()
	if s.decision != gate.Pass || v.Decision != gate.Pass || v.WaveSamples != read-40 {
		t.Errorf("a router read from the third look: %v; %s; want the wave's %d requests since its first read", s.decision, v.Text, read-40)
	}
}

// TestFiguresFromBeforeReuseTheLastBake: the canary's figures from
// before are read for a bake before it is replaced, with the other
// cells' in the same window; the next wave's are the canary's bake
// (which watched them on the old release for as long), read again by
// nobody; a healthy wave passes against every baseline it has — the
// old release, its own before, the baked canary.
func TestFiguresFromBeforeReuseTheLastBake(t *testing.T) {
	b := newGateBench(t, "c1", "c2", "c3", "c4")
	ro := &control.Rollout{Waves: []control.Wave{{Cells: []string{"c1"}, Bake: 300 * time.Millisecond}, {Cells: []string{"c2", "c3"}, Bake: 300 * time.Millisecond}, {Cells: []string{"c4"}, Bake: 300 * time.Millisecond}}}
	ctx := testkit.Context(t, 20*time.Second)
	if err := b.r.measureReference(ctx, ro); err != nil {
		t.Fatal(err)
	}
	if ref := b.r.reference[0]; len(ref.othersAt) != 3 || ref.others.Inquiries.Total < 100 {
		t.Fatalf("the canary's before: others %v, %+v", ref.othersAt, ref.others.Inquiries)
	}
	if s := b.bake(t, ro, 300*time.Millisecond); s.decision != gate.Pass {
		t.Fatalf("the healthy canary: %v %s", s.decision, verdictText(s.verdicts))
	}
	ro.SetProgress(false, "c1", control.CellRollout{Phase: control.PhaseDone})
	ro.Wave = 1
	c2 := b.cells["c2"]
	c2.mu.Lock()
	scrapes := c2.scrapes
	c2.mu.Unlock()
	if err := b.r.measureReference(ctx, ro); err != nil {
		t.Fatal(err)
	}
	c2.mu.Lock()
	again := c2.scrapes - scrapes
	c2.mu.Unlock()
	ref := b.r.reference[1]
	if again != 0 || ref.wave.Inquiries.Total < 100 || len(ref.othersAt) != 2 || !strings.Contains(b.said[len(b.said)-1], "over wave 1's bake") {
		t.Fatalf("wave 2's before: %d more scrapes, %+v, others %v, said %q", again, ref.wave.Inquiries, ref.othersAt, b.said[len(b.said)-1])
	}
	s := b.bake(t, ro, 300*time.Millisecond)
	v := verdictOf(s, gate.GateDoneLatency)
	if s.decision != gate.Pass || !strings.Contains(v.Text, "old release") || !strings.Contains(v.Text, "before") || !strings.Contains(v.Text, "baked") {
		t.Errorf("wave 2, healthy: %v; %s", s.decision, v.Text)
	}
}
