package shed

import (
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/testkit"
)

func TestAdmit(t *testing.T) {
	clk := testkit.NewClock(time.Unix(1000, 0))
	s := New(Config{LaneBlind: true, MaxAge: 10 * time.Second, MaxDepth: 100}, Options{Now: clk.Now})
	if d := s.Admit(inquiry.Normal); !d.OK {
		t.Fatalf("before any sample: %+v, want admitted", d)
	}
	s.Observe(Sample{Depth: 50, Oldest: clk.Now().Add(-5 * time.Second), At: clk.Now(), Mark: s.Mark()})
	if d := s.Admit(inquiry.Normal); !d.OK || d.Depth != 50 || d.Age != 5*time.Second {
		t.Fatalf("within budgets: %+v", d)
	}
	clk.Advance(6 * time.Second) // the oldest is now 11 s old
	d := s.Admit(inquiry.Normal)
	if d.OK || d.Reason != "age" || d.RetryAfter < time.Second || d.RetryAfter > 10*time.Second {
		t.Fatalf("over the age budget: %+v", d)
	}
	// An empty queue has no age.
	s.Observe(Sample{Depth: 0, At: clk.Now(), Mark: s.Mark()})
	if d := s.Admit(inquiry.Normal); !d.OK || d.Age != 0 {
		t.Fatalf("empty queue: %+v", d)
	}
}

func TestDepthCountsAcceptsSinceTheMark(t *testing.T) {
	clk := testkit.NewClock(time.Unix(1000, 0))
	s := New(Config{LaneBlind: true, MaxDepth: 10}, Options{Now: clk.Now})
	mark := s.Mark()
	for range 3 {
		s.Accepted(inquiry.Normal) // taken while the sample is being read: maybe not in it
	}
	s.Observe(Sample{Depth: 5, At: clk.Now(), Mark: mark})
	if d := s.Admit(inquiry.Normal); d.Depth != 8 {
		t.Fatalf("depth %d, want 5 sampled + 3 accepted since the mark", d.Depth)
	}
	s.Accepted(inquiry.Normal)
	s.Accepted(inquiry.Normal)
	if d := s.Admit(inquiry.Normal); d.OK || d.Reason != "depth" {
		t.Fatalf("at the depth limit: %+v", d)
	}
	s.Observe(Sample{Depth: 2, At: clk.Now(), Mark: s.Mark()})
	if d := s.Admit(inquiry.Normal); !d.OK || d.Depth != 2 {
		t.Fatalf("after a new sample: %+v", d)
	}
}

func TestRetryAfterFollowsTheDrainRate(t *testing.T) {
	clk := testkit.NewClock(time.Unix(1000, 0))
	s := New(Config{LaneBlind: true, MaxAge: time.Minute, MaxDepth: 100}, Options{Now: clk.Now})
	s.Observe(Sample{Depth: 200, At: clk.Now(), Mark: s.Mark()})
	if got := s.RetryAfter(); got != time.Minute {
		t.Fatalf("no drain measured yet: Retry-After %v, want the cap", got)
	}
	for range 10 {
		clk.Advance(time.Second)
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
	s := New(Config{LaneBlind: true}, Options{})
	s.Observe(Sample{Depth: 10, Oldest: time.Now(), At: time.Now()})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.Admit(inquiry.Normal)
		}
	})
}

func TestShedsWhenTheBacklogWouldOutliveTheBudget(t *testing.T) {
	clk := testkit.NewClock(time.Unix(1000, 0))
	s := New(Config{LaneBlind: true, MaxAge: 5 * time.Second, MaxDepth: 1_000_000}, Options{Now: clk.Now})
	for range 5 { // drains 100/s
		clk.Advance(time.Second)
		s.Drained(100)
		s.Observe(Sample{Depth: 300, Oldest: clk.Now().Add(-time.Second), At: clk.Now(), Mark: s.Mark()})
	}
	if d := s.Admit(inquiry.Normal); !d.OK {
		t.Fatalf("300 queued at 100/s (3 s) with a 5 s budget: %+v", d)
	}
	s.Observe(Sample{Depth: 450, Oldest: clk.Now().Add(-time.Second), At: clk.Now(), Mark: s.Mark()})
	if d := s.Admit(inquiry.Normal); d.OK || d.Reason != "wait" || d.RetryAfter < 4*time.Second || d.RetryAfter > 5*time.Second {
		t.Fatalf("450 queued at 100/s (4.5 s, over 70%% of a 5 s budget): %+v", d)
	}
}

