package cell

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/adminauth"
	"github.com/cellkit/cellkit/internal/agencysim"
	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/natsembed"
	"github.com/cellkit/cellkit/internal/queue"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/store"
	"github.com/cellkit/cellkit/internal/testkit"
)

func TestHappyPathEndToEnd(t *testing.T) {
	h := start(t, setup{})
	for i, req := range []inquiry.Request{
		user(1),
		{UserID: "a-long-user-id-that-does-not-fit-the-telegram_01", Product: "mortgage", Amount: 1, Priority: inquiry.High},
		{UserID: "U_2", Product: "p", Amount: inquiry.MaxAmount, CallbackURL: "http://127.0.0.1:1/cb"},
	} {
		call := strconv.Itoa(i + 1) // the router's number for the call
		resp := h.post(req, map[string]string{"Cellkit-Call": call})
		if resp.Status != http.StatusAccepted {
			t.Fatalf("%d: POST = %d %s", i, resp.Status, resp.Body)
		}
		if got := resp.Header.Get("Cellkit-Call"); got != call {
			t.Errorf("%d: Cellkit-Call %q in the answer, want the call's %q echoed", i, got, call)
		}
		var a struct {
			ID        string `json:"id"`
			Cell      string `json:"cell"`
			Status    string `json:"status"`
			StatusURL string `json:"status_url"`
		}
		resp.JSON(t, &a)
		if cell, ok := inquiry.CellOf(a.ID); !ok || cell != "c1" || a.Cell != "c1" || a.Status != "pending" || a.StatusURL != "/v1/inquiries/"+a.ID {
			t.Fatalf("202 body %+v", a)
		}
		if got := resp.Header.Get("Location"); got != a.StatusURL {
			t.Errorf("Location = %q, want %q", got, a.StatusURL)
		}
		v := h.settled(a.ID)
		if v.Status != inquiry.Done {
			t.Fatalf("%s: %+v, want done", a.ID, v)
		}
		want := celltest.Expected(a.ID, req, "nice", "kcb")
		if !celltest.SameResult(v.Result, &want) {
			t.Errorf("result %+v, want %+v", v.Result, want)
		}
		if v.CompletedAt == nil || v.CompletedAt.Before(v.CreatedAt) || v.Attempts != 1 || v.Priority == "" {
			t.Errorf("view %+v: want timestamps in order, one attempt, a priority", v)
		}
	}
}

func TestIdempotencyKey(t *testing.T) {
	h := start(t, setup{})
	key := map[string]string{"Idempotency-Key": "order-42"}
	id := h.accept(user(1), key)
	h.settled(id)
	calls := h.nice.Stats().Calls

	resp := h.post(user(1), key)
	if resp.Status != http.StatusAccepted || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay = %d %v %s", resp.Status, resp.Header, resp.Body)
	}
	var a struct{ ID, Status string }
	resp.JSON(t, &a)
	if a.ID != id || a.Status != "done" {
		t.Fatalf("replay answered %+v, want id %s done", a, id)
	}
	if got := h.nice.Stats().Calls; got != calls {
		t.Fatalf("agency calls went from %d to %d on a replay", calls, got)
	}
	// Concurrent duplicates of a new key: one inquiry, one message.
	var wg sync.WaitGroup
	ids := make(chan string, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := testkit.Do(t, h.client, http.MethodPost, h.intake+"/v1/inquiries", user(2), map[string]string{"Idempotency-Key": "k2"})
			if r.Status == http.StatusAccepted {
				var a struct{ ID string }
				r.JSON(t, &a)
				ids <- a.ID
			}
		}()
	}
	wg.Wait()
	close(ids)
	var first string
	for got := range ids {
		if first == "" {
			first = got
		}
		if got != first {
			t.Fatalf("same key answered %s and %s", first, got)
		}
	}
	h.settled(first)
	testkit.WaitFor(t, 5*time.Second, "the queue to empty", func() bool {
		s := h.cell.sample.Load()
		return s != nil && s.Total == 0 && h.cell.pipe.Inflight() == 0
	})
	if got := h.nice.Stats().Calls; got != calls+1 {
		t.Fatalf("agency calls for 8 posts of one key: %d, want 1 (deliveries %v)", got-calls, series(t, h, "cellkit_cell_deliveries_total", "outcome"))
	}
	// The same key with another body is refused.
	other := user(2)
	other.Amount++
	resp = h.post(other, map[string]string{"Idempotency-Key": "k2"})
	if p := resp.Problem(t); resp.Status != http.StatusUnprocessableEntity || p.Field != "Idempotency-Key" {
		t.Fatalf("key reused with another body = %d %+v", resp.Status, p)
	}
}

