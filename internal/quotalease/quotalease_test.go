package quotalease

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// pools is every instance's sessions, as the agency would count them. A
// pool grows at once to a higher limit; when the limit drops, the sessions
// above it close only at the next call (they were busy and come back
// later), as a real pool's in-use sessions do. A dead instance has none.
type pools struct {
	mu     sync.Mutex
	limits map[string]map[string]int // instance → agency → limit
	open   map[string]map[string]int // instance → agency → open sessions
}

func (p *pools) sum(agency string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, o := range p.open {
		n += o[agency]
	}
	return n
}

func (p *pools) of(inst, agency string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open[inst][agency]
}

// instanceSessions is one instance's view of pools.
type instanceSessions struct {
	p    *pools
	name string
	dead atomic.Bool
}

func (s *instanceSessions) Limit(agency string, n int) int {
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	if s.p.limits[s.name] == nil {
		s.p.limits[s.name], s.p.open[s.name] = map[string]int{}, map[string]int{}
	}
	lim, open := s.p.limits[s.name], s.p.open[s.name]
	open[agency] = min(open[agency], lim[agency]) // the busy ones came back
	lim[agency] = n
	open[agency] = max(open[agency], n)
	if s.dead.Load() {
		lim[agency], open[agency] = 0, 0
	}
	return open[agency]
}

// cuttable is a bucket that can be cut off from this instance.
type cuttable struct {
	jetstream.KeyValue
	cut atomic.Bool
	// lose: so many updates are applied and their answers lost (a
	// timeout here after the server wrote them).
	lose atomic.Int32
}

var errCut = errors.New("cut off")

func (c *cuttable) Put(ctx context.Context, k string, v []byte) (uint64, error) {
	if c.cut.Load() {
		return 0, errCut
	}
	return c.KeyValue.Put(ctx, k, v)
}

func (c *cuttable) Create(ctx context.Context, k string, v []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if c.cut.Load() {
		return 0, errCut
	}
	return c.KeyValue.Create(ctx, k, v, opts...)
}

func (c *cuttable) Update(ctx context.Context, k string, v []byte, rev uint64) (uint64, error) {
	if c.cut.Load() {
		return 0, errCut
	}
	if c.lose.Add(-1) >= 0 {
		if _, err := c.KeyValue.Update(ctx, k, v, rev); err != nil {
			return 0, err
		}
		return 0, context.DeadlineExceeded
	}
	c.lose.Store(0)
	return c.KeyValue.Update(ctx, k, v, rev)
}

func (c *cuttable) Delete(ctx context.Context, k string, opts ...jetstream.KVDeleteOpt) error {
	if c.cut.Load() {
		return errCut
	}
	return c.KeyValue.Delete(ctx, k, opts...)
}

func (c *cuttable) ListKeysFiltered(ctx context.Context, f ...string) (jetstream.KeyLister, error) {
	if c.cut.Load() {
		return nil, errCut
	}
	return c.KeyValue.ListKeysFiltered(ctx, f...)
}

type running struct {
	ses    *instanceSessions
	kv     *cuttable
	l      *Leaser
	cancel context.CancelFunc
	done   chan struct{}
}

// TestSharesNeverExceedTheQuota: three instances share a quota of 10, a
// fourth joins, one is cut off from the bucket, one dies; the shares move
// each time, and the sum of the session limits, sampled every few
// milliseconds throughout, never exceeds 10.
func TestSharesNeverExceedTheQuota(t *testing.T) {
	_, js := celltest.NATS(t)
	cfg := Config{Lease: 300 * time.Millisecond, Grace: 300 * time.Millisecond}
	kv, err := js.CreateOrUpdateKeyValue(context.Background(), BucketConfig("c1", cfg, 1))
	if err != nil {
		t.Fatal(err)
	}
	const q = 10
	p := &pools{limits: map[string]map[string]int{}, open: map[string]map[string]int{}}
	worst := testkit.SamplePeak(t, 2*time.Millisecond, func() int64 { return int64(p.sum("kcb")) })
	insts := map[string]*running{}
	start := func(name string) {
		r := &running{ses: &instanceSessions{p: p, name: name}, kv: &cuttable{KeyValue: kv}, done: make(chan struct{})}
		c := cfg
		c.Instance = name
		r.l, err = New(c, Options{KV: r.kv, Sessions: r.ses})
		if err != nil {
			t.Fatal(err)
		}
		r.l.SetQuota(map[string]int{"kcb": q})
		ctx, cancel := context.WithCancel(context.Background())
		r.cancel = cancel
		go func() { defer close(r.done); r.l.Run(ctx) }()
		insts[name] = r
	}
	t.Cleanup(func() {
		for _, r := range insts {
			r.cancel()
			<-r.done
		}
	})
	holds := func(want map[string]int) func() bool {
		return func() bool {
			for name, n := range want {
				if p.of(name, "kcb") != n {
					return false
				}
			}
			return true
		}
	}

	for _, n := range []string{"i1", "i2", "i3"} {
		start(n)
	}
	testkit.WaitFor(t, 10*time.Second, "shares 4/3/3", holds(map[string]int{"i1": 4, "i2": 3, "i3": 3}))

	start("i4")
	testkit.WaitFor(t, 10*time.Second, "shares 3/3/2/2 after i4 joins", holds(map[string]int{"i1": 3, "i2": 3, "i3": 2, "i4": 2}))

	// i2 cannot reach the bucket: it stops counting on its leases, and
	// only then do they go to the others.
	insts["i2"].kv.cut.Store(true)
	testkit.WaitFor(t, 10*time.Second, "i2 fenced off and its slots shared out", holds(map[string]int{"i2": 0, "i1": 4, "i3": 3, "i4": 3}))

	// i3 dies: its sessions go with it, its leases expire.
	r3 := insts["i3"]
	r3.ses.dead.Store(true)
	r3.kv.cut.Store(true)
	r3.cancel()
	<-r3.done
	delete(insts, "i3")
	testkit.WaitFor(t, 10*time.Second, "i3's slots shared out", holds(map[string]int{"i1": 5, "i4": 5}))

	// The quota shrinks: the instances give back what is over it.
	for _, r := range insts {
		r.l.SetQuota(map[string]int{"kcb": 4})
	}
	testkit.WaitFor(t, 10*time.Second, "shares of the smaller quota", holds(map[string]int{"i1": 2, "i4": 2}))

	if w := worst.Max(); w > q {
		t.Fatalf("the instances held %d sessions at once, over the quota of %d", w, q)
	}
	t.Logf("most sessions held at once across the changes: %d of %d", worst.Max(), q)
}

