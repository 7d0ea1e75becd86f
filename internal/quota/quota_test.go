package quota

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/apikey"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// cuttable is a router's way to the registry, which a test may cut (a
// partition between that router and the registry).
type cuttable struct {
	Board
	cut atomic.Bool
}

var errCut = errors.New("cut off from the registry")

func (c *cuttable) PutLease(ctx context.Context, id string, data []byte) error {
	if c.cut.Load() {
		return errCut
	}
	return c.Board.PutLease(ctx, id, data)
}

func (c *cuttable) Leases(ctx context.Context) (map[string][]byte, error) {
	if c.cut.Load() {
		return nil, errCut
	}
	return c.Board.Leases(ctx)
}

func (c *cuttable) DropLease(ctx context.Context, id string) error {
	if c.cut.Load() {
		return errCut
	}
	return c.Board.DropLease(ctx, id)
}

// fleet is routers sharing one file registry, on one fake clock, each
// with its own keys and buckets as separate processes would have.
type fleet struct {
	t       *testing.T
	path    string
	clk     *testkit.Clock
	keys    []byte
	routers map[string]*member
	order   []string
}

type member struct {
	s      *Sharer
	limits *apikey.Limits
	client *apikey.Client
	board  *cuttable
	dead   bool
	debt   float64 // the fraction of a request owed by the load
	asked  int
	took   int
}

func newFleet(t *testing.T, rate float64, burst int) *fleet {
	return &fleet{
		t: t, path: filepath.Join(t.TempDir(), "map.json"), clk: testkit.NewClock(time.Unix(1_800_000_000, 0)),
		keys:    fmt.Appendf(nil, `[{"client":"p","key_sha256":"%s","rate":%g,"burst":%d}]`, apikey.Hash("k"), rate, burst),
		routers: map[string]*member{},
	}
}

// add starts a router cold.
func (f *fleet) add(id string) *member {
	f.t.Helper()
	keys, err := apikey.Parse(f.keys)
	if err != nil {
		f.t.Fatal(err)
	}
	reg, err := registry.NewFile(registry.FileConfig{Path: f.path}, registry.Options{Now: f.clk.Now})
	if err != nil {
		f.t.Fatal(err)
	}
	m := &member{limits: apikey.NewEmptyLimits(keys, f.clk.Now), client: keys.Clients()[0], board: &cuttable{Board: reg}}
	m.s, err = New(Config{Router: id}, Options{Board: m.board, Buckets: m.limits, Now: f.clk.Now, Logger: testkit.Logger()})
	if err != nil {
		f.t.Fatal(err)
	}
	f.routers[id] = m
	f.order = append(f.order, id)
	return m
}

// run offers the client rates[i] requests a second at the i-th router
// of ids for d, in 10 ms steps, a lease round every 500 ms, and returns
// what was accepted in all.
func (f *fleet) run(d time.Duration, ids []string, rates []float64) (took, asked int) {
	const step = 10 * time.Millisecond
	for range int(d / step) {
		f.clk.Advance(step)
		for i, id := range ids {
			m := f.routers[id]
			if m.dead {
				continue
			}
			m.debt += rates[i] * step.Seconds()
			for ; m.debt >= 1; m.debt-- {
				asked++
				m.asked++
				if m.limits.Take(m.client).OK {
					took++
					m.took++
				}
			}
		}
		if f.clk.Now().UnixNano()%int64(500*time.Millisecond) == 0 {
			for _, id := range f.order {
				if m := f.routers[id]; !m.dead {
					m.s.Round(context.Background())
				}
			}
		}
	}
	return took, asked
}

// windows runs n 10 s windows and checks each: at most the limit and
// 10 %, and at least atLeast of the limit.
func (f *fleet) windows(what string, n int, limit, atLeast float64, ids []string, rates []float64) {
	f.t.Helper()
	for w := range n {
		took, asked := f.run(10*time.Second, ids, rates)
		got := float64(took) / 10
		f.t.Logf("%s, window %d: %.1f/s accepted of %.1f/s asked (limit %g/s)", what, w, got, float64(asked)/10, limit)
		if got > 1.1*limit || got < atLeast*limit {
			f.t.Errorf("%s, window %d: %.1f/s accepted, want %.0f%% to 110%% of the limit %g/s", what, w, got, 100*atLeast, limit)
		}
	}
}