func TestBadInput(t *testing.T) {
	h := start(t, setup{})
	json := map[string]string{"Content-Type": "application/json"}
	big := `{"user_id":"u","product":"p","amount":1,"callback_url":"http://x/` + strings.Repeat("a", 70<<10) + `"}`
	for _, tc := range []struct {
		name    string
		method  string
		path    string
		body    string
		headers map[string]string
		status  int
		field   string
	}{
		{"not json", "POST", "/v1/inquiries", `{"user_id":`, json, 400, ""},
		{"not an object", "POST", "/v1/inquiries", `[1]`, json, 400, ""},
		{"trailing data", "POST", "/v1/inquiries", `{"user_id":"u","product":"p","amount":1} {}`, json, 400, ""},
		{"unknown field", "POST", "/v1/inquiries", `{"user_id":"u","product":"p","amount":1,"x":1}`, json, 400, "x"},
		{"no user", "POST", "/v1/inquiries", `{"product":"p","amount":1}`, json, 400, "user_id"},
		{"user too long", "POST", "/v1/inquiries", `{"user_id":"` + strings.Repeat("u", 65) + `","product":"p","amount":1}`, json, 400, "user_id"},
		{"user bad char", "POST", "/v1/inquiries", `{"user_id":"u.1","product":"p","amount":1}`, json, 400, "user_id"},
		{"user not a string", "POST", "/v1/inquiries", `{"user_id":7,"product":"p","amount":1}`, json, 400, "user_id"},
		{"no product", "POST", "/v1/inquiries", `{"user_id":"u","amount":1}`, json, 400, "product"},
		{"product upper", "POST", "/v1/inquiries", `{"user_id":"u","product":"Loan","amount":1}`, json, 400, "product"},
		{"product too long", "POST", "/v1/inquiries", `{"user_id":"u","product":"` + strings.Repeat("p", 33) + `","amount":1}`, json, 400, "product"},
		{"no amount", "POST", "/v1/inquiries", `{"user_id":"u","product":"p"}`, json, 400, "amount"},
		{"amount zero", "POST", "/v1/inquiries", `{"user_id":"u","product":"p","amount":0}`, json, 400, "amount"},
		{"amount negative", "POST", "/v1/inquiries", `{"user_id":"u","product":"p","amount":-5}`, json, 400, "amount"},
		{"amount fraction", "POST", "/v1/inquiries", `{"user_id":"u","product":"p","amount":1.5}`, json, 400, "amount"},
		{"amount exponent", "POST", "/v1/inquiries", `{"user_id":"u","product":"p","amount":1e3}`, json, 400, "amount"},
		{"amount string", "POST", "/v1/inquiries", `{"user_id":"u","product":"p","amount":"100"}`, json, 400, "amount"},
		{"amount too big", "POST", "/v1/inquiries", `{"user_id":"u","product":"p","amount":1000000000001}`, json, 400, "amount"},
		{"bad priority", "POST", "/v1/inquiries", `{"user_id":"u","product":"p","amount":1,"priority":"urgent"}`, json, 400, "priority"},
		{"bad callback", "POST", "/v1/inquiries", `{"user_id":"u","product":"p","amount":1,"callback_url":"ftp://x/"}`, json, 400, "callback_url"},
		{"too large", "POST", "/v1/inquiries", big, json, 413, ""},
		{"not json type", "POST", "/v1/inquiries", `{}`, map[string]string{"Content-Type": "text/plain"}, 415, "Content-Type"},
		{"no content type", "POST", "/v1/inquiries", `{}`, nil, 415, "Content-Type"},
		{"bad idempotency key", "POST", "/v1/inquiries", `{"user_id":"u","product":"p","amount":1}`, map[string]string{"Content-Type": "application/json", "Idempotency-Key": strings.Repeat("k", 256)}, 400, "Idempotency-Key"},
		{"bad map version", "POST", "/v1/inquiries", `{"user_id":"u","product":"p","amount":1}`, map[string]string{"Content-Type": "application/json", "Cellkit-Map-Version": "x"}, 400, "Cellkit-Map-Version"},
		{"bad slot", "POST", "/v1/inquiries", `{"user_id":"u","product":"p","amount":1}`, map[string]string{"Content-Type": "application/json", "Cellkit-Slot": "99999"}, 400, "Cellkit-Slot"},
		{"GET the collection", "GET", "/v1/inquiries", "", nil, 405, ""},
		{"DELETE an inquiry", "DELETE", "/v1/inquiries/c1-00000000000000000000", "", nil, 405, ""},
		{"malformed id", "GET", "/v1/inquiries/nope", "", nil, 400, "id"},
		{"id with a bad unique part", "GET", "/v1/inquiries/c1-zzzzzzzzzzzzzzzzzzzz", "", nil, 400, "id"},
		{"unknown id", "GET", "/v1/inquiries/c1-00000000000000000000", "", nil, 404, ""},
		{"id of another cell", "GET", "/v1/inquiries/c2-00000000000000000000", "", nil, 421, "id"},
		{"unknown path", "GET", "/v2/x", "", nil, 404, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body any
			if tc.body != "" {
				body = tc.body
			}
			resp := testkit.Do(t, h.client, tc.method, h.intake+tc.path, body, tc.headers)
			p := resp.Problem(t)
			if resp.Status != tc.status || p.Status != tc.status || p.Field != tc.field || p.Type == "" || p.Title == "" || p.Detail == "" {
				t.Fatalf("%s %s = %d %+v, want %d with field %q", tc.method, tc.path, resp.Status, p, tc.status, tc.field)
			}
			if tc.status == 405 && resp.Header.Get("Allow") == "" {
				t.Errorf("405 without Allow")
			}
		})
	}
	if s := h.cell.sample.Load(); s.Total != 0 {
		t.Fatalf("bad requests left %d messages", s.Total)
	}
}

