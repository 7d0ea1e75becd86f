package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/release"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// ParseWaves makes the waves of spec over m's active cells: waves
// separated by ';', each a list of cell ids separated by ',', a share of
// the cells ("25%": of all active cells, rounded up, taken in id order
// from those no earlier wave has), or "rest" (every cell left; the last
// wave). Each bakes for bake. Every active cell must be in a wave, once.
func ParseWaves(m *slotmap.Map, spec string, bake time.Duration) ([]control.Wave, error) {
	if bake <= 0 {
		return nil, fmt.Errorf("--bake %v: want a positive duration", bake)
	}
	var active []string
	for _, c := range m.Cells() {
		if c.State == slotmap.Active {
			active = append(active, c.ID)
		}
	}
	if len(active) == 0 {
		return nil, fmt.Errorf("no active cell to roll out to")
	}
	taken := map[string]bool{}
	left := func() []string {
		var out []string
		for _, id := range active {
			if !taken[id] {
				out = append(out, id)
			}
		}
		return out
	}
	var waves []control.Wave
	items := strings.Split(spec, ";")
	for i, item := range items {
		item = strings.TrimSpace(item)
		var cells []string
		switch {
		case item == "":
			return nil, fmt.Errorf("wave %d is empty", i+1)
		case item == "rest":
			if i != len(items)-1 {
				return nil, fmt.Errorf("wave %d: rest must be the last wave", i+1)
			}
			cells = left()
		case strings.HasSuffix(item, "%"):
			pct, err := strconv.ParseFloat(strings.TrimSuffix(item, "%"), 64)
			if err != nil || pct <= 0 || pct > 100 {
				return nil, fmt.Errorf("wave %d: %q: want a share in (0%%, 100%%]", i+1, item)
			}
			n := int(math.Ceil(pct / 100 * float64(len(active))))
			l := left()
			cells = l[:min(n, len(l))]
		default:
			for _, id := range strings.Split(item, ",") {
				id = strings.TrimSpace(id)
				switch {
				case !slices.Contains(active, id):
					return nil, fmt.Errorf("wave %d: %q is not an active cell of the map (active: %s)", i+1, id, strings.Join(active, ", "))
				case taken[id] || slices.Contains(cells, id):
					return nil, fmt.Errorf("wave %d: cell %s is in an earlier wave", i+1, id)
				}
				cells = append(cells, id)
			}
		}
		if len(cells) == 0 {
			return nil, fmt.Errorf("wave %d (%s) has no cell left", i+1, item)
		}
		for _, id := range cells {
			taken[id] = true
		}
		waves = append(waves, control.Wave{Cells: cells, Bake: bake})
	}
	if l := left(); len(l) > 0 {
		return nil, fmt.Errorf("cells %s are in no wave (end with ;rest)", strings.Join(l, ", "))
	}
	return waves, nil
}

// RouterWaves are the waves of the deployer's routers: one router each,
// in the deployer's order, each baking for bake.
func RouterWaves(procs []release.Process, bake time.Duration) []control.Wave {
	var out []control.Wave
	for _, p := range procs {
		if p.Router {
			out = append(out, control.Wave{Routers: []string{p.Name}, Bake: bake})
		}
	}
	return out
}

// Validate refuses a release ValidateRelease refuses, and waves
// ValidateWaves refuses.
func (cfg Config) Validate(waves []control.Wave) error {
	if err := cfg.ValidateRelease(); err != nil {
		return err
	}
	return cfg.ValidateWaves(waves)
}

// ValidateWaves refuses no wave, a wave of nothing or of both cells and
// routers, a wave that reaches what the release does not change, and a
// bake that is not positive.
func (cfg Config) ValidateWaves(waves []control.Wave) error {
	if len(waves) == 0 {
		return errors.New("no wave to roll out: no active cell, and no router among the deployer's processes")
	}
	for i, w := range waves {
		switch {
		case len(w.Cells) > 0 && len(w.Routers) > 0:
			return fmt.Errorf("wave %d has cells and routers: a wave is one or the other", i+1)
		case len(w.Cells) > 0 && cfg.Spec.Empty():
			return fmt.Errorf("wave %d has cells, and the release changes no cell", i+1)
		case len(w.Routers) > 0 && cfg.Router.Empty():
			return fmt.Errorf("wave %d has routers, and the release changes no router", i+1)
		case len(w.Cells) == 0 && len(w.Routers) == 0:
			return fmt.Errorf("wave %d is empty", i+1)
		case w.Bake <= 0:
			return fmt.Errorf("wave %d: bake %v: want a positive duration", i+1, w.Bake)
		}
	}
	return nil
}

// ValidateRelease refuses a release that changes nothing, or a part of it
// that is not what it says (a missing binary, one that is not a cell's
// or a router's, a malformed flag).
func (cfg Config) ValidateRelease() error {
	if cfg.Spec.Empty() && cfg.Router.Empty() {
		return errors.New("a release needs a binary or a flag to set")
	}
	if !cfg.Spec.Empty() {
		if err := cfg.Spec.Validate("cell"); err != nil {
			return err
		}
	}
	if !cfg.Router.Empty() {
		if err := cfg.Router.Validate("router"); err != nil {
			return fmt.Errorf("the routers' release: %w", err)
		}
	}
	for _, kv := range append(slices.Clone(cfg.Spec.Set), cfg.Router.Set...) {
		if name, _, _ := strings.Cut(kv, "="); secretFlag(name) {
			return fmt.Errorf("flag %q carries a secret, which the rollout's record would keep: set --%s-file instead", name, name)
		}
	}
	return nil
}

// describe says what a spec runs.
func describe(s release.Spec) string {
	what := s.Bin
	switch {
	case s.Image != "":
		what = "image " + s.Image
	case what == "":
		what = "the processes' own binary"
	}
	if len(s.Set) > 0 {
		what += " with --" + strings.Join(s.Set, " --")
	}
	return what
}

// Start records a new rollout of cfg's release over waves, refused while
// another is active; Run then drives it.
func Start(ctx context.Context, ctl *control.Controller, id string, waves []control.Wave, cfg Config) (*control.Rollout, error) {
	if err := cfg.Validate(waves); err != nil {
		return nil, err
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	var events []control.RolloutEvent
	if !cfg.Spec.Empty() {
		events = append(events, control.RolloutEvent{At: time.Now(), Text: "release of the cells: " + describe(cfg.Spec)})
	}
	if !cfg.Router.Empty() {
		events = append(events, control.RolloutEvent{At: time.Now(), Text: "release of the routers: " + describe(cfg.Router)})
	}
	return ctl.StartRollout(ctx, control.Rollout{ID: id, Waves: waves, Config: data, Events: events})
}

// ConfigOf is the Config a rollout was started with, its zero fields
// filled as New fills them: a record written before a field existed
// gets today's default for it.
func ConfigOf(ro *control.Rollout) (Config, error) {
	var cfg Config
	if err := json.Unmarshal(ro.Config, &cfg); err != nil {
		return cfg, fmt.Errorf("rollout %s: its settings: %w", ro.ID, err)
	}
	return cfg.withDefaults(), nil
}
