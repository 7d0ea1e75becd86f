package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/queue"
	"github.com/cellkit/cellkit/internal/store"
	"github.com/cellkit/cellkit/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

func setup(t *testing.T, cfg queue.Config) (*queue.Queue, jetstream.JetStream) {
	t.Helper()
	_, js := celltest.NATS(t)
	cfg.Cell = "c1"
	q, err := queue.Setup(context.Background(), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return q, js
}

// records is a queue on a new cell in the records layout, as a release
// before the ledger made it.
func records(t *testing.T, cfg queue.Config) (*queue.Queue, jetstream.JetStream) {
	t.Helper()
	cfg.Layout = queue.LayoutRecords
	return setup(t, cfg)
}

func newRecord(n int, prio inquiry.Priority) inquiry.Record {
	req := inquiry.Request{UserID: "u" + string(rune('a'+n)), Product: "p", Amount: 1, Priority: prio}
	return inquiry.NewRecord(inquiry.NewID("c1", 0), "c1", req, time.Now())
}

// enqueueBothLanes enqueues a normal then a high inquiry (keyed as
// said), checks a second of the same id is refused as existing, and
// waits for both lanes' depth in the stats (a lane consumer's pending
// count may trail the stream by a moment).
func enqueueBothLanes(t *testing.T, q *queue.Queue, keyed bool) (hi, lo inquiry.Record, st queue.Stats) {
	t.Helper()
	ctx := context.Background()
	hi, lo = newRecord(1, inquiry.High), newRecord(2, inquiry.Normal)
	for _, r := range []*inquiry.Record{&lo, &hi} {
		if _, err := q.Enqueue(ctx, r, keyed); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Enqueue(ctx, &hi, keyed); !errors.Is(err, store.ErrExists) {
		t.Fatalf("second Enqueue of one id = %v, want ErrExists", err)
	}
	testkit.WaitFor(t, 5*time.Second, "both lanes' depth in the stats", func() bool {
		var err error
		st, err = q.Stats(ctx)
		return err == nil && st.Depth[inquiry.High] == 1 && st.Depth[inquiry.Normal] == 1
	})
	return hi, lo, st
}

// fetchOne takes the next delivery of lane, waiting for it a while.
func fetchOne(t *testing.T, q *queue.Queue, lane inquiry.Priority) *queue.Delivery {
	t.Helper()
	var got []*queue.Delivery
	testkit.WaitFor(t, 5*time.Second, "a delivery on the "+string(lane)+" lane", func() bool {
		var err error
		got, err = q.Fetch(lane, 1)
		return err == nil && len(got) == 1
	})
	return got[0]
}

func TestEnqueueWritesRecordThenMessageOnItsLane(t *testing.T) {
	q, _ := records(t, queue.Config{})
	ctx := context.Background()
	hi, lo, st := enqueueBothLanes(t, q, false)
	if st.Total != 2 || st.Oldest.IsZero() {
		t.Fatalf("Stats = %+v", st)
	}
	// The normal one went in first: it is the oldest of the queue and of
	// its lane.
	if n, h := st.OldestByLane[inquiry.Normal], st.OldestByLane[inquiry.High]; !n.Equal(st.Oldest) || !h.After(n) {
		t.Fatalf("oldest by lane %v, queue's oldest %v: want normal's = the queue's, before high's", st.OldestByLane, st.Oldest)
	}
	m := fetchOne(t, q, inquiry.High)
	if m.ID != hi.ID || m.Job != hi.Job || m.Headers().Get("Nats-Msg-Id") != hi.MsgID() {
		t.Fatalf("high lane message %s %s %v", m.ID, m.Job, m.Headers())
	}
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := q.Stats(ctx); err != nil || len(st.OldestByLane) != 1 || st.OldestByLane[inquiry.Normal].IsZero() {
		t.Fatalf("after the high one was acked: oldest by lane %v, %v; want the normal lane's only", st.OldestByLane, err)
	}
	// Replaying the pending record republishes the same job: deduplicated.
	got, ref, err := q.Get(ctx, lo.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Replay(ctx, got, ref); err != nil {
		t.Fatal(err)
	}
	if st, _ := q.Stats(ctx); st.Total != 1 {
		t.Fatalf("a replay within the duplicate window added a message: %+v", st)
	}
}

func TestFullQueueRollsTheRecordBack(t *testing.T) {
	q, _ := records(t, queue.Config{MaxMsgs: 1})
	ctx := context.Background()
	first, second := newRecord(1, inquiry.Normal), newRecord(2, inquiry.Normal)
	if _, err := q.Enqueue(ctx, &first, false); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, &second, false); !errors.Is(err, queue.ErrFull) {
		t.Fatalf("Enqueue on a full stream = %v, want ErrFull", err)
	}
	if _, _, err := q.Get(ctx, second.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("record of a refused inquiry: %v, want it rolled back", err)
	}
	// The id can be used again once there is room (an idempotent retry).
	m := fetchOne(t, q, inquiry.Normal)
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, &second, false); err != nil {
		t.Fatalf("retry after the rollback: %v", err)
	}
}

func TestFailuresAndRetry(t *testing.T) {
	q, _ := records(t, queue.Config{})
	ctx := context.Background()
	rec := newRecord(1, inquiry.High)
	if _, err := q.Enqueue(ctx, &rec, false); err != nil {
		t.Fatal(err)
	}
	m := fetchOne(t, q, inquiry.High)
	cur, ref, _ := q.Get(ctx, rec.ID)
	cur.Fail("nice: agency answered code 5001", time.Now())
	for range 2 { // listed once however often it is added
		if err := q.List(ctx, cur, ref); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Update(ctx, &cur, ref); err != nil {
		t.Fatal(err)
	}
	m.Ack()
	list, err := q.Failed(ctx, 10)
	if err != nil || len(list) != 1 || list[0].ID != rec.ID || list[0].Set != queue.SetError || list[0].Reason != cur.Reason {
		t.Fatalf("Failed = %+v, %v", list, err)
	}
	if f, d, err := q.FailedCounts(ctx); err != nil || f != 1 || d != 0 {
		t.Fatalf("FailedCounts = %d %d %v", f, d, err)
	}
	if err := q.Retry(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	if err := q.Retry(ctx, rec.ID); !errors.Is(err, queue.ErrNotFailed) {
		t.Fatalf("retry of a pending inquiry = %v, want ErrNotFailed", err)
	}
	got, _, _ := q.Get(ctx, rec.ID)
	msg := fetchOne(t, q, inquiry.High)
	if got.Status != inquiry.Pending || got.Job == rec.Job || msg.Job != got.Job {
		t.Fatalf("after retry: record %+v, message's job %s", got, msg.Job)
	}
	if list, _ := q.Failed(ctx, 10); len(list) != 0 {
		t.Fatalf("still listed after retry: %+v", list)
	}
}

// A failure is listed before its record is written; when that write fails
// the record stays pending and the listing must not show it, and a listing
// left behind is withdrawn once it is old.
func TestListingWithoutAFailedRecordIsHiddenThenWithdrawn(t *testing.T) {
	q, _ := records(t, queue.Config{})
	ctx := context.Background()
	young, old := newRecord(1, inquiry.Normal), newRecord(2, inquiry.Normal)
	for _, r := range []*inquiry.Record{&young, &old} {
		if _, err := q.Enqueue(ctx, r, false); err != nil {
			t.Fatal(err)
		}
	}
	// Both listed as if failed, neither record written as failed.
	yf, of := young, old
	yf.Dead, of.Dead = true, true
	yf.Fail("core banking unavailable", time.Now())
	of.Fail("core banking unavailable", time.Now().Add(-2*time.Minute))
	for _, r := range []inquiry.Record{yf, of} {
		_, ref, err := q.Get(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.List(ctx, r, ref); err != nil {
			t.Fatal(err)
		}
	}
	if list, err := q.Failed(ctx, 10); err != nil || len(list) != 0 {
		t.Fatalf("Failed = %+v, %v; want nothing listed while the records are pending", list, err)
	}
	if _, d, err := q.FailedCounts(ctx); err != nil || d != 1 {
		t.Fatalf("FailedCounts dead = %d, %v; want the young listing kept and the old one withdrawn", d, err)
	}
	// The young one's record is then written failed: it shows.
	cur, ref, err := q.Get(ctx, young.ID)
	if err != nil {
		t.Fatal(err)
	}
	cur.Dead = true
	cur.Fail("core banking unavailable", time.Now())
	if _, err := q.Update(ctx, &cur, ref); err != nil {
		t.Fatal(err)
	}
	if list, err := q.Failed(ctx, 10); err != nil || len(list) != 1 || list[0].ID != young.ID {
		t.Fatalf("Failed = %+v, %v; want the young one", list, err)
	}
	if err := q.Unlist(ctx, young.ID, ref); err != nil {
		t.Fatal(err)
	}
	if _, d, _ := q.FailedCounts(ctx); d != 0 {
		t.Fatalf("after Unlist %d dead letters are left", d)
	}
}

// NotReady tells what JetStream answers while a stream has no leader from
// a failure, through the wrapping of the store and the queue: the errors
// as the server makes them, decoded by the library.
func TestNotReadyWhileAStreamHasNoLeader(t *testing.T) {
	decoded := func(e *server.ApiError) error {
		t.Helper()
		data, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var apiErr jetstream.APIError
		if err := json.Unmarshal(data, &apiErr); err != nil {
			t.Fatal(err)
		}
		return fmt.Errorf("read record c1-x: %w", &apiErr)
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{decoded(server.NewJSClusterNotAvailError()), true},
		{decoded(server.NewJSClusterNotLeaderError()), true},
		{decoded(server.NewJSClusterNoPeersError(errors.New("1 of 3"))), true},
		{decoded(server.NewJSInsufficientResourcesError()), true},
		{decoded(server.NewJSStreamDuplicateMessageConflictError()), true}, // the same id's publish still in process
		{decoded(server.NewJSNotEnabledForAccountError()), true},
		{fmt.Errorf("create record c1-x: %w", context.DeadlineExceeded), true},
		{fmt.Errorf("read record c1-x: %w", nats.ErrNoResponders), true},
		{decoded(server.NewJSStreamNotFoundError()), false},
		{decoded(server.NewJSNoMessageFoundError()), false},
		{store.ErrConflict, false},
		// The same words without the type: a wrapper that loses it
		// (%v, or an error of its own) turns a wait into a failure.
		{errors.New("read record c1-x: JetStream system temporarily unavailable (10008)"), false},
		{nil, false},
	} {
		if got := queue.NotReady(c.err); got != c.want {
			t.Errorf("NotReady(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
