package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/store"
	"github.com/cellkit/cellkit/internal/testkit"
)

func TestLedgerLife(t *testing.T) {
	_, js := celltest.NATS(t)
	testLedgerLife(t, js, 1)
}

// On a three-node cluster, through a client of each node in turn: reads
// go to the leader, and a conflict is the replicated stream's code.
func TestReplicatedLedgerLife(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node JetStream cluster")
	}
	for _, n := range threeNodes(t, "ledger") {
		_, js := celltest.Connect(t, n)
		testLedgerLife(t, js, 3)
	}
}

// testLedgerLife takes an inquiry through its life: accepted once (a
// second acceptance of its id is refused as existing), delivered to its
// lane as its work, its states written over the revision read (a stale
// revision is refused), failed into the retry console's set, re-queued
// out of it as new work.
func testLedgerLife(t *testing.T, js jetstream.JetStream, replicas int) {
	t.Helper()
	ctx := testkit.Context(t, 30*time.Second)
	j, err := store.OpenLedger(ctx, js, store.LedgerConfig{Cell: "c1", TTL: time.Hour, Replicas: replicas})
	if err != nil {
		t.Fatal(err)
	}
	// A replicated stream answers writes once its leader is elected.
	testkit.WaitFor(t, 10*time.Second, "the ledger's leader", func() bool {
		info, err := j.Stream().Info(ctx)
		return err == nil && (info.Cluster == nil || info.Cluster.Leader != "")
	})
	if _, _, err := j.Get(ctx, inquiry.NewID("c1", 0)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get of an unknown id = %v, want ErrNotFound", err)
	}
	rec := inquiry.NewRecord(inquiry.NewID("c1", 0), "c1", inquiry.Request{UserID: "u", Product: "p", Amount: 1, Priority: inquiry.High}, time.Now())
	var rev uint64
	firstWrite(t, func() error { rev, err = j.Accept(ctx, &rec); return err })
	again := rec
	again.Job = inquiry.NewJob()
	if _, err := j.Accept(ctx, &again); !errors.Is(err, store.ErrExists) {
		t.Fatalf("a second acceptance of %s = %v, want ErrExists", rec.ID, err)
	}
	got, gotRev, err := j.Get(ctx, rec.ID)
	if err != nil || gotRev != rev || got.Job != rec.Job || got.Status != inquiry.Pending {
		t.Fatalf("Get after Accept = %+v rev %d %v; want the accepted record at %d", got, gotRev, err, rev)
	}

	// Its work, in its lane only.
	lanes := map[inquiry.Priority]jetstream.Consumer{}
	for _, lane := range []inquiry.Priority{inquiry.High, inquiry.Normal} {
		c, err := j.Stream().CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable: "t-" + string(lane), FilterSubject: store.LedgerLaneSubjects("c1", store.KindNew, lane), AckPolicy: jetstream.AckExplicitPolicy})
		if err != nil {
			t.Fatal(err)
		}
		lanes[lane] = c
	}
	m := fetch(t, lanes[inquiry.High])
	work, workRev, err := store.Delivered(m)
	if err != nil || work.ID != rec.ID || workRev != rev {
		t.Fatalf("delivered %+v rev %d %v; want %s at %d", work, workRev, err, rec.ID, rev)
	}
	if info, err := lanes[inquiry.Normal].Info(ctx); err != nil || info.NumPending != 0 {
		t.Fatalf("the normal lane: %+v %v, want nothing", info, err)
	}

	// States over the revision read; a stale one is refused.
	work.Scores, work.Reason = map[string]int{"nice": 700}, "kcb timed out"
	rev2, err := j.Update(ctx, &work, workRev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Update(ctx, &work, workRev); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a write over a stale revision = %v, want ErrConflict", err)
	}
	work.Fail("kcb refused", time.Now())
	rev3, err := j.Update(ctx, &work, rev2)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Ack(); err != nil {
		t.Fatal(err)
	}
	got, gotRev, err = j.Get(ctx, rec.ID)
	if err != nil || gotRev != rev3 || got.Status != inquiry.Failed || got.Scores["nice"] != 700 {
		t.Fatalf("Get after the failure = %+v rev %d %v; want failed with its scores at %d", got, gotRev, err, rev3)
	}
	if n := countOn(t, j, store.LedgerKindSubjects("c1", store.KindFail)); n != 1 {
		t.Fatalf("the failed set holds %d, want 1", n)
	}

	// Re-queued: new work under a new job, out of the failed set.
	got.Requeue(time.Now())
	rev4, err := j.Requeue(ctx, &got, gotRev)
	if err != nil {
		t.Fatal(err)
	}
	if n := countOn(t, j, store.LedgerKindSubjects("c1", store.KindFail)); n != 0 {
		t.Fatalf("the failed set holds %d after the re-queue, want 0", n)
	}
	m = fetch(t, lanes[inquiry.High])
	if work, workRev, err = store.Delivered(m); err != nil || workRev != rev4 || work.Job != got.Job || work.Scores["nice"] != 700 {
		t.Fatalf("re-queued work %+v rev %d %v; want job %s with its scores at %d", work, workRev, err, got.Job, rev4)
	}
	_ = m.Ack()
}

