package drill

import (
	"context"
	"errors"
	"fmt"
	"github.com/cellkit/cellkit/internal/api"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/loadtest"
	"github.com/cellkit/cellkit/internal/netlab"
	"github.com/cellkit/cellkit/internal/netlab/netstack"
)

// The partition drills run on the network lab (internal/netlab/netstack):
// every process on a host of its own, faults made by unplugging a host or
// by blackhole routes between hosts. The load comes from this machine's
// root namespace through router1, as in the local drills. Each drill
// checks, besides its own promises, that no accepted inquiry was lost or
// duplicated and that the agencies never saw more sessions than their
// limits (their peak and their refusals, sampled throughout).

// NetConfig is one drill on the network lab. Zero values mean the defaults
// in brackets (DefaultNetConfig).
type NetConfig struct {
	// Stack is the running stack; nil means the drill brings one up in a
	// temporary directory and takes it down at the end.
	Stack *netstack.Stack
	// Bin holds the binaries for a stack the drill brings up [bin].
	Bin string
	// Cells and Instances size a stack the drill brings up [3, 3].
	Cells, Instances int
	// Rate is the constant request rate through router1 [100/s].
	Rate float64
	// Users as in loadtest.Config [200].
	Users int
	// Cell is the cell the fault hits [c2]; Instance the instance of it
	// (host-loss, cut-nats, freeze-instance) [i1]; for host-loss "leader"
	// is the instance beside the node that leads the cell's ledger
	// (its loss costs an election).
	Cell, Instance string
	// Baseline is the load before the fault [15s]; Fault how long it lasts
	// [20s; host-loss 30s]; After the load after the heal [25s].
	Baseline, Fault, After time.Duration
	// ErrorWindow bounds, from the fault, when the hit cell's users may
	// still see errors (host-loss, cut-nats) [15s]. Requests in flight on
	// the instance that went away fail (the routers' health checks take it
	// out within a second). When the host led the cell's streams, the
	// cell cannot write until the others elect a leader: nats-server's Raft
	// waits 4–9 s (not configurable) after its last heartbeat, and the
	// cell's new inquiries wait for it (--leader-wait) rather than fail.
	ErrorWindow time.Duration
	// P99Factor bounds the other cells' p99 from the fault on against
	// their baseline, pooled (host-loss, freeze-instance) [1.2].
	P99Factor float64
	// DownP99 bounds the p99 of the cut cell's users (cut-router) [1.5s:
	// the router's 1 s UnackedTimeout for requests written on a kept-alive
	// connection into the cut, the rest answered at once by its breaker].
	DownP99 time.Duration
	// Recover bounds the time from the heal to the last error of the
	// users the fault hit, and to a map change applied everywhere [30s:
	// a JetStream node that rejoins its cluster after a cut forces an
	// election in every group it is in, see CutNATS].
	Recover time.Duration
	// Moves is how many users a consul cut drill moves each way [2]: each
	// move is a cellctl run, 1 to 4 s on this machine under the load.
	Moves int
	// VerifyWithin bounds the polling of accepted ids [120s].
	VerifyWithin time.Duration
	// Replays is how many accepted requests are re-sent with their
	// Idempotency-Key [300].
	Replays int
	// Progress gets the progress lines (nil: none).
	Progress io.Writer
}

// DefaultNetConfig returns the defaults; Fault is left zero: its default
// depends on the drill.
func DefaultNetConfig() NetConfig {
	return NetConfig{
		Bin: "bin", Cells: 3, Instances: 3, Rate: 100, Users: 200, Cell: "c2", Instance: "i1",
		Baseline: 15 * time.Second, After: 25 * time.Second, ErrorWindow: 15 * time.Second,
		DownP99: 1500 * time.Millisecond, Recover: 30 * time.Second, Moves: 2, P99Factor: 1.2,
		VerifyWithin: 120 * time.Second, Replays: 300,
	}
}

