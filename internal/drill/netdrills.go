package drill

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellkit/cellkit/internal/loadtest"
	"github.com/cellkit/cellkit/internal/netlab"
)

// HostLoss: one instance host of a cell goes away, as in a power loss:
// unplugged first (nothing it sends on dying reaches anyone, so the
// agencies see no FIN either), then its cell instance and JetStream node
// are killed. After Fault it comes back: plugged in, its node restarted
// (it catches up from the others), its instance restarted. The cell keeps
// serving on its other instances: errors only for requests that were in
// flight on the lost one, within ErrorWindow; the other cells untouched;
// nothing lost or duplicated; the agencies never over their limits while
// the lost instance's share moves to the survivors.
func HostLoss(ctx context.Context, c NetConfig) (*loadtest.Result, error) {
	c.defaults(30 * time.Second)
	end := c.Baseline + c.Fault + c.After
	n, err := newNetRun(&c, end)
	if err != nil {
		return nil, err
	}
	in, err := n.instance()
	if err != nil {
		return nil, err
	}
	h, err := n.host(in.Host)
	if err != nil {
		return nil, err
	}
	if err := n.watchSessions(ctx); err != nil {
		return nil, err
	}
	wait := startLoad(ctx, n.r)
	var lossAt, backAt, readyAt time.Duration
	actErr := func() error {
		if err := sleepUntil(ctx, n.r, c.Baseline); err != nil {
			return err
		}
		if err := h.LinkDown(); err != nil {
			return err
		}
		lossAt = n.r.Elapsed()
		n.r.Mark(in.Host + " lost")
		for _, p := range []string{in.Proc, in.NATS} {
			if err := n.st.Kill(ctx, p); err != nil {
				return err
			}
		}
		c.logf("host %s unplugged and %s, %s killed at %.1fs", in.Host, in.Proc, in.NATS, lossAt.Seconds())
		if err := sleepUntil(ctx, n.r, lossAt+c.Fault); err != nil {
			return err
		}
		if err := h.LinkUp(); err != nil {
			return err
		}
		backAt = n.r.Elapsed()
		n.r.Mark(in.Host + " back")
		node, err := n.st.Restart(n.lab, in.NATS)
		if err != nil {
			return err
		}
		if err := n.waitReady(ctx, 60*time.Second, node); err != nil {
			return err
		}
		proc, err := n.st.Restart(n.lab, in.Proc)
		if err != nil {
			return err
		}
		if err := n.waitReady(ctx, 60*time.Second, proc); err != nil {
			return err
		}
		readyAt = n.r.Elapsed()
		n.r.Mark(in.Proc + " ready")
		c.logf("host %s back at %.1fs, %s ready at %.1fs", in.Host, backAt.Seconds(), in.Proc, readyAt.Seconds())
		return nil
	}()
	res, err := wait()
	if err != nil {
		return nil, err
	}
	if actErr != nil {
		h.LinkUp()
		return res, fmt.Errorf("drill host-loss: %w", actErr)
	}
	d := &loadtest.Verdict{Name: "host-loss"}
	cells := usersOf(res, lossAt)
	victim := func(u int) bool { return cells[u] == c.Cell }
	checkOthers(d, res, cells, []string{c.Cell}, lossAt, end)
	early := loadtest.Window{From: lossAt, To: lossAt + c.ErrorWindow, Users: victim}.Stats(res.Samples)
	late := loadtest.Window{From: lossAt + c.ErrorWindow, To: end, Users: victim}.Stats(res.Samples)
	down := loadtest.Window{From: lossAt, To: backAt, Users: victim}.Stats(res.Samples)
	d.Check(c.Cell+" serves while "+in.Host+" is gone: errors after the first "+c.ErrorWindow.String(), late.Errors == 0 && late.N > 0,
		fmt.Sprintf("%d of %d %v", late.Errors, late.N, late.Status), "0")
	// Within the window, the requests in flight on the lost instance fail
	// (a few, at the router's 5 s call timeout), and, when the lost host
	// led one of the cell's streams, those of the election that follows
	// (see NetConfig.ErrorWindow): reported, not bounded further.
	d.Note("%s in the first %s: %d errors of %d %v", c.Cell, c.ErrorWindow, early.Errors, early.N, early.Status)
	d.Note("%s while %s is gone: %d requests, p50 %s, p99 %s", c.Cell, in.Host, down.N, msf(down.P50), msf(down.P99))
	d.Note("%s back after %s; its node and instance ready after %s", in.Host, c.Fault, sinceText(readyAt, backAt))
	if lag, err := n.caughtUp(ctx, c.Cell, c.Recover); err != nil {
		d.Check(in.NATS+" caught up with the cell's streams", false, err.Error(), "every replica current")
	} else {
		d.Check(in.NATS+" caught up with the cell's streams", true, "every replica current after "+lag.Round(100*time.Millisecond).String(), "within "+c.Recover.String())
	}
	n.finishNet(ctx, d, res)
	return res, nil
}

