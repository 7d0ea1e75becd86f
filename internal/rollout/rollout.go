// Package rollout drives a release through the cells wave by wave: within
// a cell one instance at a time (out of the routers' rotation, replaced,
// ready on the new release, back in), then a bake during which the gates
// compare the wave's cells with those still on the old release; a failed
// gate, a process that does not get ready or a bake without enough
// samples halts it, and halting rolls the wave's cells back. The state
// is the rollout's record beside the map (control.Rollout), written at
// every step, so that another cellctl resumes it.
package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/gate"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// Deployer replaces a stack's process (by name) with what run makes of
// it, and returns it as it ran before (devstack.Deployer).
type Deployer interface {
	Replace(ctx context.Context, name string, run func(devstack.Process) devstack.Process) (before devstack.Process, c *devstack.Child, err error)
}

// Config is how a rollout runs.
type Config struct {
	// Spec is the release: a binary and flags set.
	Spec devstack.Spec
	Gate gate.Config
	// Scrape is how often a bake reads the cells' metrics.
	Scrape time.Duration
	// WaitLimit is how long past its bake a wave may wait for the gates'
	// samples before the rollout halts (fail closed).
	WaitLimit time.Duration
	// ReadyWithin bounds a replaced process's wait for readiness.
	ReadyWithin time.Duration
	// Settle is how long an instance taken out of rotation is left before
	// it is replaced, for the routers to follow the map.
	Settle time.Duration
}

// DefaultConfig: scrape every 5 s, no wait for samples past the bake
// (cellctl gives one more bake), a minute to get ready, 3 s for the
// routers.
func DefaultConfig() Config {
	return Config{Gate: gate.DefaultConfig(), Scrape: 5 * time.Second, ReadyWithin: time.Minute, Settle: 3 * time.Second}
}

// Options are the rollout's collaborators.
type Options struct {
	Control  *control.Controller
	Admin    adminclient.Client
	Deployer Deployer
	// Progress hears each step as a line (nil: none).
	Progress func(string)
	Now      func() time.Time
}

// Runner drives one rollout.
type Runner struct {
	cfg  Config
	opts Options
	id   string
}

