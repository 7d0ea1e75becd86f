// Package testkit holds what tests across cellkit share: waiting for a
// condition with a deadline instead of sleeping, a fake clock, the goroutine
// leak check, loopback listeners, loggers and log buffers, HTTP requests
// read whole, and a test binary run as its package's program.
//
// It imports nothing of cellkit, so that every package's tests, internal or
// external, can use it without an import cycle. Helpers that start cellkit's
// own parts (the agency simulator, a registry with a map, NATS) are in
// internal/celltest, which builds on this package.
package testkit

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// maxPollInterval is the longest pause between two checks of a condition.
// The pause starts at a millisecond and doubles up to it, so a condition
// that holds soon is seen soon and a long wait costs little CPU.
const maxPollInterval = 10 * time.Millisecond

// WaitFor checks cond until it holds, failing the test with t.Fatalf if it
// still does not hold after within. what names the condition in the
// failure: "timed out after 5s waiting for <what>".
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(within, cond) {
		t.Fatalf("timed out after %v waiting for %s", within, what)
	}
}

// Poll checks cond until it holds or within has passed, and reports whether
// it held. It is WaitFor for a test that reports the failure itself (with
// what it saw last). cond is always checked once more after the deadline.
func Poll(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
		pause = min(2*pause, maxPollInterval)
	}
	return true
}

// Timing runs a timing measurement until it meets its bounds, at most
// attempts times: on a shared machine one run may be stalled by other
// processes, while a real regression misses in every attempt. measure
// returns nil when its bounds are met; each miss is logged and the last
// one ends the test (Fatalf). Only timing bounds belong in measure: a property
// that must hold every time is checked with t inside it.
func Timing(t testing.TB, attempts int, measure func() error) {
	t.Helper()
	var err error
	for i := 1; i <= attempts; i++ {
		if err = measure(); err == nil {
			return
		}
		t.Logf("timing, attempt %d of %d: %v", i, attempts, err)
	}
	t.Fatalf("%v (missed in each of %d attempts)", err, attempts)
}

// Context returns a context that ends after within or when the test's
// cleanup runs, whichever is first. Unlike t.Context it is still live in
// functions registered with t.Cleanup before it was made.
func Context(t testing.TB, within time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	t.Cleanup(cancel)
	return ctx
}

// Peak samples f every period from now until the test ends and keeps the
// largest value seen: a bound that must hold at every moment (sessions
// open at once, say) is checked against it.
type Peak struct {
	max atomic.Int64
}

// SamplePeak starts sampling f every period; the sampling stops, and is
// waited for, when the test ends (a cleanup registered now, so it runs
// after the cleanups registered later).
func SamplePeak(t testing.TB, period time.Duration, f func() int64) *Peak {
	p := &Peak{}
	p.max.Store(f())
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if v := f(); v > p.max.Load() {
				p.max.Store(v)
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return p
}

// Max is the largest value seen so far.
func (p *Peak) Max() int64 { return p.max.Load() }
