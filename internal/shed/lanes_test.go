package shed

import (
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/testkit"
)

// drainAt feeds s five one-second samples at a drain of perSecond, each
// with sm (At and Mark filled in, its oldest times keeping their ages),
// accepting highPerSecond high inquiries each second and asking for
// normalPerSecond normal ones (taken when admitted).
func drainAt(s *Shedder, clk *testkit.Clock, perSecond, highPerSecond, normalPerSecond int, sm Sample) {
	for range 5 {
		clk.Advance(time.Second)
		for _, t := range []*time.Time{&sm.Oldest, &sm.OldestHigh, &sm.OldestNormal} {
			if !t.IsZero() {
				*t = t.Add(time.Second)
			}
		}
		s.Drained(perSecond)
		for range highPerSecond {
			s.Accepted(inquiry.High)
		}
		for range normalPerSecond {
			if s.Admit(inquiry.Normal).OK {
				s.Accepted(inquiry.Normal)
			}
		}
		sm.At, sm.Mark = clk.Now(), s.Mark()
		s.Observe(sm)
	}
}

// TestNormalIsShedBeforeHigh: a normal backlog that would outlive its
// budget sheds normal inquiries; a high one waits only for the high lane,
// which is empty, and is taken.
func TestNormalIsShedBeforeHigh(t *testing.T) {
	clk := testkit.NewClock(time.Unix(1000, 0))
	s := New(Config{MaxAge: 10 * time.Second, MaxDepth: 1_000_000, HighReserve: 0.25}, Options{Now: clk.Now})
	// 100/s and no high traffic: the normal lane plans with all of it.
	drainAt(s, clk, 100, 0, 0, Sample{Depth: 600, OldestNormal: clk.Now().Add(-time.Second), Oldest: clk.Now().Add(-time.Second)})
	if d := s.Admit(inquiry.Normal); !d.OK {
		t.Fatalf("600 normal queued at 100/s (6 s) with a 10 s budget: %+v", d)
	}
	s.Observe(Sample{Depth: 800, OldestNormal: clk.Now().Add(-time.Second), Oldest: clk.Now().Add(-time.Second), At: clk.Now(), Mark: s.Mark()})
	if d := s.Admit(inquiry.Normal); d.OK || d.Reason != "wait" {
		t.Fatalf("800 normal queued at 100/s (8 s, over 7 s): %+v, want shed", d)
	}
	if d := s.Admit(inquiry.High); !d.OK || d.Depth != 0 {
		t.Fatalf("a high inquiry behind no high one: %+v, want taken", d)
	}
	// Lane-blind, the same queue sheds both lanes alike.
	blind := New(Config{MaxAge: 10 * time.Second, MaxDepth: 1_000_000, LaneBlind: true}, Options{Now: clk.Now})
	drainAt(blind, clk, 100, 0, 0, Sample{Depth: 800, Oldest: clk.Now().Add(-time.Second)})
	if d := blind.Admit(inquiry.High); d.OK {
		t.Fatalf("lane-blind, 800 queued at 100/s: a high inquiry was taken: %+v", d)
	}
}

// TestHighIsShedOnItsOwnBacklog: a high inquiry is turned away when the
// high lane alone would outlive its own budget, and by its own age.
func TestHighIsShedOnItsOwnBacklog(t *testing.T) {
	clk := testkit.NewClock(time.Unix(1000, 0))
	s := New(Config{MaxAge: 60 * time.Second, MaxAgeHigh: 5 * time.Second, MaxDepth: 1_000_000}, Options{Now: clk.Now})
	drainAt(s, clk, 100, 0, 0, Sample{Depth: 300, High: 300, OldestHigh: clk.Now().Add(-time.Second), Oldest: clk.Now().Add(-time.Second)})
	if d := s.Admit(inquiry.High); !d.OK {
		t.Fatalf("300 high at 100/s (3 s) within 70 %% of 5 s: %+v", d)
	}
	s.Observe(Sample{Depth: 400, High: 400, OldestHigh: clk.Now().Add(-time.Second), At: clk.Now(), Mark: s.Mark()})
	if d := s.Admit(inquiry.High); d.OK || d.Reason != "wait" || d.Depth != 400 {
		t.Fatalf("400 high at 100/s (4 s, over 3.5 s): %+v, want shed", d)
	}
	s.Observe(Sample{Depth: 10, High: 10, OldestHigh: clk.Now().Add(-6 * time.Second), OldestNormal: clk.Now().Add(-time.Second), At: clk.Now(), Mark: s.Mark()})
	if d := s.Admit(inquiry.High); d.OK || d.Reason != "age" || d.Age != 6*time.Second {
		t.Fatalf("the oldest high inquiry is 6 s old, its budget 5 s: %+v, want shed", d)
	}
	if d := s.Admit(inquiry.Normal); !d.OK || d.Age != time.Second {
		t.Fatalf("the oldest normal inquiry is 1 s old, its budget 60 s: %+v, want taken", d)
	}
}

