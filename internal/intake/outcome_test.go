package intake

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/problem"
	"github.com/cellkit/cellkit/internal/queue"
	"github.com/cellkit/cellkit/internal/storage"
	"github.com/cellkit/cellkit/internal/testkit"
)

// The subjects a cell's NATS connection writes an inquiry's acceptance
// to (prefixes of): on the records layout its record, then its work
// message; on the ledger one message.
const (
	recordWrites  = "$KV.cellkit-c1-inquiries."
	messageWrites = "cellkit.c1.work."
	ledgerWrites  = "cellkit.c1.ledger.new."
)

// onRecords is a cell in the records layout, as a release before the
// ledger made it (its half states are tested on it).
var onRecords = queue.Config{Layout: queue.LayoutRecords}

// cutCell is a cell whose NATS connection the test cuts; its tries are
// short, so that the intake gives up within a second or so, and its clock
// is real (the leader wait is timed by it), unless o.now says otherwise.
func (e *env) cutCell(o cellOpts) (*testCell, *natsCut) {
	e.t.Helper()
	o.cut = newNATSCut()
	if o.now == nil {
		o.now = time.Now
	}
	if o.intake.LeaderWait == 0 {
		o.intake.LeaderWait, o.intake.TryTimeout = time.Second, 250*time.Millisecond
	}
	return e.cell(o), o.cut
}

// wantUnknown checks a 503 outcome-unknown to the letter: the problem
// naming inquiry id (or any id of the cell when id is ""), Location its
// status URL, Retry-After, and Cellkit-Overloaded only when nothing was
// written by this instance (overloaded). It returns the inquiry's id.
func (c *testCell) wantUnknown(t testing.TB, r response, id string, overloaded bool) string {
	t.Helper()
	if r.status != http.StatusServiceUnavailable || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("answer %s, want 503 outcome-unknown", r)
	}
	var p problem.Details
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("problem body %s: %v", r.body, err)
	}
	if p.Type != problem.OutcomeUnknown || p.Status != http.StatusServiceUnavailable || p.Title != "Service Unavailable" || p.Detail == "" || p.Field != "" {
		t.Fatalf("problem %+v, want outcome-unknown", p)
	}
	if id == "" {
		if cell, ok := inquiry.CellOf(p.Inquiry); !ok || cell != c.id {
			t.Fatalf("inquiry_id %q is not an id of cell %s", p.Inquiry, c.id)
		}
	} else if p.Inquiry != id {
		t.Fatalf("inquiry_id %q, want %q", p.Inquiry, id)
	}
	if loc := r.header.Get("Location"); loc != "/v1/inquiries/"+p.Inquiry {
		t.Errorf("Location %q, want the inquiry's status URL", loc)
	}
	if r.header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	if got, want := r.header.Get(api.HeaderOverloaded), map[bool]string{true: "true"}[overloaded]; got != want {
		t.Errorf("%s %q, want %q", api.HeaderOverloaded, got, want)
	}
	return p.Inquiry
}

