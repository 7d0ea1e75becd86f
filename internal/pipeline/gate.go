package pipeline

import (
	"context"
	"sync"
	"time"
)

// gate is a resizable semaphore: at most min(size, limit()) holders,
// waiters served high lane first, each lane in FIFO order (workers hold
// fetched inquiries while they wait here, so without the lanes a high one
// would queue behind every normal one fetched before it). A pipeline keeps one per agency, sized to
// the session pool and held to the agency client's adaptive concurrency
// limit, so that workers queue here instead of being rejected by the agency
// client for want of a session or of a permit.
type gate struct {
	mu      sync.Mutex
	size    int
	limit   func() int // the agency's adaptive limit; nil: none
	held    int
	waiters [2][]chan struct{} // [0] high, [1] normal

	// The pace of the calls made through the gate, for capacity.
	mean     float64 // seconds per call, moving average
	calls    int     // calls in flight
	sumStart float64 // their start times, unix seconds, summed
}

func newGate(size int, limit func() int) *gate {
	return &gate{size: max(size, 0), limit: limit}
}

// placesLocked is the number of holders allowed now. The limit is read on
// every decision: when it grows, the next acquire or release lets more in.
func (g *gate) placesLocked() int {
	if g.limit == nil {
		return g.size
	}
	return min(g.size, max(g.limit(), 1))
}

func (g *gate) waitingLocked() int { return len(g.waiters[0]) + len(g.waiters[1]) }

// acquire waits for a free place or ctx; high waiters go first.
func (g *gate) acquire(ctx context.Context, high bool) error {
	lane := 1
	if high {
		lane = 0
	}
	g.mu.Lock()
	if g.held < g.placesLocked() && g.waitingLocked() == 0 {
		g.held++
		g.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	g.waiters[lane] = append(g.waiters[lane], ch)
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		defer g.mu.Unlock()
		q := g.waiters[lane]
		for i, w := range q {
			if w == ch {
				g.waiters[lane] = append(q[:i], q[i+1:]...)
				return ctx.Err()
			}
		}
		// Handed a place just as ctx ended: give it back.
		g.held--
		g.wakeLocked()
		return ctx.Err()
	}
}

func (g *gate) release() {
	g.mu.Lock()
	g.held--
	g.wakeLocked()
	g.mu.Unlock()
}

// resize changes the number of places; holders over a smaller size keep
// theirs until they release.
func (g *gate) resize(n int) {
	g.mu.Lock()
	g.size = max(n, 0)
	g.wakeLocked()
	g.mu.Unlock()
}

func (g *gate) wakeLocked() {
	places := g.placesLocked()
	for g.held < places && g.waitingLocked() > 0 {
		lane := 0
		if len(g.waiters[0]) == 0 {
			lane = 1
		}
		ch := g.waiters[lane][0]
		g.waiters[lane] = g.waiters[lane][1:]
		g.held++
		close(ch)
	}
}

func (g *gate) stats() (places, held, waiting int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.placesLocked(), g.held, g.waitingLocked()
}

// paceWindow is about how many calls the mean call time averages.
const paceWindow = 16

// began records a call started at t.
func (g *gate) began(t time.Time) {
	g.mu.Lock()
	g.calls++
	g.sumStart += unixSeconds(t)
	g.mu.Unlock()
}

// ended records the end of the call started at t, after took.
func (g *gate) ended(t time.Time, took time.Duration) {
	g.mu.Lock()
	g.calls--
	g.sumStart -= unixSeconds(t)
	if g.calls == 0 {
		g.sumStart = 0 // no drift from rounding
	}
	if g.mean == 0 {
		g.mean = took.Seconds()
	} else {
		g.mean += (took.Seconds() - g.mean) / paceWindow
	}
	g.mu.Unlock()
}

// capacity estimates the calls per second the gate can pass now (Little's
// law: places ÷ time per call), 0 when it has seen no call yet. The time
// per call is the larger of the recent mean and twice the mean age of the
// calls in flight: when the agency slows down, nothing completes for a
// while and the mean of completed calls says nothing yet, but the calls in
// flight age at once. (At a steady pace twice their mean age is about the
// mean call time: more with variable call times, so the estimate errs on
// the low side, which is the side the shedder needs.)
func (g *gate) capacity(now time.Time) float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mean == 0 {
		return 0
	}
	per := g.mean
	if g.calls > 0 {
		per = max(per, 2*(unixSeconds(now)-g.sumStart/float64(g.calls)))
	}
	if per <= 0 {
		return 0
	}
	return float64(g.placesLocked()) / per
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
