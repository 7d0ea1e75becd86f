package control_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/agencysim"
	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/problem"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/telegram"
	"github.com/cellkit/cellkit/internal/testkit"
)

// A change that gives some of c1's users to c2 moves their inquiries with
// them, on two cell processes: done ones, pending ones (NICE answering
// in a minute meanwhile: two in flight at c1, whose late answers cannot
// be written over the hand-over, and two queued) and keyed ones. Once the map is
// committed every inquiry is read at its user's cell, the pending ones
// are finished there and nowhere else, c1 keeps none of the moved users'
// and a keyed retry at c2 gets the id c1 gave. The change's time limit
// does not count the cells' work. One piece: one scenario,
// read top to bottom, its steps each the precondition of the next.
func TestAChangeMovesTheUsersInquiriesWithThem(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two cell processes")
	}
	tc := startTwoCells(t)
	reg, run, sims, client := tc.reg, tc.run, tc.sims, tc.client
	ctx := testkit.Context(t, 3*time.Minute)
	admin := adminclient.Client{HTTP: client, Timeout: time.Minute}

	before := reg.Map()
	after, err := before.SetWeight("c2", 3)
	if err != nil {
		t.Fatal(err)
	}
	moving := func(u string) bool { return after.After.Lookup(u).Cell == "c2" }
	post := func(u, key string) string { t.Helper(); return tc.post(t, "c1", u, key) }
	read := func(cell, id string, local bool) (int, inquiry.View) { t.Helper(); return tc.read(t, cell, id, local) }
	// c1's users: done first, then pending behind a slow agency.
	users := map[string]string{} // id → user
	var movedDone, movedPending, keyed []string
	n := 0
	for len(movedDone) < 6 {
		u := fmt.Sprintf("u%d", n)
		n++
		if before.Lookup(u).Cell != "c1" {
			continue
		}
		id := post(u, "k-"+u)
		users[id] = u
		if moving(u) {
			movedDone = append(movedDone, id)
			keyed = append(keyed, u)
		}
	}
	testkit.WaitFor(t, 30*time.Second, "c1's first inquiries done", func() bool {
		for id := range users {
			if _, v := read("c1", id, false); v.Status != inquiry.Done {
				return false
			}
		}
		return true
	})
	// NICE answers in a minute: c1's next inquiries stay pending, two in
	// flight (its two workers), the others queued.
	celltest.SetSim(t, sims["c1"][0], func(c *agencysim.Config) { c.Latency = agencysim.FixedLatency(time.Minute) })
	for len(movedPending) < 4 {
		u := fmt.Sprintf("u%d", n)
		n++
		if before.Lookup(u).Cell != "c1" {
			continue
		}
		id := post(u, "")
		users[id] = u
		if moving(u) {
			movedPending = append(movedPending, id)
		}
	}

	ctl := control.New(reg.Reg, control.Config{Holder: "test"}, control.Options{
		Moves: control.NewMover(admin, control.MoveConfig{Page: 3, AttemptWait: 2 * time.Second}, func(n control.Note) { t.Log(n.Text) }, nil),
	})
	// Under a time limit of a second, shorter than the wait for the
	// attempts in flight alone: its clock stops while the cells work (an
	// operator's drain step, cellctl's --timeout).
	limit, stop := control.WithDeadline(ctx, time.Second)
	defer stop()
	res, err := ctl.Apply(limit, control.Change{Plan: func(m *slotmap.Map) (*slotmap.Plan, error) { return m.SetWeight("c2", 3) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Moves) != 1 {
		t.Fatalf("%d moves, want one from c1 to c2", len(res.Moves))
	}
	// The attempts in flight at the fence end at c1 (their calls time
	// out: failed, and moved so); the others are handed over.
	if mv := res.Moves[0]; mv.Spec.From != "c1" || mv.Spec.To != "c2" || mv.Step != "done" || !mv.Verified || mv.Handed == 0 || mv.Handed > len(movedPending) || mv.Activated != mv.Handed {
		t.Fatalf("move %s → %s: step %s, verified %v, copied %d, handed %d, activated %d; want done, verified, some of %d handed over and all of those made work",
			mv.Spec.From, mv.Spec.To, mv.Step, mv.Verified, mv.Copied, mv.Handed, mv.Activated, len(movedPending))
	}
	if _, err := ctl.Moves(ctx); err == nil {
		t.Error("the moves' record is still there after the change")
	}

	// Every inquiry at its user's cell, and final (c1's own users and the
	// attempts in flight at the fence may fail there, their NICE sessions
	// held by the slow calls); the handed-over ones done at c2; none of
	// the moved left at c1.
	testkit.WaitFor(t, 30*time.Second, "every inquiry done at its user's cell", func() bool {
		for id, u := range users {
			cell := after.After.Lookup(u).Cell
			status, v := read(cell, id, true)
			if status != http.StatusOK || v.Status == inquiry.Pending {
				return false
			}
		}
		return true
	})
	done := 0
	for _, id := range movedPending {
		if _, v := read("c2", id, true); v.Status == inquiry.Done {
			done++
		}
	}
	if done < res.Moves[0].Handed {
		t.Errorf("%d of the %d handed-over inquiries done at c2", done, res.Moves[0].Handed)
	}
	for _, id := range append(append([]string{}, movedDone...), movedPending...) {
		if status, _ := read("c1", id, true); status != http.StatusNotFound {
			t.Errorf("c1 still has moved inquiry %s: %d", id, status)
		}
		// Through the cell the reader reaches first, as a router with an
		// older map would: c1 answers 421, so the router reads again.
		if status, _ := read("c1", id, false); status != http.StatusMisdirectedRequest {
			t.Errorf("c1's read of moved inquiry %s = %d, want 421", id, status)
		}
	}
	// A keyed retry at c2 gets the id c1 gave.
	for i, u := range keyed {
		r, err := testkit.Send(client, "POST", run["c2"].Intake+"/v1/inquiries", inquiry.Request{UserID: u, Product: "loan", Amount: 1000, Priority: inquiry.Normal},
			map[string]string{api.HeaderIdemKey: "k-" + u})
		var a struct{ ID string }
		_ = json.Unmarshal(r.Body, &a)
		if err != nil || r.Status != http.StatusAccepted || a.ID != movedDone[i] {
			t.Errorf("keyed retry of %s at c2 = %v %d id %s, want 202 with %s", u, err, r.Status, a.ID, movedDone[i])
		}
	}
}

// A change cut after its moves were prepared and before its map was
// committed (its cellctl killed) is called off by the next one: c1 takes
// its handed-over inquiries back as work and lifts the fence, c2 lets the
// copies go, the record goes; nothing moved, nothing is lost.
func TestAChangeCutBeforeItsMapIsCalledOffByTheNext(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two cell processes")
	}
	tc := startTwoCells(t)
	ctx := testkit.Context(t, 3*time.Minute)
	admin := adminclient.Client{HTTP: tc.client, Timeout: time.Minute}
	before := tc.reg.Map()
	plan, err := before.SetWeight("c2", 3)
	if err != nil {
		t.Fatal(err)
	}
	// c1's NICE answers in a minute: its moving users' inquiries pending.
	celltest.SetSim(t, tc.sims["c1"][0], func(c *agencysim.Config) { c.Latency = agencysim.FixedLatency(time.Minute) })
	var pending []string
	var mover string
	for n := 0; len(pending) < 4; n++ {
		u := fmt.Sprintf("u%d", n)
		if before.Lookup(u).Cell == "c1" && plan.After.Lookup(u).Cell == "c2" {
			pending = append(pending, tc.post(t, "c1", u, ""))
			mover = u
		}
	}
	spec := plan.DataMoves()[0]
	spec.ID = fmt.Sprintf("v%d-%s-%s", before.Version()+1, spec.From, spec.To)
	rec := api.MovesRecord{Version: before.Version() + 1, Change: plan.After.Change(), Phase: api.MovesPreparing, Holder: "a cellctl killed",
		Moves: []api.MoveProgress{{Spec: spec, Step: "recorded"}}}
	doc := registry.DocumentFor(tc.reg.Reg, api.MovesDocument)
	var rev uint64
	save := func() error {
		data, err := json.Marshal(rec)
		if err == nil {
			err = doc.Put(ctx, data, rev)
		}
		if err == nil {
			_, rev, err = doc.Get(ctx)
		}
		return err
	}
	mv := control.NewMover(admin, control.MoveConfig{AttemptWait: time.Second}, nil, nil)
	if err := mv.Prepare(ctx, before, rec.Moves[:1], save); err != nil {
		t.Fatal(err)
	}
	// Cut here: fenced, handed over, copied, verified; the map unchanged.
	if rec.Moves[0].Handed == 0 {
		t.Fatalf("prepared %+v: want some handed over", rec.Moves[0])
	}
	r, _ := testkit.Send(tc.client, "POST", tc.run["c1"].Intake+"/v1/inquiries", inquiry.Request{UserID: mover, Product: "loan", Amount: 1000, Priority: inquiry.Normal}, nil)
	if r.Status != http.StatusServiceUnavailable || !strings.Contains(string(r.Body), "user-moving") {
		t.Fatalf("a moving user's inquiry at the fenced c1 = %d %s, want 503 user-moving", r.Status, r.Body)
	}
	if status, _ := tc.read(t, "c2", pending[0], true); status != http.StatusOK {
		t.Fatalf("c2's copy of %s: %d", pending[0], status)
	}

	celltest.SetSim(t, tc.sims["c1"][0], func(c *agencysim.Config) { c.Latency = agencysim.FixedLatency(2 * time.Millisecond) })
	ctl := control.New(tc.reg.Reg, control.Config{Holder: "the next"}, control.Options{Moves: mv})
	if _, err := ctl.Apply(ctx, control.Change{Plan: func(m *slotmap.Map) (*slotmap.Plan, error) { return m.SetCapacity("c1", 500) }}); err != nil {
		t.Fatal(err)
	}
	if _, err := ctl.Moves(ctx); !errors.Is(err, control.ErrNoMoves) {
		t.Fatalf("the record after the next change: %v, want none", err)
	}
	if m := tc.reg.Map(); m.Lookup(mover).Cell != "c1" {
		t.Fatalf("%s routed to %s after the call-off, want c1", mover, m.Lookup(mover).Cell)
	}
	testkit.WaitFor(t, 60*time.Second, "c1's inquiries worked again there", func() bool {
		for _, id := range pending {
			if status, v := tc.read(t, "c1", id, true); status != http.StatusOK || v.Status == inquiry.Pending {
				return false
			}
		}
		return true
	})
	for _, id := range pending {
		if status, _ := tc.read(t, "c2", id, true); status != http.StatusNotFound {
			t.Errorf("c2 keeps a copy of %s after the call-off: %d", id, status)
		}
	}
	tc.post(t, "c1", mover, "") // the fence is lifted
}

