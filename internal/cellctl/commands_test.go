package cellctl

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// TestVerifyOfAMapWithNoCellYet: the map init made, before its first
// cell is provisioned, breaks no invariant (the in-cluster verify runs
// while an installation is still coming up); verify warns and exits 0.
func TestVerifyOfAMapWithNoCellYet(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.ok("init", "--agency", "nice=80")
		var v verifyJSON
		e.json(&v, "verify")
		if !v.OK || v.Violations != 0 || v.Warnings != 1 || !strings.Contains(v.Checks[0].Detail, "no cell yet") {
			t.Errorf("verify of an empty map: %+v", v)
		}
		if r := e.run("verify"); r.code != 0 || !strings.Contains(r.stdout, "warn  slots: the map has no cell yet") {
			t.Errorf("%v", r)
		}
	})
}

// TestSession walks an operator's session through the map commands against
// each registry: the human output of every step is a golden file (the same
// for both backends), and the map is checked after each change.
func TestSession(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		step := func(name string, args ...string) result {
			t.Helper()
			r := e.ok(args...)
			e.golden("session_"+name, r.stdout)
			e.clock.Advance(time.Minute)
			return r
		}
		step("init", "init", "--agency", "nice=80", "--agency", "kcb=40", "--slots", "4096")
		step("provision_c1", "provision", "c1", "--intake", "http://10.0.1.1:8081", "--admin", "http://127.0.0.1:1", "--leave-data")
		step("provision_c2", "provision", "c2", "--intake", "http://10.0.1.2:8081", "--admin", "http://127.0.0.1:1", "--leave-data")
		step("provision_c3", "provision", "c3", "--intake", "http://10.0.1.3:8081", "--admin", "http://127.0.0.1:1", "--weight", "2", "--leave-data")
		if m := e.load(); m.Version() != 4 || len(m.ActiveCells()) != 3 {
			t.Fatalf("after provisioning: version %d, active %v", m.Version(), m.ActiveCells())
		}
		step("map_show", "map", "show")
		step("quota", "quota")

		before := e.raw()
		step("drain_dry_run", "drain", "c2", "--dry-run", "--wait")
		step("weight_dry_run", "weight", "c3", "1", "--dry-run")
		if !bytes.Equal(before, e.raw()) {
			t.Fatal("a dry run changed the map")
		}

		step("override_set", "override", "set", "vip-17", "c1", "--leave-data")
		step("override_list", "override", "list")
		step("lookup", "map", "lookup", "vip-17", "user-42")
		step("quota_set", "quota", "set", "nice", "c1", "30")
		step("quota_after_set", "quota")
		step("verify", "verify")
		step("rebalance_nothing", "rebalance")
		step("diff", "map", "diff", "4")
		step("history", "map", "history")

		// A cell whose admin API is down cannot hand its users'
		// inquiries over: the drain is refused, the map unchanged, unless
		// --leave-data leaves them there.
		before = e.raw()
		if r := e.run("drain", "c2"); r.code != ExitFailure || !strings.Contains(r.stderr, "cell c2 does not answer") ||
			!strings.Contains(r.stderr, "--leave-data") || !bytes.Equal(before, e.raw()) {
			t.Errorf("drain of an unreachable cell without --leave-data: %v", r)
		}
		r := step("drain_c2", "drain", "c2", "--leave-data")
		if !strings.Contains(r.stderr, "warning: c2's admin API cannot be reached") {
			t.Errorf("drain of an unreachable cell: stderr %q, want a warning", r.stderr)
		}
		if c, _ := e.load().Cell("c2"); c.State != slotmap.Draining {
			t.Fatalf("c2 is %s after drain, want draining", c.State)
		}
		step("drain_c2_force", "drain", "c2", "--force", "--leave-data")
		if c, _ := e.load().Cell("c2"); c.State != slotmap.Drained || len(c.Quota) != 0 {
			t.Fatalf("c2 after drain --force: %+v, want drained without quota", c)
		}
		step("undrain_c2", "undrain", "c2", "--leave-data")
		m := e.load()
		if c, _ := m.Cell("c2"); c.State != slotmap.Active {
			t.Fatalf("c2 is %s after undrain, want active", c.State)
		}
		// Drain then undrain is the identity on the table.
		p, err := slotmap.Compare(e.mapAt(4), m)
		if err != nil {
			t.Fatal(err)
		}
		if p.MovedSlots != 0 {
			t.Errorf("drain + undrain moved %d slots, want 0", p.MovedSlots)
		}
		step("override_clear", "override", "clear", "vip-17", "--leave-data")
		step("quota_clear", "quota", "clear", "nice", "c1")
		step("quota_limit", "quota", "limit", "nice", "100")
		step("endpoints", "endpoints", "c3", "--intake", "http://10.0.1.33:8081")
		e.ok("drain", "c3", "--force", "--leave-data")
		step("remove_c3", "remove", "c3", "--force")
		if _, ok := e.load().Cell("c3"); ok {
			t.Fatal("c3 still in the map after remove")
		}
	})
}

