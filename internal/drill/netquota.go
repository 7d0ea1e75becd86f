package drill

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/loadtest"
	"github.com/cellkit/cellkit/internal/netlab"
)

// QuotaClient is the client quota-routers adds to the stack's keys file
// for the length of the drill (and revokes at its end).
const QuotaClient = "drill-quota"

// The quota-routers drill's client: its quota, requests a second, and
// its burst; the load asks three times the quota.
const (
	quotaRate  = 20
	quotaBurst = 10
)

// quotaPhase is one stretch of quota-routers: the quota client's rate at
// each router, and what is done to the routers at its start.
type quotaPhase struct {
	name        string
	at1, at2    float64 // requests a second at router1 and router2
	act         string  // "", "kill", "restart", "cut", "heal"
	usedAtLeast bool    // its whole windows must take at least 80 % of the quota
}

// quotaPhases: spread over both routers, all on router1, router2 killed
// (its share lapses to router1), router2 back, both routers cut from the
// registry (each quota split evenly over the two), healed.
var quotaPhases = []quotaPhase{
	{name: "spread", at1: 1.5 * quotaRate, at2: 1.5 * quotaRate, usedAtLeast: true},
	{name: "all on router1", at1: 3 * quotaRate, usedAtLeast: true},
	{name: "router2 killed", at1: 1.5 * quotaRate, at2: 1.5 * quotaRate, act: "kill"},
	{name: "router2 back", at1: 1.5 * quotaRate, at2: 1.5 * quotaRate, act: "restart"},
	{name: "registry cut", at1: 1.5 * quotaRate, at2: 1.5 * quotaRate, act: "cut", usedAtLeast: true},
	{name: "healed", at1: 1.5 * quotaRate, at2: 1.5 * quotaRate, act: "heal", usedAtLeast: true},
}

// quotaWindow is the span over which the accepted requests of the quota
// client are counted against its quota (plus its burst and a tenth).
const quotaWindow = 10 * time.Second

