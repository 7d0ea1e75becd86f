package cellctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/gate"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/release"
	"github.com/cellkit/cellkit/internal/rollout"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// The settings rollout plan, start and gate share: waves, bakes, the
// release, the gates; and how waves are read and written.

// rolloutFlags are the settings of rollout plan and start.
type rolloutFlags struct {
	waves, wavesFile string
	stack, id        string
	// rollout plan --kustomize: the per-wave components for Kubernetes.
	kustomize, image, routerImage string
	bake, waitLimit               time.Duration
	readyWithin                   time.Duration
	scrape, warmUp                time.Duration
	minSamples                    int64
	prometheus                    string
	spec, router                  release.Spec
}

func (f *rolloutFlags) register(fs *flag.FlagSet, start bool) {
	fs.StringVar(&f.waves, "waves", "", "`WAVES` of cells separated by ';': cell ids separated by ',', a share of the cells (25%), or rest (default: the first active cell;25%;rest)")
	fs.StringVar(&f.wavesFile, "waves-file", "", "`FILE` with the waves one per line, as --waves has them (# starts a comment)")
	fs.DurationVar(&f.bake, "bake", 5*time.Minute, "how long each wave bakes, its gates watching")
	fs.StringVar(&f.spec.Bin, "bin", "", "`PATH` of the cells' new program (default: the processes' own)")
	fs.Func("set", "`NAME=VALUE`: a flag the cells' new release sets (repeat)", func(v string) error {
		f.spec.Set = append(f.spec.Set, v)
		return nil
	})
	fs.StringVar(&f.router.Bin, "router-bin", "", "`PATH` of the routers' new program: the routers are rolled too, one at a time, after the cells")
	fs.Func("router-set", "`NAME=VALUE`: a flag the routers' new release sets (repeat; the routers are rolled too)", func(v string) error {
		f.router.Set = append(f.router.Set, v)
		return nil
	})
	fs.StringVar(&f.stack, "stack", "var", "`DIR` of the stack whose processes are replaced (its dev.json or net.json)")
	if !start {
		return
	}
	fs.StringVar(&f.id, "id", "", "the rollout's id (default r-DATE-TIME)")
	fs.DurationVar(&f.readyWithin, "ready-within", rollout.DefaultConfig().ReadyWithin, "how long a replaced process has to get ready on the new release")
	f.registerGates(fs)
}

// registerGates registers how the gates judge a bake (rollout start and
// rollout gate).
func (f *rolloutFlags) registerGates(fs *flag.FlagSet) {
	fs.DurationVar(&f.waitLimit, "wait-limit", 0, "how long past its bake a wave may wait for the gates' samples before the rollout halts (default: one more bake)")
	fs.DurationVar(&f.scrape, "scrape", rollout.DefaultConfig().Scrape, "how often a bake reads the cells' metrics")
	fs.DurationVar(&f.warmUp, "warm-up", rollout.DefaultConfig().WarmUp, "how long a wave's replaced processes run before its bake's window opens (their first seconds are slower for any release; 0: none)")
	fs.Int64Var(&f.minSamples, "min-samples", gate.DefaultConfig().MinSamples, "the fewest requests or inquiries of a wave a gate decides on")
	fs.StringVar(&f.prometheus, "prometheus", "", "`URL` of a Prometheus whose firing alerts are a gate too: one firing for the wave's cells and not for the others halts")
}

// gateConfig is the rollout's settings of the gate flags, refused with a
// usage error when out of range.
func (f *rolloutFlags) gateConfig() (rollout.Config, error) {
	cfg := rollout.DefaultConfig()
	if f.bake <= 0 {
		return cfg, usagef("--bake %v: want a positive duration", f.bake)
	}
	if f.scrape <= 0 || f.waitLimit < 0 || f.warmUp < 0 || f.minSamples < 1 {
		return cfg, usagef("--scrape must be positive, --wait-limit and --warm-up not negative, --min-samples at least 1")
	}
	if f.prometheus != "" {
		u, err := url.Parse(f.prometheus)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return cfg, usagef("--prometheus %q: want a Prometheus's base URL, http(s)://HOST:PORT", f.prometheus)
		}
	}
	cfg.Scrape, cfg.Prometheus, cfg.WaitLimit, cfg.WarmUp = f.scrape, strings.TrimSuffix(f.prometheus, "/"), f.waitLimit, f.warmUp
	if cfg.WaitLimit == 0 {
		cfg.WaitLimit = f.bake
	}
	cfg.Gate.MinSamples = f.minSamples
	return cfg, nil
}