// TestAQuotaHoldsAcrossRouters: a client at three times its limit gets
// its limit and at most 10 % more in every 10 s window, whether its
// requests are spread over three routers or all go to one, while a
// router dies, one joins, and while every router is cut off from the
// registry.
func TestAQuotaHoldsAcrossRouters(t *testing.T) {
	f := newFleet(t, 100, 100)
	for _, id := range []string{"r1", "r2", "r3"} {
		f.add(id)
	}
	all := []string{"r1", "r2", "r3"}
	f.run(3*time.Second, all, []float64{100, 100, 100}) // the first lease rounds
	f.windows("spread over three", 3, 100, 0.9, all, []float64{100, 100, 100})
	f.windows("all on one", 3, 100, 0.85, all, []float64{300, 0, 0})
	f.windows("uneven", 2, 100, 0.9, all, []float64{200, 80, 20})

	// r3 dies without a word; its requests go to the others.
	f.routers["r3"].dead = true
	f.windows("r3 dead", 2, 100, 0.9, all, []float64{150, 150, 0})
	f.add("r4")
	all = []string{"r1", "r2", "r4"}
	f.windows("r4 joined", 3, 100, 0.9, all, []float64{100, 100, 100})

	// The registry is cut off from everyone: leases lapse and each router
	// holds a third.
	for _, id := range all {
		f.routers[id].board.cut.Store(true)
	}
	f.windows("registry cut", 3, 100, 0.9, all, []float64{100, 100, 100})
	if v := f.routers["r1"].s.View(); !v.Even || math.Abs(v.Clients[0].Share-1.0/3) > 1e-9 {
		t.Errorf("cut off for 30 s: %+v, want the even split over the three it counted", v)
	}
	for _, id := range all {
		f.routers[id].board.cut.Store(false)
	}
	f.windows("registry back", 2, 100, 0.85, all, []float64{300, 0, 0})
}

// TestAClientBelowItsLimitIsNotRefused: a client at 70 % of its limit is
// never refused once the shares follow its demand, spread evenly or not;
// when its traffic moves to one router, only while the shares follow
// (two rounds).
func TestAClientBelowItsLimitIsNotRefused(t *testing.T) {
	f := newFleet(t, 100, 50)
	all := []string{"r1", "r2", "r3"}
	for _, id := range all {
		f.add(id)
	}
	f.run(3*time.Second, all, []float64{23, 23, 24})
	for _, tc := range []struct {
		what  string
		rates []float64
	}{
		{"spread", []float64{23, 23, 24}},
		{"uneven", []float64{50, 15, 5}},
		{"on one", []float64{70, 0, 0}},
		{"on another", []float64{0, 0, 70}},
	} {
		took, asked := f.run(3*time.Second, all, tc.rates) // the shares follow
		t.Logf("%s, while the shares follow: %d of %d refused", tc.what, asked-took, asked)
		if asked-took > int(2*70*0.7) {
			t.Errorf("%s: %d of %d refused while the shares followed the move, want at most two rounds' worth", tc.what, asked-took, asked)
		}
		if took, asked := f.run(20*time.Second, all, tc.rates); took != asked {
			t.Errorf("%s: %d of %d refused at 70 %% of the limit", tc.what, asked-took, asked)
		}
	}
}

// TestALoneRouterHoldsTheWholeQuota, once its first lease is written,
// and starts empty: no burst from nowhere.
func TestALoneRouterHoldsTheWholeQuota(t *testing.T) {
	f := newFleet(t, 10, 20)
	m := f.add("r1")
	if m.limits.Take(m.client).OK {
		t.Fatal("a request taken before the first lease")
	}
	m.s.Round(context.Background())
	if v := m.s.View(); v.Routers != 1 || v.Clients[0].Share != 1 {
		t.Fatalf("alone: %+v, want the whole quota", v)
	}
	if m.limits.Take(m.client).OK {
		t.Fatal("a request taken at once after the first lease: its bucket starts empty")
	}
	if took, _ := f.run(10*time.Second, []string{"r1"}, []float64{100}); took < 95 || took > 101 {
		t.Fatalf("alone for 10 s at ten times its rate: %d taken, want its rate's 100", took)
	}
}

// TestACutOffRouterFallsBackToAnEvenSplit: a router that cannot reach the
// registry holds its lease until it lapses, then half; the other drops it
// after Lease+Grace and holds the whole: the documented worst case, 1.5
// times the quota for two routers.
func TestACutOffRouterFallsBackToAnEvenSplit(t *testing.T) {
	f := newFleet(t, 100, 100)
	all := []string{"r1", "r2"}
	r1, r2 := f.add("r1"), f.add("r2")
	f.run(5*time.Second, all, []float64{200, 20})
	before := r1.s.View().Clients[0].Share
	r1.board.cut.Store(true)
	f.run(3*time.Second, all, []float64{200, 20})
	if got := r1.s.View().Clients[0].Share; got != before {
		t.Fatalf("cut off for 3 s (lease 5 s): share %v, want the lease's %v", got, before)
	}
	f.run(3*time.Second, all, []float64{200, 20})
	if v := r1.s.View(); !v.Even || v.Clients[0].Share != 0.5 {
		t.Fatalf("cut off for 6 s: %+v, want the even split", v)
	}
	f.run(2*time.Second, all, []float64{200, 20})
	if v := r2.s.View(); v.Routers != 1 || v.Clients[0].Share != 1 {
		t.Fatalf("8 s after r1 was cut off (lease 5 s, grace 2 s): r2 %+v, want it alone with the whole quota", v)
	}
	took, _ := f.run(10*time.Second, all, []float64{200, 200})
	// The documented bound: 1 + 1/n of the rate and of the burst.
	if got := float64(took) / 10; got > 1.5*100+1.5*100/10 {
		t.Fatalf("while cut off: %.0f/s, want at most the documented 1.5 × (100/s + a burst of 100 in 10 s)", got)
	}
	r1.board.cut.Store(false)
	f.run(3*time.Second, all, []float64{200, 200})
	f.windows("healed", 1, 100, 0.9, all, []float64{200, 200})
}

