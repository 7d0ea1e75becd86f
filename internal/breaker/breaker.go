// Package breaker is a count-window circuit breaker that trips on either a
// failure rate or a slow-call rate, with manual overrides for operators.
//
// Why not a library: failsafe-go's count-based breaker opens on a failure
// *count* within the window (20 failures of the last 100), not on a rate once
// a minimum number of calls is reached, and neither it nor gobreaker has a
// slow-call threshold. This package is small, pure (an injected clock, no
// goroutines) and does exactly the resilience4j-style rule the design asks
// for:
//
//   - Closed: the outcomes of the last Window calls are kept. Once at least
//     MinCalls are recorded, the breaker opens if FailureRate or more of them
//     failed, or SlowRate or more took at least SlowCall.
//   - Open: every call is refused with ErrOpen for OpenFor, then the breaker
//     goes half-open.
//   - Half-open: HalfOpenProbes calls are let through; if all succeed in time
//     the breaker closes with a fresh window, and the first failure (or slow
//     call) opens it again.
//   - An operator can force it open (refuse everything), force it closed
//     (let everything through, still counting) or reset it to closed.
//
// With Options.ProbeTrials the trials are the caller's own health checks,
// never calls: an open breaker refuses every call until Probe reports a
// healthy check (when Trip opened it: the checks saw the far side fail,
// and see it back) or HalfOpenProbes healthy checks in a row once OpenFor
// has passed (when calls opened it), then closes on probation: the first
// failure among its next HalfOpenProbes calls opens it again. Trip opens
// it at once. So a far side that hangs costs no user a trial call.
package breaker

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrOpen is returned by Acquire while the breaker refuses calls.
var ErrOpen = errors.New("circuit open")

// State is where the breaker is.
type State int

const (
	Closed State = iota
	Open
	HalfOpen
	ForcedOpen
	ForcedClosed
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half_open"
	case ForcedOpen:
		return "forced_open"
	case ForcedClosed:
		return "forced_closed"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// Config sets the rule. Zero values mean the defaults in brackets (see
// DefaultConfig).
type Config struct {
	Window         int           // outcomes remembered [100]
	MinCalls       int           // outcomes needed before tripping [20]; at most Window
	FailureRate    float64       // trip at this share of failures [0.2]
	SlowRate       float64       // trip at this share of slow calls [0.5]
	SlowCall       time.Duration // a call this long or longer is slow [5s]
	OpenFor        time.Duration // how long to refuse before probing [30s]
	HalfOpenProbes int           // probes in half-open [3]
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Window: 100, MinCalls: 20, FailureRate: 0.2, SlowRate: 0.5,
		SlowCall: 5 * time.Second, OpenFor: 30 * time.Second, HalfOpenProbes: 3,
	}
}

// withDefaults fills the zero fields of c from DefaultConfig, field by
// field. A holder with defaults of its own (the router's per-cell
// breakers) fills them in its own Config's withDefaults.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Window <= 0 {
		c.Window = d.Window
	}
	if c.MinCalls <= 0 {
		c.MinCalls = d.MinCalls
	}
	if c.FailureRate <= 0 {
		c.FailureRate = d.FailureRate
	}
	if c.SlowRate <= 0 {
		c.SlowRate = d.SlowRate
	}
	if c.SlowCall <= 0 {
		c.SlowCall = d.SlowCall
	}
	if c.OpenFor <= 0 {
		c.OpenFor = d.OpenFor
	}
	if c.HalfOpenProbes <= 0 {
		c.HalfOpenProbes = d.HalfOpenProbes
	}
	return c
}

// Options carry the breaker's collaborators. The zero value is usable.
type Options struct {
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// OnChange, if set, is called on every state change, with the lock
	// held: keep it quick and do not call back into the breaker.
	OnChange func(from, to State)
	// ProbeTrials makes Probe, not calls, the half-open trials (see the
	// package comment).
	ProbeTrials bool
}

