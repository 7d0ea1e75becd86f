package cell

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/cellkit/cellkit/internal/httpx"
)

// Run serves until ctx ends, then shuts down gracefully (see the package
// doc). It closes the cell: a Cell runs once.
func (c *Cell) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	// net/http's own errors (a failed TLS handshake, mostly) go to the
	// cell's log.
	errLog := slog.NewLogLogger(c.log.Handler(), slog.LevelWarn)
	intakeSrv := &http.Server{Handler: httpx.EchoCall(c.contained("intake", c.intake)), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, IdleTimeout: time.Minute, ErrorLog: errLog}
	adminSrv := &http.Server{Handler: c.contained("admin", c.adminHandler()), ReadHeaderTimeout: 5 * time.Second, ErrorLog: errLog}
	g.Go(func() error { return c.follower.Run(gctx) })
	g.Go(func() error { c.intake.Settle(gctx); return nil })
	g.Go(func() error { c.mover.Follow(gctx); return nil })
	g.Go(func() error { return serve(adminSrv, c.adminLn) })
	g.Go(func() error { return serve(intakeSrv, c.intakeLn) })
	g.Go(func() error { c.sampleLoop(gctx); return nil })
	g.Go(func() error { return c.watchStall(gctx) })
	if c.disk != nil {
		g.Go(func() error { c.disk.Run(gctx); return nil })
		g.Go(func() error { return c.healStore(gctx) })
	}

	pctx, stopPipeline := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPipeline()
	pipeDone := make(chan struct{})
	started := make(chan struct{})
	g.Go(func() error {
		defer close(pipeDone)
		if !c.waitForMap(gctx) {
			return nil
		}
		c.countCrash(gctx)
		close(started)
		return c.pipe.Run(pctx)
	})
	g.Go(func() error {
		select {
		case <-started:
		case <-gctx.Done():
			return nil
		}
		c.ready.Store(true)
		c.intake.Open()
		c.log.Info("cell ready", "intake", c.IntakeURL(), "admin", c.AdminURL(), "map_version", c.follower.Map().Version())
		c.followQuotas(gctx)
		return nil
	})

	// The leases outlive the pipeline: its work in flight keeps its
	// sessions until it stops, then the leases are given back.
	lctx, stopLeases := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLeases()
	leasesDone := make(chan struct{})
	if c.leaser != nil {
		g.Go(func() error {
			defer close(leasesDone)
			select {
			case <-started:
			case <-gctx.Done():
				return nil
			}
			return c.leaser.Run(lctx)
		})
	} else {
		close(leasesDone)
	}
	g.Go(func() error {
		<-gctx.Done()
		c.shutdown(intakeSrv, adminSrv, stopPipeline, pipeDone)
		stopLeases()
		<-leasesDone
		return nil
	})
	err := g.Wait()
	c.close()
	if err != nil {
		return err
	}
	c.log.Info("cell stopped")
	return nil
}

// shutdown runs the graceful stop, each phase with its own fresh timeout.
func (c *Cell) shutdown(intakeSrv, adminSrv *http.Server, stopPipeline func(), pipeDone <-chan struct{}) {
	c.stopping.Store(true)
	c.ready.Store(false)
	if d := c.cfg.ShutdownDelay; d > 0 {
		// The routers' checks fail from now on; they stop sending here
		// while the intake still takes what they send.
		c.intake.Leaving()
		c.log.Info("cell stopping: health check failing, serving on", "delay", d)
		time.Sleep(d)
	}
	c.intake.Close()
	c.log.Info("cell stopping: intake closed")
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ShutdownTimeout)
	if err := intakeSrv.Shutdown(ctx); err != nil {
		c.log.Warn("intake requests did not finish", "err", err)
		intakeSrv.Close()
	}
	cancel()
	stopPipeline()
	<-pipeDone
	if n := c.pipe.Inflight(); n > 0 {
		// Stuck work the pipeline could not stop: not a clean stop. The
		// journal stays, so that the next start counts a crash for them.
		c.log.Warn("inflight journal kept: the next start counts a crash for the inquiries still in flight", "inflight", n)
	} else if err := c.journal.Close(); err != nil { // a clean stop: the next start finds no crash
		c.log.Warn("inflight journal", "err", err)
	}
	for name, cl := range c.clients {
		if err := cl.Close(); err != nil {
			c.log.Warn("agency sessions close", "agency", name, "err", err)
		}
	}
	if err := c.nc.FlushTimeout(c.cfg.ShutdownTimeout); err != nil {
		c.log.Warn("nats flush", "err", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), c.cfg.ShutdownTimeout)
	if err := adminSrv.Shutdown(ctx); err != nil {
		adminSrv.Close()
	}
	cancel()
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
