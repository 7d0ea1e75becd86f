package drill

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/loadtest"
	"github.com/cellkit/cellkit/internal/release"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

// HandoffReadShare is the share of the handoff drill's requests that read
// an inquiry's status: the local stack's cells take the new inquiries'
// share (their stores sync each write), and the router, what the drill
// is about, takes it all.
const HandoffReadShare = 0.9

// HandoffRate is the handoff drill's rate when none is given: one the
// 2-core test machine carries, with the whole local stack on it, with
// headroom (docs/drills.md has what it keeps busy); --rate is for bigger
// machines.
const HandoffRate = 400

// handoffGap is the load between two replacements, and the window after
// one in which its requests are judged.
const handoffGap = 3 * time.Second

// handoffP99Factor bounds a handoff's p99 against its controls': the A/A
// windows right before and right after it, the same step with nothing
// replaced, which see the same machine (the worse of the two: a load
// that rose or fell across the handoff shows in one of them).
const handoffP99Factor = 2

// saturated is the machine's busy share from which a window's p99 says
// more of the machine than of what ran in it: a failing p99 line says so.
const saturated = 0.95

// handoffStep is one replacement of the router.
type handoffStep struct {
	name  string
	spec  release.Spec
	fails bool // a successor that cannot start: the old router must serve on
}

// handoffOutcome is what a step did.
type handoffOutcome struct {
	step     handoffStep
	from, to time.Duration // from the replacement's start to its end (ready, or refused)
	err      error
	drained  drainReport
	release  [2]string // the router's release before and after
	busy     float64   // the machine's CPU busy share over the step's window
	// before and after are the A/A windows around a replacement: the
	// same step with nothing replaced. After is as long as the step's
	// window; before is the previous step's after (the first step's, as
	// long as the drill's usual replacement).
	before, after aaWindow
}

// aaWindow is an A/A window and the machine's busy share over it.
type aaWindow struct {
	w    loadtest.Window
	busy float64
}

// window is the step's own: the replacement and the gap after it.
func (o handoffOutcome) window() loadtest.Window {
	return loadtest.Window{From: o.from, To: o.to + handoffGap}
}

// drainReport is an old router's "drained after the handoff" log line.
type drainReport struct {
	Conns       int64 `json:"connections"`
	Idle        int64 `json:"closed_idle"`
	AfterAnswer int64 `json:"closed_after_answer"`
	Cut         int64 `json:"cut"`
	RequestsCut int64 `json:"requests_cut"`
	found       bool
}

