package rollout

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// instanceAdmin is an instance's admin API answering its status, ready
// or not as ready says.
func instanceAdmin(t *testing.T, ready *atomic.Bool) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(api.CellStatus{Cell: "c1", Ready: ready.Load(), Release: api.Release{ID: "v1@x"}})
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestKeepQuorum: an instance of three is taken out only while both
// others are ready (a majority of the three serving without it); one not
// ready halts, naming it, unless it gets ready within the bound; a cell
// of two cannot lose one; a cell of one process has no quorum to keep.
func TestKeepQuorum(t *testing.T) {
	var ok1, ok2, ok3 atomic.Bool
	ok1.Store(true)
	ok2.Store(true)
	ok3.Store(false)
	all := []proc{
		{unit: "c1", instance: "i1", admin: instanceAdmin(t, &ok1), rotate: true, deployed: "c1-i1"},
		{unit: "c1", instance: "i2", admin: instanceAdmin(t, &ok2), rotate: true, deployed: "c1-i2"},
		{unit: "c1", instance: "i3", admin: instanceAdmin(t, &ok3), rotate: true, deployed: "c1-i3"},
	}
	ctl := mapOf(t, all)
	r := New("r1", Config{ReadyWithin: 300 * time.Millisecond}, Options{Control: ctl, Admin: adminclient.Client{HTTP: &http.Client{Timeout: time.Second}}})
	ctx := context.Background()
	if err := r.keepQuorum(ctx, all[2], all); err != nil {
		t.Errorf("i3 out, i1 and i2 ready: %v", err)
	}
	err := r.keepQuorum(ctx, all[0], all)
	if err == nil || !strings.Contains(err.Error(), "would leave 1 of 3 instances of c1 ready, under their quorum of 2; not ready: c1-i3") {
		t.Errorf("i1 out with i3 not ready: %v", err)
	}
	go func() { time.Sleep(100 * time.Millisecond); ok3.Store(true) }()
	r.cfg.ReadyWithin = 5 * time.Second
	if err := r.keepQuorum(ctx, all[0], all); err != nil {
		t.Errorf("i1 out once i3 is ready: %v", err)
	}
	r.cfg.ReadyWithin = 300 * time.Millisecond
	two := New("r1", Config{ReadyWithin: 300 * time.Millisecond}, Options{Control: mapOf(t, all[:2]), Admin: r.opts.Admin})
	if err := two.keepQuorum(ctx, all[0], all[:2]); err == nil {
		t.Error("a cell of two lost one of its instances")
	}
	if err := r.keepQuorum(ctx, proc{unit: "c2", admin: "http://127.0.0.1:1"}, nil); err != nil {
		t.Errorf("a cell of one process: %v", err)
	}
}

// mapOf is a controller over a file registry whose map holds cell c1 of
// the instances ps.
func mapOf(t *testing.T, ps []proc) *control.Controller {
	t.Helper()
	reg, err := registry.Open(registry.Config{URL: "file:" + filepath.Join(t.TempDir(), "map.json")}, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	var ins []slotmap.Instance
	for _, p := range ps {
		ins = append(ins, slotmap.Instance{ID: p.instance, Intake: p.admin, Admin: p.admin})
	}
	ctl := control.New(reg, control.Config{Holder: "quorum test"}, control.Options{})
	if err := ctl.Ensure(context.Background(), control.EnsureChange{Agencies: map[string]int{"nice": 80},
		Cells: []control.StackCell{{ID: "c1", Intake: ins[0].Intake, Admin: ins[0].Admin, Instances: ins}}}); err != nil {
		t.Fatal(err)
	}
	return ctl
}
