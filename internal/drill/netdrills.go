package drill

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/loadtest"
	"github.com/cellkit/cellkit/internal/netlab"
	"github.com/cellkit/cellkit/internal/store"
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
// One piece: a drill script on one timeline (baseline, unplug, kill, return, restart), then the checks of its marks.
func HostLoss(ctx context.Context, c NetConfig) (*loadtest.Result, error) {
	c = c.withDefaults(30 * time.Second)
	end := c.Baseline + c.Fault + c.After
	n, err := newNetRun(&c, end)
	if err != nil {
		return nil, err
	}
	nc, js, err := n.cellJetStream(c.Cell, "")
	if err != nil {
		return nil, err
	}
	leaders, err := streamLeaders(ctx, js)
	nc.Close()
	if err != nil {
		return nil, fmt.Errorf("the leaders of %s's streams: %w", c.Cell, err)
	}
	if c.Instance == "leader" {
		c.Instance = ""
		cell, _ := n.st.Cell(c.Cell)
		for _, in := range cell.Instances {
			if in.NATS == leaders[store.LedgerStream(c.Cell)] {
				c.Instance = in.ID
			}
		}
		if c.Instance == "" {
			return nil, fmt.Errorf("no instance of %s beside the leader of its ledger (leaders %v)", c.Cell, leaders)
		}
	}
	in, err := n.instance()
	if err != nil {
		return nil, err
	}
	var led []string
	for stream, l := range leaders {
		if l == in.NATS {
			led = append(led, stream)
		}
	}
	slices.Sort(led)
	h, err := n.host(in.Host)
	if err != nil {
		return nil, err
	}
	if err := n.watchSessions(ctx); err != nil {
		return nil, err
	}
	wait := startLoad(ctx, n.r)
	var lossAt, backAt, readyAt time.Duration
	electedAt := time.Duration(-1)
	var electionErr error
	elected := make(chan struct{})
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
		c.logf("host %s unplugged and %s, %s killed at %.1fs; %s led %v", in.Host, in.Proc, in.NATS, lossAt.Seconds(), in.NATS, led)
		go func() {
			defer close(elected)
			electedAt, electionErr = n.watchElection(ctx, c.Cell, in.NATS, c.Fault)
		}()
		if err := sleepUntil(ctx, n.r, lossAt+c.Fault); err != nil {
			return err
		}
		<-elected
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
		_ = h.LinkUp() // as above
		return res, fmt.Errorf("drill host-loss: %w", actErr)
	}
	d := &loadtest.Verdict{Name: "host-loss"}
	cells := usersOf(res, lossAt)
	victim := func(u int) bool { return cells[u] == c.Cell }
	checkOthers(d, res, cells, []string{c.Cell}, lossAt, end)
	// The others' tail is held over the loss; from the host's return on,
	// its node and instance restart and catch up on the same two cores as
	// every other cell (in a lab, not in production), which the note
	// shows apart.
	checkOthersP99(d, res, cells, []string{c.Cell}, lossAt, backAt, c.P99Factor)
	others := func(u int) bool { cell := cells[u]; return cell != "" && cell != c.Cell }
	d.Note("other cells' p99 while %s restarts and after: %s (baseline %s)", in.Host,
		msf(loadtest.Window{From: backAt, To: end, Users: others}.Stats(res.Samples).P99),
		msf(loadtest.Window{To: lossAt, Users: others}.Stats(res.Samples).P99))
	early := loadtest.Window{From: lossAt, To: lossAt + c.ErrorWindow, Users: victim}.Stats(res.Samples)
	late := loadtest.Window{From: lossAt + c.ErrorWindow, To: end, Users: victim}.Stats(res.Samples)
	down := loadtest.Window{From: lossAt, To: backAt, Users: victim}.Stats(res.Samples)
	d.Check(c.Cell+" serves while "+in.Host+" is gone: errors after the first "+c.ErrorWindow.String(), late.Errors == 0 && late.N > 0,
		fmt.Sprintf("%d of %d %v", late.Errors, late.N, late.Status), "0")
	// Only the requests in flight on the lost instance fail: those sent
	// once the routers' health checks have taken it out (within 0.7 s on
	// an idle machine; lostBound leaves room for the lab's load) are
	// served, through an election too (the cells wait for a leader:
	// --leader-wait).
	afterLoss := loadtest.Window{From: lossAt + lostBound, To: end, Users: victim}.Stats(res.Samples)
	d.Check(c.Cell+"'s errors for requests sent from "+lostBound.String()+" after the loss", afterLoss.Errors == 0 && afterLoss.N > 0,
		fmt.Sprintf("%d of %d %v", afterLoss.Errors, afterLoss.N, afterLoss.Status), "0")
	switch {
	case electionErr != nil:
		d.Check(c.Cell+"'s streams led again after the loss", false, electionErr.Error(), "within "+c.Fault.String())
	case len(led) > 0:
		election := electedAt - lossAt
		during := loadtest.Window{From: lossAt, To: electedAt, Users: victim}.Stats(res.Samples)
		d.Check(c.Cell+"'s p99 during the election of "+strings.Join(led, ", "), during.N > 0 && during.P99 <= election+time.Second,
			fmt.Sprintf("%s of %d (the election took %s)", msf(during.P99), during.N, msf(election)), "≤ the election + 1 s")
	default:
		d.Note("%s led none of %s's streams: no election", in.NATS, c.Cell)
	}
	// Within the window, the requests in flight on the lost instance fail
	// (a few): reported; those sent from a second after the loss are
	// checked above.
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
	c = c.withDefaults(20 * time.Second)
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
	res, sp, err := n.cutDuringLoad(ctx, "cut-router", "routers cut from "+c.Cell, []*netlab.Host{r1, r2}, cellHosts, nil, nil)
	if err != nil {
		return res, err
	}
	d := &loadtest.Verdict{Name: "cut-router"}
	cutAt, healAt := sp.Cut, sp.Healing
	cells := usersOf(res, cutAt)
	victim := func(u int) bool { return cells[u] == c.Cell }
	checkOthers(d, res, cells, []string{c.Cell}, cutAt, end)
	down := loadtest.Window{From: cutAt, To: healAt, Users: victim}.Stats(res.Samples)
	// In the first second the routers' health checks find the cut: the
	// requests in flight then are answered 504 (they may have been taken),
	// and a few are answered across the cut as its routes go in.
	// A request answered once the heal began may be served (202): the
	// window ends with the answers before it.
	found := loadtest.Window{From: cutAt + FoundBound, To: healAt, Users: victim, AnsweredBy: healAt}.Stats(res.Samples)
	d.Check(c.Cell+"'s users from "+FoundBound.String()+" after the cut: 503", found.N > 0 && found.Status["503"] == found.N,
		fmt.Sprintf("%d of %d %v", found.Status["503"], found.N, found.Status), "all")
	d.Check(c.Cell+"'s users while cut: timeouts", down.Timeouts == 0, fmt.Sprintf("%d of %d %v", down.Timeouts, down.N, down.Status), "0")
	d.Check(c.Cell+"'s users while cut: p99", down.P99 <= c.DownP99, fmt.Sprintf("%s (p50 %s)", msf(down.P99), msf(down.P50)), "≤ "+msf(c.DownP99))
	d.Check(c.Cell+"'s users while cut: Retry-After on 503", down.NoRetryAfter == 0, fmt.Sprintf("%d without", down.NoRetryAfter), "0 without")
	checkRecovery(d, res, c.Cell, victim, sp.Healed, end, c.Recover)
	n.finishNet(ctx, d, res)
	return res, nil
}

