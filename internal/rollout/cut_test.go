package rollout_test

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/gate"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/release"
	"github.com/cellkit/cellkit/internal/rollout"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// A bench for the rollout's record and steps, apart from real programs:
// a deployer that keeps its processes' binaries and arguments in memory,
// admin APIs that answer each process's release (a digest of what it
// runs) from that, a real file registry for the map and the record — and
// a cut: after a given number of actions (deployer calls, record and map
// writes) everything the driver does fails, as for a cellctl killed
// right after that action.

// errCut is what a cut driver meets.
var errCut = errors.New("the driver was cut here")

// cutter counts the driver's actions and cuts it after the at-th (0:
// never).
type cutter struct {
	mu      sync.Mutex
	at, n   int
	actions []string
}

// act counts one action about to be taken: refused once the driver is
// cut; done reports it taken (the cut falls right after).
func (c *cutter) act() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at > 0 && c.n >= c.at {
		return errCut
	}
	return nil
}

func (c *cutter) done(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	c.actions = append(c.actions, what)
}

// benchProc is one of the bench deployer's processes: its key (the
// path of its admin API on the bench's server, "c1-i1") and, as the
// deployer has it, its name (the key unless renamed), cell, instance and
// command, and an environment of its own that no command carries.
type benchProc struct {
	key string
	release.Process
	env []string
}

// benchDeployer is the stack's processes in memory, in its order.
type benchDeployer struct {
	mu    sync.Mutex
	procs []benchProc
	cut   *cutter
	// runs are every command a Replace started, by process key.
	runs map[string][][]string
}

var _ release.Deployer = (*benchDeployer)(nil)

func (d *benchDeployer) Replace(_ context.Context, name string, run control.Command) (control.Command, error) {
	if err := d.cut.act(); err != nil {
		return control.Command{}, err
	}
	d.mu.Lock()
	i := slices.IndexFunc(d.procs, func(p benchProc) bool { return p.Name == name })
	if i < 0 {
		d.mu.Unlock()
		return control.Command{}, fmt.Errorf("no process %s", name)
	}
	before := d.procs[i].Run
	d.procs[i].Run = control.Command{Bin: run.Bin, Image: run.Image, Args: slices.Clone(run.Args)}
	key := d.procs[i].key
	d.runs[key] = append(d.runs[key], slices.Clone(run.Args))
	d.mu.Unlock()
	d.cut.done("replace " + name)
	return before, nil
}

func (d *benchDeployer) Processes(context.Context) ([]release.Process, error) {
	if err := d.cut.act(); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]release.Process, 0, len(d.procs))
	for _, p := range d.procs {
		q := p.Process
		q.Run.Args = slices.Clone(q.Run.Args)
		out = append(out, q)
	}
	return out, nil
}

// command is what the process of key runs.
func (d *benchDeployer) command(key string) (string, []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	i := slices.IndexFunc(d.procs, func(p benchProc) bool { return p.key == key })
	return d.procs[i].Run.Bin, slices.Clone(d.procs[i].Run.Args)
}

// releaseOf is the release a command reports: a digest of its binary and
// settings (each flag's last value), as a cellkit program's is of its
// binary and flags.
func releaseOf(bin string, args []string) string {
	set := map[string]string{}
	for _, a := range args {
		name, v, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		set[name] = v
	}
	settings := []string{bin}
	for _, name := range slices.Sorted(maps.Keys(set)) {
		settings = append(settings, name+"="+set[name])
	}
	h := sha256.Sum256([]byte(strings.Join(settings, "\x00")))
	return "devel@" + hex.EncodeToString(h[:4])
}

// cutControl is the controller with the cut: its writes are actions.
type cutControl struct {
	*control.Controller
	cut *cutter
}

func (c cutControl) Load(ctx context.Context) (*slotmap.Map, error) {
	if err := c.cut.act(); err != nil {
		return nil, err
	}
	return c.Controller.Load(ctx)
}

