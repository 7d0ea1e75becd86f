package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/gate"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// panel is what a bake watches: the wave's processes and the baseline's
// (those still on the old release), and for a wave of cells the cells'
// ids and the routers whose figures for them are read too.
type panel struct {
	router               bool
	wave, base           []proc
	waveCells, baseCells []string
	routers              []string
}

// panel is the wave in progress's panel: for cells, every instance of the
// wave's cells and of the cells not yet reached; for routers, the wave's
// and the stack's routers not yet reached — or, for the last ones, the
// routers already baked on the new release, which passed their own bake
// against the old one in the same window (a comparison over one window,
// however noisy the traffic, is worth more than one over two).
func (r *Runner) panel(ctx context.Context, ro *control.Rollout) (panel, error) {
	w := ro.Waves[ro.Wave]
	if len(w.Routers) > 0 {
		pn := panel{router: true}
		ps, err := r.opts.Deployer.Processes()
		if err != nil {
			return pn, err
		}
		var baked []proc
		for _, p := range ps {
			if !devstack.IsRouter(p.Name) {
				continue
			}
			rp, err := routerProc(p)
			if err != nil {
				return pn, err
			}
			switch phase := ro.Routers[p.Name].Phase; {
			case slices.Contains(w.Routers, p.Name):
				pn.wave = append(pn.wave, rp)
			case !phase.Reached():
				pn.base = append(pn.base, rp)
			case phase == control.PhaseDone:
				baked = append(baked, rp)
			}
		}
		if len(pn.base) == 0 {
			pn.base = baked
		}
		return pn, nil
	}
	var pn panel
	m, err := r.opts.Control.Load(ctx)
	if err != nil {
		return pn, err
	}
	for _, c := range m.Cells() {
		if c.State != slotmap.Active {
			continue
		}
		inWave := slices.Contains(w.Cells, c.ID)
		if !inWave && ro.Cells[c.ID].Phase.Reached() {
			continue // an earlier wave's: on the new release already
		}
		ps, err := r.procs(ctx, c.ID, false)
		if err != nil {
			return pn, err
		}
		if inWave {
			pn.wave, pn.waveCells = append(pn.wave, ps...), append(pn.waveCells, c.ID)
		} else {
			pn.base, pn.baseCells = append(pn.base, ps...), append(pn.baseCells, c.ID)
		}
	}
	if r.opts.Routers != nil {
		if pn.routers, err = r.opts.Routers(ctx); err != nil {
			r.say("the routers' figures are left out of the gates: %v", err)
		}
	}
	return pn, nil
}

// seen is one process's scrape: its figures, start time and readiness (ok
// false: it did not answer); a router read for a cell's wave, its
// figures by cell.
type seen struct {
	sample  gate.Sample
	edge    map[string]gate.Edge
	started float64
	ready   bool
	ok      bool
}

// look is the panel's processes (and routers) at one moment, by admin URL.
type look struct{ procs, routers map[string]seen }

func (r *Runner) look(ctx context.Context, pn panel) look {
	l := look{procs: map[string]seen{}, routers: map[string]seen{}}
	for _, p := range append(slices.Clone(pn.wave), pn.base...) {
		var s seen
		if mfs, err := r.opts.Admin.Metrics(ctx, p.admin); err == nil {
			s.ok, s.started = true, gate.StartedOf(mfs)
			if p.router {
				// A router's readiness is only on its /readyz.
				s.sample = gate.RouterSampleOf(mfs)
				_, s.ready, _ = r.release(ctx, p)
			} else {
				s.sample, s.ready = gate.SampleOf(mfs), gate.ReadyOf(mfs)
			}
		}
		l.procs[p.admin] = s
	}
	for _, u := range pn.routers {
		if mfs, err := r.opts.Admin.Metrics(ctx, u); err == nil {
			l.routers[u] = seen{ok: true, edge: gate.EdgeOf(mfs)}
		}
	}
	return l
}

// tracker counts each process's crash restarts and readiness losses
// from one look to the next.
type tracker map[string]*tracked

type tracked struct {
	started float64
	ready   bool
	health  gate.Health
}

