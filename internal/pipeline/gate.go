package pipeline

import (
	"context"
	"sync"
)

// gate is a resizable semaphore: at most min(size, limit()) holders,
// waiters served in FIFO order. A pipeline keeps one per agency, sized to
// the session pool and held to the agency client's adaptive concurrency
// limit, so that workers queue here instead of being rejected by the agency
// client for want of a session or of a permit.
type gate struct {
	mu      sync.Mutex
	size    int
	limit   func() int // the agency's adaptive limit; nil: none
	held    int
	waiters []chan struct{}
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

// acquire waits for a free place or ctx.
func (g *gate) acquire(ctx context.Context) error {
	g.mu.Lock()
	if g.held < g.placesLocked() && len(g.waiters) == 0 {
		g.held++
		g.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	g.waiters = append(g.waiters, ch)
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		defer g.mu.Unlock()
		for i, w := range g.waiters {
			if w == ch {
				g.waiters = append(g.waiters[:i], g.waiters[i+1:]...)
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
	for g.held < places && len(g.waiters) > 0 {
		ch := g.waiters[0]
		g.waiters = g.waiters[1:]
		g.held++
		close(ch)
	}
}

func (g *gate) stats() (places, held, waiting int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.placesLocked(), g.held, len(g.waiters)
}
