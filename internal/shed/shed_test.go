package shed

import (
	"sync"
	"testing"
	"time"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestAdmit(t *testing.T) {
	clk := &clock{now: time.Unix(1000, 0)}
	s := New(Config{MaxAge: 10 * time.Second, MaxDepth: 100}, clk.Now)
	if d := s.Admit(); !d.OK {
		t.Fatalf("before any sample: %+v, want admitted", d)
	}
	s.Observe(Sample{Depth: 50, Oldest: clk.Now().Add(-5 * time.Second), At: clk.Now(), Mark: s.Mark()})
	if d := s.Admit(); !d.OK || d.Depth != 50 || d.Age != 5*time.Second {
		t.Fatalf("within budgets: %+v", d)
	}
	clk.Add(6 * time.Second) // the oldest is now 11 s old
	d := s.Admit()
	if d.OK || d.Reason != "age" || d.RetryAfter < time.Second || d.RetryAfter > 10*time.Second {
		t.Fatalf("over the age budget: %+v", d)
	}
	// An empty queue has no age.
	s.Observe(Sample{Depth: 0, At: clk.Now(), Mark: s.Mark()})
	if d := s.Admit(); !d.OK || d.Age != 0 {
		t.Fatalf("empty queue: %+v", d)
	}
}

func TestDepthCountsAcceptsSinceTheMark(t *testing.T) {
	clk := &clock{now: time.Unix(1000, 0)}
	s := New(Config{MaxDepth: 10}, clk.Now)
	mark := s.Mark()
	for range 3 {
		s.Accepted() // taken while the sample is being read: maybe not in it
	}
	s.Observe(Sample{Depth: 5, At: clk.Now(), Mark: mark})
	if d := s.Admit(); d.Depth != 8 {
		t.Fatalf("depth %d, want 5 sampled + 3 accepted since the mark", d.Depth)
	}
	s.Accepted()
	s.Accepted()
	if d := s.Admit(); d.OK || d.Reason != "depth" {
		t.Fatalf("at the depth limit: %+v", d)
	}
	s.Observe(Sample{Depth: 2, At: clk.Now(), Mark: s.Mark()})
	if d := s.Admit(); !d.OK || d.Depth != 2 {
		t.Fatalf("after a new sample: %+v", d)
	}
}

func TestRetryAfterFollowsTheDrainRate(t *testing.T) {
	clk := &clock{now: time.Unix(1000, 0)}
	s := New(Config{MaxAge: time.Minute, MaxDepth: 100}, clk.Now)
	s.Observe(Sample{Depth: 200, At: clk.Now(), Mark: s.Mark()})
	if got := s.RetryAfter(); got != time.Minute {
		t.Fatalf("no drain measured yet: Retry-After %v, want the cap", got)
	}
	for range 10 {
		clk.Add(time.Second)
		s.Drained(50)
		s.Observe(Sample{Depth: 200, At: clk.Now(), Mark: s.Mark()})
	}
	if r := s.Rate(); r < 49 || r > 51 {
		t.Fatalf("rate %v, want 50/s", r)
	}
	if got := s.RetryAfter(); got < 3900*time.Millisecond || got > 4100*time.Millisecond {
		t.Fatalf("Retry-After %v, want 200 queued / 50 per s = 4s", got)
	}
}

func BenchmarkAdmit(b *testing.B) {
	s := New(Config{}, nil)
	s.Observe(Sample{Depth: 10, Oldest: time.Now(), At: time.Now()})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.Admit()
		}
	})
}

func TestShedsWhenTheBacklogWouldOutliveTheBudget(t *testing.T) {
	clk := &clock{now: time.Unix(1000, 0)}
	s := New(Config{MaxAge: 5 * time.Second, MaxDepth: 1_000_000}, clk.Now)
	for range 5 { // drains 100/s
		clk.Add(time.Second)
		s.Drained(100)
		s.Observe(Sample{Depth: 350, Oldest: clk.Now().Add(-time.Second), At: clk.Now(), Mark: s.Mark()})
	}
	if d := s.Admit(); !d.OK {
		t.Fatalf("350 queued at 100/s (3.5 s) with a 5 s budget: %+v", d)
	}
	s.Observe(Sample{Depth: 450, Oldest: clk.Now().Add(-time.Second), At: clk.Now(), Mark: s.Mark()})
	if d := s.Admit(); d.OK || d.Reason != "wait" || d.RetryAfter < 4*time.Second || d.RetryAfter > 5*time.Second {
		t.Fatalf("450 queued at 100/s (4.5 s, over 80%% of a 5 s budget): %+v", d)
	}
}

func TestAnIdleQueueDoesNotLowerTheDrainRate(t *testing.T) {
	clk := &clock{now: time.Unix(1000, 0)}
	s := New(Config{MaxAge: 5 * time.Second}, clk.Now)
	s.Observe(Sample{Depth: 100, At: clk.Now(), Mark: s.Mark()})
	clk.Add(time.Second)
	s.Drained(100)
	s.Observe(Sample{Depth: 0, At: clk.Now(), Mark: s.Mark()})
	for range 100 { // a long quiet spell: nothing queued, nothing drained
		clk.Add(time.Second)
		s.Observe(Sample{Depth: 0, At: clk.Now(), Mark: s.Mark()})
	}
	if r := s.Rate(); r != 100 {
		t.Fatalf("rate after an idle spell %v, want the last busy rate 100/s", r)
	}
	for range 50 {
		s.Accepted()
	}
	if d := s.Admit(); !d.OK {
		t.Fatalf("a burst of 50 after a quiet spell was shed: %+v", d)
	}
}

func TestAShortStallKeepsMostOfTheRate(t *testing.T) {
	clk := &clock{now: time.Unix(1000, 0)}
	s := New(Config{MaxAge: 60 * time.Second}, clk.Now)
	s.Observe(Sample{Depth: 10, At: clk.Now(), Mark: s.Mark()})
	clk.Add(time.Second)
	s.Drained(100)
	s.Observe(Sample{Depth: 10, At: clk.Now(), Mark: s.Mark()})
	for range 50 { // one second of 20 ms samples with nothing drained
		clk.Add(20 * time.Millisecond)
		s.Observe(Sample{Depth: 10, At: clk.Now(), Mark: s.Mark()})
	}
	if r := s.Rate(); r < 75 || r > 90 {
		t.Fatalf("rate after a 1 s stall %v, want about 100·e^(-1/5) ≈ 82/s", r)
	}
}