// plan makes the waves over m's cells, when the release changes the
// cells (or says nothing yet: plan), then over the stack's routers, one
// each, when it changes them.
func (f *rolloutFlags) plan(ctx context.Context, x *inv, m *slotmap.Map) ([]control.Wave, error) {
	var waves []control.Wave
	if !f.spec.Empty() || f.router.Empty() {
		var err error
		if waves, err = f.cellWaves(m); err != nil {
			return nil, err
		}
	} else if f.waves != "" {
		return nil, errors.New("--waves: the release changes no cell (--bin or --set make a cells' release)")
	}
	if f.router.Empty() {
		return waves, nil
	}
	d, err := f.deployer(x)
	if err != nil {
		return nil, err
	}
	procs, err := d.Processes(ctx)
	if err != nil {
		return nil, err
	}
	rw := rollout.RouterWaves(procs, f.bake)
	if len(rw) == 0 {
		return nil, fmt.Errorf("the routers' release: no router in the stack %s", f.stack)
	}
	return append(waves, rw...), nil
}

// cellWaves are --waves (or --waves-file) over m's active cells.
func (f *rolloutFlags) cellWaves(m *slotmap.Map) ([]control.Wave, error) {
	spec := f.waves
	if f.wavesFile != "" {
		if spec != "" {
			return nil, errors.New("--waves and --waves-file: give one")
		}
		var err error
		if spec, err = readWaves(f.wavesFile); err != nil {
			return nil, err
		}
	}
	if spec == "" {
		var active []string
		for _, c := range m.Cells() {
			if c.State == slotmap.Active {
				active = append(active, c.ID)
			}
		}
		switch {
		case len(active) == 0:
			return nil, errors.New("no active cell to roll out to")
		case len(active) == 1:
			spec = active[0]
		case len(active) <= 4:
			spec = active[0] + ";rest"
		default:
			spec = active[0] + ";25%;rest"
		}
	}
	return rollout.ParseWaves(m, spec, f.bake)
}

// readWaves is a waves file as --waves has it: its lines, without
// comments and blank lines, joined by ';'.
func readWaves(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--waves-file: %w", err)
	}
	var items []string
	for _, line := range strings.Split(string(b), "\n") {
		line, _, _ = strings.Cut(line, "#")
		if line = strings.TrimSpace(line); line != "" {
			items = append(items, line)
		}
	}
	if len(items) == 0 {
		return "", fmt.Errorf("--waves-file %s has no wave", path)
	}
	return strings.Join(items, ";"), nil
}

// load reads the map and makes the waves over it; the caller closes the
// registry.
func (f *rolloutFlags) load(ctx context.Context, x *inv) (registry.Registry, []control.Wave, error) {
	reg, m, err := x.loadOnly(ctx)
	if err != nil {
		return nil, nil, err
	}
	waves, err := f.plan(ctx, x, m)
	if err != nil {
		reg.Close()
		return nil, nil, usagef("%v", err)
	}
	return reg, waves, nil
}

func writeWaves(x *inv, waves []control.Wave, ro *control.Rollout) {
	t := newTable(x.out, "WAVE", "CELLS", "BAKE", "STATE")
	for i, w := range waves {
		state, router := "-", len(w.Routers) > 0
		if ro != nil {
			var phases []string
			for _, c := range w.Units() {
				if p := ro.Progress(router)[c].Phase; p.Reached() {
					phases = append(phases, c+" "+string(p))
				}
			}
			state = orNone(strings.Join(phases, ", "))
			if i == ro.Wave && ro.State == control.RolloutRunning && len(phases) == 0 {
				state = "next"
			}
		}
		units := strings.Join(w.Cells, ",")
		if router {
			units = "router " + strings.Join(w.Routers, ",")
		}
		t.row(itoa(i+1), units, w.Bake.String(), state)
	}
	t.flush()
}

// writeReached lists each reached cell's and router's processes with the
// step each stands at and the release it got ready on ("-": not yet).
func writeReached(x *inv, ro *control.Rollout) {
	var lines []string
	for _, router := range []bool{false, true} {
		progress := ro.Progress(router)
		for _, unit := range sortedKeys(progress) {
			var parts []string
			for _, k := range sortedKeys(progress[unit].Processes) {
				pr := progress[unit].Processes[k]
				rel := string(pr.Step) + " " + orNone(pr.Release)
				if pr.Step == control.StepRestoring || pr.Step == control.StepRestored {
					rel = string(pr.Step) + " " + orNone(pr.Before.Release)
				}
				if k != "-" { // an instance of several
					rel = k + " " + rel
				}
				parts = append(parts, rel)
			}
			lines = append(lines, fmt.Sprintf("  %s (%s): %s", unit, progress[unit].Phase, orNone(strings.Join(parts, ", "))))
		}
	}
	if len(lines) > 0 {
		fmt.Fprintf(x.out, "\nReached (release by process):\n%s\n", strings.Join(lines, "\n"))
	}
}