// TestLanesKeepTheirShares: the normal lane may not fill the depth high
// keeps and plans with the pace high's arrivals leave it, up to high's
// share; high inquiries beyond their share are shed while normal ones are
// asked for beyond theirs, and may take what normal leaves.
func TestLanesKeepTheirShares(t *testing.T) {
	clk := testkit.NewClock(time.Unix(1000, 0))
	s := New(Config{MaxAge: 10 * time.Second, MaxDepth: 100, HighReserve: 0.2}, Options{Now: clk.Now})
	s.Observe(Sample{Depth: 80, At: clk.Now(), Mark: s.Mark()})
	if d := s.Admit(inquiry.Normal); d.OK || d.Reason != "depth" {
		t.Fatalf("80 queued of 100, 20 kept for high: normal %+v, want shed", d)
	}
	if d := s.Admit(inquiry.High); !d.OK {
		t.Fatalf("80 queued of 100: high %+v, want taken", d)
	}

	// 100/s, high taken at 10/s (within its 20 %): normal plans with the
	// 90/s left.
	s = New(Config{MaxAge: 10 * time.Second, MaxDepth: 1_000_000, HighReserve: 0.2}, Options{Now: clk.Now})
	for range 10 {
		drainAt(s, clk, 100, 10, 0, Sample{Depth: 600})
	}
	if d := s.Admit(inquiry.Normal); !d.OK {
		t.Fatalf("600 queued at the 90/s high leaves (6.7 s): %+v, want taken", d)
	}
	s.Observe(Sample{Depth: 650, At: clk.Now(), Mark: s.Mark()})
	if d := s.Admit(inquiry.Normal); d.OK || d.Reason != "wait" {
		t.Fatalf("650 queued at the 90/s high leaves (7.2 s): %+v, want shed", d)
	}

	// High taken at 50/s: over its 20 %. While normal inquiries are asked
	// for at 200/s high is shed for its share, and normal plans with the
	// 80/s high's share leaves.
	for range 10 {
		drainAt(s, clk, 100, 50, 200, Sample{Depth: 500})
	}
	if d := s.Admit(inquiry.High); d.OK || d.Reason != "share" || d.RetryAfter < time.Second {
		t.Fatalf("high at 50 %% of the pace, normal asked for at 200 %%: %+v, want shed for its share", d)
	}
	if d := s.Admit(inquiry.Normal); !d.OK {
		t.Fatalf("500 queued at the 80/s high's share leaves (6.3 s): %+v, want taken", d)
	}
	// Normal asked for at 10/s only: high takes what it leaves.
	for range 10 {
		drainAt(s, clk, 100, 50, 10, Sample{Depth: 50})
	}
	if d := s.Admit(inquiry.High); !d.OK {
		t.Fatalf("high at 50 %%, normal asking for 10 %%: %+v, want taken", d)
	}
}

// TestHighCountsAcceptsSinceTheMark: high inquiries taken after the
// sample's mark count towards the high lane's depth.
func TestHighCountsAcceptsSinceTheMark(t *testing.T) {
	clk := testkit.NewClock(time.Unix(1000, 0))
	s := New(Config{MaxDepth: 1000}, Options{Now: clk.Now})
	mark := s.Mark()
	s.Accepted(inquiry.High)
	s.Accepted(inquiry.Normal)
	s.Observe(Sample{Depth: 5, High: 2, At: clk.Now(), Mark: mark})
	if d := s.Admit(inquiry.High); d.Depth != 3 {
		t.Fatalf("high depth %d, want 2 sampled + 1 accepted since the mark", d.Depth)
	}
	if d := s.Admit(inquiry.Normal); d.Depth != 7 {
		t.Fatalf("depth %d, want 5 sampled + 2 accepted since the mark", d.Depth)
	}
}

// TestHighShareIsOfCapacity: below saturation the drain rate is what
// arrived; high's share of the pace is taken of the agencies' capacity when
// that is more, so a normal inquiry is not shed for high inquiries that
// the pipeline has room for.
func TestHighShareIsOfCapacity(t *testing.T) {
	clk := testkit.NewClock(time.Unix(1000, 0))
	s := New(Config{MaxAge: 10 * time.Second, MaxDepth: 1_000_000, HighReserve: 0.25}, Options{Now: clk.Now})
	// Drains 20/s, of which high is 15/s; the agencies could do 100/s.
	drainAt(s, clk, 20, 15, 0, Sample{Depth: 110, Capacity: 100})
	if d := s.Admit(inquiry.Normal); !d.OK {
		t.Fatalf("110 queued at 20/s, high 15 %% of a 100/s capacity (6.5 s): %+v, want taken", d)
	}
	drainAt(s, clk, 20, 15, 0, Sample{Depth: 110})
	if d := s.Admit(inquiry.Normal); d.OK {
		t.Fatalf("110 queued at 20/s, high 15/s of it, its 25 %% share taken (7.3 s): %+v, want shed", d)
	}
}

// TestALowRateGapKeepsTheShare: at a few inquiries a second, a high
// inquiry within its share is not shed for it while an instance finishes
// none for a few seconds: the half-second drain then reads near nothing,
// and high looked a hundred times over its share of it.
func TestALowRateGapKeepsTheShare(t *testing.T) {
	clk := testkit.NewClock(time.Unix(1000, 0))
	s := New(Config{MaxAge: time.Minute, MaxDepth: 1_000_000}, Options{Now: clk.Now})
	observe := func(drained int) {
		clk.Advance(250 * time.Millisecond)
		s.Drained(drained)
		s.Observe(Sample{Depth: 3, High: 1, Instances: 3, At: clk.Now(), Mark: s.Mark()})
	}
	for i := range 80 { // 20 s: 2 a second finished, half of them high
		switch i % 4 {
		case 0:
			s.Accepted(inquiry.High)
		case 2:
			if s.Admit(inquiry.Normal).OK {
				s.Accepted(inquiry.Normal)
			}
		}
		observe(i % 2)
	}
	for range 12 { // 3 s without a completion
		observe(0)
		if d := s.Admit(inquiry.High); !d.OK {
			t.Fatalf("high at half of 2/s, none finished for up to 3 s: %+v, want taken", d)
		}
	}
}