func TestAgencyErrorsFailInquiriesOntoTheErrorStream(t *testing.T) {
	h := start(t, setup{sim: agencysim.Config{ErrorRate: 1}})
	id := h.accept(user(1), nil)
	v := h.settled(id)
	if v.Status != inquiry.Failed || !strings.Contains(v.Reason, "code "+agencysim.CodeAgencyError) || v.Result != nil {
		t.Fatalf("%+v, want failed with the agency's code", v)
	}
	var list struct {
		Failed []queue.Failure `json:"failed"`
	}
	testkit.WaitFor(t, 5*time.Second, "the error stream to list it", func() bool {
		h.adminDo("GET", "/v1/admin/failed", nil).JSON(t, &list)
		return len(list.Failed) == 1
	})
	if f := list.Failed[0]; f.ID != id || f.Set != queue.SetError || f.Reason != v.Reason {
		t.Fatalf("failure %+v", f)
	}
	// Not while a map gives its user to another cell (a change left it
	// here): re-queued here it would wait for a cell's work, not this one's.
	var res RetryResult
	h.reg.Change(func(m *slotmap.Map) (*slotmap.Plan, error) { return m.AddCell(celltest.TestCell("c2")) })
	h.reg.Change(func(m *slotmap.Map) (*slotmap.Plan, error) { return m.SetOverride(user(1).UserID, "c2") })
	want := h.reg.Map().Version()
	testkit.WaitFor(t, 5*time.Second, "the cell to see the user's new cell", func() bool { return h.cell.follower.Map().Version() == want })
	h.adminDo("POST", "/v1/admin/failed/retry", map[string]any{"ids": []string{id}}).JSON(t, &res)
	if len(res.Retried) != 0 || !strings.Contains(res.Skipped[id], `served by cell "c2" now`) {
		t.Fatalf("retry in a cell that no longer serves the user = %+v", res)
	}
	h.reg.Change(func(m *slotmap.Map) (*slotmap.Plan, error) { return m.SetOverride(user(1).UserID, "c1") })
	want = h.reg.Map().Version()
	testkit.WaitFor(t, 5*time.Second, "the cell to see the user back", func() bool { return h.cell.follower.Map().Version() == want })
	// The retry console re-enqueues it once the agency is fine.
	celltest.SetSim(t, h.nice, func(c *agencysim.Config) { c.ErrorRate = 0 })
	celltest.SetSim(t, h.kcb, func(c *agencysim.Config) { c.ErrorRate = 0 })
	h.cell.clients["nice"].Breaker().Reset()
	h.cell.clients["kcb"].Breaker().Reset()
	h.adminDo("POST", "/v1/admin/failed/retry", map[string]any{"all": true}).JSON(t, &res)
	if len(res.Retried) != 1 || res.Retried[0] != id {
		t.Fatalf("retry = %+v", res)
	}
	if v := h.settled(id); v.Status != inquiry.Done {
		t.Fatalf("after retry: %+v", v)
	}
	h.adminDo("GET", "/v1/admin/failed", nil).JSON(t, &list)
	if len(list.Failed) != 0 {
		t.Fatalf("still listed after a successful retry: %+v", list.Failed)
	}
	// Retrying a done inquiry is refused.
	h.adminDo("POST", "/v1/admin/failed/retry", map[string]any{"ids": []string{id, "c2-00000000000000000000"}}).JSON(t, &res)
	if len(res.Retried) != 0 || len(res.Skipped) != 2 {
		t.Fatalf("retry of a done inquiry = %+v", res)
	}
}

func TestAgencyDownOpensTheBreakerAndFailsFast(t *testing.T) {
	h := start(t, setup{})
	h.nice.Close() // the agency is gone: its sessions break, it refuses dials
	var ids []string
	for i := range 12 {
		ids = append(ids, h.accept(user(i), nil))
	}
	for _, id := range ids {
		if v := h.settled(id); v.Status != inquiry.Failed {
			t.Fatalf("%s: %+v, want failed", id, v)
		}
	}
	testkit.WaitFor(t, 10*time.Second, "the breaker to open", func() bool { return h.cell.clients["nice"].Status().Breaker == "open" })
	began := time.Now()
	id := h.accept(user(100), nil)
	v := h.settled(id)
	if v.Status != inquiry.Failed || !strings.Contains(v.Reason, "circuit breaker open") {
		t.Fatalf("%+v, want failed with the breaker open", v)
	}
	if took := time.Since(began); took > time.Second {
		t.Fatalf("inquiry took %v to fail with the breaker open, want fast", took)
	}
	var st api.CellStatus
	h.adminDo("GET", "/v1/admin/status", nil).JSON(t, &st)
	if st.Agencies["nice"].Breaker != "open" || st.Agencies["kcb"].Breaker != "closed" {
		t.Fatalf("status agencies %+v", st.Agencies)
	}
}

// A slow agency slows the cell down; it does not fail the work it accepted.
// Two sessions per agency at 150 ms serve about 13 inquiries a second, so
// the last of 30 waits about 2 s for a session, twice the step timeout:
// the wait for a place at the gate is not the call's time, and the gate
// follows the adaptive limit, so nothing is refused for being slow.
func TestASlowAgencyDelaysWorkWithoutFailingIt(t *testing.T) {
	h := start(t, setup{
		sessions: 2,
		sim:      agencysim.Config{Latency: agencysim.FixedLatency(150 * time.Millisecond)},
		config:   func(c *Config) { c.Pipeline.StepTimeout = time.Second },
	})
	var ids []string
	for i := range 30 {
		ids = append(ids, h.accept(user(i), nil))
	}
	for _, id := range ids {
		if v := h.settled(id); v.Status != inquiry.Done || v.Attempts != 1 {
			t.Fatalf("%s: %+v, want done at the first attempt", id, v)
		}
	}
	body := string(testkit.Do(t, h.client, "GET", h.admin+"/metrics", nil, nil).Body)
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "cellkit_cell_failures_total{") && !strings.HasSuffix(line, " 0") {
			t.Errorf("failures: %s", line)
		}
	}
}

// blockingCSS holds every CSS call until released, to stall the pipeline.
type blockingCSS struct{ release chan struct{} }