// withDefaults fills the zero fields of c from DefaultNetConfig, field by
// field; Fault from fault, the drill's own.
func (c NetConfig) withDefaults(fault time.Duration) NetConfig {
	d := DefaultNetConfig()
	or(&c.Baseline, d.Baseline)
	or(&c.Fault, fault)
	or(&c.After, d.After)
	or(&c.ErrorWindow, d.ErrorWindow)
	or(&c.DownP99, d.DownP99)
	or(&c.Recover, d.Recover)
	or(&c.VerifyWithin, d.VerifyWithin)
	or(&c.Bin, d.Bin)
	or(&c.Cells, d.Cells)
	or(&c.Instances, d.Instances)
	or(&c.Rate, d.Rate)
	or(&c.Users, d.Users)
	or(&c.Cell, d.Cell)
	or(&c.Instance, d.Instance)
	or(&c.Moves, d.Moves)
	or(&c.P99Factor, d.P99Factor)
	or(&c.Replays, d.Replays)
	return c
}

func (c *NetConfig) logf(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "drill: "+format+"\n", args...)
	}
}

// NetDrills are the drills on the network lab, by name.
var NetDrills = map[string]func(context.Context, NetConfig) (*loadtest.Result, error){
	"host-loss":         HostLoss,
	"freeze-instance":   FreezeInstance,
	"cut-router":        CutRouter,
	"cut-consul-router": CutConsulRouter,
	"cut-consul-cell":   CutConsulCell,
	"cut-nats":          CutNATS,
	"cut-agency":        CutAgency,
	"quota-routers":     QuotaRouters,
}

// netRun is a drill in progress: the stack, its lab and the load.
type netRun struct {
	c     *NetConfig
	st    *netstack.Stack
	lab   *netlab.Lab
	r     *loadtest.Runner
	hc    *http.Client
	admin string // the admin bearer token

	sessions *sessionWatch
}

func newNetRun(c *NetConfig, total time.Duration) (*netRun, error) {
	st := c.Stack
	if _, ok := st.Cell(c.Cell); !ok {
		return nil, fmt.Errorf("no cell %q in the stack", c.Cell)
	}
	lab, err := st.OpenLab(netlab.Options{})
	if err != nil {
		return nil, err
	}
	tok, err := os.ReadFile(st.AdminTokenFile)
	if err != nil {
		return nil, err
	}
	quietDisk()
	n := &netRun{c: c, st: st, lab: lab, hc: &http.Client{Timeout: 3 * time.Second}, admin: strings.TrimSpace(string(tok))}
	return n, n.newLoad(total)
}

// newLoad makes the drill's load of total, its clock starting now: Rate/s
// through router1 with the stack's key.
func (n *netRun) newLoad(total time.Duration) error {
	c := n.c
	r, err := loadtest.NewRunner(loadtest.Config{
		Target: n.st.Router, Key: n.st.APIKey, Steps: []loadtest.Step{{Rate: c.Rate, For: total}},
		// As many senders as the timeout holds at the rate: a cell whose
		// users wait out an election (up to 10 s) must not hold back the
		// requests for the other cells (the generator's latency counts a
		// send's delay).
		Users: c.Users, KeepSamples: true, Timeout: 15 * time.Second, MaxInflight: max(128, int(15*c.Rate)),
	}, loadtest.Options{Progress: c.Progress})
	n.r = r
	return err
}

// host is the lab's host named name.
func (n *netRun) host(name string) (*netlab.Host, error) {
	h, ok := n.lab.Host(name)
	if !ok {
		return nil, fmt.Errorf("no host %q in the lab", name)
	}
	return h, nil
}

// cellHosts are the hosts of a cell's instances.
func (n *netRun) cellHosts(cell string) ([]*netlab.Host, error) {
	c, ok := n.st.Cell(cell)
	if !ok {
		return nil, fmt.Errorf("no cell %q in the stack", cell)
	}
	var hs []*netlab.Host
	for _, in := range c.Instances {
		h, err := n.host(in.Host)
		if err != nil {
			return nil, err
		}
		hs = append(hs, h)
	}
	return hs, nil
}

// instance is the named instance of the drill's cell.
func (n *netRun) instance() (netstack.Instance, error) {
	c, _ := n.st.Cell(n.c.Cell)
	for _, in := range c.Instances {
		if in.ID == n.c.Instance {
			return in, nil
		}
	}
	return netstack.Instance{}, fmt.Errorf("cell %s has no instance %q", n.c.Cell, n.c.Instance)
}