// TestInstancesShareTheDrain: an instance of a cell of three drains a
// third of the cell's queue; the backlog a new inquiry waits for drains at
// three times its own rate.
func TestInstancesShareTheDrain(t *testing.T) {
	clk := testkit.NewClock(time.Unix(1000, 0))
	s := New(Config{LaneBlind: true, MaxAge: 5 * time.Second, MaxDepth: 1_000_000}, Options{Now: clk.Now})
	for range 5 { // this instance drains 100/s, the cell 300/s
		clk.Advance(time.Second)
		s.Drained(100)
		s.Observe(Sample{Depth: 900, Oldest: clk.Now().Add(-time.Second), At: clk.Now(), Mark: s.Mark(), Instances: 3})
	}
	if d := s.Admit(inquiry.Normal); !d.OK {
		t.Fatalf("900 queued at 3 × 100/s (3 s) with a 5 s budget: %+v", d)
	}
	s.Observe(Sample{Depth: 900, Oldest: clk.Now().Add(-time.Second), At: clk.Now(), Mark: s.Mark(), Instances: 1})
	if d := s.Admit(inquiry.Normal); d.OK || d.Reason != "wait" {
		t.Fatalf("900 queued at 100/s (9 s) with a 5 s budget, alone: %+v", d)
	}
	s.Observe(Sample{Depth: 1350, Oldest: clk.Now().Add(-time.Second), At: clk.Now(), Mark: s.Mark(), Instances: 3})
	if d := s.Admit(inquiry.Normal); d.OK || d.RetryAfter < 4*time.Second || d.RetryAfter > 5*time.Second {
		t.Fatalf("1350 queued at 3 × 100/s (4.5 s): %+v, want shed with Retry-After 4.5 s", d)
	}
}

// TestAnIdlePipelinePredictsNoWait: a few messages held elsewhere (an
// instance cut off, until their ack wait) and a drain rate that decayed
// while nothing was admitted must not shed everything: an idle pipeline
// takes new work at once. The age budget still holds.
func TestAnIdlePipelinePredictsNoWait(t *testing.T) {
	clk := testkit.NewClock(time.Unix(1000, 0))
	s := New(Config{LaneBlind: true, MaxAge: 10 * time.Second, MaxDepth: 1_000_000}, Options{Now: clk.Now})
	for range 5 { // drains 10/s
		clk.Advance(time.Second)
		s.Drained(10)
		s.Observe(Sample{Depth: 3, Oldest: clk.Now().Add(-time.Second), At: clk.Now(), Mark: s.Mark()})
	}
	for range 30 { // nothing drained for 30 s: the rate decays toward 0
		clk.Advance(time.Second)
		s.Observe(Sample{Depth: 3, Oldest: clk.Now().Add(-2 * time.Second), At: clk.Now(), Mark: s.Mark()})
	}
	if d := s.Admit(inquiry.Normal); d.OK || d.Reason != "wait" {
		t.Fatalf("busy, 3 queued at a decayed rate: %+v, want shed on wait", d)
	}
	s.Observe(Sample{Depth: 3, Oldest: clk.Now().Add(-2 * time.Second), At: clk.Now(), Mark: s.Mark(), Idle: true})
	if d := s.Admit(inquiry.Normal); !d.OK {
		t.Fatalf("idle, 3 queued elsewhere: %+v, want admitted", d)
	}
	s.Observe(Sample{Depth: 3, Oldest: clk.Now().Add(-11 * time.Second), At: clk.Now(), Mark: s.Mark(), Idle: true})
	if d := s.Admit(inquiry.Normal); d.OK || d.Reason != "age" {
		t.Fatalf("idle, the oldest past the budget: %+v, want shed on age", d)
	}
}

func TestAnIdleQueueDoesNotLowerTheDrainRate(t *testing.T) {
	clk := testkit.NewClock(time.Unix(1000, 0))
	s := New(Config{LaneBlind: true, MaxAge: 5 * time.Second}, Options{Now: clk.Now})
	s.Observe(Sample{Depth: 100, At: clk.Now(), Mark: s.Mark()})
	clk.Advance(time.Second)
	s.Drained(100)
	s.Observe(Sample{Depth: 0, At: clk.Now(), Mark: s.Mark()})
	for range 100 { // a long quiet spell: nothing queued, nothing drained
		clk.Advance(time.Second)
		s.Observe(Sample{Depth: 0, At: clk.Now(), Mark: s.Mark()})
	}
	if r := s.Rate(); r != 100 {
		t.Fatalf("rate after an idle spell %v, want the last busy rate 100/s", r)
	}
	for range 50 {
		s.Accepted(inquiry.Normal)
	}
	if d := s.Admit(inquiry.Normal); !d.OK {
		t.Fatalf("a burst of 50 after a quiet spell was shed: %+v", d)
	}
}

