package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/registry"
)

// RolloutDocument is the name of the rollout's record beside the map.
const RolloutDocument = api.RolloutDocument

// RolloutState is where a rollout stands.
type RolloutState string

// The states of a rollout. Running, paused and halted ones are active:
// another rollout is refused while one is.
const (
	RolloutRunning    RolloutState = "running"     // a wave going out, or baking
	RolloutPaused     RolloutState = "paused"      // stopped by hand where it stood; resume goes on
	RolloutHalted     RolloutState = "halted"      // a gate failed or a process did not get ready: rolling back
	RolloutRolledBack RolloutState = "rolled_back" // the reached cells run their old release again
	RolloutAborted    RolloutState = "aborted"     // stopped by hand, left as it stood
	RolloutDone       RolloutState = "done"        // every wave out and baked
)

// Active says whether a rollout in state s still holds the registry's
// rollout slot.
func (s RolloutState) Active() bool {
	return s == RolloutRunning || s == RolloutPaused || s == RolloutHalted
}

// Wave is one step of a rollout: its cells, replaced instance by
// instance, or its routers (by their deployer's process names), one
// at a time; then watched for Bake.
type Wave struct {
	Cells   []string      `json:"cells,omitempty"`
	Routers []string      `json:"routers,omitempty"`
	Bake    time.Duration `json:"bake_ns"`
}

// Units are the wave's cells, or its routers.
func (w Wave) Units() []string {
	if len(w.Routers) > 0 {
		return w.Routers
	}
	return w.Cells
}

// Rollout is the record of a release going out cell by cell, kept beside
// the map (registry.DocumentFor(reg, RolloutDocument)) so that a cellctl that dies
// mid-rollout is resumed from it by another.
type Rollout struct {
	ID string `json:"id"`
	// Release names what goes out (the program's binary and settings,
	// as the deployer describes them) and From what it replaces.
	Release string `json:"release"`
	From    string `json:"from,omitempty"`
	// RouterRelease and RouterFrom are the same for the routers, when the
	// release has a router part.
	RouterRelease string       `json:"router_release,omitempty"`
	RouterFrom    string       `json:"router_from,omitempty"`
	Waves         []Wave       `json:"waves"`
	Wave          int          `json:"wave"` // the wave in progress (len(Waves) when all are out)
	State         RolloutState `json:"state"`
	// Holder is who drives it now ("cellctl rollout start by alice@host");
	// Driver is that driver's identity, unique to one run of it, and
	// LeaseUntil the end of its lease unless it renews it: another driver
	// is refused until then (internal/rollout).
	Holder     string    `json:"holder"`
	Driver     string    `json:"driver,omitempty"`
	LeaseUntil time.Time `json:"lease_until,omitempty"`
	Started    time.Time `json:"started"`
	Updated    time.Time `json:"updated"`
	// Cells are each reached cell's progress, by id; Routers each
	// reached router's, by process name.
	Cells   map[string]CellRollout `json:"cells,omitempty"`
	Routers map[string]CellRollout `json:"routers,omitempty"`
	// Bake is the wave in progress's bake as its driver last judged it.
	Bake *BakeStatus `json:"bake,omitempty"`
	// Reason says why it halted, was paused or aborted, with the figures.
	Reason string `json:"reason,omitempty"`
	// Events are what happened, oldest first.
	Events []RolloutEvent `json:"events,omitempty"`
	// Config is how its driver runs it (internal/rollout's), kept for
	// whoever resumes it.
	Config json.RawMessage `json:"config,omitempty"`
}

// Progress is the reached cells' progress, or the routers' (router).
func (r *Rollout) Progress(router bool) map[string]CellRollout {
	if router {
		return r.Routers
	}
	return r.Cells
}

// Replaced is the release the rollout replaces on its cells, or routers.
func (r *Rollout) Replaced(router bool) string {
	if router {
		return r.RouterFrom
	}
	return r.From
}

// SetReleases records, the first time each is seen, the release the
// rollout replaces (from) and the one it puts out (to) on its cells, or
// routers; an empty one is left as it is.
func (r *Rollout) SetReleases(router bool, from, to string) {
	f, t := &r.From, &r.Release
	if router {
		f, t = &r.RouterFrom, &r.RouterRelease
	}
	if *f == "" {
		*f = from
	}
	if *t == "" {
		*t = to
	}
}