// cut cuts every host of as from every host of bs, the pairs at once
// (each pair is two ip commands: one after the other, a cut of 2 × 3
// hosts took 1.5 s on a loaded machine, and the pairs not yet cut carry
// traffic meanwhile). heal heals the pairs cut, at once too.
func cut(as, bs []*netlab.Host) (heal func() error, err error) {
	var pairs [][2]*netlab.Host
	for _, a := range as {
		for _, b := range bs {
			pairs = append(pairs, [2]*netlab.Host{a, b})
		}
	}
	each := func(f func(a, b *netlab.Host) error) error {
		errs := make([]error, len(pairs))
		var wg sync.WaitGroup
		for i, p := range pairs {
			wg.Go(func() { errs[i] = f(p[0], p[1]) })
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	heal = func() error { return each((*netlab.Host).Heal) }
	if err := each((*netlab.Host).Cut); err != nil {
		return heal, errors.Join(err, heal())
	}
	return heal, nil
}

// waitReady waits until the named processes answer their readiness URL.
func (n *netRun) waitReady(ctx context.Context, within time.Duration, children ...*devstack.Child) error {
	return devstack.WaitReady(ctx, n.hc, within, children...)
}

// cellctl runs bin/cellctl against the stack's registry with the
// processes' Consul token.
func (n *netRun) cellctl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(n.c.Bin, "cellctl"), append([]string{"--registry", n.st.Registry}, args...)...)
	cmd.Env = append(devstack.ChildEnv(), "CONSUL_HTTP_TOKEN="+n.st.ConsulToken)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("cellctl %s: %v: %s", strings.Join(args, " "), err, devstack.Tail(string(out), 3))
	}
	return string(out), nil
}

// routerMap is the version of the map a router routes with (its /readyz).
func (n *netRun) routerMap(ctx context.Context, adminAddr string) (int64, error) {
	var rd struct {
		MapVersion int64 `json:"map_version"`
	}
	err := n.getJSON(ctx, "http://"+adminAddr+"/readyz", &rd)
	return rd.MapVersion, err
}

// cellMap is the version of the map a cell instance fences with (its
// admin status).
func (n *netRun) cellMap(ctx context.Context, adminAddr string) (int64, error) {
	var st struct {
		Map struct {
			Version int64 `json:"version"`
		} `json:"map"`
	}
	err := n.getJSON(ctx, "http://"+adminAddr+api.PathCellStatus, &st)
	return st.Map.Version, err
}

func (n *netRun) getJSON(ctx context.Context, url string, v any) error {
	return requestJSON(ctx, n.hc, http.MethodGet, url, n.admin, nil, v)
}

// sessionWatch samples the agencies' open sessions every 100 ms while a
// drill runs; the simulator's own peak and refusals are read at the end.
type sessionWatch struct {
	mu      sync.Mutex
	max     map[string]int64
	limit   map[string]int
	refused map[string]int64 // at the start
	stop    context.CancelFunc
	done    chan struct{}
}

type agencyStatus struct {
	Agency string `json:"agency"`
	Config struct {
		MaxSessions int `json:"max_sessions"`
	} `json:"config"`
	Stats struct {
		ActiveSessions int64 `json:"active_sessions"`
		PeakSessions   int64 `json:"peak_sessions"`
		Refused        int64 `json:"refused"`
	} `json:"stats"`
}

func (n *netRun) agencies(ctx context.Context) ([]agencyStatus, error) {
	var out []agencyStatus
	err := n.getJSON(ctx, n.st.AgencyAdmin+api.PathAgencies, &out)
	return out, err
}