func fetch(t *testing.T, c jetstream.Consumer) jetstream.Msg {
	t.Helper()
	b, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := <-b.Messages()
	if !ok {
		t.Fatal("no work delivered")
	}
	return m
}

// countOn counts the ledger's messages on filter.
func countOn(t *testing.T, j *store.Ledger, filter string) int {
	t.Helper()
	info, err := j.Stream().Info(testkit.Context(t, 5*time.Second), jetstream.WithSubjectFilter(filter))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range info.State.Subjects {
		n += int(c)
	}
	return n
}

// An inquiry is found by its slot and unique part whatever cell accepted
// it: a keyed request's id made in the cell that has the user's data now
// finds the inquiry another cell took, and cannot be accepted a second
// time. Ids without a slot are found only as themselves.
func TestALedgerFindsAnInquiryByItsSlotAndUniquePart(t *testing.T) {
	_, js := celltest.NATS(t)
	ctx := testkit.Context(t, 30*time.Second)
	j, err := store.OpenLedger(ctx, js, store.LedgerConfig{Cell: "c1", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	req := inquiry.Request{UserID: "u", Product: "p", Amount: 1}
	there := inquiry.NewRecord(inquiry.KeyID("c9", 77, "acme", "u", "k"), "c9", req, time.Now())
	rev, err := j.Accept(ctx, &there)
	if err != nil {
		t.Fatal(err)
	}
	here := inquiry.KeyID("c1", 77, "acme", "u", "k")
	if got, gotRev, err := j.Get(ctx, here); err != nil || got.ID != there.ID || gotRev != rev {
		t.Fatalf("Get(%s) = %s at %d, %v; want %s at %d", here, got.ID, gotRev, err, there.ID, rev)
	}
	again := inquiry.NewRecord(here, "c1", req, time.Now())
	if _, err := j.Accept(ctx, &again); !errors.Is(err, store.ErrExists) {
		t.Fatalf("Accept(%s) over %s = %v, want ErrExists", here, there.ID, err)
	}
	for _, other := range []string{inquiry.KeyID("c1", 78, "acme", "u", "k"), inquiry.KeyID("c1", 77, "acme", "u", "k2")} {
		if _, _, err := j.Get(ctx, other); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get(%s) = %v, want ErrNotFound", other, err)
		}
	}
	// Without a slot: only the id itself.
	old := inquiry.NewRecord("c9-0123456789abcdefghij", "c9", req, time.Now())
	if _, err := j.Accept(ctx, &old); err != nil {
		t.Fatal(err)
	}
	if got, _, err := j.Get(ctx, old.ID); err != nil || got.ID != old.ID {
		t.Fatalf("Get(%s) = %s, %v", old.ID, got.ID, err)
	}
	if _, _, err := j.Get(ctx, "c1-0123456789abcdefghij"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an id without a slot of another cell found: %v", err)
	}
}
