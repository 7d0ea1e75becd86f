package rollout

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/gate"
)

// A wave is judged against every baseline it has: the cells (or
// routers) still on the old release over the same window, its own before
// they were replaced over a window of its bake's length (the reference),
// and the earlier waves' baked on the new release over the same window.
// The last wave, with no cell left on the old release, has the other
// two; a gate with none to compare waits, and the bake halts when its
// wait is over.

// firsts are each source's first good look of a window (by admin URL):
// a source that could not be read when the window opened counts from
// the first time it was.
type firsts struct{ procs, routers map[string]seen }

func (f *firsts) note(l look) {
	if f.procs == nil {
		f.procs, f.routers = map[string]seen{}, map[string]seen{}
	}
	for _, m := range []struct{ into, from map[string]seen }{{f.procs, l.procs}, {f.routers, l.routers}} {
		for u, s := range m.from {
			if _, ok := m.into[u]; !ok && s.ok {
				m.into[u] = s
			}
		}
	}
}

// bakeEnd is a bake that passed, as its last look left it.
type bakeEnd struct {
	wave    int
	elapsed time.Duration
	pn      panel
	first   firsts
	now     look
	t       tracker
}

// window is the figures of procs from each one's first good look to now,
// with their health; a process not read now is named in the window's
// unread sources (a router's among the edge's).
func window(procs []proc, first firsts, now look, t tracker) gate.Sample {
	var ws []gate.Sample
	var unread []string
	for _, p := range procs {
		var w gate.Sample
		if n := now.procs[p.admin]; n.ok {
			w = n.sample.Since(first.procs[p.admin].sample)
		} else {
			unread = append(unread, fmt.Sprintf("%s: %s", p.name(), orDash(n.err)))
		}
		if tr := t[p.admin]; tr != nil {
			w.Health = tr.health
		}
		ws = append(ws, w)
	}
	s := gate.Sum(ws...)
	if len(procs) > 0 && procs[0].router {
		s.EdgeUnread = unread
	} else {
		s.Unread = unread
	}
	return s
}

// edge adds to s what the routers saw of cells from each router's first
// good look to now; a router not read now, or routers that could not be
// listed, are the edge's unread sources.
func edge(s *gate.Sample, cells, routers []string, routersUnread string, first firsts, now look) {
	s.Routers = len(routers)
	if routersUnread != "" {
		s.EdgeUnread = append(s.EdgeUnread, routersUnread)
	}
	for _, u := range routers {
		n := now.routers[u]
		if !n.ok {
			s.EdgeUnread = append(s.EdgeUnread, fmt.Sprintf("router at %s: %s", u, orDash(n.err)))
			continue
		}
		for _, c := range cells {
			s.AddEdge(n.edge[c].Since(first.routers[u].edge[c]))
		}
	}
}

// group is the window of procs (and, for cells, of what the panel's
// routers saw of cells).
func group(pn panel, procs []proc, cells []string, first firsts, now look, t tracker) gate.Sample {
	s := window(procs, first, now, t)
	if !pn.router {
		edge(&s, cells, pn.routers, pn.routersUnread, first, now)
	}
	return s
}

// ownBefore is a wave's baseline "before": its processes' window before
// they were replaced, and the other cells' (or routers') in the same
// window — the processes of others — which show how the world changed
// between that window and the bake's.
type ownBefore struct {
	wave, others gate.Sample
	othersAt     []string // the others' admin URLs, sorted
}

// measured is the ownBefore of pn's wave over a window, the others
// those of pn's other processes.
func measured(pn panel, first firsts, now look, t tracker) ownBefore {
	procs, cells := pn.others()
	return ownBefore{wave: group(pn, pn.wave, pn.waveCells, first, now, t), others: group(pn, procs, cells, first, now, t), othersAt: admins(procs)}
}

// others are the panel's processes and cells outside its wave.
func (pn panel) others() ([]proc, []string) {
	return slices.Concat(pn.base, pn.baked), slices.Concat(pn.baseCells, pn.bakedCells)
}

func admins(procs []proc) []string {
	out := make([]string, 0, len(procs))
	for _, p := range procs {
		out = append(out, p.admin)
	}
	slices.Sort(out)
	return out
}

