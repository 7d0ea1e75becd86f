package operator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/operator/api/v1alpha1"
	"github.com/cellkit/cellkit/internal/release"
	"github.com/cellkit/cellkit/internal/rollout"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// ReleaseConfig is how the operator puts a release out: the rollout's
// settings (gates, readiness, lease; filled by the rollout) and each
// wave's bake. Zero values mean the defaults of DefaultReleaseConfig. The first wave
// is the first cell to release (by name), the canary; the second, every
// other cell asking for the same release.
type ReleaseConfig struct {
	Rollout rollout.Config
	Bake    time.Duration
	// Every is how often the leader looks for a release to put out.
	Every time.Duration
}

// DefaultReleaseConfig: the rollout's defaults, a 10-minute bake, a look
// every 10 s.
func DefaultReleaseConfig() ReleaseConfig {
	return ReleaseConfig{Rollout: rollout.DefaultConfig(), Bake: 10 * time.Minute, Every: 10 * time.Second}
}

// Releaser puts the Cells' releases out, cell by cell, through the
// rollout (internal/rollout) with the operator's Deployer: when a Cell's
// spec asks for another image or settings than its pods run, the leader
// starts a rollout of that release over the cells that ask for it — the
// record in the registry, as cellctl's, is the rollout's one state
// (`cellctl rollout status` reads it; pause, resume and abort work on it)
// — and drives it, resuming one it finds running. A release that was
// rolled back is not tried again until a spec asks for another.
type Releaser struct {
	r   *Reconciler
	cfg ReleaseConfig
	// seen is the release the last look found pending (its target and
	// cells): one is started only when two looks in a row find the same,
	// so that Cells changed one after the other (an overlay applied) go
	// out as one release, not a release of the first and another of the
	// rest. Only Start's goroutine touches it.
	seen string
}

// withDefaults fills the zero fields of c from DefaultReleaseConfig,
// field by field.
func (c ReleaseConfig) withDefaults() ReleaseConfig {
	d := DefaultReleaseConfig()
	if c.Bake <= 0 {
		c.Bake = d.Bake
	}
	if c.Every <= 0 {
		c.Every = d.Every
	}
	return c
}

// Releaser is the reconciler's releaser; the manager runs it on its
// leader (Add it to the manager).
func (r *Reconciler) Releaser(cfg ReleaseConfig) *Releaser {
	return &Releaser{r: r, cfg: cfg.withDefaults()}
}

// NeedLeaderElection: only the leader releases.
func (x *Releaser) NeedLeaderElection() bool { return true }

// Start looks for a release to put out until ctx ends.
func (x *Releaser) Start(ctx context.Context) error {
	t := time.NewTicker(x.cfg.Every)
	defer t.Stop()
	for {
		if err := x.once(ctx); err != nil && ctx.Err() == nil {
			x.r.opts.Log.Warn("release", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// once drives the registry's rollout if it is the operator's and active,
// else starts the release the Cells ask for, if any.
func (x *Releaser) once(ctx context.Context) error {
	ctl := x.r.opts.Control
	ro, err := ctl.Rollout(ctx)
	switch {
	case errors.Is(err, control.ErrNoRollout):
		ro = nil
	case err != nil:
		return err
	}
	if ro != nil && ro.State.Active() {
		cfg, err := rollout.ConfigOf(ro)
		if err != nil || cfg.Spec.Image == "" {
			return err // not a release of images: another deployer's
		}
		return x.drive(ctx, ro.ID, cfg)
	}
	target, cells, err := x.pending(ctx)
	if err != nil || len(cells) == 0 {
		return err
	}
	if haltedRelease(ro, target) {
		return nil // rolled back or aborted: not again until the spec changes
	}
	if key := fmt.Sprintf("%+v %v", target, cells); key != x.seen {
		x.seen = key
		return nil // settling: started at the next look if it is the same
	}
	x.seen = ""
	cfg := x.cfg.Rollout
	cfg.Spec = target
	waves := []control.Wave{{Cells: cells[:1], Bake: x.cfg.Bake}}
	if len(cells) > 1 {
		waves = append(waves, control.Wave{Cells: cells[1:], Bake: x.cfg.Bake})
	}
	id := "k-" + time.Now().UTC().Format("20060102-150405")
	if _, err := rollout.Start(ctx, ctl, id, waves, cfg); err != nil {
		return err
	}
	for _, c := range cells {
		x.r.eventOn(ctx, c, corev1.EventTypeNormal, "ReleaseStarted", "release", fmt.Sprintf("rollout %s puts out %s%s over %v", id, target.Image, setSuffix(target.Set), cells))
	}
	return x.drive(ctx, id, cfg)
}

// haltedRelease says whether ro, the registry's last rollout, put out
// want and ended short of done (rolled back or aborted): the releaser
// does not try want again until a spec asks for another release.
func haltedRelease(ro *control.Rollout, want release.Spec) bool {
	if ro == nil || ro.State.Active() || ro.State == control.RolloutDone {
		return false
	}
	last, err := rollout.ConfigOf(ro)
	return err == nil && sameRelease(last.Spec, want)
}

// pending is the release the first Cell (by name) that asks for another
// than its pod template runs asks for, and every active cell in the map
// that asks for that one.
func (x *Releaser) pending(ctx context.Context) (release.Spec, []string, error) {
	var list v1alpha1.CellList
	if err := x.r.opts.Client.List(ctx, &list); err != nil {
		return release.Spec{}, nil, err
	}
	m, err := x.r.opts.Control.Load(ctx)
	if err != nil {
		return release.Spec{}, nil, err
	}
	slices.SortFunc(list.Items, func(a, b v1alpha1.Cell) int { return strings.Compare(a.Name, b.Name) })
	var target release.Spec
	var cells []string
	for i := range list.Items {
		c := &list.Items[i]
		if mc, ok := m.Cell(c.Name); !ok || mc.State != slotmap.Active || !c.DeletionTimestamp.IsZero() {
			continue
		}
		run, sts, err := x.r.running(ctx, c)
		if err != nil || sts == nil {
			continue
		}
		want := specRelease(c)
		if sameRelease(run, want) {
			continue
		}
		if cells == nil {
			target = want
		}
		if sameRelease(want, target) {
			cells = append(cells, c.Name)
		}
	}
	return target, cells, nil
}

// drive runs rollout id to its end (or until another driver holds it).
func (x *Releaser) drive(ctx context.Context, id string, cfg rollout.Config) error {
	log := x.r.opts.Log
	ro, err := rollout.New(id, cfg, rollout.Options{
		Control:  x.r.opts.Control,
		Admin:    x.r.opts.Admin,
		Deployer: x.r.Deployer(),
		Progress: func(s string) { log.Info("release "+id, "step", s) },
	}).Run(ctx)
	var driven *rollout.DrivenError
	if errors.As(err, &driven) {
		return nil
	}
	if ro != nil {
		for _, w := range ro.Waves {
			for _, c := range w.Cells {
				x.r.eventOn(ctx, c, corev1.EventTypeNormal, "Release"+camel(string(ro.State)), "release", fmt.Sprintf("rollout %s is %s%s", id, ro.State, why(ro)))
			}
		}
	}
	return err
}

// camel is a rollout state as an event's reason: rolled_back → RolledBack.
func camel(state string) string {
	var b strings.Builder
	for _, w := range strings.Split(state, "_") {
		if w != "" {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}

func why(ro *control.Rollout) string {
	if ro.Reason == "" {
		return ""
	}
	return ": " + ro.Reason
}
