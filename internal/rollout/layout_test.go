package rollout

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/testkit"
)

// layoutCell is a cell instance's admin API as far as layouts go: its
// status names its layout (nil: a release from before the ledger), and
// POST /v1/admin/layout/ledger switches it.
type layoutCell struct {
	mu       sync.Mutex
	id       string
	layout   *api.LayoutStatus
	switches int
}

func (c *layoutCell) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/admin/status":
		_ = json.NewEncoder(w).Encode(api.CellStatus{Cell: c.id, Instance: c.id, Ready: true, Layout: c.layout})
	case r.Method == http.MethodPost && r.URL.Path == api.PathCellLedger && c.layout != nil:
		c.switches++
		now := time.Now().UTC()
		c.layout.LedgerSince = &now
		_ = json.NewEncoder(w).Encode(c.layout)
	default:
		http.NotFound(w, r)
	}
}

// set changes the cell's layout.
func (c *layoutCell) set(change func(l **api.LayoutStatus)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	change(&c.layout)
}

func knowing() *api.LayoutStatus {
	return &api.LayoutStatus{Writes: api.LayoutRecords, Knows: []string{api.LayoutRecords, api.LayoutLedger}}
}

// TestADoneRolloutSwitchesItsCells: once a rollout is done, each of its
// cells whose instances all know the ledger is switched to it, once; a
// cell with an instance on a release that does not know it is left on
// the records layout, and said why; one switched already is left alone.
func TestADoneRolloutSwitchesItsCells(t *testing.T) {
	reg := celltest.NewRegistry(t, map[string]int{"nice": 80})
	procs := map[string][]*layoutCell{}
	for _, id := range []string{"c1", "c2", "c3"} {
		cell := celltest.TestCell(id)
		cell.Instances = nil
		for _, in := range []string{"i1", "i2"} {
			c := &layoutCell{id: id + "-" + in, layout: knowing()}
			srv := httptest.NewServer(c)
			t.Cleanup(srv.Close)
			procs[id] = append(procs[id], c)
			cell.Instances = append(cell.Instances, slotmap.Instance{ID: in, Intake: srv.URL, Admin: srv.URL})
		}
		cell.Intake, cell.Admin = cell.Instances[0].Intake, cell.Instances[0].Admin
		reg.Change(func(m *slotmap.Map) (*slotmap.Plan, error) { return m.AddCell(cell) })
	}
	procs["c2"][1].set(func(l **api.LayoutStatus) { *l = nil }) // a release from before the ledger
	since := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range procs["c3"] {
		c.set(func(l **api.LayoutStatus) { (*l).LedgerSince, (*l).Writes = &since, api.LayoutLedger })
	}
	var said []string
	r := &Runner{opts: Options{
		Control: control.New(reg.Reg, control.Config{Holder: "layout test"}, control.Options{}),
		Admin:   adminclient.Client{HTTP: &http.Client{Timeout: time.Second}},
		Now:     time.Now, Progress: func(s string) { said = append(said, s) },
	}}
	r.switchLayouts(testkit.Context(t, 10*time.Second), &control.Rollout{Waves: []control.Wave{{Cells: []string{"c1"}}, {Cells: []string{"c2", "c3"}}}})
	switches := func(cs ...*layoutCell) (n int) {
		for _, c := range cs {
			c.mu.Lock()
			n += c.switches
			c.mu.Unlock()
		}
		return n
	}
	if n := switches(procs["c1"]...); n != 1 {
		t.Errorf("c1 switched %d times, want once", n)
	}
	if n := switches(append(procs["c2"], procs["c3"]...)...); n != 0 {
		t.Errorf("c2 or c3 switched %d times, want never", n)
	}
	text := strings.Join(said, "\n")
	if !strings.Contains(text, "c1 writes the ledger from") || !strings.Contains(text, "c2 not switched to the ledger: c2-i2 on a release that does not know it") {
		t.Errorf("said:\n%s", text)
	}
}

// TestAReleaseBeforeTheLedgerIsRefusedOnASwitchedCell: a process
// replaced by a release that does not know the ledger, on a cell that
// writes it, is refused when it is ready (the rollout halts, and rolls
// it back); on a cell not switched it is not.
func TestAReleaseBeforeTheLedgerIsRefusedOnASwitchedCell(t *testing.T) {
	reg := celltest.NewRegistry(t, map[string]int{"nice": 80})
	old, replaced := &layoutCell{id: "c1-i1", layout: knowing()}, &layoutCell{id: "c1-i2"}
	cell := celltest.TestCell("c1")
	for i, c := range []*layoutCell{old, replaced} {
		srv := httptest.NewServer(c)
		t.Cleanup(srv.Close)
		cell.Instances = append(cell.Instances, slotmap.Instance{ID: []string{"i1", "i2"}[i], Intake: srv.URL, Admin: srv.URL})
	}
	cell.Intake, cell.Admin = cell.Instances[0].Intake, cell.Instances[0].Admin
	reg.Change(func(m *slotmap.Map) (*slotmap.Plan, error) { return m.AddCell(cell) })
	r := &Runner{opts: Options{
		Control: control.New(reg.Reg, control.Config{Holder: "layout test"}, control.Options{}),
		Admin:   adminclient.Client{HTTP: &http.Client{Timeout: time.Second}}, Now: time.Now,
	}}
	ctx := testkit.Context(t, 10*time.Second)
	p := proc{unit: "c1", instance: "i2", admin: cell.Instances[1].Admin}
	if err := r.knowsLedger(ctx, p, time.Time{}); err != nil {
		t.Fatalf("on a cell not switched: %v", err)
	}
	since := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	old.set(func(l **api.LayoutStatus) { (*l).LedgerSince = &since })
	err := r.knowsLedger(ctx, p, time.Time{})
	var halt haltError
	if !errors.As(err, &halt) || !strings.Contains(halt.why, "does not know the ledger that c1 writes since 2026-12-01T00:00:00Z") {
		t.Fatalf("on a switched cell: %v, want a halt", err)
	}
	replaced.set(func(l **api.LayoutStatus) { *l = knowing() })
	if err := r.knowsLedger(ctx, p, since); err != nil {
		t.Fatalf("a release that knows the ledger: %v", err)
	}
}