// Handoff: under open-loop load (HandoffRate by default), a share of it
// (Config.NewConnShare, half by default) each on a new connection and the
// rest on kept-alive ones (HTTPS when the stack runs on TLS), the stack's
// router is replaced five times in a row through its handoff socket:
// three restarts, an upgrade to another build (make build's
// bin/next/router) and a successor that cannot start (its keys file
// missing). Each replacement is followed by its control: the same step
// with nothing replaced, as long, so that both see the same machine.
// Each handoff: no connection refused, no request failed, p99 over the
// handoff and the seconds after it within handoffP99Factor of its
// control's; the failed start: the old router serves on, no request
// failed; each old router's drain cut nothing. Every accepted inquiry
// ends final.
func Handoff(ctx context.Context, c Config) (*loadtest.Result, error) {
	if c.Rate <= 0 {
		c.Rate = HandoffRate
	}
	c = c.withDefaults(0)
	if c.ReadShare == 0 {
		c.ReadShare = HandoffReadShare
	}
	if c.NewConnShare == 0 {
		c.NewConnShare = 0.5
	}
	if c.NewConnShare < 0 || c.NewConnShare > 1 {
		return nil, fmt.Errorf("drill handoff: --new-conn-share %g: want a share in (0, 1]", c.NewConnShare)
	}
	st := c.Stack
	rp, err := st.Proc("router")
	if err != nil {
		return nil, err
	}
	if !devstack.HandsOver(*rp) {
		return nil, errors.New("drill handoff: the stack's router has no --handoff-socket (a stack of an older cellctl dev up?)")
	}
	upgrade := release.Spec{Bin: filepath.Join(c.Bin, "next", "router")}
	if err := upgrade.Validate("router"); err != nil {
		return nil, fmt.Errorf("drill handoff: the upgrade: %w (make build makes bin/next/router)", err)
	}
	steps := []handoffStep{
		{name: "restart 1"}, {name: "restart 2"}, {name: "restart 3"},
		{name: "upgrade", spec: upgrade},
		{name: "failed start", spec: release.Spec{Set: []string{"keys=" + filepath.Join(st.Dir, "no-such-keys.json")}}, fails: true},
	}
	client, err := mixedClient(st.TLS, c.NewConnShare)
	if err != nil {
		return nil, err
	}
	total := c.Baseline + time.Duration(len(steps))*2*(handoffGap+5*time.Second) + c.After + 30*time.Second
	quietDisk()
	r, err := loadtest.NewRunner(loadtest.Config{
		Target: st.Router, Key: st.APIKey, Steps: []loadtest.Step{{Rate: c.Rate, For: total}},
		Users: c.Users, Zipf: c.Zipf, KeepSamples: true, Timeout: 5 * time.Second, HighShare: c.HighShare,
		ReadShare: c.ReadShare, MaxInflight: 512,
	}, loadtest.Options{Progress: c.Progress, Client: client})
	if err != nil {
		return nil, err
	}
	// The baseline leaves out the stack's first seconds under the load
	// (connections opened, caches and pools filled): a third of it.
	baseline := loadtest.Window{From: max(2*time.Second, c.Baseline/3), To: c.Baseline}
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	wait := startLoad(lctx, r)
	var outs []handoffOutcome
	var busy [2]float64   // the machine's CPU busy share in the baseline, and over the steps
	var stackCPUs float64 // the CPUs the stack and the load generator kept busy in the baseline
	var roots []int
	for _, p := range st.Processes {
		roots = append(roots, p.PID)
	}
	actErr := func() error {
		if err := sleepUntil(ctx, r, baseline.From); err != nil {
			return err
		}
		cpu0, ours0 := readCPU(), stackTicks(roots)
		if err := sleepUntil(ctx, r, baseline.To); err != nil {
			return err
		}
		cpu1, ours1 := readCPU(), stackTicks(roots)
		busy[0] = cpu0.busyUntil(cpu1)
		if cpu1.total > cpu0.total {
			stackCPUs = float64(ours1-ours0) / float64(cpu1.total-cpu0.total) * float64(runtime.NumCPU())
		}
		var err error
		outs, err = c.handoffSteps(ctx, r, steps)
		busy[1] = cpu1.busyUntil(readCPU())
		if err != nil {
			return err
		}
		return sleepUntil(ctx, r, r.Elapsed()+c.After)
	}()
	stopLoad()
	res, err := loadEnded("handoff", wait, actErr)
	if err != nil {
		return res, err
	}
	v := &loadtest.Verdict{Name: "handoff"}
	base := baseline.Stats(res.Samples)
	v.Note("baseline: %d requests at %.0f/s (%.0f%% status reads, %.0f%% each on a new connection), p99 %s; the stack and the load generator kept %.2f of the machine's %d CPUs busy; the machine was %.0f%% busy in it, %.0f%% over the steps",
		base.N, c.Rate, 100*c.ReadShare, 100*c.NewConnShare, msf(base.P99), stackCPUs, runtime.NumCPU(), 100*busy[0], 100*busy[1])
	judgeHandoffs(v, res.Samples, base, stackCPUs, outs)
	c.logf("verifying %d accepted ids...", countAccepted(res.Samples))
	v.CheckVerification(r.Verify(ctx, res.Samples, c.VerifyWithin, c.Replays))
	v.Finish()
	res.Drill = v
	return res, nil
}