func (c *cuttable) Get(ctx context.Context, k string) (jetstream.KeyValueEntry, error) {
	if c.cut.Load() {
		return nil, errCut
	}
	return c.KeyValue.Get(ctx, k)
}

// TestACutInstanceTakesBackItsOwnLeases: an instance cut off from the
// bucket for longer than Lease stops counting on its leases (its limit
// drops to 0), but the keys still name it until Grace has passed; back
// within Grace, it takes them back at once instead of waiting them out,
// and the other instance never gets them meanwhile.
func TestACutInstanceTakesBackItsOwnLeases(t *testing.T) {
	_, js := celltest.NATS(t)
	cfg := Config{Lease: 300 * time.Millisecond, Grace: 5 * time.Second}
	kv, err := js.CreateOrUpdateKeyValue(context.Background(), BucketConfig("c1", cfg, 1))
	if err != nil {
		t.Fatal(err)
	}
	p := &pools{limits: map[string]map[string]int{}, open: map[string]map[string]int{}}
	var runs []*running
	for _, name := range []string{"i1", "i2"} {
		r := &running{ses: &instanceSessions{p: p, name: name}, kv: &cuttable{KeyValue: kv}, done: make(chan struct{})}
		c := cfg
		c.Instance = name
		if r.l, err = New(c, Options{KV: r.kv, Sessions: r.ses}); err != nil {
			t.Fatal(err)
		}
		r.l.SetQuota(map[string]int{"kcb": 10})
		ctx, cancel := context.WithCancel(context.Background())
		r.cancel = cancel
		go func() { defer close(r.done); r.l.Run(ctx) }()
		runs = append(runs, r)
	}
	t.Cleanup(func() {
		for _, r := range runs {
			r.cancel()
			<-r.done
		}
	})
	testkit.WaitFor(t, 10*time.Second, "shares 5/5", func() bool { return p.of("i1", "kcb") == 5 && p.of("i2", "kcb") == 5 })
	runs[1].kv.cut.Store(true)
	testkit.WaitFor(t, 5*time.Second, "i2 fenced off", func() bool { return p.of("i2", "kcb") == 0 })
	time.Sleep(300 * time.Millisecond)
	if got := p.of("i1", "kcb"); got != 5 {
		t.Fatalf("i1 holds %d while i2's keys still name it, want 5", got)
	}
	runs[1].kv.cut.Store(false)
	healed := time.Now()
	testkit.WaitFor(t, 5*time.Second, "i2 back to 5", func() bool { return p.of("i2", "kcb") == 5 })
	if took := time.Since(healed); took > 2*time.Second {
		t.Errorf("i2 took %v to get its leases back, want its own keys taken back at once (Grace is 5 s)", took)
	}
	if s := p.sum("kcb"); s > 10 {
		t.Errorf("%d sessions, over the quota of 10", s)
	}
}

// TestALostRenewalAnswerKeepsTheLease: renewals the server applied but
// whose answers were lost (a loaded node: the round's context ran out
// after the write) leave the instance with an old revision; its next
// renewal finds the key at another revision, still naming it, and keeps
// the lease. Taken for lost, the slot would be the instance's own key,
// which it could not claim back until the key expired, and its sessions
// would shrink for Lease+Grace.
func TestALostRenewalAnswerKeepsTheLease(t *testing.T) {
	_, js := celltest.NATS(t)
	cfg := Config{Lease: 300 * time.Millisecond, Grace: 5 * time.Second, Instance: "i1"}
	kv, err := js.CreateOrUpdateKeyValue(context.Background(), BucketConfig("c1", cfg, 1))
	if err != nil {
		t.Fatal(err)
	}
	p := &pools{limits: map[string]map[string]int{}, open: map[string]map[string]int{}}
	r := &running{ses: &instanceSessions{p: p, name: "i1"}, kv: &cuttable{KeyValue: kv}, done: make(chan struct{})}
	if r.l, err = New(cfg, Options{KV: r.kv, Sessions: r.ses}); err != nil {
		t.Fatal(err)
	}
	r.l.SetQuota(map[string]int{"kcb": 4})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { defer close(r.done); r.l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-r.done })
	testkit.WaitFor(t, 5*time.Second, "i1 holds its 4", func() bool { return p.of("i1", "kcb") == 4 })
	r.kv.lose.Store(4) // one round's renewals of its 4 leases
	least := 4
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		p.mu.Lock()
		least = min(least, p.limits["i1"]["kcb"])
		p.mu.Unlock()
	}
	if least != 4 {
		t.Errorf("i1's session limit fell to %d after renewals whose answers were lost, want it kept at 4", least)
	}
}
