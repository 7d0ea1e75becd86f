package drill

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/freeport"
	"github.com/cellkit/cellkit/internal/loadtest"
)

// Alert timing of a drill's Prometheus: scrapes, rule evaluations and
// target file reloads every second.
const (
	promInterval = time.Second
	alertPoll    = 500 * time.Millisecond
)

// The kill drill's alert bounds. CellkitCellDown has `for: 30s`: it fires at
// most a scrape, an evaluation and a poll of the drill (2.5 s) after 30 s
// of the cell down; the rest is margin for this shared machine. It
// resolves at the first evaluation after the restarted cell is scraped
// ready.
const (
	CellDownBound = 40 * time.Second // from the kill to firing
	ResolveBound  = 15 * time.Second // from the restarted cell's readiness to resolved
)

// checkCellDownAlert checks the alerts a kill drill saw: the killed cell's
// down alert fired within CellDownBound and resolved within ResolveBound of
// its readiness; no alert fired for another cell. Every alert seen is a
// note.
func checkCellDownAlert(d *loadtest.Verdict, seen []AlertSeen, cell string, killAt, readyAt time.Duration) {
	var down *AlertSeen
	var others []string
	for i, a := range seen {
		d.Note("alert %s: pending at %s, firing at %s, resolved at %s", a.Key(), atText(a.Pending), atText(a.Firing), atText(a.Resolved))
		switch {
		case a.Name == "CellkitCellDown" && a.Labels["cell"] == cell && a.Firing >= 0 && down == nil:
			down = &seen[i]
		case a.Labels["cell"] != "" && a.Labels["cell"] != cell && a.Firing >= 0:
			others = append(others, a.Key())
		}
	}
	fired, resolved := "never", "-"
	if down != nil {
		fired = sinceText(down.Firing, killAt) + " after the kill"
		resolved = sinceText(down.Resolved, readyAt) + " after " + cell + " was ready"
		if down.Resolved < 0 {
			resolved = "never"
		}
	}
	d.Check("alert CellkitCellDown{cell="+cell+"} fires", down != nil && down.Firing-killAt <= CellDownBound, fired, "≤ "+CellDownBound.String())
	d.Check("alert CellkitCellDown{cell="+cell+"} resolves", down != nil && down.Resolved >= 0 && down.Resolved-readyAt <= ResolveBound,
		resolved, "≤ "+ResolveBound.String())
	d.Check("alerts for the other cells", len(others) == 0, fmt.Sprintf("%d %v", len(others), others), "0")
}

// PanicAlertBound is how soon after a poison inquiry is accepted
// CellkitInquiryPanics must fire for its cell: the panic (the inquiry's
// first agency call, at once), a scrape, an evaluation and a poll of the
// drill (2.5 s: the rule has no `for`), and margin for this shared machine.
// It fires on the first panic only because the cell exports
// cellkit_cell_panics_total at 0 from its start.
const PanicAlertBound = 10 * time.Second

// checkPanicAlert checks that CellkitInquiryPanics fired for cell within
// PanicAlertBound of burstAt, and for no other cell.
func checkPanicAlert(d *loadtest.Verdict, seen []AlertSeen, cell string, burstAt time.Duration) {
	fired, others := firedFor(d, seen, "CellkitInquiryPanics", cell)
	what := "never"
	if fired != nil {
		what = sinceText(fired.Firing, burstAt) + " after the poison inquiries"
	}
	d.Check("alert CellkitInquiryPanics{cell="+cell+"} fires", fired != nil && fired.Firing-burstAt <= PanicAlertBound, what, "≤ "+PanicAlertBound.String())
	d.Check("alert CellkitInquiryPanics for the other cells", len(others) == 0, fmt.Sprintf("%d %v", len(others), others), "0")
}

