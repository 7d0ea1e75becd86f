package cell

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/pipeline"
	"github.com/cellkit/cellkit/internal/queue"
	"github.com/cellkit/cellkit/internal/testkit"
)

// panicCSS panics scoring the poisoned user, and scores the others.
type panicCSS struct{ poisoned string }

func (p panicCSS) Score(_ context.Context, user string) (int, error) {
	if user == p.poisoned {
		var bands []int
		return bands[len(user)], nil // out of range: the kind of bug a poison inquiry finds
	}
	return inquiry.CSSScore(user), nil
}

// panicCore panics registering the poisoned user's decision.
type panicCore struct{ poisoned string }

func (p panicCore) Register(_ context.Context, rec inquiry.Record, _ inquiry.Result) (string, error) {
	if rec.UserID == p.poisoned {
		panic("core banking: unexpected answer")
	}
	return inquiry.CoreRef(rec.ID), nil
}

// TestAPanicFailsOneInquiry: a panic in a step of one inquiry fails that
// inquiry with "internal error", dead-lettered at its first attempt; the
// others of the same moment are done, nothing is held (the agencies' gates
// are free again) and the cell stays ready.
func TestAPanicFailsOneInquiry(t *testing.T) {
	for _, tc := range []struct {
		step string
		opts Options
	}{
		{"css", Options{CSS: panicCSS{poisoned: "user-3"}}},
		{"core_banking", Options{Core: panicCore{poisoned: "user-3"}}},
	} {
		t.Run(tc.step, func(t *testing.T) {
			h := start(t, setup{opts: tc.opts})
			ids := make([]string, 8)
			for i := range ids {
				ids[i] = h.accept(user(i), nil)
			}
			for i, id := range ids {
				v := h.settled(id)
				if i == 3 {
					if v.Status != inquiry.Failed || !v.DeadLetter || v.Reason != pipeline.ReasonInternal || v.Attempts != 1 {
						t.Errorf("the poisoned inquiry: %+v, want failed %q, dead-lettered at attempt 1", v, pipeline.ReasonInternal)
					}
					continue
				}
				if v.Status != inquiry.Done {
					t.Errorf("inquiry %d: %+v, want done", i, v)
				}
			}
			if got := counter(t, h, "cellkit_cell_panics_total", "step", tc.step); got != 1 {
				t.Errorf("cellkit_cell_panics_total{step=%q} = %v, want 1", tc.step, got)
			}
			var list struct {
				Failed []queue.Failure `json:"failed"`
			}
			h.adminDo("GET", "/v1/admin/failed", nil).JSON(t, &list)
			if len(list.Failed) != 1 || list.Failed[0].ID != ids[3] || list.Failed[0].Set != queue.SetDLQ {
				t.Errorf("failed list %+v, want the poisoned inquiry as a dead letter", list.Failed)
			}
			testkit.WaitFor(t, 5*time.Second, "the agencies' gates to be free", func() bool {
				for _, s := range h.cell.pipe.GateStats() {
					if s[1] != 0 {
						return false
					}
				}
				return true
			})
			if ok, checks := h.cell.readiness(); !ok {
				t.Errorf("not ready after a panic: %+v", checks)
			}
			if v := h.settled(h.accept(user(9), nil)); v.Status != inquiry.Done {
				t.Errorf("an inquiry after the panic: %+v", v)
			}
		})
	}
}

// gatedCSS blocks scoring the users it holds until released, counting
// how many it holds at once.
type gatedCSS struct {
	hold    func(user string) bool
	release chan struct{}
	now     atomic.Int32
	most    atomic.Int32
}