// TestAStoppedRouterGivesItsShareBack at once: it withdraws its lease.
func TestAStoppedRouterGivesItsShareBack(t *testing.T) {
	f := newFleet(t, 100, 100)
	r1, r2 := f.add("r1"), f.add("r2")
	f.run(3*time.Second, []string{"r1", "r2"}, []float64{50, 50})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r2.s.Run(ctx, nil); err != nil {
		t.Fatal(err)
	}
	f.routers["r2"].dead = true
	for n := 0; r2.limits.Take(r2.client).OK; n++ { // what it held is spent, once
		if n > 100 {
			t.Fatal("a stopped router's bucket never empties")
		}
	}
	f.clk.Advance(10 * time.Second)
	if r2.limits.Take(r2.client).OK {
		t.Fatal("a stopped router's bucket refilled")
	}
	f.run(2*time.Second, []string{"r1", "r2"}, []float64{100, 0})
	if v := r1.s.View(); v.Routers != 1 || v.Clients[0].Share < 0.99 {
		t.Fatalf("after r2 withdrew: r1 %+v, want the whole quota", v)
	}
}

// TestASuccessorTakesTheBucketsOver: a router handing over gives its
// successor its shares and tokens: the successor's bucket is as empty as
// its predecessor's, and the predecessor's stops refilling.
func TestASuccessorTakesTheBucketsOver(t *testing.T) {
	f := newFleet(t, 10, 20)
	old := f.add("r1")
	f.run(5*time.Second, []string{"r1"}, []float64{100}) // empty, at its limit
	st := old.s.State()
	if e := st.Clients["p"]; e.Share != 1 || e.Tokens > 0.1 {
		t.Fatalf("state %+v, want the whole share and an empty bucket", st)
	}
	// The successor: the same id, its own buckets.
	delete(f.routers, "r1")
	f.order = nil
	succ := f.add("r1")
	if err := succ.s.Resume(st); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := old.s.Run(ctx, func() bool { return true }); err != nil {
		t.Fatal(err)
	}
	if succ.limits.Take(succ.client).OK {
		t.Fatal("the successor's bucket had a token its predecessor's lacked: a fresh burst")
	}
	f.clk.Advance(time.Second)
	if !succ.limits.Take(succ.client).OK {
		t.Fatal("the successor's bucket does not refill at the share it took over")
	}
	if old.limits.Take(old.client).OK {
		t.Fatal("the predecessor's bucket refilled after it handed over")
	}
	bad := st
	bad.Clients = map[string]Entry{"p": {Share: 2}}
	if err := succ.s.Resume(bad); err == nil {
		t.Fatal("a share of 2 taken over")
	}
}

// TestLeasesOutOfBoundsAreNotBelieved: a lease another process wrote is
// read within bounds; one that is not is left out, and counted.
func TestLeasesOutOfBoundsAreNotBelieved(t *testing.T) {
	for _, tc := range []struct{ name, doc string }{
		{"not JSON", `{`},
		{"another router's", `{"router":"other","seq":1,"live":1}`},
		{"no routers", `{"router":"x","seq":1,"live":0}`},
		{"a share over one", `{"router":"x","seq":1,"live":2,"clients":{"p":{"d":1,"s":1.5,"t":0}}}`},
		{"a negative demand", `{"router":"x","seq":1,"live":2,"clients":{"p":{"d":-1,"s":0.5,"t":0}}}`},
		{"a bad client", `{"router":"x","seq":1,"live":2,"clients":{"a b":{"d":1,"s":0.5,"t":0}}}`},
	} {
		if _, err := decodeDoc("x", []byte(tc.doc)); err == nil {
			t.Errorf("%s: believed", tc.name)
		}
	}
	if d, err := decodeDoc("x", []byte(`{"router":"x","seq":1,"live":4,"clients":{"p":{"d":1,"s":0.5,"t":0.25}}}`)); err != nil ||
		d.entry("p").Share != 0.5 || d.entry("q") != (Entry{Share: 0.25, Tokens: 0.25}) {
		t.Errorf("a good lease: %+v, %v", d, err)
	}
}

func TestFairSplit(t *testing.T) {
	for _, tc := range []struct {
		limit, mine, others float64
		live                int
		want                float64
	}{
		{100, 0, 0, 4, 0.25},          // nobody asks: even
		{100, 30, 30, 3, 130.0 / 300}, // 60 of 100 asked: 30 and a third of 40
		{100, 0, 60, 3, 40.0 / 300},   // not asked: a third of what is left
		{100, 300, 0, 3, 1},           // alone in asking, over the limit
		{100, 200, 100, 3, 2.0 / 3},   // over: in proportion
		{0, 10, 0, 1, 0},
	} {
		if got := fair(tc.limit, tc.mine, tc.others, tc.live); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("fair(%v, %v, %v, %d) = %v, want %v", tc.limit, tc.mine, tc.others, tc.live, got, tc.want)
		}
	}
}