// checkRecovery asserts that the users hit see no error later than
// within after the heal, and that they are served again: at least five
// seconds of load without an error before the load ends (a drill whose
// load ends sooner than within after the heal needs its errors to end
// that much sooner).
func checkRecovery(d *loadtest.Verdict, res *loadtest.Result, cell string, users func(int) bool, healAt, end, within time.Duration) {
	last := lastError(res, users, healAt, end)
	bound := min(within, end-healAt-5*time.Second)
	clean := loadtest.Window{From: max(last, healAt), To: end, Users: users}.Stats(res.Samples)
	after := loadtest.Window{From: healAt, To: end, Users: users}.Stats(res.Samples)
	d.Check(cell+" recovered after the heal", last-healAt <= bound && clean.OK > 0,
		fmt.Sprintf("last error %s after the heal; %d of %d served from the heal on", sinceText(last, healAt), after.OK, after.N), "errors end within "+bound.Round(100*time.Millisecond).String())
}

// CutConsulRouter: router1, which takes the load, is cut from Consul; a
// map change (users pinned across cells) is made meanwhile. See
// cutConsul.
func CutConsulRouter(ctx context.Context, c NetConfig) (*loadtest.Result, error) {
	return cutConsul(ctx, c, "cut-consul-router")
}

// CutConsulCell: every host of a cell is cut from Consul; a map change
// moving users into and out of it is made meanwhile. See cutConsul.
func CutConsulCell(ctx context.Context, c NetConfig) (*loadtest.Result, error) {
	return cutConsul(ctx, c, "cut-consul-cell")
}