// QuotaRouters: one client's quota holds across the routers. A client of
// quotaRate/s is added to the keys file; it sends three times that,
// through both routers and then through one, while router2 is killed and
// started again and while both routers are cut from the registry (the
// Consul host). Its requests accepted in any 10-second window, over both
// routers, stay within its quota plus its burst and a tenth; in the
// phases where every router can count on the others' leases it gets at
// least 80 % of the quota. Meanwhile the lab client (its quota 1,000/s)
// sends Rate/s through router1 and is never refused. Each phase lasts
// Fault [20s]. One piece: a drill script on one timeline — the client
// added, the loads, each phase's act on the routers — then the checks,
// which read each phase's start.
func QuotaRouters(ctx context.Context, c NetConfig) (*loadtest.Result, error) {
	c = c.withDefaults(20 * time.Second)
	phase := c.Fault
	run := time.Duration(len(quotaPhases)) * phase
	end := c.Baseline + run + c.After
	n, err := newNetRun(&c, end)
	if err != nil {
		return nil, err
	}
	key, revoke, err := n.addQuotaClient(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := revoke(); err != nil {
			c.logf("revoking %s's key: %v", QuotaClient, err)
		}
	}()
	// The load's clock starts now, the client in the routers' keys.
	if err := n.newLoad(end); err != nil {
		return nil, err
	}
	// The quota client's two loads, one per router, each made when it
	// starts (a runner's clock starts when it is made).
	var q [2]*loadtest.Runner
	newQuotaLoads := func() error {
		for i := range q {
			var steps []loadtest.Step
			for _, p := range quotaPhases {
				steps = append(steps, loadtest.Step{Rate: []float64{p.at1, p.at2}[i], For: phase})
			}
			var err error
			if q[i], err = loadtest.NewRunner(loadtest.Config{
				Target: n.st.Routers[i], Key: key, Steps: steps, Users: c.Users, KeepSamples: true,
				Timeout: 5 * time.Second, MaxInflight: 256,
			}, loadtest.Options{}); err != nil {
				return err
			}
		}
		return nil
	}
	consul, err := n.host("consul")
	if err != nil {
		return nil, err
	}
	routers, err := n.routerHosts()
	if err != nil {
		return nil, err
	}

	if err := n.watchSessions(ctx); err != nil {
		return nil, err
	}
	wait := startLoad(ctx, n.r)
	var quota [2]func() (*loadtest.Result, error)
	var starts []time.Duration // each phase's start on the quota runners' clock
	var views []string
	actErr := func() error {
		if err := sleepUntil(ctx, n.r, c.Baseline); err != nil {
			return err
		}
		if err := newQuotaLoads(); err != nil {
			return err
		}
		for i := range q {
			quota[i] = startLoad(ctx, q[i])
		}
		var heal func() error
		defer func() {
			if heal != nil {
				_ = heal()
			}
		}()
		for i, p := range quotaPhases {
			if err := sleepUntil(ctx, q[0], time.Duration(i)*phase); err != nil {
				return err
			}
			starts = append(starts, q[0].Elapsed())
			q[0].Mark(p.name)
			n.r.Mark("quota: " + p.name)
			c.logf("quota phase %q at %.1fs", p.name, q[0].Elapsed().Seconds())
			switch p.act {
			case "kill":
				if err := n.st.Kill(ctx, "router2"); err != nil {
					return err
				}
			case "restart":
				child, err := n.st.Restart(n.lab, "router2")
				if err != nil {
					return err
				}
				if err := n.waitReady(ctx, c.Recover, child); err != nil {
					return err
				}
			case "cut":
				if heal, err = cut(routers, []*netlab.Host{consul}); err != nil {
					return err
				}
			case "heal":
				h := heal
				heal = nil
				if err := h(); err != nil {
					return err
				}
			}
			// Halfway through, what each router holds.
			if err := sleepUntil(ctx, q[0], time.Duration(i)*phase+phase/2); err != nil {
				return err
			}
			views = append(views, fmt.Sprintf("%s: %s", p.name, n.quotaViews(ctx)))
		}
		return sleepUntil(ctx, n.r, c.Baseline+run+c.After)
	}()
	var qres [2]*loadtest.Result
	for i := range quota {
		if quota[i] != nil {
			qres[i], _ = quota[i]()
		}
	}
	res, err := loadEnded("quota-routers", wait, actErr)
	if err != nil {
		return res, err
	}
	if qres[0] == nil || qres[1] == nil {
		return res, errors.New("drill quota-routers: the quota client's load did not run")
	}
	d := &loadtest.Verdict{Name: "quota-routers"}
	checkQuotaWindows(d, qres, starts, phase)
	dev := loadtest.Window{From: c.Baseline, To: end}.Stats(res.Samples)
	d.Check("the lab client (its quota 1,000/s) through router1: refused", dev.N > 0 && dev.Status["429"] == 0,
		fmt.Sprintf("%d of %d %v", dev.Status["429"], dev.N, dev.Status), "0")
	for i, r := range qres {
		d.Note("%s through %s: %d sent, answers %v", QuotaClient, []string{"router1", "router2"}[i], r.Sent, r.Status)
	}
	for _, v := range views {
		d.Note("%s", v)
	}
	var accepted []loadtest.Sample
	for _, r := range qres {
		for _, s := range r.Samples {
			if s.Status == http.StatusAccepted {
				accepted = append(accepted, s)
			}
		}
	}
	v := q[0].Verify(ctx, accepted, c.VerifyWithin, min(len(accepted), 50))
	d.Check(QuotaClient+"'s accepted inquiries: lost, unfinished", v.Lost == 0 && v.Unfinished == 0,
		fmt.Sprintf("%d lost, %d unfinished of %d", v.Lost, v.Unfinished, v.Accepted), "0")
	d.Check(QuotaClient+"'s keyed retries: a new id", v.ReplayNewID == 0, fmt.Sprintf("%d of %d", v.ReplayNewID, v.Replayed), "0")
	n.finishNet(ctx, d, res)
	return res, nil
}

// checkQuotaWindows counts the quota client's accepted requests (by send
// time, over both routers) in every 10-second window, one second apart:
// none may hold more than the quota plus its burst and a tenth; a window
// wholly inside a phase that must use its quota must hold at least 80 %
// of it.
func checkQuotaWindows(d *loadtest.Verdict, qres [2]*loadtest.Result, starts []time.Duration, phase time.Duration) {
	end := starts[len(starts)-1] + phase
	secs := int(end / time.Second)
	per := make([]int, secs+1)
	for _, r := range qres {
		for _, s := range r.Samples {
			if s.Status == http.StatusAccepted && s.At >= 0 && int(s.At/time.Second) <= secs {
				per[int(s.At/time.Second)]++
			}
		}
	}
	w := int(quotaWindow / time.Second)
	limit := int(quotaRate*quotaWindow.Seconds()*1.1) + quotaBurst
	floor := int(quotaRate * quotaWindow.Seconds() * 0.8)
	maxN, maxAt := 0, 0
	var low []string
	var phaseMax []string
	for i, p := range quotaPhases {
		from, to := int(starts[i]/time.Second), int((starts[i]+phase)/time.Second)
		pm := 0
		for s := from; s+w <= to; s++ {
			sum := 0
			for _, x := range per[s : s+w] {
				sum += x
			}
			pm = max(pm, sum)
			if p.usedAtLeast && sum < floor {
				low = append(low, fmt.Sprintf("%s [%ds,%ds): %d", p.name, s, s+w, sum))
			}
		}
		phaseMax = append(phaseMax, fmt.Sprintf("%s %d", p.name, pm))
	}
	for s := 0; s+w <= len(per); s++ {
		sum := 0
		for _, x := range per[s : s+w] {
			sum += x
		}
		if sum > maxN {
			maxN, maxAt = sum, s
		}
	}
	d.Check(fmt.Sprintf("%s's accepted per %s window, over both routers (quota %d/s, burst %d)", QuotaClient, quotaWindow, quotaRate, quotaBurst),
		maxN <= limit, fmt.Sprintf("at most %d (%.1f/s, from %ds)", maxN, float64(maxN)/quotaWindow.Seconds(), maxAt), fmt.Sprintf("≤ %d", limit))
	d.Check(QuotaClient+"'s quota used where every router counts the others' leases", len(low) == 0,
		fmt.Sprintf("%d windows under %d%s", len(low), floor, firstFew(low)), fmt.Sprintf("≥ %d per window", floor))
	d.Note("%s's most accepted in a %s window, by phase: %s", QuotaClient, quotaWindow, strings.Join(phaseMax, "; "))
}