// NewRelease is the release the rollout puts out on its cells, or on
// its routers, as the first of them to get ready on it reported ("":
// none yet).
func (r *Rollout) NewRelease(router bool) string {
	if router {
		return r.RouterRelease
	}
	return r.Release
}

// SetProgress records a cell's progress, or a router's.
func (r *Rollout) SetProgress(router bool, unit string, p CellRollout) {
	m := &r.Cells
	if router {
		m = &r.Routers
	}
	if *m == nil {
		*m = map[string]CellRollout{}
	}
	(*m)[unit] = p
}

// Phase is where a reached cell (or router) stands in its rollout; the
// empty phase is a cell not reached.
type Phase string

// The phases of a reached cell or router.
const (
	PhaseReplacing  Phase = "replacing"   // its processes being replaced one at a time
	PhaseBaking     Phase = "baking"      // on the new release, its wave baking
	PhaseDone       Phase = "done"        // its wave baked: it stays on the new release
	PhaseRolledBack Phase = "rolled_back" // put back on its old release
)

// Reached says whether the rollout has touched the cell or router.
func (p Phase) Reached() bool { return p != "" }

// CellRollout is one cell's (or router's) progress: its phase and each
// of its processes' (by instance; a router's, and a cell's of one
// process, under "-").
type CellRollout struct {
	Phase     Phase                     `json:"phase"`
	Processes map[string]ProcessRollout `json:"processes,omitempty"`
}

// SetProcess records one of its processes' progress.
func (c *CellRollout) SetProcess(key string, p ProcessRollout) {
	if c.Processes == nil {
		c.Processes = map[string]ProcessRollout{}
	}
	c.Processes[key] = p
}

// ProcessStep is where one process stands in a rollout.
type ProcessStep string

// The steps of a process. Each is recorded before what it names is
// done, so that a driver that stops anywhere leaves a record from which
// the next one finishes or reverts the step.
const (
	StepReplacing ProcessStep = "replacing" // what it ran is recorded: the deployer may have replaced it
	StepReady     ProcessStep = "ready"     // ready on the new release; its rotation not yet as it was
	StepServing   ProcessStep = "serving"   // on the new release, in rotation as it was before
	StepRestoring ProcessStep = "restoring" // being put back on what it ran
	StepRestored  ProcessStep = "restored"  // on what it ran again, ready, in rotation as it was
)

// ProcessRollout is one process's progress: its step, what it ran
// before the rollout (written before the deployer first acts on it and
// never overwritten: what a rollback puts back), the release it got
// ready on, and whether it was out of the routers' rotation before the
// rollout (drained by an operator: it stays out).
type ProcessRollout struct {
	Step      ProcessStep `json:"step"`
	Before    Command     `json:"before"`
	Release   string      `json:"release,omitempty"`
	OutBefore bool        `json:"out_before,omitempty"`
}

// Command is what putting a process back needs: the release it
// reported, its binary (a stack of processes on hosts) or its image
// (Kubernetes), and its arguments. Never its environment: a rollback
// keeps the environment the deployer gives the process.
type Command struct {
	Release string   `json:"release,omitempty"`
	Bin     string   `json:"bin"`
	Image   string   `json:"image,omitempty"`
	Args    []string `json:"args,omitempty"`
}

// Same says whether c and o run the same binary or image with the same
// arguments.
func (c Command) Same(o Command) bool {
	return c.Bin == o.Bin && c.Image == o.Image && slices.Equal(c.Args, o.Args)
}

// BakeStatus is a wave's bake as its driver last judged it (every scrape):
// when it began, how long it is, and the gates' verdicts with their
// figures, as lines for people (Gates) and as figures for the console's
// metrics (Verdicts). A resumed rollout bakes its wave again from the
// start.
type BakeStatus struct {
	Wave     int           `json:"wave"`
	Started  time.Time     `json:"started"`
	Bake     time.Duration `json:"bake_ns"`
	Judged   time.Time     `json:"judged"`
	Decision string        `json:"decision"` // pass, wait or fail
	Gates    []string      `json:"gates"`    // each gate's verdict and figures
	Verdicts []GateVerdict `json:"verdicts,omitempty"`
}