// withDefaults fills the nil collaborators that have a default: Now
// (time.Now).
func (o Options) withDefaults() Options {
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Breaker is safe for concurrent use.
type Breaker struct {
	cfg      Config
	now      func() time.Time
	onChange func(from, to State)
	byProbes bool // Options.ProbeTrials

	mu       sync.Mutex
	state    State // Closed, Open or HalfOpen: the automatic state
	forced   State // Closed (no override), ForcedOpen or ForcedClosed
	gen      uint64
	openedAt time.Time
	ring     []outcome
	next     int
	n        int // outcomes in ring
	failures int // failed outcomes in ring
	slow     int // slow outcomes in ring
	probes   int // half-open probes let through
	passed   int // half-open probes that succeeded

	tripped   bool // ProbeTrials: opened by Trip, not by calls
	probation int  // ProbeTrials: calls left whose first failure opens it again
}

type outcome uint8

const (
	failed outcome = 1 << iota
	slow
)

// New returns a closed breaker.
func New(cfg Config, opts Options) *Breaker {
	cfg, opts = cfg.withDefaults(), opts.withDefaults()
	cfg.MinCalls = min(cfg.MinCalls, cfg.Window)
	now := opts.Now
	return &Breaker{cfg: cfg, now: now, onChange: opts.OnChange, byProbes: opts.ProbeTrials, ring: make([]outcome, cfg.Window)}
}

// Permit is one admitted call; report its outcome with Done exactly once.
type Permit struct {
	b   *Breaker
	gen uint64
}

// Acquire admits a call or refuses it with ErrOpen.
func (b *Breaker) Acquire() (Permit, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.forced {
	case ForcedOpen:
		return Permit{}, ErrOpen
	case ForcedClosed:
		return Permit{b: b, gen: b.gen}, nil
	}
	if b.state == Open {
		if b.byProbes || b.now().Sub(b.openedAt) < b.cfg.OpenFor {
			return Permit{}, ErrOpen
		}
		b.setLocked(HalfOpen)
	}
	if b.state == HalfOpen {
		if b.probes >= b.cfg.HalfOpenProbes {
			return Permit{}, ErrOpen
		}
		b.probes++
	}
	return Permit{b: b, gen: b.gen}, nil
}

// Done records the call's outcome: failed (an error the breaker should count)
// and how long it took. Outcomes of calls admitted before the last state
// change are ignored.
func (p Permit) Done(isFailure bool, took time.Duration) {
	b := p.b
	if b == nil {
		return
	}
	var o outcome
	if isFailure {
		o |= failed
	}
	if took >= b.cfg.SlowCall {
		o |= slow
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if p.gen != b.gen {
		return
	}
	switch b.state {
	case Closed:
		if b.probation > 0 {
			b.probation--
			if o != 0 {
				b.tripLocked()
				return
			}
		}
		b.recordLocked(o)
		if b.n >= b.cfg.MinCalls &&
			(float64(b.failures) >= b.cfg.FailureRate*float64(b.n) || float64(b.slow) >= b.cfg.SlowRate*float64(b.n)) {
			b.tripLocked()
		}
	case HalfOpen:
		if o != 0 {
			b.tripLocked()
			return
		}
		b.passed++
		if b.passed >= b.cfg.HalfOpenProbes {
			b.setLocked(Closed)
		}
	}
}

// Cancel gives back a permit without an outcome: the call never reached the
// far side, or the caller gave up. A half-open probe slot is freed.
func (p Permit) Cancel() {
	b := p.b
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if p.gen == b.gen && b.state == HalfOpen && b.probes > 0 {
		b.probes--
	}
}

func (b *Breaker) recordLocked(o outcome) {
	if b.n == len(b.ring) {
		old := b.ring[b.next]
		if old&failed != 0 {
			b.failures--
		}
		if old&slow != 0 {
			b.slow--
		}
	} else {
		b.n++
	}
	b.ring[b.next] = o
	b.next = (b.next + 1) % len(b.ring)
	if o&failed != 0 {
		b.failures++
	}
	if o&slow != 0 {
		b.slow++
	}
}

func (b *Breaker) tripLocked() {
	b.openedAt = b.now()
	b.tripped = false
	b.setLocked(Open)
}

// Trip opens the breaker now, whatever its window holds: the caller's
// health checks found the far side failing. An open breaker stays open.
func (b *Breaker) Trip() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == Open {
		return
	}
	b.tripLocked()
	b.tripped = true
}

// Probe reports one of the caller's health checks of the far side. With
// Options.ProbeTrials, a healthy check closes an open breaker that Trip
// opened, and HalfOpenProbes healthy checks in a row one that calls opened
// (once OpenFor has passed), on probation; an unhealthy one starts the
// count again. Without it, or while the breaker is closed, Probe does
// nothing.
func (b *Breaker) Probe(healthy bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.byProbes || b.state != Open {
		return
	}
	if !healthy || (!b.tripped && b.now().Sub(b.openedAt) < b.cfg.OpenFor) {
		b.passed = 0
		return
	}
	b.passed++
	if b.tripped || b.passed >= b.cfg.HalfOpenProbes {
		b.setLocked(Closed)
		b.probation = b.cfg.HalfOpenProbes
	}
}

// setLocked moves the automatic state, starting a new generation with a
// fresh window and probe count.
func (b *Breaker) setLocked(to State) { b.setLockedFrom(b.effectiveLocked(), to) }

// setLockedFrom is setLocked reporting the change from the given state.
func (b *Breaker) setLockedFrom(from, to State) {
	b.state = to
	b.gen++
	b.probes, b.passed, b.probation = 0, 0, 0
	if to != Open {
		clear(b.ring)
		b.next, b.n, b.failures, b.slow = 0, 0, 0, 0
	}
	b.notifyLocked(from)
}

func (b *Breaker) notifyLocked(from State) {
	if to := b.effectiveLocked(); to != from && b.onChange != nil {
		b.onChange(from, to)
	}
}

func (b *Breaker) effectiveLocked() State {
	if b.forced != Closed {
		return b.forced
	}
	return b.state
}

// State is the breaker's current state, including manual overrides. An open
// breaker whose OpenFor has passed reports Open until the next Acquire.
func (b *Breaker) State() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.effectiveLocked()
}

// Counts reports the window: outcomes recorded, failures, slow calls.
func (b *Breaker) Counts() (calls, failures, slowCalls int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n, b.failures, b.slow
}

// ForceOpen refuses every call until Reset or ForceClose.
func (b *Breaker) ForceOpen() { b.force(ForcedOpen) }

// ForceClose admits every call until Reset or ForceOpen.
func (b *Breaker) ForceClose() { b.force(ForcedClosed) }

// Reset drops any override and closes the breaker with an empty window.
func (b *Breaker) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	from := b.effectiveLocked()
	b.forced = Closed
	b.setLockedFrom(from, Closed)
}

func (b *Breaker) force(to State) {
	b.mu.Lock()
	defer b.mu.Unlock()
	from := b.effectiveLocked()
	b.forced = to
	b.gen++
	b.notifyLocked(from)
}
