package program

import (
	"context"

	"github.com/oklog/run"
)

// A program's components run as one run.Group (github.com/oklog/run):
// each is added as a pair, its start (execute) beside its stop
// (interrupt). The first to return stops the group, and the group calls
// the stops one after the other in the order the components were added:
// the order of the stop is the order of the adds. These helpers make the
// two kinds of component that are not a server.

// Followers returns add, which adds to g a loop that follows others (a
// map, a file, a registry) and has nothing to drain: it runs until the
// group stops, and the loops added through one add are stopped together,
// at once, in the place of the first of them in the order. A loop that
// returns early without an error waits for the stop instead of ending
// the group; one that returns an error ends it.
func Followers(ctx context.Context, g *run.Group) (add func(loop func(context.Context) error)) {
	fctx, stop := context.WithCancel(ctx)
	return func(loop func(context.Context) error) {
		g.Add(func() error {
			if err := loop(fctx); err != nil {
				return err
			}
			<-fctx.Done()
			return nil
		}, func(error) { stop() })
	}
}

// OnStop adds to g a phase of the stop that has no start of its own
// (a notice period, the closing of clients): stop runs when the group
// stops, in its place in the order.
func OnStop(g *run.Group, stop func()) {
	done := make(chan struct{})
	g.Add(func() error { <-done; return nil }, func(error) { stop(); close(done) })
}
