package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/store"
	"github.com/cellkit/cellkit/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

func TestStoreCompareAndSwap(t *testing.T) {
	_, js := celltest.NATS(t)
	ctx := context.Background()
	st, err := store.Open(ctx, js, "c1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	rec := inquiry.NewRecord(inquiry.NewID("c1"), "c1", inquiry.Request{UserID: "u", Product: "p", Amount: 1}, time.Now())
	rev, err := st.Create(ctx, &rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(ctx, &rec); !errors.Is(err, store.ErrExists) {
		t.Fatalf("Create twice = %v", err)
	}
	rev2, err := st.Update(ctx, &rec, rev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Update(ctx, &rec, rev); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Update at a stale revision = %v, want ErrConflict", err)
	}
	if err := st.Delete(ctx, rec.ID, rev); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Delete at a stale revision = %v, want ErrConflict", err)
	}
	if err := st.Delete(ctx, rec.ID, rev2); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Get(ctx, rec.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after Delete = %v", err)
	}
}