// firstFew is ": " and up to three of xs, or "".
func firstFew(xs []string) string {
	if len(xs) == 0 {
		return ""
	}
	return ": " + strings.Join(xs[:min(3, len(xs))], "; ")
}

// routerHosts are the lab's router hosts.
func (n *netRun) routerHosts() ([]*netlab.Host, error) {
	var hs []*netlab.Host
	for _, name := range []string{"router1", "router2"} {
		h, err := n.host(name)
		if err != nil {
			return nil, err
		}
		hs = append(hs, h)
	}
	return hs, nil
}

// addQuotaClient adds a key for QuotaClient to the stack's keys file with
// 'router keys add', as an operator would, and waits until both routers
// hold the client's quota; revoke takes it out again.
func (n *netRun) addQuotaClient(ctx context.Context) (key string, revoke func() error, err error) {
	keys := filepath.Join(n.st.Dir, "router", "keys.json")
	routerCmd := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		cmd := exec.CommandContext(ctx, filepath.Join(n.c.Bin, "router"), args...)
		cmd.Stdout, cmd.Stderr, cmd.Env = &out, &errb, devstack.ChildEnv()
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("router %s: %v: %s", strings.Join(args[:2], " "), err, strings.TrimSpace(errb.String()))
		}
		return strings.TrimSpace(out.String()), nil
	}
	revoke = func() error {
		_, err := routerCmd("keys", "revoke", "--keys", keys, "--client", QuotaClient)
		return err
	}
	// A key left by a run that did not end: its client goes first.
	_ = revoke()
	key, err = routerCmd("keys", "add", "--keys", keys, "--client", QuotaClient,
		"--rate", strconv.Itoa(quotaRate), "--burst", strconv.Itoa(quotaBurst), "--lanes", "high,normal")
	if err != nil {
		return "", nil, err
	}
	err = until(ctx, n.c.Recover, QuotaClient+"'s quota on both routers", func(ctx context.Context) (bool, error) {
		for _, name := range []string{"router1", "router2"} {
			v, err := n.quotaView(ctx, name)
			if err != nil || !v.has(QuotaClient) {
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		return "", nil, errors.Join(err, revoke())
	}
	return key, revoke, nil
}

type routerQuota api.RouterQuota

func (v routerQuota) has(client string) bool {
	for _, c := range v.Clients {
		if c.Client == client {
			return true
		}
	}
	return false
}

// quotaView is what router name says it holds of the clients' quotas.
func (n *netRun) quotaView(ctx context.Context, name string) (routerQuota, error) {
	var v routerQuota
	p, ok := n.st.Process(name)
	if !ok {
		return v, fmt.Errorf("no process %q in the stack", name)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.Addrs["admin"]+api.PathRouterQuota, nil)
	if err != nil {
		return v, err
	}
	req.Header.Set("Authorization", "Bearer "+n.admin)
	resp, err := n.hc.Do(req)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("%s %s: %s", name, api.PathRouterQuota, resp.Status)
	}
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

// quotaViews says, for each router, its share of QuotaClient's quota,
// what the routers hold together and whether its lease lapsed.
func (n *netRun) quotaViews(ctx context.Context) string {
	var out []string
	for _, name := range []string{"router1", "router2"} {
		v, err := n.quotaView(ctx, name)
		if err != nil {
			out = append(out, name+" unreadable")
			continue
		}
		for _, c := range v.Clients {
			if c.Client == QuotaClient {
				out = append(out, fmt.Sprintf("%s share %.2f, held %.2f, demand %.0f/s of %.0f/s, routers %d, even %v",
					name, c.Share, c.Held, c.Demand, c.TotalDemand, v.Routers, v.Even))
			}
		}
	}
	return strings.Join(out, "; ")
}