// handoffSteps replaces the router at each step, each replacement
// between two controls (none after a step that must fail): the same
// step, its reads and its wait, with nothing replaced.
func (c *Config) handoffSteps(ctx context.Context, r *loadtest.Runner, steps []handoffStep) ([]handoffOutcome, error) {
	st := c.Stack
	d := devstack.Deployer{Path: devstack.StatePath(st.Dir), Grace: devstack.StopGrace}
	admin := &http.Client{Timeout: 5 * time.Second} // the router's admin listener is plain on the local stack
	release := func() string {
		var rd api.RouterReadiness
		if err := getJSON(ctx, st.RouterAdmin+"/readyz", &rd); err != nil {
			return "?"
		}
		return rd.Release.ID
	}
	logPath := filepath.Join(st.Dir, "logs", "router.log")
	aa := func(name string, length time.Duration) (aaWindow, error) {
		cpu := readCPU()
		from := r.Elapsed()
		r.Mark(name)
		offset := fileSize(logPath)
		_ = release()
		if err := sleepUntil(ctx, r, from+length); err != nil {
			return aaWindow{}, err
		}
		_, _ = release(), drainOf(logPath, offset)
		return aaWindow{w: loadtest.Window{From: from, To: r.Elapsed()}, busy: cpu.busyUntil(readCPU())}, nil
	}
	prev, err := aa("control", time.Second+handoffGap)
	if err != nil {
		return nil, err
	}
	var outs []handoffOutcome
	for _, k := range steps {
		o := handoffOutcome{step: k, before: prev}
		o.release[0] = release()
		offset := fileSize(logPath)
		cpu := readCPU()
		r.Mark(k.name)
		c.logf("%s at %.1fs", k.name, r.Elapsed().Seconds())
		o.from = r.Elapsed()
		_, child, err := d.ReplaceProcess(ctx, "router", devstack.AsRelease(k.spec))
		if err == nil {
			err = devstack.WaitReady(ctx, admin, 30*time.Second, child)
		}
		o.to, o.err = r.Elapsed(), err
		if k.fails != (err != nil) {
			return outs, fmt.Errorf("%s: %v", k.name, err)
		}
		if err := sleepUntil(ctx, r, o.to+handoffGap); err != nil {
			return outs, err
		}
		o.busy = cpu.busyUntil(readCPU())
		o.release[1] = release()
		o.drained = drainOf(logPath, offset)
		c.logf("%s: %.1fs, drained %+v, %v", k.name, (o.to - o.from).Seconds(), o.drained, err)
		if !k.fails {
			w := o.window()
			if o.after, err = aa(k.name+" control", w.To-w.From); err != nil {
				return outs, err
			}
			prev = o.after
		}
		outs = append(outs, o)
	}
	return outs, nil
}