func (n *netRun) watchSessions(ctx context.Context) error {
	first, err := n.agencies(ctx)
	if err != nil {
		return fmt.Errorf("agency sessions: %w", err)
	}
	w := &sessionWatch{max: map[string]int64{}, limit: map[string]int{}, refused: map[string]int64{}, done: make(chan struct{})}
	for _, a := range first {
		w.limit[a.Agency], w.refused[a.Agency] = a.Config.MaxSessions, a.Stats.Refused
	}
	wctx, stop := context.WithCancel(ctx)
	w.stop = stop
	go func() {
		defer close(w.done)
		for wctx.Err() == nil {
			if as, err := n.agencies(wctx); err == nil {
				w.mu.Lock()
				for _, a := range as {
					w.max[a.Agency] = max(w.max[a.Agency], a.Stats.ActiveSessions)
				}
				w.mu.Unlock()
			}
			select {
			case <-wctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	n.sessions = w
	return nil
}

// checkSessions stops the sampling and asserts, per agency, that the
// sessions never passed its limit: the sampled maximum, the simulator's
// own peak (every admission counted), and, unless refusals, no connection
// refused for being over it. With refusals those are reported, not
// failed: after a cut between a cell and an agency the cell's side of its
// sessions is gone at once, the agency's only at its idle timeout or when
// a FIN sent into the cut is sent again after the heal, and the cell
// dials again before that (see docs/drills.md).
func (n *netRun) checkSessions(ctx context.Context, d *loadtest.Verdict, refusals bool) {
	w := n.sessions
	w.stop()
	<-w.done
	last, err := n.agencies(ctx)
	if err != nil {
		d.Check("agency sessions read", false, err.Error(), "readable")
		return
	}
	for _, a := range last {
		lim := w.limit[a.Agency]
		refused := a.Stats.Refused - w.refused[a.Agency]
		if refusals {
			d.Check(a.Agency+" sessions ≤ its limit", a.Stats.PeakSessions <= int64(lim) && w.max[a.Agency] <= int64(lim),
				fmt.Sprintf("peak %d, sampled max %d", a.Stats.PeakSessions, w.max[a.Agency]), fmt.Sprintf("≤ %d", lim))
			d.Note("%s refused %d connections over its limit (redials after the heal while it still counted the sessions lost in the cut)", a.Agency, refused)
			continue
		}
		d.Check(a.Agency+" sessions ≤ its limit", a.Stats.PeakSessions <= int64(lim) && refused == 0 && w.max[a.Agency] <= int64(lim),
			fmt.Sprintf("peak %d, sampled max %d, refused %d", a.Stats.PeakSessions, w.max[a.Agency], refused),
			fmt.Sprintf("≤ %d, 0 refused", lim))
	}
}

// usersOf maps each user of the run to the cell that answered it before
// the fault.
func usersOf(res *loadtest.Result, before time.Duration) map[int]string {
	return loadtest.UserCells(res.Samples, 0, before)
}

// checkOthers asserts that the cells the fault did not hit answered every
// request from the fault on.
func checkOthers(d *loadtest.Verdict, res *loadtest.Result, cells map[int]string, hit []string, from, to time.Duration) {
	names := map[string]bool{}
	for _, c := range cells {
		if c != "" && !slices.Contains(hit, c) {
			names[c] = true
		}
	}
	for _, cell := range slices.Sorted(maps.Keys(names)) {
		mine := func(u int) bool { return cells[u] == cell }
		st := loadtest.Window{From: from, To: to, Users: mine}.Stats(res.Samples)
		base := loadtest.Window{To: from, Users: mine}.Stats(res.Samples)
		d.Check(cell+" errors from the fault on", st.Errors == 0 && st.N > 0, fmt.Sprintf("%d of %d %v", st.Errors, st.N, st.Status), "0")
		d.Note("%s p50/p99: baseline %s/%s, from the fault on %s/%s", cell, msf(base.P50), msf(base.P99), msf(st.P50), msf(st.P99))
	}
}

// checkMoved checks the users a change moves over st (their window):
// no error but the fence of their inquiries' move (503 user-moving, the
// last copy), each of those with Retry-After.
func checkMoved(d *loadtest.Verdict, what string, st loadtest.Stats) {
	d.Check(what+": errors, the fence's user-moving aside", st.N > 0 && st.Errors-st.Fenced == 0,
		fmt.Sprintf("%d of %d %v", st.Errors-st.Fenced, st.N, st.Status), "0")
	d.Check(what+": user-moving answers with Retry-After", st.FencedNoRetryAfter == 0,
		fmt.Sprintf("%d of %d without", st.FencedNoRetryAfter, st.Fenced), "0 without")
}

// checkOthersP99 checks the other cells' p99 in [from, to) against their
// baseline before from, pooled over those cells (one cell's p99 over a
// few hundred requests is its third slowest: too noisy to bound alone)
// and counted by checkTail.
func checkOthersP99(d *loadtest.Verdict, res *loadtest.Result, cells map[int]string, hit []string, from, to time.Duration, factor float64) {
	others := func(u int) bool { c := cells[u]; return c != "" && !slices.Contains(hit, c) }
	base := loadtest.Window{To: from, Users: others}.Stats(res.Samples)
	checkTail(d, fmt.Sprintf("other cells' p99 in [%.0fs, %.0fs)", from.Seconds(), to.Seconds()), res.Samples, base, "baseline",
		loadtest.Window{From: from, To: to, Users: others}, factor)
}

// lastError is when the last answer other than 202 to a user in users,
// among requests sent in [from, to), came back; -1 if none.
func lastError(res *loadtest.Result, users func(int) bool, from, to time.Duration) time.Duration {
	last := time.Duration(-1)
	for _, s := range res.Samples {
		if s.At < from || s.At >= to || !users(s.User) || s.Status == http.StatusAccepted {
			continue
		}
		last = max(last, s.At+s.Latency)
	}
	return last
}

// finishNet notes the error answers by kind, verifies the accepted ids
// and the sessions and ends the verdict.
func (n *netRun) finishNet(ctx context.Context, d *loadtest.Verdict, res *loadtest.Result) {
	if kinds := errorKinds(res.Samples); kinds != "" {
		d.Note("error answers by kind: %s", kinds)
	}
	n.c.logf("verifying %d accepted ids...", countAccepted(res.Samples))
	d.CheckVerification(n.r.Verify(ctx, res.Samples, n.c.VerifyWithin, n.c.Replays))
	n.checkSessions(ctx, d, d.Name == "cut-agency")
	d.Finish()
	res.Drill = d
}

// A cutSpan is when a cut held. The pairs of hosts are cut at once and
// healed at once, but each pair takes its time: every pair is cut from
// Cut on, the heal begins at Healing and every pair is healed by Healed.
// A window of the cut ends at Healing; one of the recovery begins at
// Healed.
type cutSpan struct {
	Cut, Healing, Healed time.Duration
}

// cutDuringLoad runs the drill's load, the agencies' sessions sampled,
// and cuts every host of as from every host of bs from Baseline for Fault,
// marking the cut as what. during, if not nil, runs once the cut is in
// place, with its time; afterHeal, if not nil, once it is healed, while the
// load goes on. The hosts are healed whatever fails. It returns the load's
// result (also with an error of the drill's own acts) and when the cut and
// the heal were.
func (n *netRun) cutDuringLoad(ctx context.Context, name, what string, as, bs []*netlab.Host,
	during func(cutAt time.Duration) error, afterHeal func(healAt time.Duration)) (res *loadtest.Result, sp cutSpan, err error) {
	c := n.c
	if err := n.watchSessions(ctx); err != nil {
		return nil, sp, err
	}
	wait := startLoad(ctx, n.r)
	var heal func() error
	actErr := func() error {
		if err := sleepUntil(ctx, n.r, c.Baseline); err != nil {
			return err
		}
		from := n.r.Elapsed()
		var err error
		if heal, err = cut(as, bs); err != nil {
			return err
		}
		sp.Cut = n.r.Elapsed()
		n.r.Mark(what)
		c.logf("%s at %.1fs (the cut took %s)", what, sp.Cut.Seconds(), msf(sp.Cut-from))
		if during != nil {
			if err := during(sp.Cut); err != nil {
				return err
			}
		}
		if err := sleepUntil(ctx, n.r, sp.Cut+c.Fault); err != nil {
			return err
		}
		sp.Healing = n.r.Elapsed()
		err = heal()
		sp.Healed = n.r.Elapsed()
		n.r.Mark("healed")
		c.logf("healed at %.1fs (the heal took %s)", sp.Healed.Seconds(), msf(sp.Healed-sp.Healing))
		return err
	}()
	if actErr == nil && afterHeal != nil {
		afterHeal(sp.Healed)
	}
	res, err = wait()
	if heal != nil && sp.Healed == 0 {
		_ = heal() // after a failed run: the run's error is reported; `loadtest net down` sweeps the rest
	}
	if err != nil {
		return nil, sp, err
	}
	if actErr != nil {
		return res, sp, fmt.Errorf("drill %s: %w", name, actErr)
	}
	return res, sp, nil
}