// cutConsul cuts router1 (cut-consul-router) or the hosts of c.Cell
// (cut-consul-cell) from Consul. Two seconds into the cut, Moves users of
// c.Cell are pinned to another cell and as many of that cell to c.Cell
// (cellctl override set, in Consul). Both sides keep serving on the last
// map they had: the users not moved see no error. Nothing is misrouted:
// once every process not cut has the change, no moved user is accepted by
// its old cell (the cells fence by the newest map they know; a router on
// a stale map gets 421 and answers 503). After the heal the change
// reaches the side that was cut within Recover, and the moved users are
// served by their new cells.
// One piece: a drill script on one timeline (cut, change the map, heal), then its checks.
func cutConsul(ctx context.Context, c NetConfig, name string) (*loadtest.Result, error) {
	c = c.withDefaults(40 * time.Second) // the moves take seconds each: the change lands well inside the cut
	end := c.Baseline + c.Fault + c.After
	n, err := newNetRun(&c, end)
	if err != nil {
		return nil, err
	}
	consul, err := n.host("consul")
	if err != nil {
		return nil, err
	}
	var side []*netlab.Host
	// watch: the admin addresses ("router:ADDR", "cell:ADDR") of the cut
	// side, which must see the change after the heal; seen: those of the
	// others, which see it during the cut.
	var watch, seen []string
	r1, _ := n.st.Process("router1")
	if name == "cut-consul-router" {
		h, err := n.host("router1")
		if err != nil {
			return nil, err
		}
		side = []*netlab.Host{h}
		watch = append(watch, "router:"+r1.Addrs["admin"])
	} else {
		if side, err = n.cellHosts(c.Cell); err != nil {
			return nil, err
		}
		seen = append(seen, "router:"+r1.Addrs["admin"])
	}
	for _, cl := range n.st.CellSet {
		for _, in := range cl.Instances {
			p, _ := n.st.Process(in.Proc)
			if cl.ID == c.Cell && name == "cut-consul-cell" {
				watch = append(watch, "cell:"+p.Addrs["admin"])
			} else {
				seen = append(seen, "cell:"+p.Addrs["admin"])
			}
		}
	}
	// hasMap reports whether every process of addrs serves with version
	// or newer.
	hasMap := func(addrs []string, version int64) bool {
		for _, w := range addrs {
			kind, addr, _ := strings.Cut(w, ":")
			var v int64
			var err error
			if kind == "router" {
				v, err = n.routerMap(ctx, addr)
			} else {
				v, err = n.cellMap(ctx, addr)
			}
			if err != nil || v < version {
				return false
			}
		}
		return true
	}
	// The users to move: of the load's users, Moves of c.Cell and Moves
	// of another cell, by the map in Consul now.
	m, err := loadMap(ctx, n.st.Registry, n.st.ConsulToken)
	if err != nil {
		return nil, err
	}
	other := ""
	for _, cl := range n.st.CellSet {
		if cl.ID != c.Cell {
			other = cl.ID
			break
		}
	}
	if other == "" {
		return nil, fmt.Errorf("drill %s needs two cells", name)
	}
	moves := map[int]string{} // user → its new cell
	from := map[int]string{}  // user → its old cell
	out, in := 0, 0
	for u := 0; u < c.Users && (out < c.Moves || in < c.Moves); u++ {
		switch owner := m.Lookup(loadtest.UserID(u)).Cell; {
		case owner == c.Cell && out < c.Moves:
			moves[u], from[u] = other, owner
			out++
		case owner == other && in < c.Moves:
			moves[u], from[u] = c.Cell, owner
			in++
		}
	}
	defer func() {
		for u := range moves {
			_, _ = n.cellctl(context.WithoutCancel(ctx), "override", "clear", loadtest.UserID(u)) // a cleanup; the next drill's map check would show one left
		}
	}()
	var changeAt, seenAt time.Duration
	var version int64
	change := func(cutAt time.Duration) error {
		if err := sleepUntil(ctx, n.r, cutAt+2*time.Second); err != nil {
			return err
		}
		for _, u := range slices.Sorted(maps.Keys(moves)) {
			if _, err := n.cellctl(ctx, "override", "set", loadtest.UserID(u), moves[u]); err != nil {
				return err
			}
		}
		changeAt = n.r.Elapsed()
		n.r.Mark(fmt.Sprintf("%d users moved", len(moves)))
		m, err := loadMap(ctx, n.st.Registry, n.st.ConsulToken)
		if err != nil {
			return err
		}
		version = m.Version()
		c.logf("%d users moved at %.1fs (map version %d)", len(moves), changeAt.Seconds(), version)
		// Until the side that is not cut has the change, the old owners
		// still own the moved users there: fencing is by the newest map a
		// process knows.
		for seenAt = -1; seenAt < 0 && n.r.Elapsed() < changeAt+10*time.Second; {
			if hasMap(seen, version) {
				seenAt = n.r.Elapsed()
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if seenAt < 0 {
			return fmt.Errorf("the side not cut does not have map version %d 10 s after the change", version)
		}
		return nil
	}
	// After the heal, how long until the cut side routes or fences with
	// the new map.
	applied := time.Duration(-1)
	waitApplied := func(healAt time.Duration) {
		for t0 := time.Now(); time.Since(t0) < c.Recover; time.Sleep(100 * time.Millisecond) {
			if hasMap(watch, version) {
				applied = n.r.Elapsed() - healAt
				return
			}
		}
	}
	res, sp, err := n.cutDuringLoad(ctx, name, name, side, []*netlab.Host{consul}, change, waitApplied)
	if err != nil {
		return res, err
	}
	d := &loadtest.Verdict{Name: name}
	cutAt := sp.Cut
	moved := func(u int) bool { _, ok := moves[u]; return ok }
	stay := func(u int) bool { return !moved(u) }
	all := loadtest.Window{From: cutAt, To: end, Users: stay}.Stats(res.Samples)
	d.Check("users not moved: errors from the cut on", all.Errors == 0 && all.N > 0, fmt.Sprintf("%d of %d %v", all.Errors, all.N, all.Status), "0")
	// Misrouted: accepted by the old cell after every process not cut
	// had the change.
	d.Note("the change reached every process not cut %s after the last move", sinceText(seenAt, changeAt))
	misrouted, movedOK, movedErr := 0, 0, 0
	for _, s := range res.Samples {
		if !moved(s.User) || s.At < seenAt {
			continue
		}
		if s.Status == http.StatusAccepted {
			movedOK++
			if s.Cell == from[s.User] {
				misrouted++
				if misrouted <= 3 {
					d.Note("misrouted: %s (moved %s → %s) accepted by %s at %.1fs as %s", loadtest.UserID(s.User), from[s.User], moves[s.User], s.Cell, s.At.Seconds(), s.ID)
				}
			}
		} else {
			movedErr++
		}
	}
	d.Check("moved users accepted by their old cell after the change", misrouted == 0,
		fmt.Sprintf("%d (of %d accepted, %d refused while the cut side had the old map)", misrouted, movedOK, movedErr), "0")
	d.Check("the change applied on the cut side after the heal", applied >= 0,
		fmt.Sprintf("after %s", sinceText(applied, 0)), "within "+c.Recover.String())
	checkRecovery(d, res, "moved users", moved, sp.Healed, end, c.Recover)
	n.finishNet(ctx, d, res)
	return res, nil
}

// CutNATS: one node of a cell's JetStream cluster is cut off from the
// others (blackhole routes between its host and theirs); the routers
// still reach the instance beside it, whose writes now fail. The cell
// keeps accepting on its other instances (quorum): the router takes the
// cut-off instance out of rotation after its first failures, and from
// ErrorWindow on the cell's users see no errors but those of the
// router's probes of it (among the requests answered before the heal);
// nothing is lost; after the heal the node catches
// up and the cell serves again within Recover. The heal itself costs the
// cell an election: alone, the node kept starting elections it could not
// win, its Raft term grew, and when it is back every leader of a group
// it is in steps down (nats-server's Raft has no pre-vote).
func CutNATS(ctx context.Context, c NetConfig) (*loadtest.Result, error) {
	c = c.withDefaults(30 * time.Second)
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
	var peers []*netlab.Host
	cell, _ := n.st.Cell(c.Cell)
	for _, o := range cell.Instances {
		if o.ID != in.ID {
			p, err := n.host(o.Host)
			if err != nil {
				return nil, err
			}
			peers = append(peers, p)
		}
	}
	res, sp, err := n.cutDuringLoad(ctx, "cut-nats", in.NATS+" cut off from its peers", []*netlab.Host{h}, peers, nil, nil)
	if err != nil {
		return res, err
	}
	d := &loadtest.Verdict{Name: "cut-nats"}
	cutAt, healAt := sp.Cut, sp.Healing
	cells := usersOf(res, cutAt)
	victim := func(u int) bool { return cells[u] == c.Cell }
	checkOthers(d, res, cells, []string{c.Cell}, cutAt, end)
	early := loadtest.Window{From: cutAt, To: cutAt + c.ErrorWindow, Users: victim}.Stats(res.Samples)
	// Answered before the heal: a request still in flight then may meet
	// the heal's elections, which the recovery check below accounts for.
	late := loadtest.Window{From: cutAt + c.ErrorWindow, To: healAt, AnsweredBy: healAt, Users: victim}.Stats(res.Samples)
	straddling := loadtest.Window{From: cutAt + c.ErrorWindow, To: healAt, Users: victim}.Stats(res.Samples)
	// From the window on, each event loop of router1 tries the ejected
	// instance once per EjectFor (5 s): at most that many errors.
	probes := 2 * int((healAt-cutAt-c.ErrorWindow)/(5*time.Second)+1)
	d.Check(c.Cell+" keeps accepting: errors after the first "+c.ErrorWindow.String()+", answered before the heal", late.N > 0 && late.Errors <= probes,
		fmt.Sprintf("%d of %d %v", late.Errors, late.N, late.Status), fmt.Sprintf("≤ %d (the router's probes of the ejected instance)", probes))
	d.Note("%s in the first %s: %d errors of %d %v", c.Cell, c.ErrorWindow, early.Errors, early.N, early.Status)
	d.Note("%s sent after the first %s, still in flight at the heal: %d errors of %d", c.Cell, c.ErrorWindow,
		straddling.Errors-late.Errors, straddling.N-late.N)
	checkRecovery(d, res, c.Cell, victim, sp.Healed, end, c.Recover)
	if lag, err := n.caughtUp(ctx, c.Cell, c.Recover); err != nil {
		d.Check(in.NATS+" caught up after the heal", false, err.Error(), "every replica current")
	} else {
		d.Check(in.NATS+" caught up after the heal", true, "every replica current "+lag.Round(100*time.Millisecond).String()+" after the load", "within "+c.Recover.String())
	}
	n.finishNet(ctx, d, res)
	return res, nil
}

// CutAgency: every host of a cell is cut from the agency simulator. The
// cell keeps taking inquiries (its intake does not call the agencies);
// its agency breakers open, so inquiries fail fast (failed, reason
// recorded) or wait within the age budget, as designed; none is lost;
// the other cells are untouched; after the heal new inquiries of the cell
// are done again within Recover.
func CutAgency(ctx context.Context, c NetConfig) (*loadtest.Result, error) {
	c = c.withDefaults(20 * time.Second)
	end := c.Baseline + c.Fault + c.After
	n, err := newNetRun(&c, end)
	if err != nil {
		return nil, err
	}
	agency, err := n.host("agency")
	if err != nil {
		return nil, err
	}
	cellHosts, err := n.cellHosts(c.Cell)
	if err != nil {
		return nil, err
	}
	res, sp, err := n.cutDuringLoad(ctx, "cut-agency", c.Cell+" cut from the agency", cellHosts, []*netlab.Host{agency}, nil, nil)
	if err != nil {
		return res, err
	}
	d := &loadtest.Verdict{Name: "cut-agency"}
	cutAt, healAt := sp.Cut, sp.Healing
	cells := usersOf(res, cutAt)
	victim := func(u int) bool { return cells[u] == c.Cell }
	checkOthers(d, res, cells, []string{c.Cell}, cutAt, end)
	during := loadtest.Window{From: cutAt, To: healAt, Users: victim}.Stats(res.Samples)
	d.Check(c.Cell+" intake while cut: 202 or 503 with Retry-After", during.N > 0 && during.OK+during.Status["503"] == during.N && during.NoRetryAfter == 0,
		fmt.Sprintf("%v", during.Status), "no other answer")
	c.logf("verifying %d accepted ids...", countAccepted(res.Samples))
	outcomes := n.outcomes(ctx, res, victim)
	// Recovery: from the heal, the time after which every inquiry the cell
	// accepted ended done.
	var cutDone, cutFailed, afterDone int
	lastNotDone := time.Duration(-1)
	for _, o := range outcomes {
		switch {
		case o.at >= cutAt && o.at < healAt && o.status == "done":
			cutDone++
		case o.at >= cutAt && o.at < healAt && o.status == "failed":
			cutFailed++
		case o.at >= sp.Healed && o.status != "done":
			lastNotDone = max(lastNotDone, o.at)
		}
	}
	for _, o := range outcomes {
		if o.at > max(lastNotDone, sp.Healed) && o.status == "done" {
			afterDone++
		}
	}
	d.Check(c.Cell+" inquiries accepted while cut: ended", cutDone+cutFailed > 0, fmt.Sprintf("%d failed fast or timed out, %d done after waiting", cutFailed, cutDone), "done or failed")
	d.Check(c.Cell+" inquiries done again after the heal", afterDone > 0 && lastNotDone-sp.Healed <= c.Recover,
		fmt.Sprintf("the last one not done accepted %s after the heal; %d done after it", sinceText(lastNotDone, sp.Healed), afterDone), "within "+c.Recover.String())
	n.finishNet(ctx, d, res)
	return res, nil
}

// outcome is an accepted inquiry's final status.
type outcome struct {
	at     time.Duration
	status string
}

// outcomes polls the final status of the accepted inquiries of users
// (through router1), until VerifyWithin.
func (n *netRun) outcomes(ctx context.Context, res *loadtest.Result, users func(int) bool) []outcome {
	var ids []string
	for _, s := range res.Samples {
		if s.ID != "" && !s.Read && users(s.User) {
			ids = append(ids, s.ID)
		}
	}
	final := settled(ctx, n.hc, n.st.Router, n.st.APIKey, ids, n.c.VerifyWithin)
	var out []outcome
	for _, s := range res.Samples {
		if s.ID != "" && !s.Read && users(s.User) {
			out = append(out, outcome{at: s.At, status: string(final[s.ID].Status)})
		}
	}
	return out
}
