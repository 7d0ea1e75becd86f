package cell

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/oklog/run"

	"github.com/cellkit/cellkit/internal/httpx"
	"github.com/cellkit/cellkit/internal/program"
)

// Run serves until ctx ends, then shuts down gracefully (see the package
// doc). It closes the cell: a Cell runs once. The cell's components run
// as one group (internal/program), each start beside its stop, stopped
// in the order added: the loops that follow at once, then the notice
// period, the intake, the pipeline, the agencies' sessions and NATS, the
// admin listener, and last the sessions' leases.
func (c *Cell) Run(ctx context.Context) error {
	// net/http's own errors (a failed TLS handshake, mostly) go to the
	// cell's log.
	errLog := slog.NewLogLogger(c.log.Handler(), slog.LevelWarn)
	intakeSrv := &http.Server{Handler: httpx.EchoCall(c.contained("intake", c.intake)), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, IdleTimeout: time.Minute, ErrorLog: errLog}
	adminSrv := &http.Server{Handler: c.contained("admin", c.adminHandler()), ReadHeaderTimeout: 5 * time.Second, ErrorLog: errLog}
	var g run.Group
	started := make(chan struct{}) // the pipeline takes work

	// The loops that follow the map, the store, the disk and the moves;
	// they end with ctx, which stops the group.
	follow := program.Followers(ctx, &g)
	follow(c.follower.Run)
	follow(func(ctx context.Context) error { c.intake.Settle(ctx); return nil })
	follow(func(ctx context.Context) error { c.mover.Follow(ctx); return nil })
	follow(func(ctx context.Context) error { c.sampleLoop(ctx); return nil })
	follow(c.watchStall)
	if c.disk != nil {
		follow(func(ctx context.Context) error { c.disk.Run(ctx); return nil })
		follow(c.healStore)
	}
	follow(func(ctx context.Context) error {
		select {
		case <-started:
		case <-ctx.Done():
			return nil
		}
		c.ready.Store(true)
		c.intake.Open()
		c.log.Info("cell ready", "intake", c.IntakeURL(), "admin", c.AdminURL(), "map_version", c.follower.Map().Version())
		c.followQuotas(ctx)
		return nil
	})

	program.OnStop(&g, c.notice)
	g.Add(func() error { return serve(intakeSrv, c.intakeLn) }, func(error) {
		c.intake.Close()
		c.log.Info("cell stopping: intake closed")
		c.shutdownServer(intakeSrv, "intake requests did not finish")
	})
	c.addPipeline(&g, ctx, started)
	program.OnStop(&g, c.closeSessions)
	g.Add(func() error { return serve(adminSrv, c.adminLn) }, func(error) { c.shutdownServer(adminSrv, "") })
	if c.leaser != nil {
		// The leases outlive the pipeline: its work in flight keeps its
		// sessions until it stops, then the leases are given back.
		lctx, stopLeases := context.WithCancel(context.WithoutCancel(ctx))
		defer stopLeases()
		leasesDone := make(chan struct{})
		g.Add(func() error {
			defer close(leasesDone)
			select {
			case <-started:
			case <-lctx.Done():
				return nil
			}
			if err := c.leaser.Run(lctx); err != nil {
				return err
			}
			<-lctx.Done()
			return nil
		}, func(error) { stopLeases(); <-leasesDone })
	}
	err := g.Run()
	c.close()
	if err != nil {
		return err
	}
	c.log.Info("cell stopped")
	return nil
}

// addPipeline adds the pipeline: it starts once the map names the cell
// and the last run's crash is counted, and stops once the intake has
// closed: the work in flight is stopped, and a clean stop removes the
// in-flight journal.
func (c *Cell) addPipeline(g *run.Group, ctx context.Context, started chan<- struct{}) {
	sctx, stopStarting := context.WithCancel(ctx)
	pctx, stopPipeline := context.WithCancel(context.WithoutCancel(ctx))
	pipeDone := make(chan struct{})
	g.Add(func() error {
		defer close(pipeDone)
		if !c.waitForMap(sctx) {
			return nil
		}
		c.countCrash(sctx)
		close(started)
		return c.pipe.Run(pctx)
	}, func(error) {
		stopStarting()
		stopPipeline()
		<-pipeDone
		if n := c.pipe.Inflight(); n > 0 {
			// Stuck work the pipeline could not stop: not a clean stop.
			// The journal stays, so that the next start counts a crash
			// for them.
			c.log.Warn("inflight journal kept: the next start counts a crash for the inquiries still in flight", "inflight", n)
		} else if err := c.journal.Close(); err != nil { // a clean stop: the next start finds no crash
			c.log.Warn("inflight journal", "err", err)
		}
	})
}

