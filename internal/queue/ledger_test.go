package queue_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/queue"
	"github.com/cellkit/cellkit/internal/store"
	"github.com/cellkit/cellkit/internal/testkit"
)

// A new cell keeps its inquiries in the ledger: acceptance is the work
// on its lane, a worker's first delivery carries the record, the lanes'
// depth and oldest are the stats, a failed record's write lists it, and
// a retry queues it again with its scores.
func TestTheLedgerIsTheWork(t *testing.T) {
	q, _ := setup(t, queue.Config{})
	ctx := context.Background()
	if q.Layout() != queue.LayoutLedger || q.Switched().IsZero() {
		t.Fatalf("a new cell's layout %s (switched %v), want the ledger", q.Layout(), q.Switched())
	}
	hi, _, st := enqueueBothLanes(t, q, true)
	if n, h := st.OldestByLane[inquiry.Normal], st.OldestByLane[inquiry.High]; st.Total != 2 || !n.Equal(st.Oldest) || !h.After(n) {
		t.Fatalf("stats %+v: want 2, the normal one the oldest", st)
	}
	m := fetchOne(t, q, inquiry.High)
	rec, ref, err := q.Record(ctx, m)
	if err != nil || m.ID != hi.ID || m.Job != hi.Job || m.Attempt != 1 || rec.ID != hi.ID || rec.Fingerprint != hi.Fingerprint {
		t.Fatalf("first delivery %s/%s attempt %d, record %+v, %v", m.ID, m.Job, m.Attempt, rec, err)
	}
	// A partial state, then a failure: its write is its listing.
	rec.Scores = map[string]int{"kcb": 610}
	read := ref
	if ref, err = q.Update(ctx, &rec, ref); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Update(ctx, &rec, read); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a write over a revision that moved on = %v, want ErrConflict", err)
	}
	if _, err := q.Update(ctx, &rec, queue.Ref{}); err == nil {
		t.Fatal("a write with no record read was taken")
	}
	rec.Fail("nice: agency answered code 5001", time.Now())
	if err := q.List(ctx, rec, ref); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Update(ctx, &rec, ref); err != nil {
		t.Fatal(err)
	}
	m.Ack()
	if got, _, err := q.Get(ctx, hi.ID); err != nil || got.Status != inquiry.Failed || got.Scores["kcb"] != 610 {
		t.Fatalf("read after the failure: %+v, %v", got, err)
	}
	list, err := q.Failed(ctx, 10)
	if err != nil || len(list) != 1 || list[0].ID != hi.ID || list[0].Set != queue.SetError || list[0].Reason != rec.Reason {
		t.Fatalf("Failed = %+v, %v", list, err)
	}
	testkit.WaitFor(t, 5*time.Second, "one failed in the counts", func() bool {
		f, d, err := q.FailedCounts(ctx)
		return err == nil && f == 1 && d == 0
	})
	if err := q.Retry(ctx, hi.ID); err != nil {
		t.Fatal(err)
	}
	if err := q.Retry(ctx, hi.ID); !errors.Is(err, queue.ErrNotFailed) {
		t.Fatalf("retry of a pending inquiry = %v, want ErrNotFailed", err)
	}
	again := fetchOne(t, q, inquiry.High)
	rec, _, err = q.Record(ctx, again)
	if err != nil || again.Job == hi.Job || rec.Job != again.Job || rec.Status != inquiry.Pending || rec.Scores["kcb"] != 610 {
		t.Fatalf("after the retry: delivery's job %s, record %+v, %v; want a new job, pending, the score kept", again.Job, rec, err)
	}
	if list, _ := q.Failed(ctx, 10); len(list) != 0 {
		t.Fatalf("still listed after the retry: %+v", list)
	}
	testkit.WaitFor(t, 5*time.Second, "nothing failed in the counts", func() bool {
		f, d, err := q.FailedCounts(ctx)
		return err == nil && f == 0 && d == 0
	})
	// A redelivery reads the last state, not the message's.
	again.Nak()
	re := fetchOne(t, q, inquiry.High)
	rec.Scores["nice"] = 700
	if _, err := q.Update(ctx, &rec, mustRef(t, q, rec.ID)); err != nil {
		t.Fatal(err)
	}
	re.Nak()
	third := fetchOne(t, q, inquiry.High)
	if got, _, err := q.Record(ctx, third); err != nil || third.Attempt < 2 || got.Scores["nice"] != 700 {
		t.Fatalf("redelivery %d read %+v, %v; want the scores written since", third.Attempt, got, err)
	}
}