// GateVerdict is one gate's verdict in figures: the gate
// (internal/gate's names), its decision (pass, wait or fail), the
// one-sided p-value of "the wave is worse" against the baseline that came
// closest to failing it (1: no test made), the wave's samples, and that
// baseline's name ("old release", "before", "baked"; "" when none was
// compared) and samples. For the events gates (crash restarts, readiness
// lost) the samples are the events of the worst process.
type GateVerdict struct {
	Gate            string  `json:"gate"`
	Decision        string  `json:"decision"`
	P               float64 `json:"p"`
	WaveSamples     int64   `json:"wave_samples"`
	Baseline        string  `json:"baseline,omitempty"`
	BaselineSamples int64   `json:"baseline_samples"`
}

// Left is how much of the bake was left when it was last judged.
func (b *BakeStatus) Left() time.Duration { return max(0, b.Bake-b.Judged.Sub(b.Started)) }

// RolloutEvent is one line of a rollout's story.
type RolloutEvent struct {
	At   time.Time `json:"at"`
	Text string    `json:"text"`
}

// RolloutActiveError refuses a rollout while another is active.
type RolloutActiveError struct {
	ID, Holder string
	State      RolloutState
}

func (e *RolloutActiveError) Error() string {
	return fmt.Sprintf("rollout %s is %s, held by %s: resume, abort or roll it back first", e.ID, e.State, e.Holder)
}

// ErrNoRollout means the registry holds no rollout record.
var ErrNoRollout = errors.New("no rollout")

// Rollout returns the registry's rollout record, or ErrNoRollout.
func (c *Controller) Rollout(ctx context.Context) (*Rollout, error) {
	r, _, err := c.loadRollout(ctx)
	return r, err
}

func (c *Controller) rolloutDocument() (registry.Document, error) {
	d := registry.DocumentFor(c.reg, RolloutDocument)
	if d == nil {
		return nil, fmt.Errorf("registry %s keeps no rollout record", c.reg.Describe())
	}
	return d, nil
}

func (c *Controller) loadRollout(ctx context.Context) (*Rollout, uint64, error) {
	d, err := c.rolloutDocument()
	if err != nil {
		return nil, 0, err
	}
	data, rev, err := d.Get(ctx)
	if errors.Is(err, registry.ErrNoDocument) {
		return nil, 0, ErrNoRollout
	}
	if err != nil {
		return nil, 0, err
	}
	var r Rollout
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, 0, fmt.Errorf("the rollout record %s: %w", d.Describe(), err)
	}
	return &r, rev, nil
}

// StartRollout records r as the registry's rollout, under the writer
// lock; it is refused with a *RolloutActiveError while another is active.
func (c *Controller) StartRollout(ctx context.Context, r Rollout) (*Rollout, error) {
	_, release, err := c.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	cur, rev, err := c.loadRollout(ctx)
	switch {
	case errors.Is(err, ErrNoRollout):
	case err != nil:
		return nil, err
	case cur.State.Active():
		return nil, &RolloutActiveError{ID: cur.ID, Holder: cur.Holder, State: cur.State}
	}
	now := c.opts.Now()
	r.Holder, r.Started, r.Updated = c.cfg.Holder, now, now
	if r.State == "" {
		r.State = RolloutRunning
	}
	r.Events = append(r.Events, RolloutEvent{At: now, Text: "started by " + c.cfg.Holder})
	return &r, c.saveRollout(ctx, &r, rev)
}

// UpdateRollout changes the record of rollout id with change, under the
// writer lock and over the revision read (a write another made meanwhile
// fails it). change's error leaves the record as it was. Who drives the
// rollout is the record's Driver, which only its driver changes.
func (c *Controller) UpdateRollout(ctx context.Context, id string, change func(r *Rollout) error) (*Rollout, error) {
	_, release, err := c.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	r, rev, err := c.loadRollout(ctx)
	if err != nil {
		return nil, err
	}
	if r.ID != id {
		return nil, fmt.Errorf("the registry's rollout is %s, not %s", r.ID, id)
	}
	if err := change(r); err != nil {
		return nil, err
	}
	r.Updated = c.opts.Now()
	return r, c.saveRollout(ctx, r, rev)
}

func (c *Controller) saveRollout(ctx context.Context, r *Rollout, rev uint64) error {
	d, err := c.rolloutDocument()
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return d.Put(ctx, data, rev)
}