// wantProcessedOnce checks that inquiry id has its record, pending, and
// the work stream exactly one message, of the record's job: what a worker
// takes, and processes, once. The cell holds records records in all.
func (c *testCell) wantProcessedOnce(t testing.TB, id string, records int) {
	t.Helper()
	c.wantStored(t, records, 1, 0)
	rec, _, found := c.record(t, id)
	if !found || rec.Status != inquiry.Pending {
		t.Fatalf("record of %s: %+v (found %v), want pending", id, rec, found)
	}
	m, msg, ok := c.fetch(t, inquiry.High)
	if !ok || msg != (queue.Message{ID: id, Job: rec.Job}) {
		t.Fatalf("work message %+v, want %s's job %s", msg, id, rec.Job)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	if _, msg, ok := c.fetch(t, inquiry.High); ok {
		t.Fatalf("a second work message %+v", msg)
	}
}

// A write whose answer never comes may have been made: the client is told
// that the outcome is unknown (never that nothing was accepted), with the
// inquiry's id, and a retry with the same Idempotency-Key gets that
// inquiry, which is processed once. Each case cuts the cell's NATS
// connection at another write of the intake.
func TestAWriteWithoutAnAnswerIsAnUnknownOutcome(t *testing.T) {
	for _, tc := range []struct {
		name    string
		queue   queue.Config
		subject string // the write cut
		forward bool   // it reached the server
	}{
		{"ledger: the acceptance stored, its answer lost", queue.Config{}, ledgerWrites, true},
		{"ledger: the acceptance's write lost", queue.Config{}, ledgerWrites, false},
		{"records: the record made, its answer lost", onRecords, recordWrites, true},
		{"records: the record's write lost", onRecords, recordWrites, false},
		{"records: the message stored, its answer lost", onRecords, messageWrites, true},
		{"records: the message's write lost", onRecords, messageWrites, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.maps.Set(testMapOf(t, nil, "c1"))
			c, cut := e.cutCell(cellOpts{queue: tc.queue})
			key := map[string]string{api.HeaderIdemKey: "order-7"}
			id := keyID("c1", "u-1", "order-7")

			cut.arm(tc.subject, tc.forward)
			c.wantUnknown(t, c.post(t, request("u-1"), key), id, false)
			cut.heal()
			// The retry finds what the first request wrote and completes
			// it, or takes it anew: the same id either way.
			r := c.post(t, request("u-1"), key)
			if r.status != http.StatusAccepted {
				t.Fatalf("retry with the same key: %s", r)
			}
			if a := c.wantAccepted(t, r, inquiry.Pending, r.header.Get("Idempotent-Replayed") == "true"); a.ID != id {
				t.Fatalf("retry answered inquiry %s, want %s", a.ID, id)
			}
			c.wantProcessedOnce(t, id, 1)
		})
	}
}

// A keyed retry of an inquiry whose record is there without its message
// (the records layout's half state) replays it; a replay whose message's
// write gets no answer leaves the outcome unknown (the record is there),
// and the next retry completes it.
func TestAReplayWithoutAnAnswerIsAnUnknownOutcome(t *testing.T) {
	e := newEnv(t)
	e.maps.Set(testMapOf(t, nil, "c1"))
	c, cut := e.cutCell(cellOpts{queue: onRecords})
	key := map[string]string{api.HeaderIdemKey: "k"}
	r := inquiry.Request{UserID: "u-1", Product: "credit_loan", Amount: 5_000_000, Priority: inquiry.High}
	rec := inquiry.NewRecord(keyID("c1", "u-1", "k"), "c1", r, e.clk.Now())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.st.Create(ctx, &rec); err != nil {
		t.Fatal(err)
	}

	cut.arm(messageWrites, false)
	c.wantUnknown(t, c.post(t, request("u-1"), key), rec.ID, false)
	cut.heal()
	if a := c.wantAccepted(t, c.post(t, request("u-1"), key), inquiry.Pending, true); a.ID != rec.ID {
		t.Fatalf("retry answered %s, want %s", a.ID, rec.ID)
	}
	c.wantProcessedOnce(t, rec.ID, 1)
}

