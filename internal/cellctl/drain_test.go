package cellctl

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/testkit"
)

// drainEnv is a map with c1, c2 and c3 whose admin APIs are fake cells.
func drainEnv(t *testing.T, e *env) map[string]*fakeCell {
	cells := map[string]*fakeCell{}
	for _, id := range []string{"c1", "c2", "c3"} {
		cells[id] = newFakeCell(t, id)
		e.replace = append(e.replace, cells[id].URL(), "http://ADMIN-"+id)
	}
	e.setup([]string{"c1", "c2", "c3"}, func(id string) string { return cells[id].URL() })
	return cells
}

// TestDrainWait: drain --wait closes the intake, shows progress, and marks
// the cell drained (handing its quota over) only once its queue and
// in-flight work are empty.
func TestDrainWait(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		cells := drainEnv(t, e)
		c2 := cells["c2"]
		c2.set(func(f *fakeCell) { f.high, f.normal, f.inflight, f.work = 3, 7, 2, 2 })
		before := e.load()
		r := e.ok("drain", "c2", "--wait", "--interval", "5ms")

		if c2.pending() != 0 {
			t.Fatalf("drain --wait returned with %d messages still pending", c2.pending())
		}
		c2.mu.Lock()
		statuses, emptyAt := c2.statuses, c2.emptyAt
		c2.mu.Unlock()
		if emptyAt == 0 || statuses < emptyAt+1 {
			t.Errorf("marked drained after %d status calls; the queue was first empty at call %d (want two empty samples)", statuses, emptyAt)
		}
		if got := c2.called("POST /v1/admin/intake/close"); len(got) != 1 {
			t.Errorf("intake close calls: %v, want 1", got)
		}
		for _, want := range []string{
			"Intake of c2 closed.",
			"waiting for c2: queue high 3 normal 7, oldest 929ms, in flight 2, elapsed",
			"waiting for c2: queue high 0 normal 0, oldest -, in flight 0",
			"c2's queue and in-flight work are empty after",
			"Plan: mark drained c2 (map version 5 → 6)",
			"c2    draining → drained  1       0      0.0%   13 → 0   27 → 0",
			"Applied: map version 6 (mark drained c2).",
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
			}
		}
		m := e.load()
		c, _ := m.Cell("c2")
		if c.State != slotmap.Drained || len(c.Quota) != 0 {
			t.Errorf("c2 after drain --wait: %+v", c)
		}
		// Draining moved only c2's slots.
		p, _ := slotmap.Compare(before, m)
		for _, mv := range p.Moves {
			if mv.FromCell != "c2" {
				t.Errorf("drain moved slots %d-%d from %s", mv.From, mv.To, mv.FromCell)
			}
		}
		if q := m.Quota("c1", "nice") + m.Quota("c3", "nice"); q != 80 {
			t.Errorf("nice quota of the others after the drain: %d, want all 80", q)
		}
	})
}

// TestDrainUnknownQueue: a status whose queue figures are unknown (the cell
// could not read its queue) is not taken for an empty queue.
func TestDrainUnknownQueue(t *testing.T) {
	e := newFileEnv(t)
	cells := drainEnv(t, e)
	c2 := cells["c2"]
	c2.set(func(f *fakeCell) { f.queueErrs = 4 })
	r := e.ok("drain", "c2", "--wait", "--interval", "5ms")
	if !strings.Contains(r.stdout, "status unavailable (the cell cannot read its queue: queue: nats: timeout)") {
		t.Errorf("no unavailable progress line:\n%s", r.stdout)
	}
	c2.mu.Lock()
	defer c2.mu.Unlock()
	if c2.statuses < 4+2 {
		t.Errorf("drained after %d status calls, 4 of which had no queue figures", c2.statuses)
	}
}