// twoCells are two cell processes, c1 and c2, each with its own agency
// simulators, on one registry.
type twoCells struct {
	reg    *celltest.Registry
	run    map[string]*celltest.RealCell
	sims   map[string][2]*agencysim.Server // NICE, KCB
	client *http.Client
}

func startTwoCells(t *testing.T) *twoCells {
	t.Helper()
	sim := agencysim.Config{MaxSessions: 8, Latency: agencysim.FixedLatency(2 * time.Millisecond)}
	tc := &twoCells{run: map[string]*celltest.RealCell{}, sims: map[string][2]*agencysim.Server{}, client: &http.Client{Timeout: 10 * time.Second}}
	addr := map[string][2]string{}
	var cells []slotmap.Cell
	for _, id := range []string{"c1", "c2"} {
		tc.sims[id] = [2]*agencysim.Server{celltest.StartSim(t, telegram.NICE(), sim), celltest.StartSim(t, telegram.KCB(), sim)}
		in, ad := testkit.FreeAddr(t), testkit.FreeAddr(t)
		addr[id] = [2]string{in, ad}
		cells = append(cells, slotmap.Cell{ID: id, Weight: 1, Intake: "http://" + in, Admin: "http://" + ad})
	}
	tc.reg = celltest.NewRegistry(t, map[string]int{"nice": 8, "kcb": 8}, cells...)
	for _, id := range []string{"c1", "c2"} {
		tc.run[id] = celltest.StartCell(t, celltest.CellProcess{ID: id, Registry: tc.reg.URL(), Intake: addr[id][0], Admin: addr[id][1],
			Nice: tc.sims[id][0].Addr().String(), KCB: tc.sims[id][1].Addr().String()})
	}
	return tc
}