// notice is the stop's first phase: readiness fails, and with a
// ShutdownDelay the intake goes on taking what the routers send for that
// long while their checks see it leaving.
func (c *Cell) notice() {
	c.stopping.Store(true)
	c.ready.Store(false)
	if d := c.cfg.ShutdownDelay; d > 0 {
		c.intake.Leaving()
		c.log.Info("cell stopping: health check failing, serving on", "delay", d)
		time.Sleep(d)
	}
}

// shutdownServer stops srv within ShutdownTimeout (a fresh one for each
// server), closing it if its requests do not finish; why, if set, is
// logged then.
func (c *Cell) shutdownServer(srv *http.Server, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		if why != "" {
			c.log.Warn(why, "err", err)
		}
		_ = srv.Close() // its requests are cut: the warning above says so
	}
}

// closeSessions closes the agencies' sessions once the pipeline has
// stopped, and flushes what the cell published to NATS.
func (c *Cell) closeSessions() {
	for name, cl := range c.clients {
		if err := cl.Close(); err != nil {
			c.log.Warn("agency sessions close", "agency", name, "err", err)
		}
	}
	if err := c.nc.FlushTimeout(c.cfg.ShutdownTimeout); err != nil {
		c.log.Warn("nats flush", "err", err)
	}
}

// close releases everything New opened; safe on a partly built cell.
func (c *Cell) close() {
	for _, ln := range []net.Listener{c.intakeLn, c.adminLn} {
		if ln != nil {
			ln.Close()
		}
	}
	for _, cl := range c.clients {
		_ = cl.Close() // a cell that failed to start: its error is the one reported
	}
	if c.nc != nil {
		c.nc.Close()
	}
	if c.ns != nil {
		c.ns.Shutdown()
		c.ns = nil
	}
	if c.registry != nil {
		c.registry.Close()
	}
	if c.unlock != nil {
		c.unlock()
		c.unlock = nil
	}
}

// countCrash counts the last run's crash in the inquiries it had in
// flight, quarantining those in flight at too many crashes, before the
// pipeline takes work. A store that fails leaves the list for the next
// start: the crash loop then ends at MaxDeliver as it would without.
func (c *Cell) countCrash(ctx context.Context) {
	if len(c.crashed) == 0 {
		return
	}
	q, err := c.pipe.Crashed(ctx, c.crashed, c.journal.Forget)
	if err != nil {
		c.log.Error("cannot count the crash in the inquiries in flight", "err", err)
	}
	if len(q) > 0 {
		c.log.Error("quarantined suspected poison: failed and dead-lettered", "ids", q)
	}
	c.crashed = nil
}

// waitForMap blocks until the follower has a map that names this cell.
func (c *Cell) waitForMap(ctx context.Context) bool {
	logEvery := time.NewTicker(10 * time.Second)
	defer logEvery.Stop()
	logged := false
	for {
		changed := c.follower.Changed()
		m := c.follower.Map()
		if m != nil {
			if _, ok := m.Cell(c.cfg.ID); ok {
				c.applyQuotas(m)
				return true
			}
		}
		if !logged {
			if m == nil {
				c.log.Info("waiting for the cell map", "registry", c.registry.Describe())
			} else {
				c.log.Warn("waiting for a cell map that names this cell", "registry", c.registry.Describe(), "map_version", m.Version())
			}
			logged = true
		}
		select {
		case <-changed:
		case <-logEvery.C:
			logged = false
		case <-ctx.Done():
			return false
		}
	}
}