func (b blockingCSS) Score(ctx context.Context, user string) (int, error) {
	select {
	case <-b.release:
		return inquiry.CSSScore(user), nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func TestShedding(t *testing.T) {
	t.Run("oldest over budget", func(t *testing.T) {
		css := blockingCSS{release: make(chan struct{})}
		h := start(t, setup{opts: Options{CSS: css}, config: func(c *Config) {
			c.Shed.MaxAge = 300 * time.Millisecond
			c.Pipeline.Workers = 1
			c.Pipeline.StepTimeout = time.Minute
		}})
		first := h.accept(user(1), nil)
		second := h.accept(user(2), nil)
		var resp testkit.Response
		testkit.WaitFor(t, 5*time.Second, "intake to shed", func() bool {
			resp = h.post(user(3), nil)
			return resp.Status == http.StatusServiceUnavailable
		})
		p := resp.Problem(t)
		ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if p.Type != "https://cellkit.dev/problems/overloaded" || err != nil || ra < 1 || resp.Header.Get("Cellkit-Overloaded") != "true" {
			t.Fatalf("shed answer %+v Retry-After %q", p, resp.Header.Get("Retry-After"))
		}
		close(css.release)
		h.settled(first)
		h.settled(second)
		testkit.WaitFor(t, 5*time.Second, "intake to take work again", func() bool {
			return h.post(user(4), nil).Status == http.StatusAccepted
		})
		assertMetric(t, h, `cellkit_cell_intake_shed_total{cell="c1",reason="age"}`)
	})
	t.Run("depth limit", func(t *testing.T) {
		css := blockingCSS{release: make(chan struct{})}
		h := start(t, setup{opts: Options{CSS: css}, config: func(c *Config) {
			// Normal inquiries may fill half of it (the high lane's
			// share being 0.5): 3.
			c.Shed.MaxDepth = 6
			c.Pipeline.Workers = 1
			c.Pipeline.StepTimeout = time.Minute
		}})
		accepted, last := 0, ""
		for i := range 10 {
			resp := h.post(user(i), nil)
			if resp.Status == http.StatusAccepted {
				accepted++
				continue
			}
			if resp.Status != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("post %d = %d %s", i, resp.Status, resp.Body)
			}
			last = string(resp.Body)
		}
		// Never over the limit; an inquiry accepted while the queue was
		// being sampled may be counted twice until the next sample, so
		// one fewer is fine.
		if accepted < 2 || accepted > 3 {
			t.Fatalf("%d normal inquiries accepted with a depth limit of 3 for them (%s)", accepted, last)
		}
		close(css.release)
		assertMetric(t, h, `cellkit_cell_intake_shed_total{cell="c1",reason="depth"}`)
	})
}

func TestFencing(t *testing.T) {
	h := start(t, setup{})
	m := h.cell.follower.Map()
	// Find a user that moves to c2 when it joins, and one that stays.
	after, err := m.AddCell(celltest.TestCell("c2"))
	if err != nil {
		t.Fatal(err)
	}
	var moving, staying inquiry.Request
	for i := 0; moving.UserID == "" || staying.UserID == ""; i++ {
		u := user(i)
		if after.After.Lookup(u.UserID).Cell == "c2" {
			moving = u
		} else {
			staying = u
		}
	}
	v1 := strconv.FormatInt(m.Version(), 10)
	slot := func(u inquiry.Request) string { return strconv.Itoa(m.SlotOf(u.UserID)) }
	hdr := func(v, s string) map[string]string {
		return map[string]string{"Cellkit-Map-Version": v, "Cellkit-Slot": s}
	}
	h.accept(moving, hdr(v1, slot(moving)))

	h.reg.Change(func(m *slotmap.Map) (*slotmap.Plan, error) { return m.AddCell(celltest.TestCell("c2")) })
	testkit.WaitFor(t, 5*time.Second, "the cell to see map v2", func() bool { return h.cell.follower.Map().Version() == m.Version()+1 })
	v2 := strconv.FormatInt(m.Version()+1, 10)

	resp := h.post(moving, hdr(v1, slot(moving)))
	if resp.Status != http.StatusMisdirectedRequest || resp.Header.Get("Cellkit-Map-Version") != v2 {
		t.Fatalf("stale router = %d %v %s, want 421 with map version %s", resp.Status, resp.Header, resp.Body, v2)
	}
	if p := resp.Problem(t); p.Type != "https://cellkit.dev/problems/misdirected" {
		t.Fatalf("problem %+v", p)
	}
	if resp := h.post(moving, nil); resp.Status != http.StatusMisdirectedRequest {
		t.Fatalf("no headers, user of c2 = %d", resp.Status)
	}
	if resp := h.post(moving, hdr(strconv.FormatInt(m.Version()+5, 10), slot(moving))); resp.Status != http.StatusAccepted {
		t.Fatalf("a router with a newer map = %d, want 202", resp.Status)
	}
	h.accept(staying, hdr(v1, slot(staying)))
	h.accept(staying, hdr(v2, slot(staying)))
	assertMetric(t, h, `cellkit_cell_intake_misdirected_total{cell="c1"}`)
}

func TestDrainViaAdminIntakeClose(t *testing.T) {
	h := start(t, setup{})
	id := h.accept(user(1), nil)
	if r := h.adminDo("POST", "/v1/admin/intake/close", nil); r.Status != 200 {
		t.Fatalf("close = %d %s", r.Status, r.Body)
	}
	resp := h.post(user(2), nil)
	if p := resp.Problem(t); resp.Status != 503 || p.Type != "https://cellkit.dev/problems/intake-closed" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("post with intake closed = %d %+v", resp.Status, p)
	}
	if r := h.adminDo("GET", "/readyz", nil); r.Status != 503 {
		t.Fatalf("readyz with intake closed = %d", r.Status)
	}
	if v := h.settled(id); v.Status != inquiry.Done {
		t.Fatalf("queued work must finish while draining: %+v", v)
	}
	var st api.CellStatus
	testkit.WaitFor(t, 5*time.Second, "status to show the cell drained", func() bool {
		h.adminDo("GET", "/v1/admin/status", nil).JSON(t, &st)
		return st.Intake == "closed" && st.Queue.Messages == 0 && st.Inflight == 0
	})
	h.adminDo("POST", "/v1/admin/intake/open", nil)
	h.accept(user(3), nil)
	if r := h.adminDo("GET", "/readyz", nil); r.Status != 200 {
		t.Fatalf("readyz after open = %d %s", r.Status, r.Body)
	}
}

// flakyCore fails every registration until fixed.
type flakyCore struct {
	mu    sync.Mutex
	fails bool
	calls int
}

func (f *flakyCore) Register(ctx context.Context, rec inquiry.Record, _ inquiry.Result) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.fails {
		return "", errors.New("core banking unavailable")
	}
	return inquiry.CoreRef(rec.ID), nil
}