func (t tracker) observe(l look) {
	for u, s := range l.procs {
		tr, ok := t[u]
		if !ok {
			t[u] = &tracked{started: s.started, ready: s.ready}
			continue
		}
		if s.ok && s.started != 0 && tr.started != 0 && s.started != tr.started {
			tr.health.Restarts++
		}
		if tr.ready && !s.ready {
			tr.health.Flaps++
		}
		if s.ok && s.started != 0 {
			tr.started = s.started
		}
		tr.ready = s.ready
	}
}

// window is the figures of procs since before, with their health.
func window(procs []proc, before, now look, t tracker) gate.Sample {
	var ws []gate.Sample
	for _, p := range procs {
		var w gate.Sample
		if n, ok := now.procs[p.admin]; ok && n.ok {
			w = n.sample
			if b, ok := before.procs[p.admin]; ok && b.ok {
				w = n.sample.Since(b.sample)
			}
		}
		if tr := t[p.admin]; tr != nil {
			w.Health = tr.health
		}
		ws = append(ws, w)
	}
	return gate.Sum(ws...)
}

// edge adds to s what the routers saw of cells since before.
func edge(s *gate.Sample, cells []string, before, now look) {
	for u, n := range now.routers {
		b, ok := before.routers[u]
		if !ok {
			continue
		}
		s.Routers++
		for _, c := range cells {
			w := n.edge[c].Since(b.edge[c])
			s.Edge.Total += w.Requests.Total
			s.Edge.Failed += w.Requests.Failed
			s.EdgeLatency = s.EdgeLatency.Add(w.Latency)
		}
	}
}

// judge is the gates' verdicts on the panel's window.
func (r *Runner) judge(pn panel, waveW, baseW gate.Sample) []gate.Verdict {
	if pn.router {
		return r.cfg.Gate.JudgeRouters(waveW, baseW)
	}
	return r.cfg.Gate.Judge(waveW, baseW)
}

// windows are the wave's and the baseline's figures since before (a wave
// of routers with no other router: the reference measured before they
// were replaced).
func (r *Runner) windows(wave int, pn panel, before, now look, t tracker) (waveW, baseW gate.Sample) {
	waveW, baseW = window(pn.wave, before, now, t), window(pn.base, before, now, t)
	if pn.router {
		if ref, ok := r.reference[wave]; ok && len(pn.base) == 0 {
			baseW = ref
		}
		return waveW, baseW
	}
	edge(&waveW, pn.waveCells, before, now)
	edge(&baseW, pn.baseCells, before, now)
	return waveW, baseW
}

// measureReference, for a wave of routers that no other router can be
// compared with (a single router), reads the wave's routers for the
// wave's bake before they are replaced: their own figures are the
// baseline. Not on a resume past their replacement.
func (r *Runner) measureReference(ctx context.Context, ro *control.Rollout) error {
	w := ro.Waves[ro.Wave]
	if _, ok := r.reference[ro.Wave]; ok {
		return nil
	}
	for _, name := range w.Routers {
		if ro.Routers[name].Phase.Reached() {
			return nil
		}
	}
	pn, err := r.panel(ctx, ro)
	if err != nil || len(pn.base) > 0 {
		return err
	}
	r.say("no other router to compare %s with: reading its figures for %v before it is replaced", strings.Join(w.Routers, ", "), w.Bake)
	t := tracker{}
	before := r.look(ctx, pn)
	t.observe(before)
	for start := r.opts.Now(); r.opts.Now().Sub(start) < w.Bake; {
		if !sleep(ctx, min(r.cfg.Scrape, w.Bake)) {
			return ctx.Err()
		}
		t.observe(r.look(ctx, pn))
	}
	now := r.look(ctx, pn)
	t.observe(now)
	r.reference[ro.Wave] = window(pn.wave, before, now, t)
	return nil
}

// step is one judgement of a bake: how long it has run, the gates'
// verdicts and their decision.
type step struct {
	elapsed  time.Duration
	verdicts []gate.Verdict
	decision gate.Decision
}

