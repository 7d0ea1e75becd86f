// Package slotrate keeps a request rate per slot of the cell map: a counter
// per slot that the request path increments (one uncontended atomic add),
// folded into a moving average when the rates are read. Routers keep one so
// that plans can project measured traffic rather than slot shares.
package slotrate

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultWindow is the time constant of the moving average.
const DefaultWindow = time.Minute

// Rates is safe for concurrent use: Add from any goroutine, Snapshot from
// any other.
type Rates struct {
	window time.Duration
	now    func() time.Time
	counts []atomic.Uint64 // requests since the last fold, per slot

	mu    sync.Mutex
	rates []float64 // per slot, requests per second
	last  time.Time // the last fold
	begun time.Time // the first fold: rates over less than a window are averages since
}

// New returns the rates of a map of slots slots, averaged over window
// (DefaultWindow if 0). now is the clock (time.Now if nil).
func New(slots int, window time.Duration, now func() time.Time) *Rates {
	if window <= 0 {
		window = DefaultWindow
	}
	if now == nil {
		now = time.Now
	}
	t := now()
	return &Rates{window: window, now: now, counts: make([]atomic.Uint64, slots), rates: make([]float64, slots), last: t, begun: t}
}

// Slots is the number of slots counted.
func (r *Rates) Slots() int { return len(r.counts) }

// Add counts one request to slot; a slot out of range is ignored.
func (r *Rates) Add(slot int) {
	if uint(slot) < uint(len(r.counts)) {
		r.counts[slot].Add(1)
	}
}

// Snapshot is the rates at one moment.
type Snapshot struct {
	// Slots is the number of slots of the map counted.
	Slots int `json:"slots"`
	// WindowSeconds is the moving average's time constant; SinceSeconds
	// how long the counting has run (shorter than the window, the rates
	// are averages over it).
	WindowSeconds float64 `json:"window_seconds"`
	SinceSeconds  float64 `json:"since_seconds"`
	// Total is the sum of the rates, requests per second.
	Total float64 `json:"total"`
	// Rates are [slot, requests per second] for the slots with traffic,
	// in slot order.
	Rates [][2]float64 `json:"rates"`
}

// Snapshot folds the counts in and returns the rates.
func (r *Rates) Snapshot() Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	dt := now.Sub(r.last).Seconds()
	since := now.Sub(r.begun).Seconds()
	// Within the first window the average is over the time counted so
	// far (a plain mean), so that a router just started does not report a
	// rate ramping up from zero.
	a := 1.0
	if dt > 0 && since > dt {
		a = 1 - math.Exp(-dt/math.Min(r.window.Seconds(), since))
	}
	s := Snapshot{Slots: len(r.counts), WindowSeconds: r.window.Seconds(), SinceSeconds: since, Rates: [][2]float64{}}
	for i := range r.counts {
		c := r.counts[i].Swap(0)
		if dt > 0 {
			r.rates[i] = a*float64(c)/dt + (1-a)*r.rates[i]
		}
		if r.rates[i] > 1e-9 {
			s.Rates = append(s.Rates, [2]float64{float64(i), r.rates[i]})
			s.Total += r.rates[i]
		}
	}
	if dt > 0 {
		r.last = now
	}
	return s
}
