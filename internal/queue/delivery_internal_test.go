package queue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/store"
)

// A ledger delivery whose message the leader has not applied yet (it
// answers an older state, or none) is behind, never gone: taken for gone,
// its work would be acked and dropped (found on the network lab, where a
// follower's consumer delivered before the stream's leader had applied).
func TestALedgerDeliveryAheadOfTheLeaderIsBehindNotGone(t *testing.T) {
	_, js := celltest.NATS(t)
	ctx := context.Background()
	q, err := Setup(ctx, js, Config{Cell: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	rec := inquiry.NewRecord(inquiry.NewID("c1", 0), "c1", inquiry.Request{UserID: "u", Product: "p", Amount: 1}, time.Now())
	if _, err := q.Enqueue(ctx, &rec, false); err != nil {
		t.Fatal(err)
	}
	_, ref, err := q.Get(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []*Delivery{
		{ID: rec.ID, Job: rec.Job, Attempt: 1, ledger: true, seq: ref.rev + 5},                          // a later message than the leader has
		{ID: inquiry.NewID("c1", 0), Job: inquiry.NewJob(), Attempt: 1, ledger: true, seq: ref.rev + 6}, // one the leader has none of
	} {
		if _, _, err := q.Record(ctx, d); !errors.Is(err, ErrBehind) || errors.Is(err, store.ErrNotFound) {
			t.Errorf("Record of %s at %d = %v, want ErrBehind", d.ID, d.seq, err)
		}
	}
	d := &Delivery{ID: rec.ID, Job: rec.Job, Attempt: 1, ledger: true, seq: ref.rev}
	if got, _, err := q.Record(ctx, d); err != nil || got.ID != rec.ID {
		t.Fatalf("Record of the applied delivery = %+v, %v", got, err)
	}
}