// The server refuses the message (the work stream is full) and the
// rollback of the record gets no answer: the record may still be there,
// so the outcome is unknown (not queue-full, which a router would send to
// another instance). Once there is room, a keyed retry completes it.
func TestAFailedRollbackIsAnUnknownOutcome(t *testing.T) {
	e := newEnv(t)
	e.maps.Set(testMapOf(t, nil, "c1"))
	c, cut := e.cutCell(cellOpts{queue: queue.Config{Layout: queue.LayoutRecords, MaxMsgs: 1, PublishTimeout: 250 * time.Millisecond}})
	c.accept(t, request("u-1"), nil)
	msg, _, ok := c.fetch(t, inquiry.High) // held, not acked: the stream stays full
	if !ok {
		t.Fatal("no message")
	}
	key := map[string]string{api.HeaderIdemKey: "k"}
	id := keyID("c1", "u-2", "k")

	cut.armAfter(recordWrites+id, 1, true) // the write after the record's: its rollback
	c.wantUnknown(t, c.post(t, request("u-2"), key), id, false)
	cut.heal()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := msg.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	r := c.post(t, request("u-2"), key)
	if r.status != http.StatusAccepted {
		t.Fatalf("retry once there is room: %s", r)
	}
	if a := c.wantAccepted(t, r, inquiry.Pending, r.header.Get("Idempotent-Replayed") == "true"); a.ID != id {
		t.Fatalf("retry answered %s, want %s", a.ID, id)
	}
	c.wantProcessedOnce(t, id, 2)
}

// A request without a key whose outcome is unknown is settled by the
// instance once its queue answers: on the ledger an acceptance written is
// the work (GET says pending); on records a record written without its
// message gets it (the inquiry is accepted, once, and its GET says so);
// one never written stays unknown to GET (404), and is let go settleLate
// later.
func TestAnUnknownOutcomeIsSettled(t *testing.T) {
	t.Run("ledger: acceptance written", func(t *testing.T) {
		e := newEnv(t)
		e.maps.Set(testMapOf(t, nil, "c1"))
		c, cut := e.cutCell(cellOpts{})
		cut.arm(ledgerWrites, true)
		id := c.wantUnknown(t, c.post(t, request("u-1"), nil), "", false)
		cut.heal()
		testkit.WaitFor(t, 5*time.Second, "the inquiry let go", func() bool { return c.h.doubtsHeld() == 0 })
		if v := c.view(t, id); v.Status != inquiry.Pending {
			t.Fatalf("GET %s after it settled: %+v", id, v)
		}
		c.wantProcessedOnce(t, id, 1)
	})
	t.Run("records: record written", func(t *testing.T) {
		e := newEnv(t)
		e.maps.Set(testMapOf(t, nil, "c1"))
		c, cut := e.cutCell(cellOpts{queue: onRecords})
		observer := e.cell(cellOpts{closed: true, queue: onRecords}) // another connection to the same streams
		cut.arm(messageWrites, false)
		id := c.wantUnknown(t, c.post(t, request("u-1"), nil), "", false)
		if rec, _, found := observer.record(t, id); !found || rec.Status != inquiry.Pending {
			t.Fatalf("record of %s: %+v (found %v), want it kept, pending", id, rec, found)
		}
		if s := observer.stats(t); s.Total != 0 {
			t.Fatalf("work stream %+v before the cut heals, want empty", s)
		}
		cut.heal()
		testkit.WaitFor(t, 5*time.Second, "the settled inquiry's message", func() bool { return c.stats(t).Total == 1 })
		if v := c.view(t, id); v.Status != inquiry.Pending {
			t.Fatalf("GET %s after it settled: %+v", id, v)
		}
		c.wantProcessedOnce(t, id, 1)
		testkit.WaitFor(t, 5*time.Second, "the inquiry let go", func() bool { return c.h.doubtsHeld() == 0 })
	})
	for _, tc := range []struct {
		name    string
		queue   queue.Config
		subject string
	}{{"ledger: never written", queue.Config{}, ledgerWrites}, {"records: record never written", onRecords, recordWrites}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.maps.Set(testMapOf(t, nil, "c1"))
			var skew atomic.Int64 // the cell's clock runs this far ahead of time
			c, cut := e.cutCell(cellOpts{queue: tc.queue, now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }})
			cut.arm(tc.subject, false)
			id := c.wantUnknown(t, c.post(t, request("u-1"), nil), "", false)
			cut.heal()
			c.wantProblem(t, c.get(t, id), http.StatusNotFound, "unknown-inquiry", "")
			if n := c.h.doubtsHeld(); n != 1 {
				t.Fatalf("%d inquiries held to settle, want 1 until settleLate", n)
			}
			skew.Store(int64(settleLate))
			testkit.WaitFor(t, 5*time.Second, "the inquiry let go", func() bool { return c.h.doubtsHeld() == 0 })
			c.wantStored(t, 0, 0, 0)
		})
	}
}

