package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/gate"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// panel is what a bake watches: the wave's processes and its baselines'
// over the same window — those still on the old release, those of the
// earlier waves baked on the new one — and for a wave of cells the
// cells' ids and the routers whose figures for them are read too.
type panel struct {
	router                           bool
	wave, base, baked                []proc
	waveCells, baseCells, bakedCells []string
	routers                          []string
	// routersUnread says why the routers to read could not be listed:
	// the edge gates wait ("" listed, or none asked for).
	routersUnread string
}

// panel is the wave in progress's panel: for cells, every instance of the
// wave's cells, of the cells not yet reached and of the earlier waves'
// cells; for routers, the wave's, the deployer's routers not yet reached and
// the routers already baked on the new release.
func (r *Runner) panel(ctx context.Context, ro *control.Rollout) (panel, error) {
	w := ro.Waves[ro.Wave]
	if len(w.Routers) > 0 {
		pn := panel{router: true}
		ps, err := r.listed(ctx)
		if err != nil {
			return pn, err
		}
		for _, p := range ps {
			if !p.Router {
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
				pn.baked = append(pn.baked, rp)
			}
		}
		return pn, nil
	}
	var pn panel
	m, err := r.opts.Control.Load(ctx)
	if err != nil {
		return pn, err
	}
	listed, err := r.listed(ctx)
	if err != nil {
		return pn, err
	}
	for _, c := range m.Cells() {
		if c.State != slotmap.Active {
			continue
		}
		procs, cells := &pn.base, &pn.baseCells
		switch phase := ro.Cells[c.ID].Phase; {
		case slices.Contains(w.Cells, c.ID):
			procs, cells = &pn.wave, &pn.waveCells
		case phase == control.PhaseDone:
			procs, cells = &pn.baked, &pn.bakedCells // an earlier wave's, baked
		case phase.Reached():
			continue
		}
		*procs, *cells = append(*procs, cellProcs(c, listed)...), append(*cells, c.ID)
	}
	if r.opts.Routers != nil {
		if pn.routers, err = r.opts.Routers(ctx); err != nil {
			pn.routersUnread = "the routers: " + err.Error()
			r.say("the routers' figures cannot be read: the edge gates wait (%v)", err)
		}
	}
	return pn, nil
}

// seen is one process's scrape: its figures, start time and readiness (ok
// false: its figures could not be read, err says why); a router read for
// a cell's wave, its figures by cell.
type seen struct {
	sample  gate.Sample
	edge    map[string]gate.Edge
	started float64
	ready   bool
	ok      bool
	err     string
}

// look is the panel's processes (and routers) at one moment, by admin URL.
type look struct{ procs, routers map[string]seen }

func (r *Runner) look(ctx context.Context, pn panel) look {
	l := look{procs: map[string]seen{}, routers: map[string]seen{}}
	for _, p := range slices.Concat(pn.wave, pn.base, pn.baked) {
		l.procs[p.admin] = r.scrape(ctx, p)
	}
	for _, u := range pn.routers {
		var s seen
		mfs, err := r.opts.Admin.Metrics(ctx, u)
		if err == nil {
			s.edge, err = gate.EdgeOf(mfs)
		}
		if s.ok = err == nil; err != nil {
			s.err = err.Error()
		}
		l.routers[u] = s
	}
	return l
}

// scrape reads one process: its figures (a value that is no number
// makes them unread), its start time and its readiness.
func (r *Runner) scrape(ctx context.Context, p proc) seen {
	var s seen
	mfs, err := r.opts.Admin.Metrics(ctx, p.admin)
	if err != nil {
		return seen{err: err.Error()}
	}
	s.started, _ = gate.StartedOf(mfs) // a start time that is no number: unknown (0), no restart counted
	if p.router {
		// A router's readiness is only on its /readyz.
		s.sample, err = gate.RouterSampleOf(mfs)
		_, s.ready, _ = r.release(ctx, p)
	} else {
		s.sample, err = gate.SampleOf(mfs)
		s.ready = gate.ReadyOf(mfs)
	}
	if s.ok = err == nil; err != nil {
		s.err = err.Error()
	}
	return s
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
		if s.started != 0 && tr.started != 0 && s.started != tr.started {
			tr.health.Restarts++
		}
		if tr.ready && !s.ready {
			tr.health.Flaps++
		}
		if s.started != 0 {
			tr.started = s.started
		}
		tr.ready = s.ready
	}
}

// step is one judgement of a bake: how long it has run, the gates'
// verdicts and their decision.
type step struct {
	elapsed  time.Duration
	verdicts []gate.Verdict
	decision gate.Decision
}