func TestTransientFailuresAreRetriedThenDeadLettered(t *testing.T) {
	core := &flakyCore{fails: true}
	h := start(t, setup{opts: Options{Core: core}, config: func(c *Config) { c.Pipeline.MaxDeliver = 3 }})
	calls := h.nice.Stats().Calls
	id := h.accept(user(1), nil)
	v := h.settled(id)
	if v.Status != inquiry.Failed || !v.DeadLetter || !strings.Contains(v.Reason, "dead-lettered after 3 attempts: core banking: core banking unavailable") || v.Attempts != 3 {
		t.Fatalf("%+v, want dead-lettered after 3 attempts", v)
	}
	if core.calls != 3 {
		t.Fatalf("core banking called %d times, want 3", core.calls)
	}
	if got := h.nice.Stats().Calls - calls; got != 1 {
		t.Fatalf("agency called %d times over 3 attempts, want once (partial scores kept)", got)
	}
	var list struct {
		Failed []queue.Failure `json:"failed"`
	}
	h.adminDo("GET", "/v1/admin/failed", nil).JSON(t, &list)
	if len(list.Failed) != 1 || list.Failed[0].Set != queue.SetDLQ {
		t.Fatalf("failed list %+v, want one dead letter", list.Failed)
	}
	core.mu.Lock()
	core.fails = false
	core.mu.Unlock()
	var res RetryResult
	h.adminDo("POST", "/v1/admin/failed/retry", map[string]any{"ids": []string{id}}).JSON(t, &res)
	if v := h.settled(id); v.Status != inquiry.Done || len(res.Retried) != 1 {
		t.Fatalf("after retry %+v (%+v)", v, res)
	}
}

func TestQuotaFollowsTheMap(t *testing.T) {
	h := start(t, setup{sessions: 4, sim: agencysim.Config{MaxSessions: 20}})
	limits := func() string {
		var lines []string
		for _, l := range strings.Split(string(h.adminDo("GET", "/metrics", nil).Body), "\n") {
			if strings.HasPrefix(l, "cellkit_cell_agency_limit{") {
				lines = append(lines, l)
			}
		}
		return strings.Join(lines, "\n")
	}
	want := "cellkit_cell_agency_limit{agency=\"kcb\",cell=\"c1\"} 4\ncellkit_cell_agency_limit{agency=\"nice\",cell=\"c1\"} 4"
	if got := limits(); got != want {
		t.Fatalf("/metrics agency limits:\n%s\nwant\n%s", got, want)
	}
	h.reg.Change(func(m *slotmap.Map) (*slotmap.Plan, error) { return m.SetAgency("nice", 7) })
	testkit.WaitFor(t, 5*time.Second, "the nice pool to grow to 7", func() bool {
		st := h.cell.clients["nice"].Status()
		return st.Pool.Size == 7 && st.Pool.Idle == 7 && st.Limit == 7
	})
	if gs := h.cell.pipe.GateStats()["nice"]; gs[0] != 7 {
		t.Fatalf("nice gate size %d, want 7", gs[0])
	}
	var st api.CellStatus
	h.adminDo("GET", "/v1/admin/status", nil).JSON(t, &st)
	if st.Agencies["nice"].Quota != 7 || st.Agencies["kcb"].Quota != 4 || st.Map.OwnedSlots != slotmap.DefaultSlots || st.Map.State != "active" {
		t.Fatalf("status %+v", st)
	}
	want = strings.Replace(want, `agency="nice",cell="c1"} 4`, `agency="nice",cell="c1"} 7`, 1)
	if got := limits(); got != want {
		t.Fatalf("/metrics agency limits after the change:\n%s\nwant\n%s", got, want)
	}
	// A smaller quota (a cell joined the map) closes only the sessions
	// beyond it: the cell keeps the others and stays ready.
	created := h.cell.clients["nice"].Status().Pool.Created
	h.reg.Change(func(m *slotmap.Map) (*slotmap.Plan, error) { return m.SetAgency("nice", 2) })
	testkit.WaitFor(t, 5*time.Second, "the nice pool to shrink to 2", func() bool {
		st := h.cell.clients["nice"].Status().Pool
		return st.Size == 2 && st.Open == 2
	})
	if st := h.cell.clients["nice"].Status().Pool; st.Created != created || st.Idle != 2 {
		t.Fatalf("after the shrink: %+v, want the same sessions (%d created), 2 idle", st, created)
	}
	if code := h.adminDo("GET", "/readyz", nil).Status; code != http.StatusOK {
		t.Fatalf("readyz %d after the shrink", code)
	}
}