// A store that fails a write cuts the intake's wait for its message's
// answer; the message may have been stored all the same, so the answer is
// outcome-unknown, not storage-full (which says nothing was accepted, and
// is marked overloaded: a router would send the request to another
// instance).
func TestAStoreThatFailsAWriteLeavesTheOutcomeUnknown(t *testing.T) {
	t.Run("ledger", func(t *testing.T) { storeFailsAWrite(t, queue.Config{}, ledgerWrites) })
	t.Run("records", func(t *testing.T) { storeFailsAWrite(t, onRecords, messageWrites) })
}

func storeFailsAWrite(t *testing.T, qc queue.Config, subject string) {
	e := newEnv(t)
	e.maps.Set(testMapOf(t, nil, "c1"))
	// Watermarks no test machine's disk reaches: only a failed write
	// makes the guard refuse.
	guard, err := storage.New(storage.Config{Dir: t.TempDir(), High: 1, Low: 0.999}, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Tries long enough that only the store's failure ends the wait.
	c, cut := e.cutCell(cellOpts{queue: qc, storage: guard, intake: Config{Timeout: 10 * time.Second, LeaderWait: 5 * time.Second, TryTimeout: 5 * time.Second}})
	key := map[string]string{api.HeaderIdemKey: "k"}
	id := keyID("c1", "u-1", "k")

	cutNow := cut.arm(subject, true)
	failed := make(chan struct{})
	go func() {
		defer close(failed)
		<-cutNow
		guard.Failed(true, "write error: no space left on device")
	}()
	began := time.Now()
	c.wantUnknown(t, c.post(t, request("u-1"), key), id, false)
	<-failed
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("answered after %v: the store's failure did not cut the wait", took)
	}
	guard.Failed(false, "")
	cut.heal()
	if a := c.wantAccepted(t, c.post(t, request("u-1"), key), inquiry.Pending, true); a.ID != id {
		t.Fatalf("retry answered %s, want %s", a.ID, id)
	}
	c.wantProcessedOnce(t, id, 1)
}

// Refused writes accepted nothing, and say so: a queue at its depth limit
// writes nothing on the ledger, and on records its full work stream
// refuses the message and the record is rolled back (see TestQueueFull);
// the classification is store.Refused's.
func TestRefusedWritesAreNotUnknown(t *testing.T) {
	for _, layout := range []string{queue.LayoutLedger, queue.LayoutRecords} {
		t.Run(layout, func(t *testing.T) {
			e := newEnv(t)
			e.maps.Set(testMapOf(t, nil, "c1"))
			c := e.cell(cellOpts{queue: queue.Config{MaxMsgs: 1, Layout: layout}})
			c.accept(t, request("u-1"), nil)
			c.wantStored(t, 1, 1, 0) // the depth read, as the cell's sampler does
			c.wantShed(t, c.post(t, request("u-2"), map[string]string{api.HeaderIdemKey: "k"}), "queue-full", "60")
			if _, _, found := c.record(t, keyID("c1", "u-2", "k")); found {
				t.Fatal("the record of a refused inquiry was kept")
			}
			if n := c.h.doubtsHeld(); n != 0 {
				t.Fatalf("%d inquiries held to settle after a refusal", n)
			}
		})
	}
}

// doubtsHeld is the number of inquiries the handler holds to settle.
func (h *Handler) doubtsHeld() int {
	h.doubts.mu.Lock()
	defer h.doubts.mu.Unlock()
	return len(h.doubts.since)
}