func TestAShortStallKeepsMostOfTheRate(t *testing.T) {
	clk := testkit.NewClock(time.Unix(1000, 0))
	s := New(Config{LaneBlind: true, MaxAge: 60 * time.Second}, Options{Now: clk.Now})
	s.Observe(Sample{Depth: 10, At: clk.Now(), Mark: s.Mark()})
	clk.Advance(time.Second)
	s.Drained(100)
	s.Observe(Sample{Depth: 10, At: clk.Now(), Mark: s.Mark()})
	for range 50 { // one second of 20 ms samples with nothing drained
		clk.Advance(20 * time.Millisecond)
		s.Observe(Sample{Depth: 10, At: clk.Now(), Mark: s.Mark()})
	}
	if r := s.Rate(); r < 75 || r > 90 {
		t.Fatalf("rate after a 1 s stall %v, want about 100·e^(-1/5) ≈ 82/s", r)
	}
}

// A sudden ×10 slowdown: the backlog that was 2 s of work becomes 20 s.
// Admission must notice within about a second, not after the 5 s average
// catches up (the agency-slow drill overshot the budget by 50 % that way).
func TestASuddenSlowdownShedsWithinASecond(t *testing.T) {
	clk := testkit.NewClock(time.Unix(1000, 0))
	s := New(Config{LaneBlind: true, MaxAge: 5 * time.Second, MaxDepth: 1_000_000}, Options{Now: clk.Now})
	step := func(drained, depth int) {
		clk.Advance(250 * time.Millisecond)
		s.Drained(drained)
		s.Observe(Sample{Depth: depth, Oldest: clk.Now().Add(-time.Second), At: clk.Now(), Mark: s.Mark()})
	}
	for range 40 { // 10 s at 100/s with 200 queued: 2 s of work
		step(25, 200)
	}
	if d := s.Admit(inquiry.Normal); !d.OK {
		t.Fatalf("200 queued at 100/s with a 5 s budget: %+v", d)
	}
	shedAt := time.Duration(0)
	for i := range 8 { // now 10/s
		step([]int{3, 2}[i%2], 200)
		if d := s.Admit(inquiry.Normal); !d.OK && shedAt == 0 {
			if d.Reason != "wait" {
				t.Fatalf("shed for %q, want wait", d.Reason)
			}
			shedAt = time.Duration(i+1) * 250 * time.Millisecond
		}
	}
	if shedAt == 0 || shedAt > time.Second {
		t.Fatalf("200 queued at 10/s (20 s of work, 5 s budget) admitted for %v after the slowdown, want shed within 1 s (rate %.0f/s)", 2*time.Second, s.Rate())
	}
	// The slow average still says about 70/s: that is what Retry-After
	// advises (a shed client comes back when the backlog could be gone).
	if r := s.Rate(); r < 50 {
		t.Fatalf("Retry-After rate %.0f/s after 2 s of the slowdown, want the slow average (> 50/s)", r)
	}
	// Recovery: back to 100/s, the backlog drains; once it is a second of
	// work, intake opens although the slow average is still low.
	for range 8 {
		step(25, 50)
	}
	if d := s.Admit(inquiry.Normal); !d.OK {
		t.Fatalf("50 queued after recovering to 100/s: %+v (rate %.0f/s)", d, s.Rate())
	}
}

// The predicted age of a new inquiry is the backlog's drain time plus its
// own service: with slow calls (1.5 s) a backlog of 3 s is already over 70 %
// of a 5 s budget. The peak decays once calls are quick again.
func TestServiceTimeCountsTowardsTheWait(t *testing.T) {
	clk := testkit.NewClock(time.Unix(1000, 0))
	s := New(Config{LaneBlind: true, MaxAge: 5 * time.Second, MaxDepth: 1_000_000}, Options{Now: clk.Now})
	step := func() {
		clk.Advance(250 * time.Millisecond)
		s.Drained(25)
		s.Observe(Sample{Depth: 300, Oldest: clk.Now().Add(-time.Second), At: clk.Now(), Mark: s.Mark()})
	}
	for range 20 { // 100/s, 300 queued: 3 s
		step()
	}
	s.Served(300 * time.Millisecond)
	if d := s.Admit(inquiry.Normal); !d.OK {
		t.Fatalf("3 s of backlog + 0.3 s service, 5 s budget: %+v", d)
	}
	s.Served(1500 * time.Millisecond)
	if d := s.Admit(inquiry.Normal); d.OK || d.Reason != "wait" {
		t.Fatalf("3 s of backlog + 1.5 s service, 5 s budget: %+v, want shed for wait", d)
	}
	for range 40 { // 10 s of quick calls
		step()
	}
	if d := s.Admit(inquiry.Normal); !d.OK || s.Service() > 300*time.Millisecond {
		t.Fatalf("10 s after the last slow call: %+v, service peak %v", d, s.Service())
	}
}

