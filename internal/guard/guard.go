// Package guard protects the router, and the other cells' users, from one
// cell: a bulkhead and a circuit breaker, both refusing at once without
// touching the network.
package guard

import (
	"sync/atomic"
	"time"

	"github.com/cellkit/cellkit/internal/breaker"
)

// Guard protects the router (and the other cells' users) from one cell: a
// bulkhead caps the requests in flight to it, and a circuit breaker stops
// calling it once enough calls fail (5xx, connection errors, timeouts).
// Both refuse at once, without touching the network, so a dead or hanging
// cell costs its own users a fast 503 and nobody else anything.
//
// A guard lives as long as its cell id is in the map, across map versions
// and endpoint changes.
type Guard struct {
	Cell     string
	limit    int64
	inFlight atomic.Int64
	br       *breaker.Breaker
	openFor  time.Duration
}

// Reason is why the router refused a request to a cell.
type Reason uint8

// Reasons to refuse. NoCell is not a guard's verdict but the router's (the
// map has no active cell): it is here so that one enumeration names every
// reason the router sheds for, as its metrics' label values.
const (
	Bulkhead Reason = iota
	Breaker
	NoCell
	Reasons  // how many there are
	Admitted = Reasons
)

func (r Reason) String() string {
	switch r {
	case Bulkhead:
		return "bulkhead"
	case Breaker:
		return "breaker"
	case NoCell:
		return "no_cell"
	}
	return "admitted"
}

// New builds a cell's guard; with probed, the breaker's trials are the
// router's health checks, not users' requests.
func New(cell string, limit int, cfg breaker.Config, probed bool, onChange func(from, to breaker.State)) *Guard {
	return &Guard{
		Cell:    cell,
		limit:   int64(limit),
		br:      breaker.New(cfg, breaker.Options{OnChange: onChange, ProbeTrials: probed}),
		openFor: cfg.OpenFor,
	}
}

// Enter admits a request (report it with leave or cancel) or says why not.
func (g *Guard) Enter() (breaker.Permit, Reason) {
	if g.inFlight.Add(1) > g.limit {
		g.inFlight.Add(-1)
		return breaker.Permit{}, Bulkhead
	}
	p, err := g.br.Acquire()
	if err != nil {
		g.inFlight.Add(-1)
		return breaker.Permit{}, Breaker
	}
	return p, Admitted
}

// Leave reports an admitted request's outcome.
func (g *Guard) Leave(p breaker.Permit, failed bool, took time.Duration) {
	p.Done(failed, took)
	g.inFlight.Add(-1)
}

// RetryAfter is what a refused client is told to wait.
func (g *Guard) RetryAfter(why Reason) time.Duration {
	if why == Breaker {
		return g.openFor
	}
	return time.Second
}

// InFlight is the number of requests admitted and not yet left.
func (g *Guard) InFlight() int64 { return g.inFlight.Load() }

// Limit is the bulkhead's size.
func (g *Guard) Limit() int64 { return g.limit }

// Circuit is the guard's breaker (the health checks drive its trials).
func (g *Guard) Circuit() *breaker.Breaker { return g.br }
