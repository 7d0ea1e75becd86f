package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/control"
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

// Start records a new rollout of cfg's release over waves, refused while
// another is active; Run then drives it.
func Start(ctx context.Context, ctl *control.Controller, id string, waves []control.Wave, cfg Config) (*control.Rollout, error) {
	if err := cfg.Spec.Validate(); err != nil {
		return nil, err
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	what := cfg.Spec.Bin
	if what == "" {
		what = "the processes' own binary"
	}
	if len(cfg.Spec.Set) > 0 {
		what += " with --" + strings.Join(cfg.Spec.Set, " --")
	}
	return ctl.StartRollout(ctx, control.Rollout{ID: id, Waves: waves, Config: data,
		Events: []control.RolloutEvent{{At: time.Now(), Text: "release: " + what}}})
}

// ConfigOf is the Config a rollout was started with.
func ConfigOf(ro *control.Rollout) (Config, error) {
	var cfg Config
	if err := json.Unmarshal(ro.Config, &cfg); err != nil {
		return cfg, fmt.Errorf("rollout %s: its settings: %w", ro.ID, err)
	}
	return cfg, nil
}