// The pipeline's capacity estimate (from the calls in flight) leads the
// measured rates: at the first sample after the agencies slowed down, the
// completions still show the old pace, but the capacity does not.
func TestCapacityLeadsTheMeasuredRate(t *testing.T) {
	clk := testkit.NewClock(time.Unix(1000, 0))
	s := New(Config{LaneBlind: true, MaxAge: 5 * time.Second, MaxDepth: 1_000_000}, Options{Now: clk.Now})
	observe := func(capacity float64) {
		clk.Advance(250 * time.Millisecond)
		s.Drained(25)
		s.Observe(Sample{Depth: 200, Oldest: clk.Now().Add(-time.Second), At: clk.Now(), Mark: s.Mark(), Capacity: capacity})
	}
	for range 40 { // 100/s, capacity 120/s: 200 queued is 2 s
		observe(120)
	}
	if d := s.Admit(inquiry.Normal); !d.OK {
		t.Fatalf("200 queued at 100/s: %+v", d)
	}
	observe(15) // completions as before, but the calls in flight are slow
	if d := s.Admit(inquiry.Normal); d.OK || d.Reason != "wait" {
		t.Fatalf("200 queued with a capacity of 15/s (13 s): %+v, want shed for wait", d)
	}
}

// At a few inquiries a second an instance may finish none for a couple of
// seconds (one slow call) while three are queued in its cell. The half
// second average then reads a twentieth of the pace, and the three would
// have been a minute's wait: scattered 503s at 7 inquiries a second per
// cell of three. A real stall is still shed for, on the slow average.
func TestALowRateGapIsNotAStall(t *testing.T) {
	clk := testkit.NewClock(time.Unix(1000, 0))
	s := New(Config{LaneBlind: true, MaxAge: time.Minute, MaxDepth: 1_000_000}, Options{Now: clk.Now})
	observe := func(drained int) {
		clk.Advance(250 * time.Millisecond)
		s.Drained(drained)
		s.Observe(Sample{Depth: 3, Oldest: clk.Now().Add(-time.Second), At: clk.Now(), Mark: s.Mark(), Instances: 3})
	}
	for i := range 80 { // 20 s at 2 a second on this instance
		observe(i % 2)
	}
	for range 12 { // 3 s without a completion
		observe(0)
		if d := s.Admit(inquiry.Normal); !d.OK {
			t.Fatalf("3 queued, an instance of three at 2/s finishing none for up to 3 s: %+v (rate %.2f/s)", d, s.Rate())
		}
	}
	for range 4 * 60 { // a minute without a completion: stalled
		observe(0)
	}
	if d := s.Admit(inquiry.Normal); d.OK || d.Reason != Wait {
		t.Fatalf("3 queued, nothing finished for a minute: %+v, want shed for wait", d)
	}
}

// With everything queued in flight at the agencies (no more than the
// instances' places), a new inquiry waits for no other: however long
// nothing finished, no wait is predicted. Beyond the places, the same
// pace predicts one.
func TestNoBacklogNoWait(t *testing.T) {
	clk := testkit.NewClock(time.Unix(1000, 0))
	s := New(Config{LaneBlind: true, MaxAge: time.Minute, MaxDepth: 1_000_000}, Options{Now: clk.Now})
	sample := Sample{Depth: 3, Places: 9, Instances: 3}
	observe := func(drained int) {
		clk.Advance(250 * time.Millisecond)
		s.Drained(drained)
		sm := sample
		sm.Oldest, sm.At, sm.Mark = clk.Now().Add(-time.Second), clk.Now(), s.Mark()
		s.Observe(sm)
	}
	for i := range 80 { // 20 s at 2 a second on this instance
		observe(i % 2)
	}
	for range 4 * 25 { // 25 s without a completion, 3 in flight of 27 places
		observe(0)
	}
	if d := s.Admit(inquiry.Normal); !d.OK {
		t.Fatalf("3 queued, 27 places, nothing finished for 25 s: %+v (rate %.3f/s), want taken", d, s.Rate())
	}
	sample.Depth = 30
	observe(0)
	if d := s.Admit(inquiry.Normal); d.OK || d.Reason != Wait {
		t.Fatalf("30 queued, 27 places, at that pace: %+v, want shed for wait", d)
	}
}
