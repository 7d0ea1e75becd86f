package agencysim

import (
	"sync/atomic"
	"time"
)

// maxSlack bounds how early the simulator sets its timers.
const maxSlack = 2 * time.Millisecond

// slack is how early the simulator sets a latency timer so that answers
// leave at the configured latency on average. Go's timers fire late: the
// netpoller sleeps in whole milliseconds, and a busy process runs the timer
// goroutine later still (about 0.4 ms on average on an idle 2-core machine,
// more under load). Uncorrected, a configured 50 ms answered in about
// 51 ms, and the bound S/L a benchmark measures against was out of reach
// for any client. The estimate follows the observed lateness (an average
// over about eight answers) within [0, maxSlack].
type slack struct{ ns atomic.Int64 }

// get is the current slack.
func (s *slack) get() time.Duration { return time.Duration(s.ns.Load()) }

// observe learns from one timer that was meant to fire at its deadline and
// fired late (negative: early) by late.
func (s *slack) observe(late time.Duration) {
	for {
		cur := s.ns.Load()
		next := min(max(cur+int64(late)/8, 0), int64(maxSlack))
		if s.ns.CompareAndSwap(cur, next) {
			return
		}
	}
}

// sleepUntil waits until deadline (its timer set early by the learnt
// slack), or less if the server is closed; false means closed.
func (s *Server) sleepUntil(deadline time.Time) bool {
	d := time.Until(deadline) - s.slack.get()
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		s.slack.observe(time.Since(deadline))
		return true
	case <-s.stop:
		return false
	}
}