// mapAt reads a version from the history cellctl keeps.
func (e *env) mapAt(v int64) *slotmap.Map {
	e.t.Helper()
	reg := e.open()
	defer reg.Close()
	m, err := control.HistoryFor(reg).Load(context.Background(), v)
	if err != nil {
		e.t.Fatalf("history version %d: %v", v, err)
	}
	return m
}

// TestJSON parses the --json output of every command that reads or
// changes the map.
func TestJSON(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		var ir initResult
		e.json(&ir, "init", "--agency", "nice=80", "--agency", "kcb=40", "--slots", "4096")
		if !ir.Applied || ir.Version != 1 || ir.Slots != 4096 || ir.Agencies["nice"] != 80 {
			t.Errorf("init --json = %+v", ir)
		}
		var ar struct {
			Plan struct {
				Op            string         `json:"op"`
				VersionBefore int64          `json:"version_before"`
				VersionAfter  int64          `json:"version_after"`
				MovedSlots    int            `json:"moved_slots"`
				MovedFraction float64        `json:"moved_fraction"`
				Moves         []slotmap.Move `json:"moves"`
				Cells         []slotmap.CellChange
			} `json:"plan"`
			DryRun  bool  `json:"dry_run"`
			Applied bool  `json:"applied"`
			Version int64 `json:"version"`
		}
		for i, id := range []string{"c1", "c2"} {
			e.json(&ar, "provision", id, "--intake", "http://10.0.0.1:8081", "--admin", "http://127.0.0.1:1", "--leave-data")
			if !ar.Applied || ar.Version != int64(i+2) || ar.Plan.Op != "add cell "+id {
				t.Errorf("provision %s --json = %+v", id, ar)
			}
		}
		// The moves listed are all of them, not a summary.
		n := 0
		for _, mv := range ar.Plan.Moves {
			n += mv.To - mv.From + 1
			if mv.FromCell != "c1" || mv.ToCell != "c2" {
				t.Errorf("adding c2 moved %+v", mv)
			}
		}
		if n != ar.Plan.MovedSlots || n == 0 || ar.Plan.MovedFraction != float64(n)/4096 {
			t.Errorf("moves cover %d slots, plan says %d (%v)", n, ar.Plan.MovedSlots, ar.Plan.MovedFraction)
		}

		e.json(&ar, "weight", "c1", "3", "--dry-run")
		if ar.Applied || !ar.DryRun || ar.Plan.VersionAfter != 4 || e.load().Version() != 3 {
			t.Errorf("weight --dry-run --json = %+v", ar)
		}

		// map show --json is the map document itself.
		r := e.ok("map", "show", "--json")
		m, err := slotmap.Decode(bytes.TrimSpace([]byte(r.stdout)))
		if err != nil || m.Version() != 3 {
			t.Fatalf("map show --json does not decode as the map: %v", err)
		}
		if got := bytes.TrimSpace([]byte(r.stdout)); !bytes.Equal(got, e.raw()) {
			t.Error("map show --json differs from the stored document")
		}

		var lk lookupJSON
		e.json(&lk, "map", "lookup", "user-1")
		if want := m.Lookup("user-1"); lk.Cell != want.Cell || lk.Slot != want.Slot || lk.Override {
			t.Errorf("map lookup --json = %+v, want %+v", lk, want)
		}
		var q quotaJSON
		e.json(&q, "quota")
		if q.Agencies["nice"].Allocated != 80 || len(q.Cells) != 2 || q.Cells[0].Quota["kcb"]+q.Cells[1].Quota["kcb"] != 40 {
			t.Errorf("quota --json = %+v", q)
		}
		var v verifyJSON
		e.json(&v, "verify")
		if !v.OK || v.Violations != 0 || len(v.Checks) == 0 {
			t.Errorf("verify --json = %+v", v)
		}
		e.ok("override", "set", "u-1", "c2")
		var ov []overrideRow
		e.json(&ov, "override", "list")
		if len(ov) != 1 || ov[0].User != "u-1" || ov[0].Cell != "c2" || !ov[0].Active {
			t.Errorf("override list --json = %+v", ov)
		}
		var d planJSON
		e.json(&d, "map", "diff", "1")
		if d.VersionBefore != 1 || d.VersionAfter != 4 || d.MovedSlots != 4096 || len(d.Overrides) != 1 {
			t.Errorf("map diff --json: %d → %d, %d moved, overrides %v", d.VersionBefore, d.VersionAfter, d.MovedSlots, d.Overrides)
		}
		var h []historyRow
		e.json(&h, "map", "history")
		if len(h) != 4 || h[3].Version != 4 || h[3].Change != "override u-1 c2" {
			t.Errorf("map history --json = %+v", h)
		}
		var st statusJSON
		e.json(&st, "status")
		if st.Version != 4 || len(st.Cells) != 2 || st.Cells[0].Reachable || st.Cells[0].Error == "" {
			t.Errorf("status --json = %+v", st)
		}
		var dr drainResult
		e.json(&dr, "drain", "c1", "--leave-data")
		if dr.State != slotmap.Draining || dr.Drain == nil || !dr.Drain.Applied || dr.Intake != "unreachable" {
			t.Errorf("drain --json = %+v", dr)
		}
	})
}

