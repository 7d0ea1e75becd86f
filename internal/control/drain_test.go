package control

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/testkit"
)

// scriptedAdmin answers a drain's status readings from a script of queue
// depths, one reading each, the last repeated; it records the intake
// calls. (The HTTP side is adminclient's and cellctl's tests, against
// real cells.)
type scriptedAdmin struct {
	mu      sync.Mutex
	depths  []int64
	reads   int
	open    bool // the cell's intake
	closes  int
	down    bool
	sampled time.Time
}

func (a *scriptedAdmin) Status(ctx context.Context, admin string) (*api.CellStatus, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.down {
		return nil, &adminclient.Error{URL: admin, Err: errors.New("connection refused")}
	}
	d := a.depths[min(a.reads, len(a.depths)-1)]
	a.reads++
	a.sampled = a.sampled.Add(time.Second)
	st := &api.CellStatus{Intake: map[bool]string{true: "open", false: "closed"}[a.open], Sampled: a.sampled}
	st.Queue.Depth = map[string]int64{"normal": d}
	if a.reads == 2 {
		a.open = true // a restart reopened it
	}
	return st, nil
}

func (a *scriptedAdmin) SetIntake(ctx context.Context, admin string, open bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.down {
		return &adminclient.Error{URL: admin, Err: errors.New("connection refused")}
	}
	a.open = open
	if !open {
		a.closes++
	}
	return nil
}

func (a *scriptedAdmin) SetIntakes(ctx context.Context, cell slotmap.Cell, open bool) error {
	return a.SetIntake(ctx, cell.Admin, open)
}

func TestDrainWaitsForTheQueueThenMarksDrained(t *testing.T) {
	reg := fileRegistry(t)
	ctx := testkit.Context(t, 30*time.Second)
	c := New(reg, Config{Holder: "test"}, Options{})
	admin := &scriptedAdmin{depths: []int64{5, 2, 0, 0, 0}, open: true}
	var kinds []string
	res, err := c.Drain(ctx, admin, DrainRequest{Cell: "c2", Wait: true, Interval: time.Millisecond,
		Event: func(e DrainEvent) { kinds = append(kinds, fmt.Sprint(e.Kind)) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.State != slotmap.Drained || res.Intake != "closed" || !res.Waited || res.Drain == nil || !res.Drain.Applied || res.MarkDrained == nil || !res.MarkDrained.Applied {
		t.Fatalf("result %+v", res)
	}
	// Closed at the start and again after the reopening seen in the
	// second reading; done after two empty readings in a row.
	if admin.closes != 2 || admin.reads != 4 {
		t.Errorf("closes %d, reads %d; want 2 and 4", admin.closes, admin.reads)
	}
	want := fmt.Sprint([]DrainEventKind{DrainIntakeClosed, DrainProgress, DrainProgress, DrainProgress, DrainProgress, DrainEmpty, DrainMarking})
	if got := "[" + strings.Join(kinds, " ") + "]"; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	// Again: already drained, nothing done.
	res, err = c.Drain(ctx, admin, DrainRequest{Cell: "c2", Wait: true})
	if err != nil || res.State != slotmap.Drained || res.Drain != nil || res.MarkDrained != nil {
		t.Fatalf("again: %+v, %v", res, err)
	}
}

func TestDrainOfAnUnreachableCell(t *testing.T) {
	reg := fileRegistry(t)
	c := New(reg, Config{Holder: "test"}, Options{})
	admin := &scriptedAdmin{depths: []int64{3}, down: true}

	// Without --wait: slots moved, the intake unreachable, still draining.
	res, err := c.Drain(testkit.Context(t, 30*time.Second), admin, DrainRequest{Cell: "c2"})
	if err != nil || res.State != slotmap.Draining || res.Intake != "unreachable" || res.Waited {
		t.Fatalf("no wait: %+v, %v", res, err)
	}
	// Waiting gives up at the deadline with what to do, and the cell
	// stays draining.
	ctx, cancel := context.WithTimeout(testkit.Context(t, 30*time.Second), 50*time.Millisecond)
	defer cancel()
	res, err = c.Drain(ctx, admin, DrainRequest{Cell: "c2", Wait: true, Interval: 5 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "timed out (--timeout)") || !strings.Contains(err.Error(), "'cellctl drain c2 --force'") || res.State != slotmap.Draining {
		t.Fatalf("wait on a dead cell: %+v, %v", res, err)
	}
	// Force marks it drained without a reading.
	res, err = c.Drain(testkit.Context(t, 30*time.Second), admin, DrainRequest{Cell: "c2", Force: true})
	if err != nil || res.State != slotmap.Drained || res.Waited {
		t.Fatalf("force: %+v, %v", res, err)
	}
}

func TestDrainDryRunChangesNothing(t *testing.T) {
	reg := fileRegistry(t)
	ctx := testkit.Context(t, 30*time.Second)
	c := New(reg, Config{Holder: "test"}, Options{})
	admin := &scriptedAdmin{depths: []int64{0}, open: true}
	var plans []string
	res, err := c.Drain(ctx, admin, DrainRequest{Cell: "c1", Wait: true, DryRun: true,
		Planned: func(p *slotmap.Plan) { plans = append(plans, p.Op) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(plans) != 2 || res.MarkDrained == nil || !res.MarkDrained.DryRun || res.MarkDrained.Plan.Before != res.Drain.Plan.After {
		t.Fatalf("plans %v, result %+v: want the drain, then the mark on its map", plans, res)
	}
	if admin.reads != 0 || !admin.open {
		t.Errorf("a dry run read the cell (%d) or closed its intake (open %v)", admin.reads, admin.open)
	}
	if m, _ := c.Load(ctx); m.Version() != v0 {
		t.Errorf("map version %d after a dry run", m.Version())
	}
	if _, err := c.Drain(ctx, admin, DrainRequest{Cell: "c9"}); err == nil || !strings.Contains(err.Error(), `unknown cell "c9"`) {
		t.Errorf("unknown cell: %v", err)
	}
}