// CutRouter: blackhole routes between both routers and every host of a
// cell. That cell's users get a fast 503 (p99 within DownP99, far below
// any client timeout); the other cells are untouched; after the heal the
// cell serves again within Recover.
func CutRouter(ctx context.Context, c NetConfig) (*loadtest.Result, error) {
	c.defaults(20 * time.Second)
	end := c.Baseline + c.Fault + c.After
	n, err := newNetRun(&c, end)
	if err != nil {
		return nil, err
	}
	cellHosts, err := n.cellHosts(c.Cell)
	if err != nil {
		return nil, err
	}
	r1, err := n.host("router1")
	if err != nil {
		return nil, err
	}
	r2, err := n.host("router2")
	if err != nil {
		return nil, err
	}
	if err := n.watchSessions(ctx); err != nil {
		return nil, err
	}
	wait := startLoad(ctx, n.r)
	var cutAt, healAt time.Duration
	var heal func() error
	actErr := func() error {
		if err := sleepUntil(ctx, n.r, c.Baseline); err != nil {
			return err
		}
		if heal, err = cut([]*netlab.Host{r1, r2}, cellHosts); err != nil {
			return err
		}
		cutAt = n.r.Elapsed()
		n.r.Mark("routers cut from " + c.Cell)
		c.logf("routers cut from %s at %.1fs", c.Cell, cutAt.Seconds())
		if err := sleepUntil(ctx, n.r, cutAt+c.Fault); err != nil {
			return err
		}
		err := heal()
		healAt = n.r.Elapsed()
		n.r.Mark("healed")
		c.logf("healed at %.1fs", healAt.Seconds())
		return err
	}()
	res, err := wait()
	if heal != nil && healAt == 0 {
		heal()
	}
	if err != nil {
		return nil, err
	}
	if actErr != nil {
		return res, fmt.Errorf("drill cut-router: %w", actErr)
	}
	d := &loadtest.Verdict{Name: "cut-router"}
	cells := usersOf(res, cutAt)
	victim := func(u int) bool { return cells[u] == c.Cell }
	checkOthers(d, res, cells, []string{c.Cell}, cutAt, end)
	down := loadtest.Window{From: cutAt, To: healAt, Users: victim}.Stats(res.Samples)
	d.Check(c.Cell+"'s users while cut: 503", down.N > 0 && down.Status["503"] == down.N,
		fmt.Sprintf("%d of %d %v", down.Status["503"], down.N, down.Status), "all")
	d.Check(c.Cell+"'s users while cut: p99", down.P99 <= c.DownP99, fmt.Sprintf("%s (p50 %s)", msf(down.P99), msf(down.P50)), "≤ "+msf(c.DownP99))
	d.Check(c.Cell+"'s users while cut: Retry-After on 503", down.NoRetryAfter == 0, fmt.Sprintf("%d without", down.NoRetryAfter), "0 without")
	checkRecovery(d, res, c.Cell, victim, healAt, end, c.Recover)
	n.finishNet(ctx, d, res)
	return res, nil
}

// checkRecovery asserts that the users hit see no error later than
// within after the heal, and that they are served again.
func checkRecovery(d *loadtest.Verdict, res *loadtest.Result, cell string, users func(int) bool, healAt, end, within time.Duration) {
	last := lastError(res, users, healAt, end)
	after := loadtest.Window{From: healAt, To: end, Users: users}.Stats(res.Samples)
	d.Check(cell+" recovered after the heal", last-healAt <= within && after.OK > 0,
		fmt.Sprintf("last error %s after the heal; %d of %d served from the heal on", sinceText(last, healAt), after.OK, after.N), "errors end within "+within.String())
}

// caughtUp waits until every stream of the cell's JetStream has all its
// replicas current, and says how long it took.
func (n *netRun) caughtUp(ctx context.Context, cell string, within time.Duration) (time.Duration, error) {
	tok, err := os.ReadFile(n.st.NATSTokenFile)
	if err != nil {
		return 0, err
	}
	var urls []string
	for _, p := range n.st.Processes {
		if p.Addrs["cell"] == cell && p.Addrs["nats"] != "" {
			urls = append(urls, "nats://"+p.Addrs["nats"])
		}
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.Token(strings.TrimSpace(string(tok))), nats.Timeout(2*time.Second))
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	var last string
	for time.Since(t0) < within {
		last = ""
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		streams := js.ListStreams(lctx)
		count := 0
		for si := range streams.Info() {
			count++
			if si.Cluster == nil {
				continue
			}
			if si.Cluster.Leader == "" {
				last = si.Config.Name + " has no leader"
			}
			for _, p := range si.Cluster.Replicas {
				if !p.Current || p.Offline {
					last = fmt.Sprintf("%s: replica %s not current (lag %d)", si.Config.Name, p.Name, p.Lag)
				}
			}
			if len(si.Cluster.Replicas)+1 < si.Config.Replicas {
				last = fmt.Sprintf("%s: %d of %d replicas", si.Config.Name, len(si.Cluster.Replicas)+1, si.Config.Replicas)
			}
		}
		if err := streams.Err(); err != nil {
			last = err.Error()
		}
		cancel()
		if last == "" && count > 0 {
			return time.Since(t0), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return 0, fmt.Errorf("not within %v: %s", within, last)
}
