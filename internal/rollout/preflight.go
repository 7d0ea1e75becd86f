package rollout

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/gate"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// Preflight reads every metrics source a rollout of cfg would judge by —
// each active cell's processes, the routers of opts.Routers, the
// deployer's routers when the release changes them, Prometheus when cfg names one —
// and refuses, naming it, one that does not answer or whose figures are
// no numbers: a rollout that could not see its gates is not started.
func Preflight(ctx context.Context, cfg Config, opts Options) error {
	r := New("", cfg, opts)
	m, err := opts.Control.Load(ctx)
	if err != nil {
		return err
	}
	listed, err := r.listed(ctx)
	if err != nil {
		return err
	}
	var targets []proc
	for _, c := range m.Cells() {
		if c.State == slotmap.Active {
			targets = append(targets, cellProcs(c, listed)...)
		}
	}
	if !cfg.Router.Empty() {
		for _, p := range listed {
			if p.Router {
				rp, err := routerProc(p)
				if err != nil {
					return err
				}
				targets = append(targets, rp)
			}
		}
	}
	edgeReaders := 0 // the last targets: routers read for the cells' figures
	if opts.Routers != nil {
		urls, err := opts.Routers(ctx)
		if err != nil {
			return err
		}
		edgeReaders = len(urls)
		for _, u := range urls {
			targets = append(targets, proc{unit: "router at " + u, router: true, admin: u})
		}
	}
	for i, p := range targets {
		mfs, err := opts.Admin.Metrics(ctx, p.admin)
		if err == nil {
			err = gateReadable(mfs, p, i >= len(targets)-edgeReaders)
		}
		if err != nil {
			return fmt.Errorf("the metrics of %s: %v (the gates could not read them)", p.name(), err)
		}
	}
	if cfg.Prometheus != "" {
		if _, err := r.firingAlerts(ctx); err != nil {
			return fmt.Errorf("prometheus %s: %v (the gates could not read its alerts)", cfg.Prometheus, err)
		}
	}
	return nil
}

// Gate runs a bake's gates over cells already on a new release, put there
// by other means (kubectl apply of a wave), against the active cells that
// run another release, for bake (and up to cfg.WaitLimit more while the
// gates wait for samples): the last judgement's decision and verdicts.
// The wave's processes must all run one release; no cell left on
// another is a baseline of none (the gates say so).
func Gate(ctx context.Context, cells []string, bake time.Duration, cfg Config, opts Options) (gate.Decision, []gate.Verdict, error) {
	r := New("", cfg, opts)
	m, err := opts.Control.Load(ctx)
	if err != nil {
		return gate.Fail, nil, err
	}
	listed, err := r.listed(ctx)
	if err != nil {
		return gate.Fail, nil, err
	}
	ro := &control.Rollout{Waves: []control.Wave{{Cells: cells, Bake: bake}}}
	release := ""
	for _, id := range cells {
		c, ok := m.Cell(id)
		if !ok || c.State != slotmap.Active {
			return gate.Fail, nil, fmt.Errorf("%s is not an active cell of the map", id)
		}
		for _, p := range cellProcs(c, listed) {
			rel, _, why := r.release(ctx, p)
			switch {
			case rel == "":
				return gate.Fail, nil, fmt.Errorf("%s reports no release: %s", p.name(), why)
			case release != "" && rel != release:
				return gate.Fail, nil, fmt.Errorf("the wave runs more than one release: %s runs %s, another %s", p.name(), rel, release)
			}
			release = rel
		}
	}
	// A cell outside the wave already on its release is no baseline.
	for _, c := range m.Cells() {
		if c.State != slotmap.Active || slices.Contains(cells, c.ID) {
			continue
		}
		if slices.ContainsFunc(cellProcs(c, listed), func(p proc) bool { rel, _, _ := r.release(ctx, p); return rel == release }) {
			ro.SetProgress(false, c.ID, control.CellRollout{Phase: control.PhaseDone})
		}
	}
	pn, err := r.panel(ctx, ro)
	if err != nil {
		return gate.Fail, nil, err
	}
	r.say("gating %s (%s) against %s (on another release) and %s (on %s) for %v", strings.Join(cells, ","), release,
		cellsOrNone(pn.baseCells), cellsOrNone(pn.bakedCells), release, bake)
	s, err := r.watch(ctx, 0, pn, bake, func(s step) error {
		r.say("%v of %v: %s", s.elapsed.Round(time.Second), bake, verdictText(s.verdicts))
		return nil
	})
	return s.decision, s.verdicts, err
}

func cellsOrNone(cells []string) string {
	if len(cells) == 0 {
		return "no cell"
	}
	return strings.Join(cells, ",")
}

// gateReadable says whether a scrape of p holds figures the gates can
// judge by: a value that is no number (NaN, an infinity, a negative
// count) or histogram buckets out of order is refused, as a bake would
// leave it unread.
func gateReadable(mfs map[string]*dto.MetricFamily, p proc, edge bool) error {
	var err error
	switch {
	case edge:
		_, err = gate.EdgeOf(mfs)
	case p.router:
		_, err = gate.RouterSampleOf(mfs)
	default:
		_, err = gate.SampleOf(mfs)
	}
	return err
}