// TestSavedFileDiff diffs against a map saved with 'map show --json'.
func TestSavedFileDiff(t *testing.T) {
	e := newFileEnv(t)
	e.setup([]string{"c1", "c2", "c3"}, nil)
	saved := filepath.Join(t.TempDir(), "before.json")
	if err := os.WriteFile(saved, []byte(e.ok("map", "show", "--json").stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	e.ok("drain", "c3", "--leave-data")
	var d planJSON
	e.json(&d, "map", "diff", saved)
	for _, mv := range d.Moves {
		if mv.FromCell != "c3" {
			t.Errorf("diff after draining c3 shows a move from %s", mv.FromCell)
		}
	}
	if d.MovedSlots == 0 || d.VersionBefore != 4 || d.VersionAfter != 5 {
		t.Errorf("diff: %d → %d moved %d", d.VersionBefore, d.VersionAfter, d.MovedSlots)
	}
	r := e.run("map", "diff", "99")
	if r.code != ExitFailure || !strings.Contains(r.stderr, "map version 99 is not in the history") {
		t.Errorf("diff against an unknown version: %v", r)
	}
}

// TestVerify: drift from the rendezvous target is a violation (exit 1)
// unless --max-drift accepts it, rebalance undoes it, and pins to cells
// that are not active are warnings.
func TestVerify(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.setup([]string{"c1", "c2", "c3"}, nil)
		e.ok("override", "set", "vip-1", "c3", "--leave-data")
		e.ok("drain", "c3", "--leave-data")

		// Another writer moves slots 0-99 to c1, off their targets. It
		// writes format 1, whose table lists [from, to, "cell"] runs.
		m := e.load()
		data, _ := m.Encode()
		var doc map[string]any
		json.Unmarshal(data, &doc)
		table := []any{[]any{0, 99, "c1"}}
		for s := 100; s < m.Slots(); s++ {
			table = append(table, []any{s, s, m.Owner(s)})
		}
		delete(doc, "format")
		doc["table"], doc["version"] = table, m.Version()+1
		data, _ = json.Marshal(doc)
		drifted, err := slotmap.Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		want := len(drifted.Drift())
		reg := e.open()
		if err := reg.CompareAndSwap(context.Background(), m.Version(), drifted); err != nil {
			t.Fatal(err)
		}
		reg.Close()

		r := e.run("verify")
		if r.code != ExitFailure || !strings.Contains(r.stderr, "violates 1 invariant") ||
			!strings.Contains(r.stdout, "FAIL  target: "+itoa(want)+" slots") || !strings.Contains(r.stdout, "warn  overrides: user vip-1 is pinned to draining cell c3") {
			t.Errorf("%v", r)
		}
		e.golden("verify_drift", r.stdout)
		var v verifyJSON
		e.json(&v, "verify", "--max-drift", itoa(want))
		n := 0
		for _, d := range v.Drift {
			n += d.To - d.From + 1
			if d.Owner != "c1" || d.From < 0 || d.To > 99 {
				t.Errorf("drift %+v, want only slots 0-99 on c1", d)
			}
		}
		if !v.OK || n != want || v.Warnings != 2 {
			t.Errorf("verify --max-drift: ok %v, %d drifted slots (want %d), %d warnings", v.OK, n, want, v.Warnings)
		}
		var res struct {
			Plan struct {
				MovedSlots int `json:"moved_slots"`
			} `json:"plan"`
		}
		e.json(&res, "rebalance", "--leave-data")
		if res.Plan.MovedSlots != want {
			t.Errorf("rebalance moved %d slots, want the %d that drifted", res.Plan.MovedSlots, want)
		}
		if v := verify(e.load(), 0); !v.OK {
			t.Errorf("after rebalance: %+v", v.Checks)
		}
	})
}