// post sends an inquiry of user (keyed if key is set) to cell and returns
// its id.
func (tc *twoCells) post(t *testing.T, cell, user, key string) string {
	t.Helper()
	hdr := map[string]string{}
	if key != "" {
		hdr[api.HeaderIdemKey] = key
	}
	r, err := testkit.Send(tc.client, "POST", tc.run[cell].Intake+"/v1/inquiries", inquiry.Request{UserID: user, Product: "loan", Amount: 1000, Priority: inquiry.Normal}, hdr)
	if err != nil || r.Status != http.StatusAccepted {
		t.Fatalf("POST for %s at %s = %v %d %s", user, cell, err, r.Status, r.Body)
	}
	var a struct{ ID string }
	_ = json.Unmarshal(r.Body, &a)
	return a.ID
}

// read reads inquiry id at cell (local: from its own store only).
func (tc *twoCells) read(t *testing.T, cell, id string, local bool) (int, inquiry.View) {
	t.Helper()
	hdr := map[string]string{}
	if local {
		hdr[api.HeaderLocalRead] = "1"
	}
	r, err := testkit.Send(tc.client, "GET", tc.run[cell].Intake+"/v1/inquiries/"+id, nil, hdr)
	if err != nil {
		t.Fatal(err)
	}
	var v inquiry.View
	_ = json.Unmarshal(r.Body, &v)
	return r.Status, v
}