func (c cutControl) Rollout(ctx context.Context) (*control.Rollout, error) {
	if err := c.cut.act(); err != nil {
		return nil, err
	}
	return c.Controller.Rollout(ctx)
}

func (c cutControl) Apply(ctx context.Context, ch control.Change) (*control.Result, error) {
	if err := c.cut.act(); err != nil {
		return nil, err
	}
	res, err := c.Controller.Apply(ctx, ch)
	if err == nil {
		c.cut.done("map")
	}
	return res, err
}

func (c cutControl) UpdateRollout(ctx context.Context, id string, change func(*control.Rollout) error) (*control.Rollout, error) {
	if err := c.cut.act(); err != nil {
		return nil, err
	}
	ro, err := c.Controller.UpdateRollout(ctx, id, change)
	if err == nil {
		c.cut.done("record")
	}
	return ro, err
}

// bench is one stack: cell c1 of three instances (i3 drained by an
// operator before any rollout), cell c2 of one process.
type bench struct {
	t        *testing.T
	reg      registry.Registry
	deployer *benchDeployer
	cut      *cutter
	admin    adminclient.Client
	base     string
	// skew moves the drivers' clock on: past a dead driver's lease.
	skew atomic.Int64
	bin  string
	dir  string
	// broken, if set, says which commands never get ready.
	broken func(name string, args []string) bool
}

var benchProcs = []string{"c1-i1", "c1-i2", "c1-i3", "c2"}