// watch judges pn's wave against its baseline every Scrape, over the
// window since its first look, until the judgement is final: a gate
// failed, the gates passed once bake is over, or bake and WaitLimit are
// over (too few samples). Each step goes to each first (nil: none); an
// error from each ends the watch.
func (r *Runner) watch(ctx context.Context, wave int, pn panel, bake time.Duration, each func(step) error) (step, error) {
	start := r.opts.Now()
	t := tracker{}
	before := r.look(ctx, pn)
	t.observe(before)
	for {
		if !sleep(ctx, r.cfg.Scrape) {
			return step{}, ctx.Err()
		}
		now := r.look(ctx, pn)
		t.observe(now)
		waveW, baseW := r.windows(wave, pn, before, now, t)
		vs := r.judge(pn, waveW, baseW)
		if r.cfg.Prometheus != "" {
			vs = append(vs, r.alertVerdict(ctx, pn))
		}
		s := step{elapsed: r.opts.Now().Sub(start), verdicts: vs, decision: gate.Overall(vs)}
		if each != nil {
			if err := each(s); err != nil {
				return s, err
			}
		}
		if s.decision == gate.Fail || (s.elapsed >= bake && s.decision == gate.Pass) || s.elapsed >= bake+r.cfg.WaitLimit {
			return s, nil
		}
	}
}

// errStopped ends a bake whose rollout was paused or aborted meanwhile.
var errStopped = errors.New("the rollout is no longer running")

// bake watches the wave against the baseline for the wave's bake time,
// recording each judgement in the record: a gate that fails halts at
// once; at the end the gates must pass, waiting for samples up to
// WaitLimit more.
func (r *Runner) bake(ctx context.Context, ro *control.Rollout) (*control.Rollout, error) {
	w := ro.Waves[ro.Wave]
	pn, err := r.panel(ctx, ro)
	if err != nil {
		return ro, err
	}
	started := r.opts.Now()
	s, err := r.watch(ctx, ro.Wave, pn, w.Bake, func(s step) error {
		_, err := r.opts.Control.UpdateRollout(ctx, r.id, func(cur *control.Rollout) error {
			if cur.State != control.RolloutRunning {
				return errStopped
			}
			if err := r.stillHeld(cur); err != nil {
				return err
			}
			cur.Bake = &control.BakeStatus{Wave: ro.Wave, Started: started, Bake: w.Bake, Judged: r.opts.Now(),
				Decision: s.decision.String(), Gates: verdictLines(s.verdicts)}
			return nil
		})
		switch {
		case errors.Is(err, errStopped), errors.Is(err, errTakenOver):
			return err
		case err != nil:
			r.say("wave %d: the record not updated: %v", ro.Wave+1, err)
		default:
			r.held = true
		}
		r.say("wave %d baking %v of %v: %s", ro.Wave+1, s.elapsed.Round(time.Second), w.Bake, verdictText(s.verdicts))
		return nil
	})
	switch {
	case errors.Is(err, errStopped):
		return r.opts.Control.Rollout(ctx) // paused or aborted meanwhile
	case err != nil:
		return ro, err
	}
	figures, elapsed := verdictText(s.verdicts), s.elapsed.Round(time.Second)
	switch s.decision {
	case gate.Fail:
		why := fmt.Sprintf("wave %d failed its gates after %v: %s", ro.Wave+1, elapsed, figures)
		return r.update(ctx, "halted: "+why, func(ro *control.Rollout) { ro.State, ro.Reason = control.RolloutHalted, why })
	case gate.Pass:
		return r.update(ctx, fmt.Sprintf("wave %d baked %v: %s", ro.Wave+1, elapsed, figures), func(ro *control.Rollout) {
			router := len(w.Routers) > 0
			for _, u := range w.Units() {
				cr := ro.Progress(router)[u]
				cr.Phase = control.PhaseDone
				ro.SetProgress(router, u, cr)
			}
			ro.Wave++
			ro.Reason = ""
		})
	}
	why := fmt.Sprintf("wave %d had too few samples after %v: %s", ro.Wave+1, elapsed, figures)
	return r.update(ctx, "halted: "+why, func(ro *control.Rollout) { ro.State, ro.Reason = control.RolloutHalted, why })
}

func verdictLines(vs []gate.Verdict) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Decision.String() + " " + v.Text
	}
	return out
}

func verdictText(vs []gate.Verdict) string { return strings.Join(verdictLines(vs), "; ") }