func (g *gatedCSS) Score(ctx context.Context, user string) (int, error) {
	if g.hold(user) {
		n := g.now.Add(1)
		defer g.now.Add(-1)
		for m := g.most.Load(); n > m && !g.most.CompareAndSwap(m, n); m = g.most.Load() {
		}
		select {
		case <-g.release:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return inquiry.CSSScore(user), nil
}

// crash leaves the journal a crashed process would have left: the cell
// stopped with ids in flight, without the clean stop's removal.
func crash(t *testing.T, store string, ids ...string) {
	t.Helper()
	var b strings.Builder
	for _, id := range ids {
		b.WriteString("+" + id + "\n")
	}
	if err := os.WriteFile(filepath.Join(store, "inflight.log"), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestSuspectsRunAloneAndRepeatOffendersAreQuarantined: the inquiries in
// flight at a crash are counted at the next start and run one at a time;
// one in flight at a second crash is quarantined at the start after it.
func TestSuspectsRunAloneAndRepeatOffendersAreQuarantined(t *testing.T) {
	store := t.TempDir()
	cfg := func(c *Config) {
		c.Pipeline.DrainTimeout = 100 * time.Millisecond
		c.Pipeline.StepTimeout = time.Minute
		c.AckWait = time.Second // what a stop abandons comes back after this
	}
	held := func(user string) bool { return user == "user-1" || user == "user-2" }
	css := &gatedCSS{hold: held, release: make(chan struct{})}
	h := start(t, setup{storeDir: store, opts: Options{CSS: css}, config: cfg})
	a, b := h.accept(user(1), nil), h.accept(user(2), nil)
	testkit.WaitFor(t, 5*time.Second, "both in flight", func() bool { return css.now.Load() == 2 })
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(store, "inflight.log")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a clean stop left its journal: %v", err)
	}

	// First crash, with both in flight: both are suspects and run one at a
	// time, while other work goes on beside them.
	crash(t, store, a, b)
	css2 := &gatedCSS{hold: held, release: make(chan struct{})}
	h2 := start(t, setup{storeDir: store, reg: h.reg, opts: Options{CSS: css2}, config: cfg})
	testkit.WaitFor(t, 10*time.Second, "both suspects taken, one running", func() bool {
		return h2.cell.pipe.Inflight() == 2 && css2.now.Load() == 1
	})
	if v := h2.settled(h2.accept(user(5), nil)); v.Status != inquiry.Done {
		t.Fatalf("other work beside a suspect: %+v", v)
	}
	// While the first suspect blocks, the second waits its turn.
	if css2.most.Load() != 1 {
		t.Fatalf("%d suspects ran at once, want 1", css2.most.Load())
	}
	if err := h2.stop(); err != nil {
		t.Fatal(err)
	}

	// Second crash, with a alone in flight: a is quarantined, b (in flight
	// at one crash only) runs and is done.
	crash(t, store, a)
	h3 := start(t, setup{storeDir: store, reg: h.reg, config: cfg})
	va := h3.settled(a)
	if va.Status != inquiry.Failed || !va.DeadLetter || !strings.HasPrefix(va.Reason, pipeline.ReasonSuspected) {
		t.Errorf("in flight at two crashes: %+v, want failed as %q and dead-lettered", va, pipeline.ReasonSuspected)
	}
	if vb := h3.settled(b); vb.Status != inquiry.Done {
		t.Errorf("in flight at one crash: %+v, want done", vb)
	}
	if got := counter(t, h3, "cellkit_cell_quarantined_total", "cell", "c1"); got != 1 {
		t.Errorf("cellkit_cell_quarantined_total = %v, want 1", got)
	}
	// The retry console gives a quarantined inquiry another chance.
	var res RetryResult
	h3.adminDo("POST", "/v1/admin/failed/retry", map[string]any{"ids": []string{a}}).JSON(t, &res)
	if v := h3.settled(a); v.Status != inquiry.Done || len(res.Retried) != 1 {
		t.Errorf("retried after quarantine: %+v (%+v), want done", v, res)
	}
}

// TestAPanicInARequestIs500: a request whose handler panics gets a 500
// problem (or, once its answer has begun, is cut off), the panic is
// counted, and the cell serves on.
func TestAPanicInARequestIs500(t *testing.T) {
	h := start(t, setup{})
	srv := httptest.NewServer(h.cell.contained("intake", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/begun" {
			w.WriteHeader(http.StatusOK)
			w.Write([]byte("partial"))
		}
		var req *inquiry.Request
		_ = req.UserID // nil pointer: the bug
	})))
	defer srv.Close()
	r := testkit.Do(t, srv.Client(), "GET", srv.URL+"/v1/inquiries/x", nil, nil)
	if p := r.Problem(t); r.Status != http.StatusInternalServerError || p.Detail != "internal error" {
		t.Errorf("a panicking request: %d %s", r.Status, r.Body)
	}
	if _, err := testkit.Send(srv.Client(), "POST", srv.URL+"/begun", nil, nil); err == nil {
		t.Errorf("an answer begun before the panic was not cut off")
	}
	if got := counter(t, h, "cellkit_cell_panics_total", "step", "intake"); got != 2 {
		t.Errorf("cellkit_cell_panics_total{step=intake} = %v, want 2", got)
	}
	if v := h.settled(h.accept(user(1), nil)); v.Status != inquiry.Done {
		t.Errorf("after the panics: %+v", v)
	}
}