// judgeHandoffs adds each step's lines to v: refused and failed requests
// in the step and in its control (hard lines), the step's p99 against its
// control's, the old router's drain, the upgrade's release; the failed
// start: the old router serves on. The baseline is reported beside, not
// judged against: the machine's load moves it within a run.
func judgeHandoffs(v *loadtest.Verdict, samples []loadtest.Sample, base loadtest.Stats, own float64, outs []handoffOutcome) {
	for _, o := range outs {
		w := o.window()
		s := w.Stats(samples)
		refused, failed := refusedAndFailed(samples, w)
		v.Check(o.step.name+": connections refused", refused == 0, fmt.Sprintf("%d of %d", refused, s.N), "0")
		v.Check(o.step.name+": requests failed", failed == 0, fmt.Sprintf("%d of %d %v", failed, s.N, s.Status), "0")
		if o.step.fails {
			v.Check(o.step.name+": the old router serves on", o.err != nil && strings.Contains(o.err.Error(), "the old one serves on") && o.release[1] == o.release[0],
				fmt.Sprintf("%s; release %s; p99 %s", refusal(o.err), o.release[1], msf(s.P99)), "refused, release unchanged")
			continue
		}
		for _, ctl := range []struct {
			name string
			w    loadtest.Window
		}{{"before", o.before.w}, {"after", o.after.w}} {
			cs := ctl.w.Stats(samples)
			refused, failed := refusedAndFailed(samples, ctl.w)
			v.Check(o.step.name+": its control "+ctl.name+", requests refused or failed", refused+failed == 0 && cs.N > 0,
				fmt.Sprintf("%d of %d", refused+failed, cs.N), "0")
		}
		v.Check(o.step.name+": p99 over the handoff", s.P99 <= handoffP99Factor*o.reference(samples),
			o.p99Text(samples, s.P99, base.P99, own), fmt.Sprintf("≤ %d× its controls'", handoffP99Factor))
		v.Check(o.step.name+": the old router drained, nothing cut", o.drained.found && o.drained.Cut == 0,
			fmt.Sprintf("%d connections: %d after their answer, %d idle, %d cut", o.drained.Conns, o.drained.AfterAnswer, o.drained.Idle, o.drained.Cut), "0 cut")
		if o.step.spec.Bin != "" {
			v.Check(o.step.name+": the new build serves", o.release[1] != o.release[0] && strings.HasPrefix(o.release[1], "next@"),
				o.release[0]+" → "+o.release[1], "next@…")
		}
	}
}

// reference is the p99 a handoff's is held to: the worse of its
// controls'.
func (o handoffOutcome) reference(samples []loadtest.Sample) time.Duration {
	return max(o.before.w.Stats(samples).P99, o.after.w.Stats(samples).P99)
}

// p99Text is a handoff's p99 line: its p99 beside its controls' and the
// baseline's, the machine's busy share over each, and when the line
// fails on a saturated machine, that it measured the machine, with the
// CPUs the drill's own processes kept busy in the baseline (own): the
// reader sees whether the drill or something else filled it.
func (o handoffOutcome) p99Text(samples []loadtest.Sample, p99, base time.Duration, own float64) string {
	w := o.window()
	b, a := o.before.w.Stats(samples).P99, o.after.w.Stats(samples).P99
	t := fmt.Sprintf("%s in %.1fs, machine %.0f%% busy (%.1f× its controls': before %s at %.0f%%, after %s at %.0f%%; %.1f× the baseline's)",
		msf(p99), (w.To - w.From).Seconds(), 100*o.busy, ratio(p99, max(a, b)), msf(b), 100*o.before.busy, msf(a), 100*o.after.busy, ratio(p99, base))
	if p99 > handoffP99Factor*max(a, b) && max(o.busy, o.before.busy, o.after.busy) >= saturated {
		t += fmt.Sprintf("; the machine was saturated (≥ %.0f%% busy; the drill's own processes kept %.2f of its %d CPUs busy in the baseline): the line measured the machine, not the handoff",
			100*saturated, own, runtime.NumCPU())
	}
	return t
}

// cpuTimes are the machine's CPU times (/proc/stat, in ticks): busy and
// in all.
type cpuTimes struct{ busy, total uint64 }

// readCPU reads them; zero where /proc/stat cannot be read.
func readCPU() cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var t cpuTimes
	for i, x := range f[1:] {
		n, err := strconv.ParseUint(x, 10, 64)
		if err != nil || i >= 8 { // user nice system idle iowait irq softirq steal; guests are in user
			break
		}
		t.total += n
		if i != 3 && i != 4 {
			t.busy += n
		}
	}
	return t
}

