package tfprovider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cellkit/cellkit/internal/agencysim"
	"github.com/cellkit/cellkit/internal/cellctl"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/consultest"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/telegram"
	"github.com/cellkit/cellkit/internal/testkit"
)

// The acceptance tests run the real terraform CLI against the provider
// built from this tree (a dev_overrides CLI configuration: nothing is
// downloaded), on a file registry and on a real Consul agent.

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if buildDir != "" {
			os.RemoveAll(buildDir) // the provider's binary
		}
		celltest.RemoveCellBinary()
		os.Exit(code)
	}))
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// providerDir builds bin/terraform-provider-cellkit into a temporary
// directory once per test binary and returns the directory.
func providerDir(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "cellkit-tf-provider-")
		if buildErr != nil {
			return
		}
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		// Built, not this test binary run as the provider: under make test
		// that is a -race build, too slow for the tests' lock_wait of 2 s.
		cmd := exec.Command("go", "build", "-o", filepath.Join(buildDir, "terraform-provider-cellkit"), "./terraform")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./terraform: %v: %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildDir
}

// tf is one Terraform working directory against one registry.
type tf struct {
	t   *testing.T
	bin string
	dir string
	env []string
	reg string
	// strict: the provider without leave_data (a change whose cell does
	// not answer fails).
	strict bool
}

func newTF(t *testing.T, reg string) *tf {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the terraform CLI: skipped with -short")
	}
	bin, err := exec.LookPath("terraform")
	if err != nil {
		t.Skip("the terraform CLI is not on PATH")
	}
	dir := t.TempDir()
	rc := filepath.Join(dir, "cli.tfrc")
	conf := fmt.Sprintf("provider_installation {\n  dev_overrides {\n    %q = %q\n  }\n  direct {}\n}\n", "cellkit/cellkit", providerDir(t))
	if err := os.WriteFile(rc, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1",
		"TF_DATA_DIR="+filepath.Join(dir, ".terraform"), "CELLKIT_REGISTRY=", "CELLKIT_ADMIN_TOKEN=")
	return &tf{t: t, bin: bin, dir: dir, env: env, reg: reg}
}

// config writes main.tf: the provider block for the registry, then body.
func (f *tf) config(body string) {
	f.t.Helper()
	head := fmt.Sprintf(`terraform {
  required_providers {
    cellkit = { source = "cellkit/cellkit" }
  }
}
provider "cellkit" {
  registry   = %q
  lock_wait  = "2s"
  leave_data = %t # the tests' cells do not run, or hold nothing
}
`, f.reg, !f.strict)
	if err := os.WriteFile(filepath.Join(f.dir, "main.tf"), []byte(head+body), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// run runs terraform with args and returns its output and exit status.
func (f *tf) run(args ...string) (string, int) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, f.bin, append(args, "-no-color")...)
	cmd.Dir, cmd.Env = f.dir, f.env
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	f.t.Fatalf("terraform %s: %v: %s", strings.Join(args, " "), err, out)
	return "", 0
}