// judge is the gates' verdicts on the wave's window against each of its
// baselines; interim, for a look before the bake's end, at the gates'
// InterimAlpha.
func (r *Runner) judge(wave int, pn panel, first firsts, now look, t tracker, interim bool) []gate.Verdict {
	waveW := group(pn, pn.wave, pn.waveCells, first, now, t)
	ref, measuredBefore := r.reference[wave]
	// otherCells is a baseline of procs over the wave's window, its
	// control the same processes against the wave's in the window from
	// before, when the others then were exactly these.
	otherCells := func(name string, procs []proc, cells []string) gate.Baseline {
		b := gate.Baseline{Name: name, Sample: group(pn, procs, cells, first, now, t)}
		if measuredBefore && slices.Equal(admins(procs), ref.othersAt) {
			b.Then, b.Now = &ref.others, &ref.wave
		}
		return b
	}
	var bases []gate.Baseline
	if len(pn.base) > 0 {
		bases = append(bases, otherCells(gate.BaselineOld, pn.base, pn.baseCells))
	}
	if measuredBefore {
		b := gate.Baseline{Name: gate.BaselineBefore, Sample: ref.wave}
		// The same other processes in both windows: how the world moved.
		if procs, cells := pn.others(); len(procs) > 0 && slices.Equal(admins(procs), ref.othersAt) {
			others := group(pn, procs, cells, first, now, t)
			b.Then, b.Now = &ref.others, &others
		}
		bases = append(bases, b)
	}
	if len(pn.baked) > 0 {
		bases = append(bases, otherCells(gate.BaselineBaked, pn.baked, pn.bakedCells))
	}
	g := r.cfg.Gate
	if interim {
		g = g.Interim()
	}
	if pn.router {
		return g.JudgeRouters(waveW, bases)
	}
	return g.Judge(waveW, bases)
}

// measureReference reads the wave's processes (and, for cells, what the
// routers saw of them) over a window of the wave's bake before they are
// replaced: the wave's baseline "before", with the other processes' in
// the same window. The previous wave's bake, when it passed in this
// driver and watched them (on the old release) for at least as long, is
// that window already; otherwise they are read now for one bake. Not on
// a resume past their replacement: the wave is then judged against its
// other baselines.
func (r *Runner) measureReference(ctx context.Context, ro *control.Rollout) error {
	w := ro.Waves[ro.Wave]
	if _, ok := r.reference[ro.Wave]; ok {
		return nil
	}
	router := len(w.Routers) > 0
	for _, u := range w.Units() {
		if ro.Progress(router)[u].Phase.Reached() {
			return nil
		}
	}
	pn, err := r.panel(ctx, ro)
	if err != nil {
		return err
	}
	units := strings.Join(w.Units(), ", ")
	if last := r.lastBake; last != nil && last.wave == ro.Wave-1 && last.elapsed >= w.Bake && watched(last.pn, pn.wave) {
		// The same processes as pn's, as the last bake's panel had them.
		then := pn
		then.routers, then.routersUnread = last.pn.routers, last.pn.routersUnread
		r.reference[ro.Wave] = measured(then, last.first, last.now, last.t)
		r.say("wave %d: %s's figures from before, over wave %d's bake (%v)", ro.Wave+1, units, ro.Wave, last.elapsed.Round(time.Second))
		return nil
	}
	r.say("wave %d: reading %s for %v before they are replaced (their own figures, a baseline)", ro.Wave+1, units, w.Bake)
	t, first := tracker{}, firsts{}
	now := r.look(ctx, pn)
	t.observe(now)
	first.note(now)
	for start := r.opts.Now(); ; {
		left := w.Bake - r.opts.Now().Sub(start)
		if left <= 0 {
			break
		}
		if !sleep(ctx, min(r.cfg.Scrape, left)) {
			return ctx.Err()
		}
		now = r.look(ctx, pn)
		t.observe(now)
		first.note(now)
	}
	r.reference[ro.Wave] = measured(pn, first, now, t)
	return nil
}

// watched says whether a bake's panel read every one of procs as a
// baseline of the old release.
func watched(pn panel, procs []proc) bool {
	for _, p := range procs {
		if !slices.ContainsFunc(pn.base, func(b proc) bool { return b.admin == p.admin }) {
			return false
		}
	}
	return len(procs) > 0
}