func newBench(t *testing.T, drained ...string) *bench {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "cell")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho cell devel\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	b := &bench{t: t, cut: &cutter{}, bin: bin, dir: dir}
	b.deployer = &benchDeployer{cut: b.cut, runs: map[string][][]string{}}
	for _, key := range benchProcs {
		cell, instance, _ := strings.Cut(key, "-")
		b.deployer.procs = append(b.deployer.procs, benchProc{key: key, env: []string{"CELLKIT_SECRET=s3cret"},
			Process: release.Process{Name: key, Cell: cell, Instance: instance, Run: control.Command{Bin: bin, Args: b.original(key)}}})
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		if rest == "metrics" {
			// Only the start time: a process of each Replace starts
			// anew; the bakes find no samples.
			b.deployer.mu.Lock()
			started := 1.7e9 + float64(len(b.deployer.runs[key]))
			b.deployer.mu.Unlock()
			_, _ = fmt.Fprintf(w, "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %g\n", started)
			return
		}
		if rest != "v1/admin/status" {
			http.NotFound(w, r)
			return
		}
		bin, args := b.deployer.command(key)
		ready := b.broken == nil || !b.broken(key, args)
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"cell":%q,"ready":%v,"release":{"id":%q}}`, key, ready, releaseOf(bin, args))
	}))
	t.Cleanup(srv.Close)
	b.base = srv.URL
	b.admin = adminclient.Client{HTTP: srv.Client()}
	reg, err := registry.Open(registry.Config{URL: "file:" + filepath.Join(dir, "map.json")}, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	b.reg = reg
	ctl := control.New(reg, control.Config{Holder: "bench"}, control.Options{})
	u := func(name string) string { return b.base + "/" + name }
	var ins []slotmap.Instance
	for _, id := range []string{"i1", "i2", "i3"} {
		ins = append(ins, slotmap.Instance{ID: id, Intake: u("c1-" + id), Admin: u("c1-" + id)})
	}
	ctx := context.Background()
	if err := ctl.Ensure(ctx, control.EnsureChange{Agencies: map[string]int{"nice": 80},
		Cells: []control.StackCell{{ID: "c1", Intake: ins[0].Intake, Admin: ins[0].Admin, Instances: ins}, {ID: "c2", Intake: u("c2"), Admin: u("c2")}}}); err != nil {
		t.Fatal(err)
	}
	for _, in := range drained {
		if _, err := ctl.Apply(ctx, control.Change{Plan: control.SetInstanceRotation("c1", in, true)}); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func (b *bench) now() time.Time { return time.Now().Add(time.Duration(b.skew.Load())) }

// runner is a driver of rollout id, cut after its at-th action (0:
// never), its steps logged.
func (b *bench) runner(id string, at int, progress ...func(string)) *rollout.Runner {
	b.cut.mu.Lock()
	b.cut.at, b.cut.n, b.cut.actions = at, 0, nil
	b.cut.mu.Unlock()
	ctl := cutControl{Controller: control.New(b.reg, control.Config{Holder: "cellctl rollout resume by bench@host"}, control.Options{}), cut: b.cut}
	ro, err := ctl.Controller.Rollout(context.Background())
	if err != nil {
		b.t.Fatal(err)
	}
	cfg, err := rollout.ConfigOf(ro)
	if err != nil {
		b.t.Fatal(err)
	}
	opts := rollout.Options{Control: ctl, Admin: b.admin, Deployer: b.deployer, Now: b.now}
	opts.Progress = func(s string) {
		b.t.Logf("%s %s", time.Now().Format("05.000"), s)
		if s == "c1 runs the new release: baking" {
			// Every instance of the baking cell in rotation as before
			// the rollout: none left out by a driver stopped between
			// its readiness and its return to rotation.
			b.checkRotation("c1 baking")
		}
		if len(progress) > 0 {
			progress[0](s)
		}
	}
	return rollout.New(id, cfg, opts)
}

// start records rollout id of --set workers=9 over c1 then c2, with
// bakes that find no samples: every run halts in the first wave and
// rolls it back.
func (b *bench) start(id string) {
	b.t.Helper()
	ctl := control.New(b.reg, control.Config{Holder: "cellctl rollout start by bench@host"}, control.Options{})
	cfg := rollout.Config{Spec: release.Spec{Set: []string{"workers=9"}},
		Gate:   gate.Config{Alpha: 0.01, MinSamples: 20, FailureMargin: 0.005, LatencyFactor: 1.25, LatencyMargin: 0.050},
		Scrape: 10 * time.Millisecond, ReadyWithin: 2 * time.Second, Lease: time.Minute}
	waves := []control.Wave{{Cells: []string{"c1", "c2"}, Bake: 50 * time.Millisecond}}
	if _, err := rollout.Start(context.Background(), ctl, id, waves, cfg); err != nil {
		b.t.Fatal(err)
	}
}

// original is each process's command before any rollout, by key.
func (b *bench) original(key string) []string {
	return []string{"--cell=" + strings.SplitN(key, "-", 2)[0], "--workers=4"}
}

// rename gives the deployer's processes names of its own (as a cluster
// names pods), and lists them in order (by key): the rollout finds each
// cell's processes by their cell and instance.
func (b *bench) rename(name func(key string) string, order ...string) {
	b.deployer.mu.Lock()
	defer b.deployer.mu.Unlock()
	for i := range b.deployer.procs {
		b.deployer.procs[i].Name = name(b.deployer.procs[i].key)
	}
	slices.SortStableFunc(b.deployer.procs, func(p, q benchProc) int {
		return cmp.Compare(slices.Index(order, p.key), slices.Index(order, q.key))
	})
}

// keyOf is the key of a unit's process in the record (k: its instance,
// "-" for a cell of one process).
func keyOf(unit, k string) string {
	if k == "-" {
		return unit
	}
	return unit + "-" + k
}

// check says what is wrong with the stack and the record after a
// rollout that ended rolled back, "" if nothing.
func (b *bench) check(ro *control.Rollout) string {
	var bad []string
	for _, name := range benchProcs {
		bin, args := b.deployer.command(name)
		if bin != b.bin || !slices.Equal(args, b.original(name)) {
			bad = append(bad, fmt.Sprintf("%s runs %v, not what it ran before %v", name, args, b.original(name)))
		}
		for _, run := range b.deployer.runs[name] {
			if n := slices.Index(run, "--workers=9"); n >= 0 && slices.Contains(run[n+1:], "--workers=9") {
				bad = append(bad, fmt.Sprintf("%s was run with the release's flag twice: %v", name, run))
			}
		}
	}
	if ro.State != control.RolloutRolledBack {
		bad = append(bad, fmt.Sprintf("the record says %s, not rolled_back", ro.State))
	}
	for unit, cr := range ro.Cells {
		if cr.Phase.Reached() && cr.Phase != control.PhaseRolledBack {
			bad = append(bad, fmt.Sprintf("%s is %s in the record", unit, cr.Phase))
		}
		for k, pr := range cr.Processes {
			name := keyOf(unit, k)
			if pr.Step != control.StepRestored {
				bad = append(bad, fmt.Sprintf("%s is %s in the record", name, pr.Step))
			}
			if pr.Before.Bin != b.bin || !slices.Equal(pr.Before.Args, b.original(name)) || pr.Before.Release != releaseOf(b.bin, b.original(name)) {
				bad = append(bad, fmt.Sprintf("the record has %s running %+v before, not what it ran", name, pr.Before))
			}
		}
	}
	b.checkRotation("rolled back")
	return strings.Join(bad, "; ")
}

// checkRotation fails the test unless c1's i3, drained by an operator,
// is out of the routers' rotation and the others are in it.
func (b *bench) checkRotation(when string) {
	b.t.Helper()
	m, err := b.reg.Load(context.Background())
	if err != nil {
		b.t.Error(err)
		return
	}
	c1, _ := m.Cell("c1")
	for _, in := range c1.Instances {
		if want := in.ID == "i3"; in.Drained != want {
			b.t.Errorf("%s: c1/%s drained=%v, want %v (as before the rollout)", when, in.ID, in.Drained, want)
		}
	}
}

// TestEveryCutIsResumedTruthfully: a rollout whose driver is cut after
// any one of its actions — each deployer call, record write and map
// write of a whole run, the rollback's included — and then resumed by
// another driver (once the first's lease has run out) ends with every
// process on the command and release it ran before the rollout, the
// operator's drained instance still drained, the others in rotation,
// the release's flag never appended twice, and a record that says
// rolled_back with each process restored and what it ran before. The
// record keeps nothing of a process's environment.
func TestEveryCutIsResumedTruthfully(t *testing.T) {
	ctx := context.Background()
	// An uncut run counts the actions.
	b := newBench(t, "i3")
	b.start("whole")
	ro, err := b.runner("whole", 0).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if why := b.check(ro); why != "" {
		t.Fatalf("an uncut run: %s", why)
	}
	total := len(b.cut.actions)
	if total < 20 {
		t.Fatalf("an uncut run took %d actions: %v", total, b.cut.actions)
	}
	actions := slices.Clone(b.cut.actions)
	for at := 1; at <= total; at++ {
		t.Run(fmt.Sprintf("after %d %s", at, actions[at-1]), func(t *testing.T) {
			t.Parallel()
			b := newBench(t, "i3")
			b.start("cut")
			// A cut that refuses only the lease given back at the end
			// leaves a driver that ended well.
			if _, err := b.runner("cut", at).Run(ctx); err != nil && !errors.Is(err, errCut) {
				t.Fatalf("the driver cut after action %d: %v, want the cut", at, err)
			}
			b.skew.Add(int64(2 * time.Minute)) // its lease runs out
			ro, err := b.runner("cut", 0).Run(ctx)
			if err != nil {
				t.Fatalf("the resume: %v", err)
			}
			if why := b.check(ro); why != "" {
				t.Errorf("cut after %s, resumed: %s\nevents: %v", actions[at-1], why, ro.Events)
			}
			data, err := os.ReadFile(filepath.Join(b.dir, "map.json.rollout"))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(data), "s3cret") || strings.Contains(string(data), "CELLKIT_SECRET") {
				t.Errorf("the record holds a process's environment:\n%s", data)
			}
		})
	}
}

// TestProcessesOnTheReleaseAlready: a rollout of a release that some of
// its wave's processes run already (the rollout run again after a halt
// in a later wave) is not halted waiting for them to get ready "on
// another release than before": the first process reached, on it, is
// replaced and ready once a new process answers (its start time moved);
// the next, on the release the first reported, is left as it runs. The
// bench's bake then finds no samples and the rollout is rolled back
// truthfully.
func TestProcessesOnTheReleaseAlready(t *testing.T) {
	b := newBench(t, "i3")
	b.deployer.mu.Lock()
	for i, p := range b.deployer.procs {
		if p.key == "c1-i1" || p.key == "c1-i2" {
			b.deployer.procs[i].Run.Args = append(b.original(p.key), "--workers=9")
		}
	}
	b.deployer.mu.Unlock()
	b.start("again")
	ro, err := b.runner("again", 0).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ro.State != control.RolloutRolledBack || strings.Contains(ro.Reason, "not ready") || !strings.Contains(ro.Reason, "too few samples") {
		t.Fatalf("rollout %s: %s, want rolled back for the bake's lack of samples", ro.State, ro.Reason)
	}
	var events []string
	for _, e := range ro.Events {
		events = append(events, e.Text)
	}
	said := strings.Join(events, "\n")
	for _, p := range []string{"c1-i1", "c1-i2", "c1-i3", "c2"} {
		if !strings.Contains(said, p+" ready on ") {
			t.Errorf("%s never got ready on the release:\n%s", p, said)
		}
	}
	if runs := b.deployer.runs["c1-i1"]; len(runs) == 0 || !slices.Contains(runs[0], "--workers=9") {
		t.Errorf("c1-i1, the first reached, was not run anew: %v", runs)
	}
	for _, run := range b.deployer.runs["c1-i2"] {
		if slices.Contains(run, "--workers=9") {
			t.Errorf("c1-i2, on the rollout's release already, was replaced: %v", run)
		}
	}
	if ro.Release != ro.From {
		t.Errorf("the rollout's release %s, from %s: want the release the first process ran", ro.Release, ro.From)
	}
}

// TestALastInstanceInRotationIsNotReplaced: with c1's i2 and i3 drained
// by an operator, i1 serves c1 alone: the rollout halts before it
// replaces i1, and ends rolled back with nothing of c1 replaced and
// i2, i3 still drained.
func TestALastInstanceInRotationIsNotReplaced(t *testing.T) {
	b := newBench(t, "i2", "i3")
	b.start("alone")
	ro, err := b.runner("alone", 0).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ro.State != control.RolloutRolledBack || !strings.Contains(ro.Reason, "c1-i1 is the last instance of c1 in the routers' rotation") {
		t.Fatalf("rollout %s: %s", ro.State, ro.Reason)
	}
	if runs := b.deployer.runs["c1-i1"]; len(runs) != 0 {
		t.Errorf("c1-i1, serving alone, was replaced: %v", runs)
	}
	m, _ := b.reg.Load(context.Background())
	c1, _ := m.Cell("c1")
	for _, in := range c1.Instances {
		if want := in.ID != "i1"; in.Drained != want {
			t.Errorf("c1/%s drained=%v, want %v", in.ID, in.Drained, want)
		}
	}
}

// TestOneDriverAtATime: while a driver holds the rollout, a second one of
// the same user on the same host is refused before it acts, and a driver
// whose rollout another has taken stops without acting again.
func TestOneDriverAtATime(t *testing.T) {
	ctx := context.Background()
	b := newBench(t, "i3")
	b.start("twice")
	// The first driver stops (cut) right after its first record write:
	// its lease lasts.
	if _, err := b.runner("twice", 1).Run(ctx); !errors.Is(err, errCut) {
		t.Fatalf("first driver: %v", err)
	}
	second := b.runner("twice", 0)
	ro, err := second.Run(ctx)
	var driven *rollout.DrivenError
	if !errors.As(err, &driven) || !strings.Contains(driven.Driver, "cellctl rollout resume by bench@host #") {
		t.Fatalf("a second driver while the first's lease lasts: %v", err)
	}
	if n := len(b.cut.actions); n != 0 {
		t.Errorf("the refused driver acted %d times: %v", n, b.cut.actions)
	}
	if ro == nil || ro.Driver == second.Driver() || ro.Wave != 0 {
		t.Errorf("the record after the refusal: %+v", ro)
	}
	// A second driver that asks while the first drives (from within the
	// first's progress) is refused, and the first ends the rollout alone.
	b2 := newBench(t, "i3")
	b2.start("live")
	var asked atomic.Bool
	var refusal error
	first := b2.runner("live", 0, func(string) {
		if asked.CompareAndSwap(false, true) {
			ctl := control.New(b2.reg, control.Config{Holder: "cellctl rollout resume by bench@host"}, control.Options{})
			other := rollout.New("live", rollout.Config{Lease: time.Minute}, rollout.Options{Control: ctl, Admin: b2.admin, Deployer: b2.deployer})
			_, refusal = other.Run(ctx)
		}
	})
	ro, err = first.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.As(refusal, &driven) {
		t.Errorf("a second driver during the first's run: %v", refusal)
	}
	if why := b2.check(ro); why != "" {
		t.Error(why)
	}

	// A driver whose rollout another took (its lease given to another in
	// the record) stops before its next action: no process replaced, no
	// map written after the record changed hands.
	b3 := newBench(t, "i3")
	b3.start("taken")
	var taken atomic.Bool
	var actionsAtTakeover int
	ctl := control.New(b3.reg, control.Config{Holder: "another"}, control.Options{})
	r3 := b3.runner("taken", 0, func(s string) {
		if strings.HasPrefix(s, "replacing c1-i1") && taken.CompareAndSwap(false, true) {
			if _, err := ctl.UpdateRollout(ctx, "taken", func(ro *control.Rollout) error {
				ro.Driver, ro.LeaseUntil = "another #1", time.Now().Add(time.Hour)
				return nil
			}); err != nil {
				t.Error(err)
			}
			b3.cut.mu.Lock()
			actionsAtTakeover = b3.cut.n
			b3.cut.mu.Unlock()
		}
	})
	if _, err := r3.Run(ctx); err == nil || !strings.Contains(err.Error(), "is driven by another #1 now: this driver stops") {
		t.Fatalf("a driver whose rollout was taken: %v", err)
	}
	if n := len(b3.cut.actions); n != actionsAtTakeover {
		t.Errorf("the driver acted after its rollout was taken: %v", b3.cut.actions[actionsAtTakeover:])
	}
	if runs := b3.deployer.runs["c1-i1"]; len(runs) != 0 {
		t.Errorf("c1-i1 was replaced by a driver that no longer held the rollout: %v", runs)
	}
}

// TestRecordsHoldNoSecrets: a release that would set a secret as a flag
// is refused at start (give it as a file), and a process whose arguments
// carry one is not recorded: the rollout halts before it acts on it, and
// the record (shown by rollout status and the console) never holds it.
func TestRecordsHoldNoSecrets(t *testing.T) {
	for set, ok := range map[string]bool{"admin-token=abc": false, "consul-password=x": false, "admin-token-file=/etc/t": true, "workers=3": true} {
		err := rollout.Config{Spec: release.Spec{Set: []string{set}}}.ValidateRelease()
		if (err == nil) != ok {
			t.Errorf("--set %s: %v", set, err)
		}
	}
	b := newBench(t, "i3")
	b.deployer.procs[3].Run.Args = append(b.deployer.procs[3].Run.Args, "--consul-token=s3cret")
	b.start("secret")
	ro, err := b.runner("secret", 0).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ro.State != control.RolloutRolledBack || !strings.Contains(ro.Reason, "c2: its flag --consul-token carries a secret") {
		t.Errorf("rollout %s: %s", ro.State, ro.Reason)
	}
	if runs := b.deployer.runs["c2"]; len(runs) != 0 {
		t.Errorf("c2 was replaced: %v", runs)
	}
	data, err := os.ReadFile(filepath.Join(b.dir, "map.json.rollout"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "s3cret") {
		t.Errorf("the record holds the secret:\n%s", data)
	}
}

// TestARollbackPutsTheBrokenProcessBackFirst: c1-i1 got ready on the new
// release, c1-i2 never does; the halt's rollback puts c1-i2 back first
// (replacing a process that serves no one costs its cell nothing), then
// c1-i1 with the quorum kept, and ends rolled back.
func TestARollbackPutsTheBrokenProcessBackFirst(t *testing.T) {
	b := newBench(t, "i3")
	b.broken = func(name string, args []string) bool { return name == "c1-i2" && slices.Contains(args, "--workers=9") }
	b.start("broken")
	ro, err := b.runner("broken", 0).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ro.Reason, "c1-i2: not ready on the new release") {
		t.Errorf("halted for %q", ro.Reason)
	}
	if why := b.check(ro); why != "" {
		t.Error(why)
	}
}

// TestTheDeployersNamesAndOrder: a deployer that names its processes its
// own way (as a cluster names pods) has each cell's processes found by
// their cell and instance, and a cell's instances replaced in the order
// it lists them (a cluster's highest ordinal first); an instance the
// deployer does not list comes after those it does, and halts the
// rollout before anything is done to it.
func TestTheDeployersNamesAndOrder(t *testing.T) {
	pods := map[string]string{"c1-i1": "cell-c1-0", "c1-i2": "cell-c1-1", "c1-i3": "cell-c1-2", "c2": "cell-c2-0"}
	b := newBench(t, "i3")
	b.rename(func(key string) string { return pods[key] }, "c2", "c1-i3", "c1-i2", "c1-i1")
	b.start("pods")
	ro, err := b.runner("pods", 0).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var replaced []string
	for _, a := range b.cut.actions {
		if name, ok := strings.CutPrefix(a, "replace "); ok && len(replaced) < 4 {
			replaced = append(replaced, name)
		}
	}
	if want := []string{"cell-c1-2", "cell-c1-1", "cell-c1-0", "cell-c2-0"}; !slices.Equal(replaced, want) {
		t.Errorf("replaced %v, want %v (the deployer's order within c1, then c2); halted for %q", replaced, want, ro.Reason)
	}
	if why := b.check(ro); why != "" {
		t.Error(why)
	}
	if !strings.Contains(strings.Join(eventTexts(ro), "\n"), "replacing cell-c1-2 (runs devel@") {
		t.Errorf("the events do not name the deployer's process: %v", eventTexts(ro))
	}

	// c1's i2 is not among the deployer's processes of c1.
	b = newBench(t, "i3")
	b.deployer.procs[1].Cell = ""
	b.start("unlisted")
	ro, err = b.runner("unlisted", 0).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ro.State != control.RolloutRolledBack || !strings.Contains(ro.Reason, "c1/i2 is not among the deployer's processes") {
		t.Fatalf("rollout %s: %s", ro.State, ro.Reason)
	}
	if runs := b.deployer.runs["c1-i2"]; len(runs) != 0 {
		t.Errorf("the unlisted instance was replaced: %v", runs)
	}
	if runs := b.deployer.runs["c1-i3"]; len(runs) != 2 {
		t.Errorf("c1-i3, listed, after i1 and before the unlisted i2: %d runs, want the release and its rollback", len(runs))
	}
	if why := b.check(ro); why != "" {
		t.Error(why)
	}
}

func eventTexts(ro *control.Rollout) []string {
	var out []string
	for _, e := range ro.Events {
		out = append(out, e.Text)
	}
	return out
}
