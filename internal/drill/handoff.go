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
	"strings"
	"sync/atomic"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/loadtest"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

// HandoffReadShare is the share of the handoff drill's requests that read
// an inquiry's status: at its rate (1,000/s in make drill) the local
// stack's cells take the new inquiries' share (their stores sync each
// write), and the router, what the drill is about, takes it all.
const HandoffReadShare = 0.9

// handoffGap is the load between two replacements, and the window after
// one in which its requests are judged.
const handoffGap = 3 * time.Second

// handoffStep is one replacement of the router.
type handoffStep struct {
	name  string
	spec  devstack.Spec
	fails bool // a successor that cannot start: the old router must serve on
}

// handoffOutcome is what a step did.
type handoffOutcome struct {
	step     handoffStep
	from, to time.Duration // from the replacement's start to its end (ready, or refused)
	err      error
	drained  drainReport
	release  [2]string // the router's release before and after
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

// Handoff: under open-loop load, a share of it (Config.NewConnShare,
// half by default) each on a new connection and the rest on kept-alive
// ones (HTTPS when the stack runs on TLS), the stack's router is replaced five times in a row through its
// handoff socket: three restarts, an upgrade to another build (make
// build's bin/next/router) and a successor that cannot start (its keys
// file missing). Each handoff: no connection refused, no request failed,
// p99 over the handoff and the seconds after it within 2× the baseline's
// (and, for the record, against the failed start's: the same processes
// started and ended with no handover); the failed start: the old
// router serves on, no request failed; each old router's drain cut
// nothing. Every accepted inquiry ends final.
func Handoff(ctx context.Context, c Config) (*loadtest.Result, error) {
	c.defaults(0)
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
	upgrade := devstack.Spec{Bin: filepath.Join(c.Bin, "next", "router")}
	if err := upgrade.Validate("router"); err != nil {
		return nil, fmt.Errorf("drill handoff: the upgrade: %w (make build makes bin/next/router)", err)
	}
	steps := []handoffStep{
		{name: "restart 1"}, {name: "restart 2"}, {name: "restart 3"},
		{name: "upgrade", spec: upgrade},
		{name: "failed start", spec: devstack.Spec{Set: []string{"keys=" + filepath.Join(st.Dir, "no-such-keys.json")}}, fails: true},
	}
	client, err := mixedClient(st.TLS, c.NewConnShare)
	if err != nil {
		return nil, err
	}
	admin := &http.Client{Timeout: 5 * time.Second} // the router's admin listener is plain on the local stack
	total := c.Baseline + time.Duration(len(steps))*(handoffGap+5*time.Second) + c.After + 30*time.Second
	quietDisk()
	r, err := loadtest.NewRunner(loadtest.Config{
		Target: st.Router, Key: st.APIKey, Steps: []loadtest.Step{{Rate: c.Rate, For: total}},
		Users: c.Users, Zipf: c.Zipf, KeepSamples: true, Timeout: 5 * time.Second, HighShare: c.HighShare,
		ReadShare: c.ReadShare, MaxInflight: 512,
	}, loadtest.Options{Progress: c.Progress, Client: client})
	if err != nil {
		return nil, err
	}
	d := devstack.Deployer{Path: devstack.StatePath(st.Dir), Grace: devstack.StopGrace}
	release := func() string {
		var rd api.RouterReadiness
		if err := getJSON(ctx, st.RouterAdmin+"/readyz", &rd); err != nil {
			return "?"
		}
		return rd.Release.ID
	}
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	wait := startLoad(lctx, r)
	var outs []handoffOutcome
	actErr := func() error {
		if err := sleepUntil(ctx, r, c.Baseline); err != nil {
			return err
		}
		for _, k := range steps {
			o := handoffOutcome{step: k}
			o.release[0] = release()
			logPath := filepath.Join(st.Dir, "logs", "router.log")
			offset := fileSize(logPath)
			r.Mark(k.name)
			c.logf("%s at %.1fs", k.name, r.Elapsed().Seconds())
			o.from = r.Elapsed()
			_, child, err := d.Replace(ctx, "router", k.spec.Apply)
			if err == nil {
				err = devstack.WaitReady(ctx, admin, 30*time.Second, child)
			}
			o.to, o.err = r.Elapsed(), err
			if k.fails != (err != nil) {
				return fmt.Errorf("%s: %v", k.name, err)
			}
			if err := sleepUntil(ctx, r, o.to+handoffGap); err != nil {
				return err
			}
			o.release[1] = release()
			o.drained = drainOf(logPath, offset)
			c.logf("%s: %.1fs, drained %+v, %v", k.name, (o.to - o.from).Seconds(), o.drained, err)
			outs = append(outs, o)
		}
		return sleepUntil(ctx, r, r.Elapsed()+c.After)
	}()
	stopLoad()
	res, err := loadEnded("handoff", wait, actErr)
	if err != nil {
		return res, err
	}
	v := &loadtest.Verdict{Name: "handoff"}
	// The baseline leaves out the stack's first seconds under the load
	// (connections opened, caches and pools filled): a third of it.
	base := loadtest.Window{From: max(2*time.Second, c.Baseline/3), To: c.Baseline}.Stats(res.Samples)
	v.Note("baseline: %d requests at %.0f/s (%.0f%% status reads, %.0f%% each on a new connection), p99 %s", base.N, c.Rate, 100*c.ReadShare, 100*c.NewConnShare, msf(base.P99))
	// The failed start is the control: the same processes started (a
	// supervisor and a router) and ended, with no handover; what it costs
	// the tail is what starting a process costs this host under this load,
	// which each handoff's line compares itself with too.
	var control time.Duration
	for _, o := range outs {
		if o.step.fails {
			control = loadtest.Window{From: o.from, To: o.to + handoffGap}.Stats(res.Samples).P99
		}
	}
	for _, o := range outs {
		w := loadtest.Window{From: o.from, To: o.to + handoffGap}
		s := w.Stats(res.Samples)
		refused, failed := refusedAndFailed(res.Samples, w)
		v.Check(o.step.name+": connections refused", refused == 0, fmt.Sprintf("%d of %d", refused, s.N), "0")
		v.Check(o.step.name+": requests failed", failed == 0, fmt.Sprintf("%d of %d %v", failed, s.N, s.Status), "0")
		if o.step.fails {
			v.Check(o.step.name+": the old router serves on", o.err != nil && strings.Contains(o.err.Error(), "the old one serves on") && o.release[1] == o.release[0],
				fmt.Sprintf("%s; release %s; p99 %s", refusal(o.err), o.release[1], msf(s.P99)), "refused, release unchanged")
			continue
		}
		v.Check(o.step.name+": p99 over the handoff", s.P99 <= 2*base.P99,
			fmt.Sprintf("%s in %.1fs (%.1f× baseline, %.1f× the failed start's)", msf(s.P99), (o.to+handoffGap-o.from).Seconds(), ratio(s.P99, base.P99), ratio(s.P99, control)),
			"≤ 2× "+msf(base.P99))
		v.Check(o.step.name+": the old router drained, nothing cut", o.drained.found && o.drained.Cut == 0,
			fmt.Sprintf("%d connections: %d after their answer, %d idle, %d cut", o.drained.Conns, o.drained.AfterAnswer, o.drained.Idle, o.drained.Cut), "0 cut")
		if o.step.spec.Bin != "" {
			v.Check(o.step.name+": the new build serves", o.release[1] != o.release[0] && strings.HasPrefix(o.release[1], "next@"),
				o.release[0]+" → "+o.release[1], "next@…")
		}
	}
	c.logf("verifying %d accepted ids...", countAccepted(res.Samples))
	v.CheckVerification(r.Verify(ctx, res.Samples, c.VerifyWithin, c.Replays))
	v.Finish()
	res.Drill = v
	return res, nil
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