// firedFor notes every alert seen and returns the firing of alert name for
// cell (nil if it never fired) and the keys of those that fired for other
// cells.
func firedFor(d *loadtest.Verdict, seen []AlertSeen, name, cell string) (fired *AlertSeen, others []string) {
	for i, a := range seen {
		d.Note("alert %s: pending at %s, firing at %s, resolved at %s", a.Key(), atText(a.Pending), atText(a.Firing), atText(a.Resolved))
		if a.Name != name || a.Firing < 0 {
			continue
		}
		if a.Labels["cell"] == cell {
			fired = &seen[i]
		} else {
			others = append(others, a.Key())
		}
	}
	return fired, others
}

// startPrometheus starts c.Prometheus against c.Stack with c.Rules, or
// returns nil when the drill runs without one.
func (c Config) startPrometheus(ctx context.Context) (*Prometheus, error) {
	if c.Prometheus == "" {
		return nil, nil
	}
	c.logf("starting prometheus (rules %s)...", c.Rules)
	return StartPrometheus(ctx, c.Prometheus, c.Rules, c.Stack)
}

// watchedLoad starts the drill's Prometheus if it has one, then its load
// runner for total, which the Prometheus watches (its alerts are read
// against the run's clock). The caller stops the Prometheus (nil without
// one) when the drill is done.
func (c Config) watchedLoad(ctx context.Context, total time.Duration) (*loadtest.Runner, *Prometheus, error) {
	prom, err := c.startPrometheus(ctx)
	if err != nil {
		return nil, nil, err
	}
	r, err := c.runner(total)
	if err != nil {
		prom.Stop()
		return nil, nil, err
	}
	if prom != nil {
		prom.Watch(ctx, r)
	}
	return r, prom, nil
}

func atText(at time.Duration) string {
	if at < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fs", at.Seconds())
}

// Prometheus is a real Prometheus server on loopback that scrapes the
// stack's processes (the targets file `cellctl dev up` writes) and
// evaluates the alert rules, so that a drill can check which alerts fire,
// for which cell, and when.
type Prometheus struct {
	child *devstack.Child
	url   string
	hc    *http.Client

	mu       sync.Mutex
	alerts   map[string]*AlertSeen // by alertname{labels}
	stop     chan struct{}
	done     chan struct{}
	watching bool
}

// AlertSeen is one alert as the drill saw it, times from the run's start
// (-1: never).
type AlertSeen struct {
	Name     string            `json:"name"`
	Labels   map[string]string `json:"labels"`
	Pending  time.Duration     `json:"pending"`
	Firing   time.Duration     `json:"firing"`
	Resolved time.Duration     `json:"resolved"`
}

// Key is the alert's name and labels, as Prometheus writes a series.
func (a *AlertSeen) Key() string { return alertKey(a.Name, a.Labels) }

func alertKey(name string, labels map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if k != "alertname" && k != "severity" {
			parts = append(parts, k+"="+labels[k])
		}
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

// StartPrometheus runs bin with the rules file against st's targets, its
// data and log in a directory of the stack, and waits until it is ready
// and has scraped every target once.
func StartPrometheus(ctx context.Context, bin, rules string, st *Stack) (*Prometheus, error) {
	targets := filepath.Join(st.Dir, "prometheus", "targets.json")
	if _, err := os.Stat(targets); err != nil {
		return nil, fmt.Errorf("prometheus: the stack has no targets file (%w): start it with this cellctl", err)
	}
	rules, err := filepath.Abs(rules)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(st.Dir, "prometheus", "server")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`global:
  scrape_interval: %[1]s
  scrape_timeout: %[1]s
  evaluation_interval: %[1]s
rule_files:
  - %[2]q
scrape_configs:
  - job_name: cellkit
    file_sd_configs:
      - files: [%[3]q]
        refresh_interval: %[1]s
`, promInterval, rules, targets)
	confPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	addr, err := freeport.Addr()
	if err != nil {
		return nil, err
	}
	child, err := devstack.Start(devstack.Process{
		Name: "prometheus", Bin: bin,
		Args: []string{"--config.file=" + confPath, "--storage.tsdb.path=" + filepath.Join(dir, "data"),
			"--web.listen-address=" + addr, "--log.level=warn"},
		Log:   filepath.Join(dir, "prometheus.log"),
		Ready: "http://" + addr + "/-/ready",
	})
	if err != nil {
		return nil, err
	}
	p := &Prometheus{child: child, url: "http://" + addr, hc: &http.Client{Timeout: 2 * time.Second},
		alerts: map[string]*AlertSeen{}, stop: make(chan struct{}), done: make(chan struct{})}
	if err := devstack.WaitReady(ctx, p.hc, 30*time.Second, child); err != nil {
		p.Stop()
		return nil, err
	}
	// Every target scraped and up once: the rules see a whole stack.
	want := len(st.Scraped())
	deadline := time.Now().Add(30 * time.Second)
	for {
		up, err := p.targetsUp(ctx)
		if err == nil && up >= want {
			break
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("prometheus: %d of %d targets up after 30s (%v); see %s", up, want, err, child.Log)
		}
		time.Sleep(promInterval)
	}
	return p, nil
}