// A change whose moving users' cell does not answer at all is refused,
// nothing changed and no record left; with LeaveData it is applied, the
// move skipped (its users' inquiries left where they are) and said so.
func TestAChangeWhoseCellDoesNotAnswer(t *testing.T) {
	reg := celltest.NewRegistry(t, map[string]int{"nice": 8},
		slotmap.Cell{ID: "c1", Weight: 1, Intake: "http://127.0.0.1:1", Admin: "http://127.0.0.1:1"},
		slotmap.Cell{ID: "c2", Weight: 1, Intake: "http://127.0.0.1:1", Admin: "http://127.0.0.1:1"})
	ctx := testkit.Context(t, 30*time.Second)
	admin := adminclient.Client{HTTP: &http.Client{Timeout: time.Second}}
	weight := control.Change{Plan: func(m *slotmap.Map) (*slotmap.Plan, error) { return m.SetWeight("c2", 3) }}
	before := reg.Map().Version()
	ctl := control.New(reg.Reg, control.Config{Holder: "test"}, control.Options{Moves: control.NewMover(admin, control.MoveConfig{}, nil, nil)})
	_, err := ctl.Apply(ctx, weight)
	if err == nil || !strings.Contains(err.Error(), "cell c1 does not answer") || !strings.Contains(err.Error(), "nothing changed") {
		t.Fatalf("a change whose source does not answer = %v, want refused", err)
	}
	if v := reg.Map().Version(); v != before {
		t.Fatalf("the map went from version %d to %d", before, v)
	}
	if _, err := ctl.Moves(ctx); !errors.Is(err, control.ErrNoMoves) {
		t.Fatalf("a record left after the refusal: %v", err)
	}
	// A cell on a release without moves (the path unknown): refused too.
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		problem.Write(w, problem.New(http.StatusNotFound, problem.NotFound, "no such path: "+r.URL.Path))
	}))
	defer old.Close()
	reg.Change(func(m *slotmap.Map) (*slotmap.Plan, error) {
		return m.SetEndpoints("c1", "http://127.0.0.1:1", old.URL)
	})
	_, err = ctl.Apply(ctx, weight)
	if err == nil || !strings.Contains(err.Error(), "cell c1 cannot take part") || strings.Count(err.Error(), "no such path") != 1 {
		t.Fatalf("a change whose source runs a release without moves = %v, want refused in one line", err)
	}
	if _, err := ctl.Moves(ctx); !errors.Is(err, control.ErrNoMoves) {
		t.Fatalf("a record left after the refusal: %v", err)
	}
	// A server that answers anything with 200 is no cell taking part:
	// refused, not a copy that never ends.
	anything := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"cell":"c1","ready":true}`)
	}))
	defer anything.Close()
	reg.Change(func(m *slotmap.Map) (*slotmap.Plan, error) {
		return m.SetEndpoints("c1", "http://127.0.0.1:1", anything.URL)
	})
	before = reg.Map().Version()
	if _, err = ctl.Apply(ctx, weight); err == nil || !strings.Contains(err.Error(), "answered no record of move") {
		t.Fatalf("a change whose source answers anything = %v, want refused", err)
	}
	if v := reg.Map().Version(); v != before {
		t.Fatalf("the map went from version %d to %d", before, v)
	}
	var notes []string
	leave := control.New(reg.Reg, control.Config{Holder: "test"}, control.Options{
		Moves: control.NewMover(admin, control.MoveConfig{LeaveData: true}, func(n control.Note) { notes = append(notes, n.Text) }, nil)})
	res, err := leave.Apply(ctx, weight)
	if err != nil || !res.Applied || len(res.Moves) != 1 || res.Moves[0].Step != "skipped" {
		t.Fatalf("with LeaveData: %+v, %v; want applied, the move skipped", res, err)
	}
	if len(notes) == 0 || !strings.Contains(strings.Join(notes, "\n"), "stay in c1") {
		t.Errorf("notes %q do not say the inquiries stay in c1", notes)
	}
	if _, err := leave.Moves(ctx); !errors.Is(err, control.ErrNoMoves) {
		t.Fatalf("a record left after the change: %v", err)
	}
}