// watch judges pn's wave against its baselines every Scrape, over the
// window since each source's first good look (once the routers route to
// the wave's cells again: settle), until the judgement is
// final: a gate failed, the gates passed once bake is over, or bake and
// WaitLimit are over (too few samples, or figures not read). The window
// opens WarmUp after the routers route to the wave again; the processes'
// crash restarts and readiness losses count from the first look. The looks
// before bake is over test at the gates' InterimAlpha: only what is
// plainly worse halts early, so that looking every Scrape does not make
// a good release's false halt several times as likely. Each step
// goes to each first (nil: none); an error from each ends the watch. A
// watch that passes is kept (lastBake): its window of the cells still on
// the old release is the next wave's figures from before.
func (r *Runner) watch(ctx context.Context, wave int, pn panel, bake time.Duration, each func(step) error) (step, error) {
	r.settle(ctx, pn)
	t, first := tracker{}, firsts{}
	now := r.look(ctx, pn)
	t.observe(now)
	if r.cfg.WarmUp > 0 {
		// The processes warm; their events count from here.
		r.say("wave %d warming up for %v before its bake", wave+1, r.cfg.WarmUp)
		for end := r.opts.Now().Add(r.cfg.WarmUp); r.opts.Now().Before(end); {
			if !sleep(ctx, min(r.cfg.Scrape, end.Sub(r.opts.Now()))) {
				return step{}, ctx.Err()
			}
			now = r.look(ctx, pn)
			t.observe(now)
		}
	}
	start := r.opts.Now()
	first.note(now)
	for {
		if !sleep(ctx, r.cfg.Scrape) {
			return step{}, ctx.Err()
		}
		now = r.look(ctx, pn)
		t.observe(now)
		first.note(now)
		elapsed := r.opts.Now().Sub(start)
		vs := r.judge(wave, pn, first, now, t, elapsed < bake)
		if r.cfg.Prometheus != "" {
			vs = append(vs, r.alertVerdict(ctx, pn))
		}
		s := step{elapsed: elapsed, verdicts: vs, decision: gate.Overall(vs)}
		if each != nil {
			if err := each(s); err != nil {
				return s, err
			}
		}
		if s.decision == gate.Pass && s.elapsed >= bake {
			r.lastBake = &bakeEnd{wave: wave, elapsed: s.elapsed, pn: pn, first: first, now: now, t: t}
		}
		if s.decision == gate.Fail || (s.elapsed >= bake && s.decision == gate.Pass) || s.elapsed >= bake+r.cfg.WaitLimit {
			return s, nil
		}
	}
}

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
	s, err := r.watch(ctx, ro.Wave, pn, w.Bake, func(s step) error {
		_, err := r.update(ctx, "", func(cur *control.Rollout) error {
			if err := expect(cur, control.RolloutRunning); err != nil || cur.Wave != ro.Wave {
				return errStopped
			}
			now := r.opts.Now()
			cur.Bake = &control.BakeStatus{Wave: ro.Wave, Started: now.Add(-s.elapsed), Bake: w.Bake, Judged: now,
				Decision: s.decision.String(), Gates: verdictLines(s.verdicts), Verdicts: verdictFigures(s.verdicts)}
			return nil
		})
		switch {
		case errors.Is(err, errStopped), errors.Is(err, errTakenOver):
			return err
		case err != nil:
			r.say("wave %d: the record not updated: %v", ro.Wave+1, err)
		}
		r.say("wave %d baking %v of %v: %s", ro.Wave+1, s.elapsed.Round(time.Second), w.Bake, verdictText(s.verdicts))
		return nil
	})
	if err != nil {
		return ro, err // errStopped: paused, aborted or halted meanwhile
	}
	figures, elapsed := verdictText(s.verdicts), s.elapsed.Round(time.Second)
	switch s.decision {
	case gate.Fail:
		return r.halt(ctx, ro.Wave, fmt.Sprintf("wave %d failed its gates after %v: %s", ro.Wave+1, elapsed, figures))
	case gate.Pass:
		wave := ro.Wave
		return r.update(ctx, fmt.Sprintf("wave %d baked %v: %s", ro.Wave+1, elapsed, figures), func(ro *control.Rollout) error {
			// The wave it closes, still running: a second driver's
			// close of the same wave is refused.
			if err := expect(ro, control.RolloutRunning); err != nil || ro.Wave != wave {
				return errStopped
			}
			router := len(w.Routers) > 0
			for _, u := range w.Units() {
				cr := ro.Progress(router)[u]
				cr.Phase = control.PhaseDone
				ro.SetProgress(router, u, cr)
			}
			ro.Wave++
			ro.Reason = ""
			return nil
		})
	}
	return r.halt(ctx, ro.Wave, fmt.Sprintf("wave %d had too few samples after %v: %s", ro.Wave+1, elapsed, figures))
}

func verdictLines(vs []gate.Verdict) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Decision.String() + " " + v.Text
	}
	return out
}

func verdictText(vs []gate.Verdict) string { return strings.Join(verdictLines(vs), "; ") }

// verdictFigures are the verdicts as the record keeps their figures.
func verdictFigures(vs []gate.Verdict) []control.GateVerdict {
	out := make([]control.GateVerdict, len(vs))
	for i, v := range vs {
		out[i] = control.GateVerdict{Gate: v.Gate, Decision: v.Decision.String(), P: v.P,
			WaveSamples: v.WaveSamples, Baseline: v.Baseline, BaselineSamples: v.BaselineSamples}
	}
	return out
}