// New is a runner of the registry's rollout id.
func New(id string, cfg Config, opts Options) *Runner {
	d := DefaultConfig()
	if cfg.Scrape <= 0 {
		cfg.Scrape = d.Scrape
	}
	if cfg.ReadyWithin <= 0 {
		cfg.ReadyWithin = d.ReadyWithin
	}
	if cfg.Gate == (gate.Config{}) {
		cfg.Gate = d.Gate
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Runner{cfg: cfg, opts: opts, id: id}
}

func (r *Runner) say(format string, args ...any) {
	if r.opts.Progress != nil {
		r.opts.Progress(fmt.Sprintf(format, args...))
	}
}

// update changes the record and says what happened in it and on Progress.
func (r *Runner) update(ctx context.Context, event string, change func(*control.Rollout)) (*control.Rollout, error) {
	ro, err := r.opts.Control.UpdateRollout(ctx, r.id, func(ro *control.Rollout) error {
		change(ro)
		if event != "" {
			ro.Events = append(ro.Events, control.RolloutEvent{At: r.opts.Now(), Text: event})
		}
		return nil
	})
	if err == nil && event != "" {
		r.say("%s", event)
	}
	return ro, err
}

// Run goes on with the rollout from where its record stands until it is
// done, halted and rolled back, paused or aborted (by another cellctl,
// seen between steps), or ctx ends.
func (r *Runner) Run(ctx context.Context) (*control.Rollout, error) {
	ro, err := r.opts.Control.Rollout(ctx)
	if err != nil {
		return nil, err
	}
	for {
		if ro.ID != r.id {
			return ro, fmt.Errorf("the registry's rollout is %s, not %s", ro.ID, r.id)
		}
		switch ro.State {
		case control.RolloutHalted:
			return r.rollBack(ctx, ro)
		case control.RolloutRunning:
		default:
			return ro, nil
		}
		if ro.Wave >= len(ro.Waves) {
			return r.update(ctx, "every wave out and baked: done", func(ro *control.Rollout) { ro.State = control.RolloutDone })
		}
		if ro, err = r.wave(ctx, ro); err != nil {
			return ro, err
		}
	}
}

// wave replaces the cells of the wave in progress not yet replaced, then
// bakes it: the record comes back with the next wave, or halted.
func (r *Runner) wave(ctx context.Context, ro *control.Rollout) (*control.Rollout, error) {
	w := ro.Waves[ro.Wave]
	for _, cell := range w.Cells {
		if p := ro.Cells[cell].Phase; p == "baking" || p == "done" {
			continue
		}
		var err error
		if ro, err = r.replaceCell(ctx, ro, cell); err != nil {
			var halt haltError
			if errors.As(err, &halt) {
				return r.update(ctx, "halted: "+halt.Error(), func(ro *control.Rollout) {
					ro.State, ro.Reason = control.RolloutHalted, halt.Error()
				})
			}
			return ro, err
		}
	}
	return r.bake(ctx, ro)
}

// haltError is a reason to halt the rollout (not a failure of cellctl).
type haltError struct{ why string }

func (h haltError) Error() string { return h.why }

// replaceCell replaces cell's instances one at a time.
func (r *Runner) replaceCell(ctx context.Context, ro *control.Rollout, cell string) (*control.Rollout, error) {
	m, err := r.opts.Control.Load(ctx)
	if err != nil {
		return ro, err
	}
	c, ok := m.Cell(cell)
	if !ok {
		return ro, haltError{fmt.Sprintf("cell %s is no longer in the map", cell)}
	}
	type target struct{ id, admin string }
	targets := []target{{"", c.Admin}}
	if len(c.Instances) > 0 {
		targets = targets[:0]
		for _, in := range c.Instances {
			targets = append(targets, target{in.ID, in.Admin})
		}
	}
	ro, err = r.update(ctx, "replacing "+cell, func(ro *control.Rollout) {
		cr := ro.Cells[cell]
		cr.Phase = "replacing"
		setCell(ro, cell, cr)
	})
	if err != nil {
		return ro, err
	}
	for _, t := range targets {
		rel, replaced := ro.Cells[cell].Instances[instanceKey(t.id)]
		switch {
		case replaced && rel != "":
			continue // replaced and ready before a resume
		case replaced:
			// Replaced, not yet seen ready, when the last cellctl stopped:
			// its record holds what ran before; only the wait is left.
			err = r.finishInstance(ctx, cell, t.id, t.admin, ro.From, len(targets) > 1)
		default:
			err = r.replaceInstance(ctx, cell, t.id, t.admin, len(targets) > 1)
		}
		if err != nil {
			return ro, err
		}
		ro, err = r.opts.Control.Rollout(ctx)
		if err != nil {
			return ro, err
		}
	}
	return r.update(ctx, cell+" runs the new release: baking", func(ro *control.Rollout) {
		cr := ro.Cells[cell]
		cr.Phase = "baking"
		setCell(ro, cell, cr)
	})
}

func instanceKey(id string) string {
	if id == "" {
		return "-"
	}
	return id
}

func setCell(ro *control.Rollout, cell string, cr control.CellRollout) {
	if ro.Cells == nil {
		ro.Cells = map[string]control.CellRollout{}
	}
	ro.Cells[cell] = cr
}

// replaceInstance takes one process out of rotation (an instance of
// several), replaces it, waits until it is ready on another release, and
// puts it back. What it ran before is recorded first, for a rollback.
func (r *Runner) replaceInstance(ctx context.Context, cell, instance, admin string, rotate bool) error {
	name := devstack.InstanceName(cell, instance)
	old, err := r.opts.Admin.Status(ctx, admin)
	oldRelease := ""
	if err == nil {
		oldRelease = old.Release.ID
	}
	if rotate {
		if err := r.rotation(ctx, cell, instance, true); err != nil {
			return err
		}
		sleep(ctx, r.cfg.Settle)
	}
	before, _, rerr := r.opts.Deployer.Replace(ctx, name, r.cfg.Spec.Apply)
	if before.Name == "" {
		return haltError{fmt.Sprintf("replace %s: %v", name, rerr)}
	}
	// What ran before is recorded even when the new one did not start:
	// the rollback puts it back.
	prev, err := json.Marshal(before)
	if err != nil {
		return err
	}
	if _, err := r.update(ctx, fmt.Sprintf("%s replaced (was %s)", name, orDash(oldRelease)), func(ro *control.Rollout) {
		cr := ro.Cells[cell]
		if cr.Instances == nil {
			cr.Instances, cr.Previous = map[string]string{}, map[string]string{}
		}
		cr.Previous[instanceKey(instance)] = string(prev)
		cr.Instances[instanceKey(instance)] = ""
		setCell(ro, cell, cr)
		if ro.From == "" {
			ro.From = oldRelease
		}
	}); err != nil {
		return err
	}
	if rerr != nil {
		return haltError{fmt.Sprintf("replace %s: %v", name, rerr)}
	}
	return r.finishInstance(ctx, cell, instance, admin, oldRelease, rotate)
}

// finishInstance waits until a replaced process is ready on a release
// other than old, records it and puts it back in rotation.
func (r *Runner) finishInstance(ctx context.Context, cell, instance, admin, old string, rotate bool) error {
	name := devstack.InstanceName(cell, instance)
	rel, err := r.waitReady(ctx, admin, old)
	if err != nil {
		return haltError{fmt.Sprintf("%s: %v", name, err)}
	}
	if _, err := r.update(ctx, fmt.Sprintf("%s ready on %s", name, rel), func(ro *control.Rollout) {
		cr := ro.Cells[cell]
		cr.Instances[instanceKey(instance)] = rel
		setCell(ro, cell, cr)
		if ro.Release == "" {
			ro.Release = rel
		}
	}); err != nil {
		return err
	}
	if rotate {
		return r.rotation(ctx, cell, instance, false)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (r *Runner) rotation(ctx context.Context, cell, instance string, drain bool) error {
	_, err := r.opts.Control.Apply(ctx, control.Change{Plan: control.SetInstanceRotation(cell, instance, drain)})
	if err != nil && !errors.Is(err, slotmap.ErrInvalid) {
		return err
	}
	return nil
}

// waitReady polls the admin API until the process is ready on a release
// other than old; one that does not within ReadyWithin halts the rollout.
func (r *Runner) waitReady(ctx context.Context, admin, old string) (string, error) {
	deadline := r.opts.Now().Add(r.cfg.ReadyWithin)
	last := "no answer"
	for {
		st, err := r.opts.Admin.Status(ctx, admin)
		switch {
		case err != nil:
			last = err.Error()
		case !st.Ready:
			last = "not ready: " + st.NotReady()
		case st.Release.ID == "" || st.Release.ID == old:
			last = "ready on the old release " + orDash(st.Release.ID)
		default:
			return st.Release.ID, nil
		}
		if !r.opts.Now().Before(deadline) {
			return "", fmt.Errorf("not ready on the new release within %v (%s)", r.cfg.ReadyWithin, last)
		}
		if !sleep(ctx, 250*time.Millisecond) {
			return "", ctx.Err()
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// bake watches the wave's cells against the cells not yet reached for the
// wave's bake time, scraping every Scrape: a gate that fails halts at
// once; at the end the gates must pass, waiting for samples up to
// WaitLimit more.
func (r *Runner) bake(ctx context.Context, ro *control.Rollout) (*control.Rollout, error) {
	w := ro.Waves[ro.Wave]
	waveAdmins, baseAdmins, err := r.admins(ctx, ro)
	if err != nil {
		return ro, err
	}
	start := r.opts.Now()
	before := r.scrape(ctx, waveAdmins, baseAdmins)
	limit := w.Bake + r.cfg.WaitLimit
	for {
		if !sleep(ctx, r.cfg.Scrape) {
			return ro, ctx.Err()
		}
		now := r.scrape(ctx, waveAdmins, baseAdmins)
		waveW, baseW := now.window(before)
		vs := r.cfg.Gate.Judge(waveW, baseW)
		d, elapsed := gate.Overall(vs), r.opts.Now().Sub(start)
		figures := verdictText(vs)
		if cur, err := r.opts.Control.Rollout(ctx); err == nil && cur.State != control.RolloutRunning {
			return cur, nil // paused or aborted meanwhile
		}
		switch {
		case d == gate.Fail:
			why := fmt.Sprintf("wave %d failed its gates after %v: %s", ro.Wave+1, elapsed.Round(time.Second), figures)
			return r.update(ctx, "halted: "+why, func(ro *control.Rollout) { ro.State, ro.Reason = control.RolloutHalted, why })
		case elapsed >= w.Bake && d == gate.Pass:
			return r.update(ctx, fmt.Sprintf("wave %d baked %v: %s", ro.Wave+1, elapsed.Round(time.Second), figures), func(ro *control.Rollout) {
				for _, c := range w.Cells {
					cr := ro.Cells[c]
					cr.Phase = "done"
					setCell(ro, c, cr)
				}
				ro.Wave++
				ro.Reason = ""
			})
		case elapsed >= limit:
			why := fmt.Sprintf("wave %d had too few samples after %v: %s", ro.Wave+1, elapsed.Round(time.Second), figures)
			return r.update(ctx, "halted: "+why, func(ro *control.Rollout) { ro.State, ro.Reason = control.RolloutHalted, why })
		}
		r.say("wave %d baking %v of %v: %s", ro.Wave+1, elapsed.Round(time.Second), w.Bake, figures)
	}
}

func verdictText(vs []gate.Verdict) string {
	var parts []string
	for _, v := range vs {
		parts = append(parts, v.Decision.String()+" "+v.Text)
	}
	return strings.Join(parts, "; ")
}

// admins are the admin URLs of the wave's processes and of the cells not
// yet reached (the baseline): every instance of each.
func (r *Runner) admins(ctx context.Context, ro *control.Rollout) (wave, base []string, err error) {
	m, err := r.opts.Control.Load(ctx)
	if err != nil {
		return nil, nil, err
	}
	inWave := ro.Waves[ro.Wave].Cells
	for _, c := range m.Cells() {
		if c.State != slotmap.Active {
			continue
		}
		urls := []string{c.Admin}
		if len(c.Instances) > 0 {
			urls = urls[:0]
			for _, in := range c.Instances {
				urls = append(urls, in.Admin)
			}
		}
		switch {
		case slices.Contains(inWave, c.ID):
			wave = append(wave, urls...)
		case ro.Cells[c.ID].Phase == "":
			base = append(base, urls...)
		}
	}
	return wave, base, nil
}

// scrapes are the samples of the wave's and the baseline's processes at
// one moment, by admin URL (a process that did not answer is left out).
type scrapes struct{ wave, base map[string]gate.Sample }

func (r *Runner) scrape(ctx context.Context, wave, base []string) scrapes {
	get := func(urls []string) map[string]gate.Sample {
		out := map[string]gate.Sample{}
		for _, u := range urls {
			if mfs, err := r.opts.Admin.Metrics(ctx, u); err == nil {
				out[u] = gate.SampleOf(mfs)
			}
		}
		return out
	}
	return scrapes{wave: get(wave), base: get(base)}
}

// window is the wave's and the baseline's counts since before.
func (s scrapes) window(before scrapes) (wave, base gate.Sample) {
	sum := func(now, then map[string]gate.Sample) gate.Sample {
		var ws []gate.Sample
		for u, n := range now {
			if b, ok := then[u]; ok {
				ws = append(ws, n.Since(b))
			}
		}
		return gate.Sum(ws...)
	}
	return sum(s.wave, before.wave), sum(s.base, before.base)
}

// rollBack puts every process the rollout replaced in the wave in progress
// back as it ran before, instance by instance; cells of earlier waves
// (done, baked) and cells not reached are left alone.
func (r *Runner) rollBack(ctx context.Context, ro *control.Rollout) (*control.Rollout, error) {
	if ro.Wave >= len(ro.Waves) {
		return ro, nil
	}
	for _, cell := range ro.Waves[ro.Wave].Cells {
		cr := ro.Cells[cell]
		if cr.Phase == "" || cr.Phase == "rolled_back" {
			continue
		}
		keys := make([]string, 0, len(cr.Previous))
		for k := range cr.Previous {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			var before devstack.Process
			if err := json.Unmarshal([]byte(cr.Previous[k]), &before); err != nil {
				return ro, fmt.Errorf("the record of %s/%s: %w", cell, k, err)
			}
			if err := r.restore(ctx, cell, k, before, cr.Instances[k]); err != nil {
				return ro, err
			}
		}
		var err error
		if ro, err = r.update(ctx, cell+" rolled back", func(ro *control.Rollout) {
			c := ro.Cells[cell]
			c.Phase = "rolled_back"
			setCell(ro, cell, c)
		}); err != nil {
			return ro, err
		}
	}
	return r.update(ctx, "rolled back: "+ro.Reason, func(ro *control.Rollout) { ro.State = control.RolloutRolledBack })
}

// restore puts one process back as it ran before: out of rotation (an
// instance of several), replaced, ready on a release other than the one
// it was rolled to (when it got that far), back in rotation.
func (r *Runner) restore(ctx context.Context, cell, key string, before devstack.Process, rolledTo string) error {
	instance := key
	if key == "-" {
		instance = ""
	}
	m, err := r.opts.Control.Load(ctx)
	if err != nil {
		return err
	}
	c, ok := m.Cell(cell)
	if !ok {
		return fmt.Errorf("roll back %s: the cell is no longer in the map", before.Name)
	}
	admin, rotate := c.Admin, false
	if i := slices.IndexFunc(c.Instances, func(in slotmap.Instance) bool { return in.ID == instance }); i >= 0 {
		admin, rotate = c.Instances[i].Admin, true
	}
	if rotate {
		if err := r.rotation(ctx, cell, instance, true); err != nil {
			return err
		}
		sleep(ctx, r.cfg.Settle)
	}
	if _, _, err := r.opts.Deployer.Replace(ctx, before.Name, func(devstack.Process) devstack.Process { return before }); err != nil {
		return fmt.Errorf("roll back %s: %w", before.Name, err)
	}
	if _, err := r.waitReady(ctx, admin, rolledTo); err != nil {
		return fmt.Errorf("roll back %s: %w", before.Name, err)
	}
	r.say("%s put back as it ran before", before.Name)
	if rotate {
		return r.rotation(ctx, cell, instance, false)
	}
	return nil
}