func TestAdminAPI(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "admin-tokens")
	if err := os.WriteFile(tokens, []byte("# operators\ns3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	guard, err := adminauth.New(adminauth.Config{TokenFile: tokens}, adminauth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, setup{opts: Options{AdminGuard: guard}})
	for _, tc := range []struct {
		method, path, token string
		status              int
	}{
		{"GET", "/healthz", "", 200},
		{"GET", "/readyz", "", 200},
		{"GET", "/metrics", "", 401},
		{"GET", "/metrics", "wrong", 401},
		{"GET", "/metrics", "s3cret", 200},
		{"GET", "/v1/admin/status", "", 401},
		{"GET", "/v1/admin/status", "wrong", 401},
		{"GET", "/v1/admin/status", "s3cret", 200},
		{"GET", "/v1/admin/nothing", "", 401},
		{"GET", "/v1/admin/nothing", "s3cret", 404},
		{"POST", "/v1/admin/status", "s3cret", 405},
		{"POST", "/v1/admin/circuit/nice/open", "s3cret", 200},
		{"POST", "/v1/admin/circuit/nice/sideways", "s3cret", 400},
		{"POST", "/v1/admin/circuit/visa/open", "s3cret", 404},
		{"GET", "/v1/admin/circuit/nice/open", "s3cret", 405},
		{"POST", "/v1/admin/intake/ajar", "s3cret", 400},
		{"GET", "/v1/admin/failed?limit=0", "s3cret", 400},
		{"POST", "/v1/admin/failed/retry", "s3cret", 400},
	} {
		headers := map[string]string{}
		if tc.token != "" {
			headers["Authorization"] = "Bearer " + tc.token
		}
		resp := testkit.Do(t, h.client, tc.method, h.admin+tc.path, nil, headers)
		if resp.Status != tc.status {
			t.Errorf("%s %s (token %q) = %d %s, want %d", tc.method, tc.path, tc.token, resp.Status, resp.Body, tc.status)
		}
		if resp.Status == http.StatusUnauthorized {
			if p := resp.Problem(t); p.Type != "https://cellkit.dev/problems/unauthorized" || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s %s (token %q): problem %+v, WWW-Authenticate %q", tc.method, tc.path, tc.token, p, resp.Header.Get("WWW-Authenticate"))
			}
		}
	}
	// The forced-open breaker fails inquiries at once.
	id := h.accept(user(1), nil)
	if v := h.settled(id); v.Status != inquiry.Failed || !strings.Contains(v.Reason, "nice: circuit breaker open") {
		t.Fatalf("%+v, want failed on the forced-open breaker", v)
	}
	auth := map[string]string{"Authorization": "Bearer s3cret"}
	testkit.Do(t, h.client, "POST", h.admin+"/v1/admin/circuit/nice/reset", nil, auth)
	var st api.CellStatus
	testkit.WaitFor(t, 5*time.Second, "status to count the failure", func() bool {
		testkit.Do(t, h.client, "GET", h.admin+"/v1/admin/status", nil, auth).JSON(t, &st)
		return st.Failed == 1
	})
	if st.Agencies["nice"].Breaker != "closed" || !st.Ready || st.NATS != "CONNECTED" || st.Map.Version == 0 {
		t.Fatalf("status %+v", st)
	}
	metrics := string(testkit.Do(t, h.client, "GET", h.admin+"/metrics", nil, auth).Body)
	for _, name := range []string{
		"cellkit_cell_queue_depth", "cellkit_cell_queue_oldest_age_seconds", "cellkit_cell_intake_shed_total",
		"cellkit_cell_map_version", "cellkit_agency_breaker_state", "cellkit_cell_deliveries_total", "cellkit_cell_failed_inquiries",
	} {
		if !strings.Contains(metrics, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}

func TestStartsWithAgenciesDownAndWaitsForTheMap(t *testing.T) {
	reg := celltest.NewRegistry(t, map[string]int{"nice": 2, "kcb": 2}) // no cell yet
	h := start(t, setup{reg: reg, noStart: true})
	resp := h.post(user(1), nil)
	if p := resp.Problem(t); resp.Status != 503 || p.Type != "https://cellkit.dev/problems/intake-closed" {
		t.Fatalf("post before the map = %d %+v", resp.Status, p)
	}
	if r := h.adminDo("GET", "/healthz", nil); r.Status != 200 {
		t.Fatalf("healthz while waiting = %d", r.Status)
	}
	if r := h.adminDo("GET", "/readyz", nil); r.Status != 503 {
		t.Fatalf("readyz while waiting = %d", r.Status)
	}
	reg.Change(func(m *slotmap.Map) (*slotmap.Plan, error) { return m.AddCell(celltest.TestCell("c1")) })
	h.waitReady()
	h.settled(h.accept(user(1), nil))
}

func TestGracefulStopAndResume(t *testing.T) {
	css := blockingCSS{release: make(chan struct{})}
	store := t.TempDir()
	h := start(t, setup{storeDir: store, opts: Options{CSS: css}, config: func(c *Config) {
		c.Pipeline.DrainTimeout = 200 * time.Millisecond
		c.Pipeline.StepTimeout = time.Minute
		c.AckWait = time.Second // abandoned work comes back after a restart when this expires
	}})
	var ids []string
	for i := range 5 {
		ids = append(ids, h.accept(user(i), nil))
	}
	testkit.WaitFor(t, 5*time.Second, "work in flight", func() bool { return h.cell.pipe.Inflight() == 5 })
	began := time.Now()
	if err := h.stop(); err != nil {
		t.Fatalf("Run() = %v after a graceful stop", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("stop took %v", took)
	}
	// Restart on the same store: the unfinished work resumes.
	close(css.release)
	h2 := start(t, setup{storeDir: store, reg: h.reg, config: func(c *Config) { c.AckWait = time.Second }})
	for _, id := range ids {
		if v := h2.settled(id); v.Status != inquiry.Done {
			t.Fatalf("%s after restart: %+v", id, v)
		}
	}
}

func TestStoreDirIsLocked(t *testing.T) {
	h := start(t, setup{})
	cfg := h.cfg
	if _, err := New(context.Background(), cfg, Options{Logger: testkit.Logger()}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second cell on the same store = %v, want in use", err)
	}
}

func assertMetric(t *testing.T, h *harness, series string) {
	t.Helper()
	testkit.WaitFor(t, 5*time.Second, "metric "+series+" above 0", func() bool {
		body := string(testkit.Do(t, h.client, "GET", h.admin+"/metrics", nil, nil).Body)
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, series+" ") && !strings.HasSuffix(line, " 0") {
				return true
			}
		}
		return false
	})
}

// On a three-node JetStream cluster with --replicas 3 the cell's streams
// and record bucket are replicated, and the cell keeps taking and finishing
// work with one node gone. One node's embedded server cannot run replicas.
func TestReplicatedOnACluster(t *testing.T) {
	bad := Config{ID: "c1", Agencies: []AgencyAddr{{Name: "nice", Addr: "x:1"}}, Replicas: 3}
	if err := bad.validate(); err == nil || !strings.Contains(err.Error(), "--nats-url") {
		t.Fatalf("replicas 3 on the embedded server: %v, want refused", err)
	}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	nodes, err := natsembed.StartCluster(natsembed.ClusterConfig{Name: "cells", Dirs: dirs, Timeout: 30 * time.Second}, natsembed.Options{Logger: testkit.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // after the cell's own cleanup
		for _, n := range nodes {
			n.Shutdown()
		}
	})
	urls := nodes[0].ClientURL() + "," + nodes[1].ClientURL() + "," + nodes[2].ClientURL()
	h := start(t, setup{config: func(c *Config) { c.NATSURL, c.Replicas = urls, 3 }})
	if v := h.settled(h.accept(user(1), nil)); v.Status != inquiry.Done {
		t.Fatalf("%+v", v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range []string{store.LedgerStream("c1")} {
		st, err := h.cell.js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		info, err := st.Info(ctx)
		if err != nil || info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			t.Fatalf("stream %s: %+v, %v: want 3 replicas", name, info.Cluster, err)
		}
	}
	nodes[2].Shutdown() // a quorum of two is left
	testkit.WaitFor(t, 30*time.Second, "an inquiry accepted and done with one node down", func() bool {
		r, err := testkit.Send(h.client, "POST", h.intake+"/v1/inquiries", user(2), nil)
		if err != nil || r.Status != http.StatusAccepted {
			return false
		}
		var a struct {
			ID string `json:"id"`
		}
		r.JSON(t, &a)
		return h.settled(a.ID).Status == inquiry.Done
	})
}

func TestExternalNATS(t *testing.T) {
	ext, err := natsembed.Start(natsembed.Config{Name: "external", StoreDir: t.TempDir()}, natsembed.Options{Logger: testkit.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ext.Shutdown) // after the cell's own cleanup
	h := start(t, setup{config: func(c *Config) { c.NATSURL = ext.ClientURL() }})
	if h.cell.ns != nil || h.cell.NATSURL() != ext.ClientURL() {
		t.Fatalf("the cell started its own NATS with --nats-url set")
	}
	req := user(1)
	id := h.accept(req, nil)
	if v := h.settled(id); v.Status != inquiry.Done {
		t.Fatalf("%+v", v)
	}
}

func TestCallbackGetsTheFinalRecord(t *testing.T) {
	got := make(chan inquiry.View, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var v inquiry.View
		if json.NewDecoder(r.Body).Decode(&v) == nil {
			got <- v
		}
	}))
	t.Cleanup(srv.Close) // after the cell: its callbacks end first
	h := start(t, setup{config: loopbackCallbacks})
	req := user(1)
	req.CallbackURL = srv.URL + "/done"
	id := h.accept(req, nil)
	select {
	case v := <-got:
		if v.ID != id || v.Status != inquiry.Done || v.Result == nil {
			t.Fatalf("callback body %+v", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no callback")
	}
	assertMetric(t, h, `cellkit_cell_callbacks_total{cell="c1",outcome="ok"}`)
}

// By default a callback to an internal address (here loopback) is refused
// when dialled: the receiver gets nothing, the inquiry is still done.
func TestCallbackToLoopbackRefusedByDefault(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	h := start(t, setup{})
	req := user(1)
	req.CallbackURL = srv.URL + "/done"
	id := h.accept(req, nil)
	if v := h.settled(id); v.Status != inquiry.Done {
		t.Fatalf("%+v, want done", v)
	}
	assertMetric(t, h, `cellkit_cell_callbacks_total{cell="c1",outcome="refused"}`)
	if n := hits.Load(); n != 0 {
		t.Fatalf("the receiver on loopback got %d requests", n)
	}
}

// A drain moves the slots, then closes the intake: users that moved must get
// 421 (the router retries them on their new cell), not "intake closed".
func TestClosedIntakeStillFencesMovedUsers(t *testing.T) {
	h := start(t, setup{})
	m := h.cell.follower.Map()
	after, err := m.AddCell(celltest.TestCell("c2"))
	if err != nil {
		t.Fatal(err)
	}
	var moving, staying inquiry.Request
	for i := 0; moving.UserID == "" || staying.UserID == ""; i++ {
		if u := user(i); after.After.Lookup(u.UserID).Cell == "c2" {
			moving = u
		} else {
			staying = u
		}
	}
	h.reg.Change(func(m *slotmap.Map) (*slotmap.Plan, error) { return m.AddCell(celltest.TestCell("c2")) })
	// The close first takes the registry's map itself, without waiting
	// for the watch to bring it.
	if r := h.adminDo("POST", "/v1/admin/intake/close", nil); r.Status != 200 {
		t.Fatalf("close = %d %s", r.Status, r.Body)
	}
	if v := h.cell.follower.Map().Version(); v != m.Version()+1 {
		t.Fatalf("intake closed with map version %d, want the registry's %d", v, m.Version()+1)
	}
	if resp := h.post(moving, nil); resp.Status != http.StatusMisdirectedRequest {
		t.Fatalf("moved user with the intake closed = %d %s, want 421", resp.Status, resp.Body)
	}
	if resp := h.post(staying, nil); resp.Status != http.StatusServiceUnavailable {
		t.Fatalf("owned user with the intake closed = %d %s, want 503", resp.Status, resp.Body)
	}
}

// TestInstancesShareTheQuota: two instances of one cell over one NATS
// server share its session quota (the simulators never see more sessions
// than it, sampled throughout); when one stops, the other takes all of it,
// and both serve inquiries meanwhile.
func TestInstancesShareTheQuota(t *testing.T) {
	srv, err := natsembed.Start(natsembed.Config{Name: "shared", StoreDir: t.TempDir()}, natsembed.Options{Logger: testkit.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	lease := func(c *Config, inst string) {
		c.NATSURL, c.Instance, c.Lease, c.LeaseGrace = srv.ClientURL(), inst, 300*time.Millisecond, 300*time.Millisecond
	}
	first := start(t, setup{sessions: 6, config: func(c *Config) { lease(c, "i1") }})
	// Not ready until the first instance gives it a share: not waited for.
	second := start(t, setup{sessions: 6, reg: first.reg, noStart: true, config: func(c *Config) {
		lease(c, "i2")
		c.Agencies = first.cfg.Agencies
	}})
	worst := testkit.SamplePeak(t, 5*time.Millisecond, func() int64 { return int64(first.kcb.Stats().ActiveSessions) })
	pool := func(h *harness) int { return h.cell.clients["kcb"].Status().Pool.Size }
	ready := func(h *harness) bool { ok, _ := h.cell.readiness(); return ok }
	if !testkit.Poll(20*time.Second, func() bool {
		return pool(first) == 3 && pool(second) == 3 && ready(first) && ready(second)
	}) {
		_, c1 := first.cell.readiness()
		_, c2 := second.cell.readiness()
		t.Fatalf("after 20 s: pools %d and %d (shares %v and %v), readiness %v and %v",
			pool(first), pool(second), first.cell.leaser.Share(), second.cell.leaser.Share(), c1, c2)
	}
	for _, h := range []*harness{first, second} {
		if r := testkit.Do(t, h.client, "POST", h.intake+"/v1/inquiries", map[string]any{"user_id": "u-" + h.cfg.Instance, "product": "credit_line", "amount": 5000}, nil); r.Status != 202 {
			t.Fatalf("instance %s: POST %d %s", h.cfg.Instance, r.Status, r.Body)
		}
	}
	if err := second.stop(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, "the first instance with all 6", func() bool { return pool(first) == 6 })
	if w := worst.Max(); w > 6 {
		t.Fatalf("the agency saw %d sessions at once, over the quota of 6", w)
	}
}

// TestNoSessionsNoFetching: an instance that holds no session of an
// agency (its leases gone: the leaser sizes the gate as here) leaves its
// work in the queue rather than taking it and holding it at the gate; it
// takes it once it has sessions again.
func TestNoSessionsNoFetching(t *testing.T) {
	h := start(t, setup{sessions: 4, sim: agencysim.Config{MaxSessions: 20}})
	h.cell.pipe.Resize("nice", 0)
	a := h.accept(user(1), nil)
	time.Sleep(500 * time.Millisecond) // several fetch rounds
	if n := h.cell.pipe.Inflight(); n != 0 {
		t.Fatalf("%d inquiries taken with the nice gate shut, want 0 (left in the queue)", n)
	}
	h.cell.pipe.Resize("nice", 4)
	if v := h.settled(a); v.Status != inquiry.Done {
		t.Fatalf("after the gate opened: %+v, want done", v)
	}
}

// stuckCSS never answers, whatever its deadline says: a deadlock.
type stuckCSS struct{ release chan struct{} }

func (s stuckCSS) Score(context.Context, string) (int, error) { <-s.release; return 0, nil }

// TestStuckPipelineFailsReadinessThenEndsTheCell: a pipeline with work in
// flight that settles none of it for StallTimeout fails the cell's
// readiness by itself, and a second later Run ends with an error (the
// process exits for its supervisor to start it again).
func TestStuckPipelineFailsReadinessThenEndsTheCell(t *testing.T) {
	css := stuckCSS{release: make(chan struct{})}
	h := start(t, setup{opts: Options{CSS: css}, config: func(c *Config) { c.StallTimeout, c.Pipeline.DrainTimeout = 300*time.Millisecond, 500*time.Millisecond }})
	t.Cleanup(func() { close(css.release) }) // before the harness's stop: LIFO
	h.runEnds = true
	h.accept(user(1), nil)
	testkit.WaitFor(t, 5*time.Second, "readiness failing on the stuck pipeline", func() bool {
		ok, checks := h.cell.readiness()
		return !ok && !checks["pipeline"].OK
	})
	if _, checks := h.cell.readiness(); !strings.Contains(checks["pipeline"].Detail, "none settled") {
		t.Errorf("pipeline check: %+v", checks["pipeline"])
	}
	testkit.WaitFor(t, 15*time.Second, "Run to end", func() bool {
		select {
		case <-h.runDone:
			return true
		default:
			return false
		}
	})
	if err := h.stop(); err == nil || !strings.Contains(err.Error(), "stuck") {
		t.Fatalf("Run() = %v, want the stuck pipeline's error", err)
	}
	if _, err := os.Stat(filepath.Join(h.cfg.StoreDir, "inflight.log")); err != nil {
		t.Errorf("the inflight journal is gone after a stop with stuck work: %v (the next start would not count the crash)", err)
	}
}

// TestAStoppingInstanceFailsItsHealthFirst: with a shutdown delay, a
// stopping instance answers the routers' health check 503 at once while
// its intake still takes inquiries; only after the delay does the intake
// close (a router has taken it out of rotation by then, and sends nothing
// onto a connection the instance closes).
func TestAStoppingInstanceFailsItsHealthFirst(t *testing.T) {
	h := start(t, setup{config: func(c *Config) { c.ShutdownDelay = time.Second }})
	health := func() int { return testkit.Do(t, h.client, "GET", h.intake+api.PathHealth, nil, nil).Status }
	if s := health(); s != http.StatusOK {
		t.Fatalf("health before the stop: %d", s)
	}
	stopped := make(chan error, 1)
	began := time.Now()
	go func() { stopped <- h.stop() }()
	testkit.WaitFor(t, 500*time.Millisecond, "the health check to fail", func() bool { return health() == http.StatusServiceUnavailable })
	h.accept(user(1), nil) // the intake serves on
	if err := <-stopped; err != nil {
		t.Fatalf("Run() = %v", err)
	}
	if took := time.Since(began); took < time.Second {
		t.Fatalf("stopped %v after the stop began, want after the 1 s delay", took)
	}
}