// ok runs terraform and fails the test unless it exits 0.
func (f *tf) ok(args ...string) string {
	f.t.Helper()
	out, code := f.run(args...)
	if code != 0 {
		f.t.Fatalf("terraform %s: exit %d:\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

// noChanges checks that a plan finds nothing to do.
func (f *tf) noChanges() {
	f.t.Helper()
	if out, code := f.run("plan", "-detailed-exitcode"); code != 0 {
		f.t.Fatalf("plan after apply: exit %d, want 0 (no changes):\n%s", code, out)
	}
}

// load reads the registry's map (nil when there is none).
func (f *tf) load() *slotmap.Map {
	f.t.Helper()
	m, err := newClient(f.reg, time.Second, "", control.MoveConfig{}).load(context.Background())
	if errors.Is(err, registry.ErrNoMap) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return m
}

// raw is the registry's map document ("" when there is none).
func (f *tf) raw() string {
	f.t.Helper()
	m := f.load()
	if m == nil {
		return ""
	}
	b, err := m.Encode()
	if err != nil {
		f.t.Fatal(err)
	}
	return string(b)
}

// cellctl runs a cellctl command line against the registry in process.
func (f *tf) cellctl(args ...string) string {
	f.t.Helper()
	var out, errb bytes.Buffer
	if code := cellctl.Run(context.Background(), append([]string{"--registry", f.reg}, args...), &out, &errb); code != 0 {
		f.t.Fatalf("cellctl %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
	}
	return out.String()
}

// backends runs f once on a file registry and once on a real Consul agent.
func backends(t *testing.T, f func(t *testing.T, reg string)) {
	t.Run("file", func(t *testing.T) { f(t, "file:"+filepath.Join(t.TempDir(), "map.json")) })
	t.Run("consul", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a Consul agent: skipped with -short")
		}
		a := consultest.Start(t)
		f(t, "consul://"+a.Addr()+"/cellkit-tf")
	})
}

// fourCells is the example's configuration: a map, four cells (no cell
// process runs, so destroy may not wait for their queues), an override.
func fourCells(weight2 int) string {
	return fmt.Sprintf(`
resource "cellkit_map" "this" {
  agencies = { nice = 80, kcb = 40 }
}

locals {
  weights = { c1 = 1, c2 = %d, c3 = 1, c4 = 1 }
}

resource "cellkit_cell" "cell" {
  for_each      = local.weights
  id            = each.key
  intake        = "http://127.0.0.1:81${substr(each.key, 1, 1)}0"
  admin         = "http://127.0.0.1:91${substr(each.key, 1, 1)}0"
  weight        = each.value
  capacity      = 100 * each.value
  force_destroy = true
  depends_on    = [cellkit_map.this]
}

resource "cellkit_override" "vip" {
  user = "vip-17"
  cell = cellkit_cell.cell["c3"].id
}

data "cellkit_lookup" "vip" {
  user       = "vip-17"
  depends_on = [cellkit_override.vip]
}

output "vip_cell" { value = data.cellkit_lookup.vip.cell }
`, weight2)
}

// The example's life: apply, nothing left to do, a weight change that
// moves only slots to or from that cell, destroy.
func TestApplyPlanWeightDestroy(t *testing.T) {
	backends(t, func(t *testing.T, reg string) {
		f := newTF(t, reg)
		f.config(fourCells(1))
		out := f.ok("apply", "-auto-approve")
		if !strings.Contains(out, `vip_cell = "c3"`) {
			t.Errorf("apply output lacks the lookup of the override:\n%s", out)
		}
		m := f.load()
		if len(m.ActiveCells()) != 4 || m.Overrides()["vip-17"] != "c3" {
			t.Fatalf("after apply: cells %v, overrides %v", m.ActiveCells(), m.Overrides())
		}
		if !strings.HasSuffix(m.Change(), "("+Origin+")") {
			t.Errorf("change text %q does not say it came from Terraform", m.Change())
		}
		f.noChanges()

		before := m
		f.config(fourCells(3))
		f.ok("apply", "-auto-approve")
		after := f.load()
		for s := range after.Slots() {
			from, to := before.Owner(s), after.Owner(s)
			if from != to && to != "c2" && from != "c2" {
				t.Fatalf("slot %d moved %s → %s: a weight change of c2 moved another cell's slot", s, from, to)
			}
		}
		if c, _ := before.Cell("c2"); c.Capacity != 100 {
			t.Errorf("c2's capacity %d after apply, want 100", c.Capacity)
		}
		if c, _ := after.Cell("c2"); c.Weight != 3 || c.Capacity != 300 || after.SlotCounts()["c2"] <= before.SlotCounts()["c2"] {
			t.Errorf("c2 after the weight change: %+v, %d slots (before %d)", c, after.SlotCounts()["c2"], before.SlotCounts()["c2"])
		}
		f.noChanges()

		f.ok("destroy", "-auto-approve")
		if m := f.load(); m == nil || len(m.Cells()) != 0 || len(m.Overrides()) != 0 {
			t.Errorf("after destroy: %v", m)
		}
	})
}

// What an operator changes with cellctl shows as drift in the next plan,
// and is put back by apply; existing cells and the map are imported.
func TestDriftAndImport(t *testing.T) {
	f := newTF(t, "file:"+filepath.Join(t.TempDir(), "map.json"))
	f.cellctl("init", "--agency", "nice=80", "--agency", "kcb=40")
	for _, c := range []string{"c1", "c2", "c3", "c4"} {
		f.cellctl("provision", c, "--intake", "http://127.0.0.1:81"+c[1:]+"0", "--admin", "http://127.0.0.1:91"+c[1:]+"0", "--leave-data")
		f.cellctl("capacity", "set", c, "100/s")
	}
	f.cellctl("override", "set", "vip-17", "c3", "--leave-data")
	f.config(fourCells(1))
	f.ok("import", "cellkit_map.this", f.reg)
	for _, c := range []string{"c1", "c2", "c3", "c4"} {
		f.ok("import", `cellkit_cell.cell["`+c+`"]`, c)
	}
	f.ok("import", "cellkit_override.vip", "vip-17")
	// Imported cells have no force_destroy and timeouts in state yet: the
	// first apply records them without a map change.
	version := f.load().Version()
	f.ok("apply", "-auto-approve")
	if v := f.load().Version(); v != version {
		t.Errorf("the apply after import changed the map: version %d → %d", version, v)
	}
	f.noChanges()

	f.cellctl("drain", "c2", "--force", "--leave-data")
	out, code := f.run("plan", "-detailed-exitcode")
	if code != 2 || !strings.Contains(out, `~ state         = "drained" -> "active"`) {
		t.Fatalf("plan after cellctl drain c2: exit %d, want 2 with c2's state change:\n%s", code, out)
	}
	f.ok("apply", "-auto-approve")
	if c, _ := f.load().Cell("c2"); c.State != slotmap.Active {
		t.Errorf("c2 after apply: %s, want active again", c.State)
	}
	f.noChanges()
}

// A writer holding the registry's lock: apply waits lock_wait, then fails
// naming the holder, and the map is unchanged.
func TestApplyWaitsForTheLockThenFails(t *testing.T) {
	backends(t, func(t *testing.T, reg string) {
		f := newTF(t, reg)
		f.config(fourCells(1))
		f.ok("apply", "-auto-approve")
		r, err := registry.Open(registry.Config{URL: reg}, registry.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		lock, err := r.Lock(context.Background(), "cellctl weight by alice@ops-1")
		if err != nil {
			t.Fatal(err)
		}
		before := f.raw()
		f.config(fourCells(2))
		start := time.Now()
		out, code := f.run("apply", "-auto-approve")
		if code == 0 || !strings.Contains(out, "cellctl weight by alice@ops-1") || !strings.Contains(out, "writer lock") {
			t.Errorf("apply with the lock held: exit %d, want a failure naming the holder:\n%s", code, out)
		}
		if took := time.Since(start); took > time.Minute {
			t.Errorf("apply took %v with lock_wait 2s", took)
		}
		if f.raw() != before {
			t.Error("the map changed while someone else held the writer lock")
		}
		if err := lock.Unlock(context.Background()); err != nil {
			t.Fatal(err)
		}
		f.ok("apply", "-auto-approve")
		if c, _ := f.load().Cell("c2"); c.Weight != 2 {
			t.Errorf("c2 weight %d after the lock was released, want 2", c.Weight)
		}
		f.ok("destroy", "-auto-approve")
	})
}

// Every bad configuration fails at plan with its reason on the attribute,
// and the map stays byte-identical.
func TestBadConfigurationsFailAtPlan(t *testing.T) {
	f := newTF(t, "file:"+filepath.Join(t.TempDir(), "map.json"))
	f.config(`
resource "cellkit_map" "this" {
  agencies = { nice = 80, kcb = 40 }
}
resource "cellkit_cell" "c1" {
  id            = "c1"
  intake        = "http://127.0.0.1:8110"
  admin         = "http://127.0.0.1:9110"
  fixed_quota   = { nice = 30 }
  force_destroy = true
  depends_on    = [cellkit_map.this]
}
`)
	f.ok("apply", "-auto-approve")
	base := `
resource "cellkit_map" "this" {
  agencies = { nice = 80, kcb = 40 }
}
resource "cellkit_cell" "c1" {
  id            = "c1"
  intake        = "http://127.0.0.1:8110"
  admin         = "http://127.0.0.1:9110"
  fixed_quota   = { nice = 30 }
  force_destroy = true
  depends_on    = [cellkit_map.this]
}
`
	for _, tc := range []struct {
		name, extra, want string
	}{
		{"bad URL", `resource "cellkit_cell" "c2" {
  id     = "c2"
  intake = "ftp://example.com"
  admin  = "http://127.0.0.1:9120"
}`, "Invalid URL"},
		{"weight 0", `resource "cellkit_cell" "c2" {
  id     = "c2"
  intake = "http://127.0.0.1:8120"
  admin  = "http://127.0.0.1:9120"
  weight = 0
}`, "weight must be 1 or more"},
		{"negative capacity", `resource "cellkit_cell" "c2" {
  id       = "c2"
  intake   = "http://127.0.0.1:8120"
  admin    = "http://127.0.0.1:9120"
  capacity = -1
}`, "capacity must be in 0.."},
		{"unknown cell in an override", `resource "cellkit_override" "o" {
  user = "u-1"
  cell = "c9"
}`, `unknown cell "c9"`},
		{"quota over the limit", `resource "cellkit_cell" "c2" {
  id          = "c2"
  intake      = "http://127.0.0.1:8120"
  admin       = "http://127.0.0.1:9120"
  fixed_quota = { nice = 60 }
}`, "Quota over the agency's limit"},
		{"duplicate cell id", `resource "cellkit_cell" "again" {
  id     = "c1"
  intake = "http://127.0.0.1:8120"
  admin  = "http://127.0.0.1:9120"
}`, "Duplicate cell id"},
		{"bad state", `resource "cellkit_cell" "c2" {
  id     = "c2"
  intake = "http://127.0.0.1:8120"
  admin  = "http://127.0.0.1:9120"
  state  = "paused"
}`, "value must be one of"},
		{"agency removed", "", "An agency cannot be removed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base + tc.extra
			if tc.extra == "" {
				cfg = strings.Replace(base, "nice = 80, kcb = 40", "nice = 80", 1)
			}
			f.config(cfg)
			before := f.raw()
			out, code := f.run("plan")
			if code == 0 || !strings.Contains(out, tc.want) {
				t.Errorf("plan: exit %d, want a failure saying %q:\n%s", code, tc.want, out)
			}
			if f.raw() != before {
				t.Error("a failed plan changed the map")
			}
		})
	}
	f.config(base)
	f.ok("destroy", "-auto-approve")
}

// startCell runs a real cell process for id against the registry, its
// agencies the simulators at nice and kcb, until the test ends.
func startCell(t *testing.T, id, reg, intake, admin, nice, kcb string) {
	t.Helper()
	celltest.StartCell(t, celltest.CellProcess{ID: id, Registry: reg, Intake: intake, Admin: admin, Nice: nice, KCB: kcb})
}

// state = "drained" on a running cell with queued work: apply waits until
// the queue and in-flight work are empty, then the cell owns no slot and
// every inquiry it had accepted is done.
// TestAChangeWhoseCellDoesNotAnswerFails: without leave_data, a cell that
// would take users from a cell that does not answer is not created (their
// inquiries could not move with them), in one diagnostic, the map as the
// first cell left it.
func TestAChangeWhoseCellDoesNotAnswerFails(t *testing.T) {
	f := newTF(t, "file:"+filepath.Join(t.TempDir(), "map.json"))
	f.strict = true
	f.config(`
resource "cellkit_map" "this" {
  agencies = { nice = 80 }
}
resource "cellkit_cell" "c1" {
  id         = "c1"
  intake     = "http://127.0.0.1:1"
  admin      = "http://127.0.0.1:1"
  depends_on = [cellkit_map.this]
}
resource "cellkit_cell" "c2" {
  id         = "c2"
  intake     = "http://127.0.0.1:2"
  admin      = "http://127.0.0.1:2"
  depends_on = [cellkit_cell.c1]
}
`)
	out, code := f.run("apply", "-auto-approve")
	if code == 0 || !strings.Contains(out, "cell c1 does not answer") || !strings.Contains(out, "leave_data = true") {
		t.Fatalf("apply with a cell that does not answer: exit %d:\n%s", code, out)
	}
	if m := f.load(); m == nil || len(m.ActiveCells()) != 1 {
		t.Fatalf("after the failed apply: %v", m)
	}
}

func TestDrainWaitsForTheQueue(t *testing.T) {
	f := newTF(t, "file:"+filepath.Join(t.TempDir(), "map.json"))
	slow := agencysim.Config{Latency: agencysim.FixedLatency(200 * time.Millisecond)}
	nice := celltest.StartSim(t, telegram.NICE(), slow)
	kcb := celltest.StartSim(t, telegram.KCB(), slow)
	intake, admin := testkit.FreeAddr(t), testkit.FreeAddr(t)
	cells := func(state string) string {
		return fmt.Sprintf(`
resource "cellkit_map" "this" {
  agencies = { nice = 80, kcb = 40 }
}
resource "cellkit_cell" "c1" {
  id            = "c1"
  intake        = "http://127.0.0.1:1"
  admin         = "http://127.0.0.1:1"
  force_destroy = true
  depends_on    = [cellkit_map.this]
}
resource "cellkit_cell" "c2" {
  id         = "c2"
  intake     = "http://%s"
  admin      = "http://%s"
  state      = %q
  depends_on = [cellkit_map.this]
  timeouts {
    update = "2m"
  }
}
`, intake, admin, state)
	}
	f.config(cells("active"))
	f.ok("apply", "-auto-approve")
	startCell(t, "c2", f.reg, intake, admin, nice.Addr().String(), kcb.Addr().String())

	// 24 inquiries for c2's users: with 2 workers and 200 ms agencies they
	// take a few seconds.
	m := f.load()
	var ids []string
	for u := 0; len(ids) < 24; u++ {
		user := fmt.Sprintf("user-%d", u)
		if m.Lookup(user).Cell != "c2" {
			continue
		}
		r := testkit.Do(t, nil, "POST", "http://"+intake+"/v1/inquiries",
			map[string]any{"user_id": user, "product": "credit_loan", "amount": 5000000, "priority": "normal"}, nil)
		var a struct{ ID string }
		r.JSON(t, &a)
		if r.Status != http.StatusAccepted {
			t.Fatalf("POST for %s: %d %s", user, r.Status, r.Body)
		}
		ids = append(ids, a.ID)
	}
	f.config(cells("drained"))
	start := time.Now()
	f.ok("apply", "-auto-approve")
	took := time.Since(start)
	t.Logf("apply with the drain took %v", took)
	after := f.load()
	if c, _ := after.Cell("c2"); c.State != slotmap.Drained || after.SlotCounts()["c2"] != 0 {
		t.Fatalf("c2 after apply: %s with %d slots, want drained with none", c.State, after.SlotCounts()["c2"])
	}
	for _, id := range ids {
		r := testkit.Do(t, nil, "GET", "http://"+intake+"/v1/inquiries/"+id, nil, nil)
		var v struct{ Status string }
		r.JSON(t, &v)
		if v.Status != "done" {
			t.Errorf("inquiry %s is %q after the drain, want done: apply returned before the queue was empty (took %v)", id, v.Status, took)
		}
	}
	f.noChanges()
}

// The examples users copy: terraform get (the local module; nothing is
// downloaded), apply, and a plan with nothing left to do.
func TestExamples(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(file), "..", "..", "terraform")
	for _, ex := range []struct{ name, varName string }{{"local", "registry"}, {"consul", "consul"}} {
		t.Run(ex.name, func(t *testing.T) {
			var reg, value string
			if ex.name == "local" {
				reg = "file:" + filepath.Join(t.TempDir(), "map.json")
				value = reg
			} else {
				if testing.Short() {
					t.Skip("starts a Consul agent: skipped with -short")
				}
				a := consultest.Start(t)
				reg, value = "consul://"+a.Addr()+"/cellkit", a.Addr()
			}
			f := newTF(t, reg)
			// The example and the module, at the same relative places.
			if err := os.CopyFS(filepath.Join(f.dir, "terraform"), os.DirFS(src)); err != nil {
				t.Fatal(err)
			}
			f.dir = filepath.Join(f.dir, "terraform", "examples", ex.name)
			f.ok("get")
			// The example's cells do not run here: nothing to move.
			f.ok("apply", "-auto-approve", "-var", ex.varName+"="+value, "-var", "leave_data=true")
			if m := f.load(); m == nil || len(m.ActiveCells()) != 4 {
				t.Fatalf("after applying the example: %v", m)
			}
			if out, code := f.run("plan", "-detailed-exitcode", "-var", ex.varName+"="+value, "-var", "leave_data=true"); code != 0 {
				t.Fatalf("plan after apply: exit %d:\n%s", code, out)
			}
		})
	}
}
