package router

import (
	"sync/atomic"
	"time"

	"github.com/cellkit/cellkit/internal/breaker"
)

// guard protects the router (and the other cells' users) from one cell: a
// bulkhead caps the requests in flight to it, and a circuit breaker stops
// calling it once enough calls fail (5xx, connection errors, timeouts).
// Both refuse at once, without touching the network, so a dead or hanging
// cell costs its own users a fast 503 and nobody else anything.
//
// A guard lives as long as its cell id is in the map, across map versions
// and endpoint changes.
type guard struct {
	cell     string
	limit    int64
	inFlight atomic.Int64
	br       *breaker.Breaker
	openFor  time.Duration
}

// shedReason is why a guard refused a request.
type shedReason uint8

const (
	shedBulkhead shedReason = iota
	shedBreaker
	shedNoCell // not a guard's verdict: the map has no active cell
	shedReasons
	admitted = shedReasons
)

func (r shedReason) String() string {
	switch r {
	case shedBulkhead:
		return "bulkhead"
	case shedBreaker:
		return "breaker"
	case shedNoCell:
		return "no_cell"
	}
	return "admitted"
}

// newGuard builds a cell's guard; with probed, the breaker's trials are the
// router's health checks (health.go), not users' requests.
func newGuard(cell string, limit int, cfg breaker.Config, probed bool, onChange func(from, to breaker.State)) *guard {
	return &guard{
		cell:    cell,
		limit:   int64(limit),
		br:      breaker.New(cfg, breaker.Options{OnChange: onChange, ProbeTrials: probed}),
		openFor: cfg.OpenFor,
	}
}

// enter admits a request (report it with leave or cancel) or says why not.
func (g *guard) enter() (breaker.Permit, shedReason) {
	if g.inFlight.Add(1) > g.limit {
		g.inFlight.Add(-1)
		return breaker.Permit{}, shedBulkhead
	}
	p, err := g.br.Acquire()
	if err != nil {
		g.inFlight.Add(-1)
		return breaker.Permit{}, shedBreaker
	}
	return p, admitted
}

// leave reports an admitted request's outcome.
func (g *guard) leave(p breaker.Permit, failed bool, took time.Duration) {
	p.Done(failed, took)
	g.inFlight.Add(-1)
}

// retryAfter is what a refused client is told to wait.
func (g *guard) retryAfter(why shedReason) time.Duration {
	if why == shedBreaker {
		return g.openFor
	}
	return time.Second
}