func mustRef(t *testing.T, q *queue.Queue, id string) queue.Ref {
	t.Helper()
	_, ref, err := q.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// An upgrade: a cell whose data is in the records layout keeps writing
// it on the new release until it is switched; then the intake writes the
// ledger, the workers take the old work stream's inquiries first, a
// keyed inquiry of the bucket is found, and a failed inquiry of the old
// sets is listed and retried onto the ledger. One piece: the life of one
// cell across the upgrade, each step on the state the last left.
func TestAnUpgradeKeepsTheRecordsLayoutsData(t *testing.T) {
	_, js := celltest.NATS(t)
	ctx := context.Background()
	oldRelease, err := queue.Setup(ctx, js, queue.Config{Cell: "c1", Layout: queue.LayoutRecords})
	if err != nil {
		t.Fatal(err)
	}
	pending, failed := newRecord(1, inquiry.Normal), newRecord(2, inquiry.Normal)
	for _, r := range []*inquiry.Record{&pending, &failed} {
		if _, err := oldRelease.Enqueue(ctx, r, true); err != nil {
			t.Fatal(err)
		}
	}
	m := fetchOne(t, oldRelease, inquiry.Normal)
	f := fetchOne(t, oldRelease, inquiry.Normal)
	if m.ID != pending.ID || f.ID != failed.ID {
		t.Fatalf("deliveries %s, %s; want %s, %s", m.ID, f.ID, pending.ID, failed.ID)
	}
	rec, ref, _ := oldRelease.Record(ctx, f)
	rec.Dead = true
	rec.Fail("dead-lettered after 5 attempts: core banking unavailable", time.Now())
	if err := oldRelease.List(ctx, rec, ref); err != nil {
		t.Fatal(err)
	}
	if _, err := oldRelease.Update(ctx, &rec, ref); err != nil {
		t.Fatal(err)
	}
	f.Ack()
	m.Nak()

	// The new release over the same JetStream, grace short for the test.
	q, err := queue.Setup(ctx, js, queue.Config{Cell: "c1", SwitchGrace: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if q.Layout() != queue.LayoutRecords || !q.Switched().IsZero() {
		t.Fatalf("the new release on an old cell writes %s (switched %v), want records until switched", q.Layout(), q.Switched())
	}
	before := newRecord(3, inquiry.Normal)
	if _, err := q.Enqueue(ctx, &before, false); err != nil {
		t.Fatal(err)
	}
	if _, err := oldRelease.Enqueue(ctx, &before, true); !errors.Is(err, store.ErrExists) {
		t.Fatalf("the old release's keyed retry of the new release's inquiry = %v, want ErrExists", err)
	}
	since, err := q.Switch(ctx)
	if err != nil || since.IsZero() {
		t.Fatalf("Switch = %v, %v", since, err)
	}
	if again, err := q.Switch(ctx); err != nil || !again.Equal(since) {
		t.Fatalf("a second Switch = %v, %v; want the first's %v kept", again, err, since)
	}
	testkit.WaitFor(t, 5*time.Second, "the switch to take effect", func() bool { return q.Layout() == queue.LayoutLedger })
	if _, err := q.Enqueue(ctx, &pending, true); !errors.Is(err, store.ErrExists) {
		t.Fatalf("a keyed retry of an inquiry in the bucket = %v, want ErrExists", err)
	}
	after := newRecord(4, inquiry.Normal)
	if _, err := q.Enqueue(ctx, &after, true); err != nil {
		t.Fatal(err)
	}
	var st queue.Stats
	testkit.WaitFor(t, 5*time.Second, "the work of both layouts in the stats", func() bool {
		st, err = q.Stats(ctx)
		return err == nil && st.Depth[inquiry.Normal] == 3
	})
	// The old work stream's first, then the ledger's.
	var order []string
	for range 3 {
		d := fetchOne(t, q, inquiry.Normal)
		rec, _, err := q.Record(ctx, d)
		if err != nil || rec.ID != d.ID {
			t.Fatalf("record of %s: %+v, %v", d.ID, rec, err)
		}
		order = append(order, d.ID)
		d.Ack()
	}
	if want := []string{pending.ID, before.ID, after.ID}; !slices.Equal(order, want) {
		t.Fatalf("deliveries %v, want %v", order, want)
	}
	list, err := q.Failed(ctx, 10)
	if err != nil || len(list) != 1 || list[0].ID != failed.ID || list[0].Set != queue.SetDLQ {
		t.Fatalf("Failed after the switch = %+v, %v; want the old DLQ entry", list, err)
	}
	if err := q.Retry(ctx, failed.ID); err != nil {
		t.Fatal(err)
	}
	d := fetchOne(t, q, inquiry.Normal)
	if got, ref, err := q.Record(ctx, d); err != nil || got.ID != failed.ID || got.Status != inquiry.Pending || ref == (queue.Ref{}) {
		t.Fatalf("the retried inquiry's delivery: %+v, %v", got, err)
	}
	if got, _, err := q.Get(ctx, failed.ID); err != nil || got.Status != inquiry.Pending {
		t.Fatalf("read after the retry onto the ledger: %+v, %v; want pending", got, err)
	}
	if list, _ := q.Failed(ctx, 10); len(list) != 0 {
		t.Fatalf("still listed after the retry: %+v", list)
	}
	// A restart keeps the switch.
	again, err := queue.Setup(ctx, js, queue.Config{Cell: "c1"})
	if err != nil || again.Layout() != queue.LayoutLedger || !again.Switched().Equal(since) {
		t.Fatalf("after a restart: %s since %v, %v; want the ledger since %v", again.Layout(), again.Switched(), err, since)
	}
}

// A key's inquiry accepted by a release before ids held the slot is
// under the id it had then ("<cell>-<unique>"): a keyed retry after the
// upgrade, whose id holds the slot, finds it — on the records layout and
// after the switch to the ledger — and is not accepted a second time.
func TestAKeyTakenBeforeIdsHeldTheSlotIsFound(t *testing.T) {
	_, js := celltest.NATS(t)
	ctx := context.Background()
	q, err := queue.Setup(ctx, js, queue.Config{Cell: "c1", Layout: queue.LayoutRecords, SwitchGrace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	taken := func(key string) (slotted string) {
		slotted = inquiry.KeyID("c1", 5, "acme", "u", key)
		old := inquiry.NewRecord(inquiry.Unslotted(slotted), "c1", inquiry.Request{UserID: "u", Product: "p", Amount: 1}, time.Now())
		if _, err := q.Enqueue(ctx, &old, true); err != nil {
			t.Fatal(err)
		}
		return slotted
	}
	retry := func(when, id string) {
		t.Helper()
		again := inquiry.NewRecord(id, "c1", inquiry.Request{UserID: "u", Product: "p", Amount: 1}, time.Now())
		if _, err := q.Enqueue(ctx, &again, true); !errors.Is(err, store.ErrExists) {
			t.Fatalf("%s: a keyed retry of %s = %v, want ErrExists", when, id, err)
		}
		if got, _, err := q.Get(ctx, id); err != nil || got.ID != inquiry.Unslotted(id) {
			t.Fatalf("%s: Get(%s) = %s, %v; want the inquiry taken before", when, id, got.ID, err)
		}
	}
	before := taken("k1")
	retry("on records", before)
	if _, err := q.Switch(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "the switch to take effect", func() bool { return q.Layout() == queue.LayoutLedger })
	retry("on the ledger", before)
}
