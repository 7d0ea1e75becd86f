package store_test

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/store"
	"github.com/cellkit/cellkit/internal/testkit"
)

// A move of two slots' users from c1's ledger to c2's, as the cells run
// it: a first copy while c1 works on, c1's changes after it (a record
// done, one accepted, a failed one re-queued, which purges its failed
// entry), the pending ones handed over, a second copy from the first's
// cursor; the digests show the slot whose purge the copy could not carry,
// which is copied again whole; then c2 makes the handed inquiries its
// work, and c1 lets the moved users' messages go. A user of a moving slot
// who stays (pinned to c1) is neither copied nor let go. One piece: the
// steps of one move in their order, each on the state the last left.
func TestAMoveCopiesVerifiesAndHandsOverALedgersInquiries(t *testing.T) {
	_, js := celltest.NATS(t)
	ctx := testkit.Context(t, 60*time.Second)
	open := func(cell string) *store.Ledger {
		j, err := store.OpenLedger(ctx, js, store.LedgerConfig{Cell: cell, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	src, dst := open("c1"), open("c2")
	moving := []int{1, 2}
	want := func(slot int, user string) bool { return slices.Contains(moving, slot) && user != "stay" }
	accept := func(slot int, user string) inquiry.Record {
		t.Helper()
		rec := inquiry.NewRecord(inquiry.NewID("c1", slot), "c1", inquiry.Request{UserID: user, Product: "p", Amount: 1}, time.Now())
		if _, err := src.Accept(ctx, &rec); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	update := func(id string, change func(*inquiry.Record)) {
		t.Helper()
		rec, rev, err := src.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		change(&rec)
		if _, err := src.Update(ctx, &rec, rev); err != nil {
			t.Fatal(err)
		}
	}
	done := func(r *inquiry.Record) { r.Complete(inquiry.Result{}, time.Now()) }
	fail := func(r *inquiry.Record) { r.Fail("nice: 5001", time.Now()) }

	pending, finished, failed := accept(1, "u1"), accept(1, "u2"), accept(2, "u3")
	// c2 holds an inquiry of a moving user of its own (an earlier change
	// left it there): the move's digest, discard and activation at c2
	// touch the copies alone.
	own := inquiry.NewRecord(inquiry.NewID("c2", 2), "c2", inquiry.Request{UserID: "u3", Product: "p", Amount: 1}, time.Now())
	if _, err := dst.Accept(ctx, &own); err != nil {
		t.Fatal(err)
	}
	later, stays, elsewhere := accept(2, "u4"), accept(2, "stay"), accept(3, "u5")
	update(finished.ID, done)
	update(failed.ID, fail)

	copyFrom := func(after uint64, slots []int) uint64 {
		t.Helper()
		for {
			next, end, err := src.Export(ctx, after, slots, want, 2, func(m api.MovedMessage) error { return dst.Import(ctx, "m1", m, time.Hour, time.Now()) })
			if err != nil {
				t.Fatal(err)
			}
			after = next
			if end {
				return after
			}
		}
	}
	cursor := copyFrom(0, moving)

	// c1 works on: later done, a new one, the failed one re-queued.
	update(later.ID, done)
	fresh := accept(1, "u6")
	rec, rev, err := src.Get(ctx, failed.ID)
	if err != nil {
		t.Fatal(err)
	}
	rec.Requeue(time.Now())
	if _, err := src.Requeue(ctx, &rec, rev); err != nil {
		t.Fatal(err)
	}

	// The fence: the pending ones handed over; a write over the revision
	// a worker read before fails.
	_, before, _ := src.Get(ctx, pending.ID)
	job := store.HandJob("m1")
	for _, id := range []string{pending.ID, fresh.ID, failed.ID, finished.ID} {
		handed, err := src.Hand(ctx, id, job)
		if err != nil || handed != (id != finished.ID) {
			t.Fatalf("Hand(%s) = %v, %v", id, handed, err)
		}
	}
	late, _, _ := src.Get(ctx, pending.ID)
	late.Job = pending.Job
	done(&late)
	if _, err := src.Update(ctx, &late, before); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a worker's write after the hand-over = %v, want ErrConflict", err)
	}
	copyFrom(cursor, moving)

	horizon := time.Now().Add(-time.Hour)
	digests := func() (a, b map[int]api.SlotDigest) {
		t.Helper()
		a, err := src.Digest(ctx, moving, want, "", horizon)
		if err != nil {
			t.Fatal(err)
		}
		b, err = dst.Digest(ctx, moving, want, "m1", horizon)
		if err != nil {
			t.Fatal(err)
		}
		return a, b
	}
	a, b := digests()
	if a[1] != b[1] || a[2] == b[2] {
		t.Fatalf("digests c1 %v, c2 %v: want slot 1 the same, slot 2 not (c1 purged the failed entry)", a, b)
	}
	// Slot 2 copied again, whole.
	if err := dst.Discard(ctx, []int{2}, want, func(int) bool { return true }, "m1"); err != nil {
		t.Fatal(err)
	}
	copyFrom(0, []int{2})
	if a, b = digests(); !maps.Equal(a, b) || a[1].Messages != 6 || a[2].Messages != 4 {
		t.Fatalf("digests after slot 2 again: c1 %v, c2 %v", a, b)
	}

	// c2 makes the handed ones its work; they read the same there.
	n, err := dst.Activate(ctx, moving, want, "m1", time.Now())
	if err != nil || n != 3 {
		t.Fatalf("Activate = %d, %v; want 3", n, err)
	}
	if again, err := dst.Activate(ctx, moving, want, "m1", time.Now()); err != nil || again != 0 {
		t.Fatalf("a second Activate = %d, %v; want 0", again, err)
	}
	for _, id := range []string{pending.ID, fresh.ID, failed.ID, finished.ID, later.ID} {
		got, _, err := dst.Get(ctx, id)
		wantStatus := inquiry.Pending
		if id == finished.ID || id == later.ID {
			wantStatus = inquiry.Done
		}
		if err != nil || got.Status != wantStatus || (wantStatus == inquiry.Pending && (got.Job == job || got.Job == "")) {
			t.Errorf("c2's %s: %s job %q, %v; want %s under a job of its own", id, got.Status, got.Job, err, wantStatus)
		}
	}
	for _, id := range []string{stays.ID, elsewhere.ID} {
		if _, _, err := dst.Get(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("c2 has %s, which does not move: %v", id, err)
		}
	}
	if got, _, err := dst.Get(ctx, own.ID); err != nil || got.Status != inquiry.Pending || got.Job != own.Job {
		t.Errorf("c2's own inquiry of a moving user after the move: %+v, %v", got, err)
	}

	// c1 lets the moved users go: slot 1 whole, slot 2 but the user who
	// stays.
	if err := src.Discard(ctx, moving, want, func(s int) bool { return s == 1 }, ""); err != nil {
		t.Fatal(err)
	}
	if left, err := src.Digest(ctx, moving, want, "", horizon); err != nil || len(left) != 0 {
		t.Fatalf("c1 keeps %v of the moved users, %v", left, err)
	}
	for _, id := range []string{stays.ID, elsewhere.ID} {
		if _, _, err := src.Get(ctx, id); err != nil {
			t.Errorf("c1 lost %s, which does not move: %v", id, err)
		}
	}

	// The users move on, from c2 to c3: what c2 made its work moves as
	// one acceptance, and both sides digest the same.
	third := open("c3")
	for after := uint64(0); ; {
		next, end, err := dst.Export(ctx, after, moving, want, 100, func(m api.MovedMessage) error { return third.Import(ctx, "m2", m, time.Hour, time.Now()) })
		if err != nil {
			t.Fatal(err)
		}
		if after = next; end {
			break
		}
	}
	a, err = dst.Digest(ctx, moving, want, "", horizon)
	if err != nil {
		t.Fatal(err)
	}
	if b, err = third.Digest(ctx, moving, want, "m2", horizon); err != nil || !maps.Equal(a, b) {
		t.Fatalf("digests of a second move: c2 %v, c3 %v (%v)", a, b, err)
	}
}

// A scan reads every message, however many and however fast its consumer
// delivers them: a digest counts each inquiry of a large slot set, and an
// export in pages carries each message once.
func TestAMoveReadsEveryMessage(t *testing.T) {
	_, js := celltest.NATS(t)
	ctx := testkit.Context(t, 60*time.Second)
	j, err := store.OpenLedger(ctx, js, store.LedgerConfig{Cell: "c1", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	var slots []int
	for i := range n {
		slot := i % 100
		rec := inquiry.NewRecord(inquiry.NewID("c1", slot), "c1", inquiry.Request{UserID: "u", Product: "p", Amount: 1}, time.Now())
		if _, err := j.Accept(ctx, &rec); err != nil {
			t.Fatal(err)
		}
		if i < 100 {
			slots = append(slots, slot)
		}
	}
	all := func(int, string) bool { return true }
	for _, scan := range [][]int{slots, slots[:10]} {
		d, err := j.Digest(ctx, scan, all, "", time.Now().Add(-time.Hour))
		count := 0
		for _, s := range d {
			count += s.Messages
		}
		if want := n * len(scan) / 100; err != nil || count != want {
			t.Fatalf("digest of %d slots counted %d messages, %v; want %d", len(scan), count, err, want)
		}
	}
	seen, after := map[uint64]bool{}, uint64(0)
	for {
		next, done, err := j.Export(ctx, after, slots, all, 700, func(m api.MovedMessage) error {
			if seen[m.Seq] {
				t.Fatalf("message %d exported twice", m.Seq)
			}
			seen[m.Seq] = true
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		after = next
		if done {
			break
		}
	}
	if len(seen) != n {
		t.Fatalf("exported %d messages, want %d", len(seen), n)
	}
}