// TestDrainInterrupted: an interrupted (or timed out) drain leaves the cell
// draining, a consistent state, says how to resume, and the resumed drain
// finishes the job.
func TestDrainInterrupted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		cells := drainEnv(t, e)
		c2 := cells["c2"]
		c2.set(func(f *fakeCell) { f.high, f.normal, f.inflight = 3, 7, 2 })

		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			testkit.WaitFor(t, 10*time.Second, "three status calls", func() bool {
				c2.mu.Lock()
				defer c2.mu.Unlock()
				return c2.statuses >= 3
			})
			cancel()
		}()
		r := e.runCtx(ctx, "drain", "c2", "--wait", "--interval", "5ms")
		want := "interrupted after"
		if r.code != ExitFailure || !strings.Contains(r.stderr, want) ||
			!strings.Contains(r.stderr, "c2 is draining (slots moved, intake closed), inquiries still queued (high 3, normal 7) or in flight (2); resume with 'cellctl drain c2 --wait'") {
			t.Errorf("%v", r)
		}
		if c, _ := e.load().Cell("c2"); c.State != slotmap.Draining || c.Quota["nice"] != 27 {
			t.Errorf("c2 after an interrupted drain: %+v, want draining with its quota", c)
		}
		if e.load().Owner(0) == "c2" || e.load().SlotCounts()["c2"] != 0 {
			t.Error("c2 still owns slots after an interrupted drain")
		}

		// --timeout bounds the wait the same way.
		r = e.run("drain", "c2", "--wait", "--interval", "5ms", "--timeout", "100ms")
		if r.code != ExitFailure || !strings.Contains(r.stderr, "timed out (--timeout) after") || !strings.Contains(r.stderr, "resume with 'cellctl drain c2 --wait'") {
			t.Errorf("%v", r)
		}

		// Resumed once the queue can empty.
		c2.set(func(f *fakeCell) { f.work = 100 })
		r = e.ok("drain", "c2", "--wait", "--interval", "5ms")
		if !strings.Contains(r.stdout, "c2 is already draining (its slots moved): resuming.") || !strings.Contains(r.stdout, "Applied: map version 6 (mark drained c2).") {
			t.Errorf("resumed drain:\n%s", r.stdout)
		}
		if c, _ := e.load().Cell("c2"); c.State != slotmap.Drained {
			t.Errorf("c2 is %s after the resumed drain", c.State)
		}
		r = e.ok("drain", "c2")
		if !strings.Contains(r.stdout, "c2 is already drained (map version 6): nothing to do.") {
			t.Errorf("drain of a drained cell:\n%s", r.stdout)
		}
	})
}

// TestDrainProgressTerminal: on a terminal the progress line rewrites
// itself.
func TestDrainProgressTerminal(t *testing.T) {
	e := newFileEnv(t)
	cells := drainEnv(t, e)
	cells["c2"].set(func(f *fakeCell) { f.high, f.normal, f.work = 2, 2, 1 })
	e.cli.Terminal = func(io.Writer) bool { return true }
	r := e.ok("drain", "c2", "--wait", "--interval", "5ms")
	if n := strings.Count(r.stdout, "\r\033[Kwaiting for c2:"); n < 4 {
		t.Errorf("%d in-place progress lines, want at least 4:\n%q", n, r.stdout)
	}
}

// TestDrainDryRun shows both plans (the drain and the mark drained that
// follows the wait) and changes nothing, calls no cell.
func TestDrainDryRun(t *testing.T) {
	e := newFileEnv(t)
	cells := drainEnv(t, e)
	cells["c2"].set(func(f *fakeCell) { f.calls = nil }) // the setup's moves
	before := e.raw()
	r := e.ok("drain", "c2", "--wait", "--dry-run")
	if !bytes.Equal(before, e.raw()) {
		t.Error("drain --dry-run changed the map")
	}
	// It asks what the moves would carry, and nothing else.
	sized := cells["c2"].called("POST " + api.PathCellMoveSize)
	if calls := cells["c2"].called(""); len(calls) != len(sized) || len(sized) == 0 {
		t.Errorf("drain --dry-run called the cell for more than the moves' size (%d calls): %.300v", len(calls), calls)
	}
	if !strings.Contains(r.stdout, "Plan: drain c2 (map version 4 → 5)") || !strings.Contains(r.stdout, "Plan: mark drained c2 (map version 5 → 6)") ||
		!strings.Contains(r.stdout, "Data to move: 0 messages (0 KiB) in 2 moves, copied as fast as the cells take them") {
		t.Errorf("drain --wait --dry-run:\n%s", r.stdout)
	}
}