// URL is the server's base URL.
func (p *Prometheus) URL() string { return p.url }

// targetsUp counts the active targets whose last scrape succeeded.
func (p *Prometheus) targetsUp(ctx context.Context) (int, error) {
	var body struct {
		Data struct {
			Active []struct {
				Health string `json:"health"`
			} `json:"activeTargets"`
		} `json:"data"`
	}
	if err := p.get(ctx, "/api/v1/targets?state=active", &body); err != nil {
		return 0, err
	}
	n := 0
	for _, t := range body.Data.Active {
		if t.Health == "up" {
			n++
		}
	}
	return n, nil
}

func (p *Prometheus) get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+path, nil)
	if err != nil {
		return err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("prometheus %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// Watch polls the alerts every alertPoll until Stop, recording when each
// was first pending, first firing and resolved, and marking firing and
// resolution on the run's chart.
func (p *Prometheus) Watch(ctx context.Context, r *loadtest.Runner) {
	p.watching = true
	go func() {
		defer close(p.done)
		t := time.NewTicker(alertPoll)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				p.poll(ctx, r)
			}
		}
	}()
}

func (p *Prometheus) poll(ctx context.Context, r *loadtest.Runner) {
	var body struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := p.get(ctx, "/api/v1/alerts", &body); err != nil {
		return // a missed poll; the next one sees the same state
	}
	now := r.Elapsed()
	p.mu.Lock()
	defer p.mu.Unlock()
	active := map[string]bool{}
	for _, a := range body.Data.Alerts {
		key := alertKey(a.Labels["alertname"], a.Labels)
		active[key] = true
		seen, ok := p.alerts[key]
		if !ok || seen.Resolved >= 0 {
			seen = &AlertSeen{Name: a.Labels["alertname"], Labels: a.Labels, Pending: now, Firing: -1, Resolved: -1}
			p.alerts[key] = seen
		}
		if a.State == "firing" && seen.Firing < 0 {
			seen.Firing = now
			r.Mark("alert " + key + " firing")
		}
	}
	for key, seen := range p.alerts {
		if !active[key] && seen.Resolved < 0 {
			seen.Resolved = now
			if seen.Firing >= 0 {
				r.Mark("alert " + key + " resolved")
			}
		}
	}
}

// Alerts returns what was seen, by key.
func (p *Prometheus) Alerts() []AlertSeen {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []AlertSeen
	for _, k := range slices.Sorted(maps.Keys(p.alerts)) {
		out = append(out, *p.alerts[k])
	}
	return out
}

// Stop ends the watch and the server; a nil Prometheus (a drill without
// one) has nothing to stop.
func (p *Prometheus) Stop() {
	if p == nil {
		return
	}
	select {
	case <-p.stop:
	default:
		close(p.stop)
		if p.watching {
			<-p.done
		}
	}
	_, _ = devstack.Stop(context.Background(), p.child.Process, 10*time.Second) // a cleanup: the drill's result is reported
}
