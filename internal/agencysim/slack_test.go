package agencysim

import (
	"testing"
	"time"
)

// The slack converges to the timers' lateness, so that the next ones fire
// on time, backs off when they fire early, and stays within its bounds.
func TestSlackLearnsTheTimersLateness(t *testing.T) {
	var s slack
	for range 100 { // timers 600 µs late, minus what the slack already corrects
		s.observe(600*time.Microsecond - s.get())
	}
	if got := s.get(); got < 550*time.Microsecond || got > 600*time.Microsecond {
		t.Fatalf("slack %v after timers 600 µs late, want about 600 µs", got)
	}
	for range 100 { // now the runtime is punctual: the early timers fire early
		s.observe(-s.get())
	}
	if got := s.get(); got > 10*time.Microsecond {
		t.Fatalf("slack %v after punctual timers, want about 0", got)
	}
	for range 100 {
		s.observe(time.Second)
	}
	if got := s.get(); got != maxSlack {
		t.Fatalf("slack %v after 1 s late timers, want the cap %v", got, maxSlack)
	}
	for range 100 {
		s.observe(-time.Second)
	}
	if got := s.get(); got != 0 {
		t.Fatalf("slack %v after early timers, want 0", got)
	}
}