// stackTicks is the CPU time (ticks) used so far by this process (the
// load generator) and by every process descending from roots (the
// stack's): what the drill itself costs the machine, apart from what else
// runs on it. A process that ended takes its time with it: read it over
// a span in which none ends.
func stackTicks(roots []int) uint64 {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	parent, ticks := map[int]int{}, map[int]uint64{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		i := strings.LastIndexByte(string(b), ')') // the command name may hold anything
		if err != nil || i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:])) // state ppid ... utime (12th) stime (13th)
		if len(f) < 13 {
			continue
		}
		parent[pid], _ = strconv.Atoi(f[1])
		ut, _ := strconv.ParseUint(f[11], 10, 64)
		st, _ := strconv.ParseUint(f[12], 10, 64)
		ticks[pid] = ut + st
	}
	ours := func(pid int) bool {
		for n := 0; pid > 1 && n < 64; n++ {
			if pid == os.Getpid() || slices.Contains(roots, pid) {
				return true
			}
			pid = parent[pid]
		}
		return false
	}
	var sum uint64
	for pid, t := range ticks {
		if ours(pid) {
			sum += t
		}
	}
	return sum
}

// busyUntil is the share of the machine's CPU time that was busy from t
// to u.
func (t cpuTimes) busyUntil(u cpuTimes) float64 {
	if u.total <= t.total {
		return 0
	}
	return float64(u.busy-t.busy) / float64(u.total-t.total)
}

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// refusal is the first clause of a refused successor's error, without
// the log lines it quotes.
func refusal(err error) string {
	s := firstLine(err)
	if i := strings.Index(s, "; last lines of"); i >= 0 {
		s = s[:i] + ")"
	}
	return s
}

// refusedAndFailed counts w's requests whose connection was refused, and
// those otherwise not answered as asked (a 503 with Retry-After, a cell's
// refusal the client retries, is an answer).
func refusedAndFailed(samples []loadtest.Sample, w loadtest.Window) (refused, failed int) {
	for _, s := range samples {
		if s.At < w.From || s.At >= w.To {
			continue
		}
		switch {
		case strings.Contains(s.Err, "connection refused"):
			refused++
		case s.OK(), s.Status == http.StatusServiceUnavailable && s.RetryAfter:
		default:
			failed++
		}
	}
	return refused, failed
}

// mixedClient sends a share of its requests each on a new connection and
// the rest on kept-alive ones, trusting the stack's CA when it runs on TLS.
func mixedClient(t *devstack.TLS, newShare float64) (*http.Client, error) {
	var cfg *tls.Config
	if t != nil {
		pool, err := tlsconf.LoadPool(t.CA)
		if err != nil {
			return nil, err
		}
		cfg = &tls.Config{RootCAs: pool, ClientSessionCache: tls.NewLRUClientSessionCache(256)}
	}
	kept := &http.Transport{TLSClientConfig: cfg, MaxIdleConns: 512, MaxIdleConnsPerHost: 512, IdleConnTimeout: 30 * time.Second}
	fresh := &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}
	return &http.Client{Transport: &mixed{kept: kept, fresh: fresh, share: newShare}}, nil
}

// mixed sends share of its requests through fresh, spread evenly (a
// Bresenham walk over the request count), the rest through kept.
type mixed struct {
	kept, fresh http.RoundTripper
	share       float64
	n           atomic.Uint64
}

func (m *mixed) RoundTrip(req *http.Request) (*http.Response, error) {
	n := float64(m.n.Add(1))
	if int64(n*m.share) != int64((n-1)*m.share) {
		return m.fresh.RoundTrip(req)
	}
	return m.kept.RoundTrip(req)
}

// drainOf finds the old router's drain report in its log after offset.
func drainOf(path string, offset int64) drainReport {
	var d drainReport
	f, err := os.Open(path)
	if err != nil {
		return d
	}
	defer f.Close()
	if _, err := f.Seek(offset, 0); err != nil {
		return d
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !strings.Contains(string(line), `"drained after the handoff`) {
			continue
		}
		var x drainReport
		if json.Unmarshal(line, &x) == nil {
			d, d.found = x, true
		}
	}
	return d
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func firstLine(err error) string {
	if err == nil {
		return "no error"
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
