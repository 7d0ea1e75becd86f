package registry

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/consultest"
	"github.com/cellkit/cellkit/internal/testkit"
)

func TestLeaseBoards(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		f, err := NewFile(FileConfig{Path: filepath.Join(t.TempDir(), "map.json")}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		testLeaseBoard(t, f)
	})
	t.Run("consul", func(t *testing.T) {
		agent := consultest.Start(t)
		c, err := NewConsul(consulTestConfig(agent.Addr(), consulPrefix()), Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		testLeaseBoard(t, c)
	})
}

// testLeaseBoard: each router's document is kept under its id as
// written, replaced by its next, removed when dropped; ids and sizes out
// of bounds are refused.
func testLeaseBoard(t *testing.T, b LeaseBoard) {
	ctx := testkit.Context(t, time.Minute)
	if ls, err := b.Leases(ctx); err != nil || len(ls) != 0 {
		t.Fatalf("no lease yet: %v, %v", ls, err)
	}
	for _, id := range []string{"router-a", "router-b"} {
		if err := b.PutLease(ctx, id, []byte(`{"router":"`+id+`"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.PutLease(ctx, "router-a", []byte(`{"router":"router-a","seq":2}`)); err != nil {
		t.Fatal(err)
	}
	ls, err := b.Leases(ctx)
	if err != nil || len(ls) != 2 || string(ls["router-a"]) != `{"router":"router-a","seq":2}` || string(ls["router-b"]) != `{"router":"router-b"}` {
		t.Fatalf("Leases = %q, %v; want both, router-a's second", ls, err)
	}
	if err := b.DropLease(ctx, "router-a"); err != nil {
		t.Fatal(err)
	}
	if err := b.DropLease(ctx, "router-a"); err != nil {
		t.Fatalf("dropping twice: %v", err)
	}
	if ls, err := b.Leases(ctx); err != nil || len(ls) != 1 || ls["router-b"] == nil {
		t.Fatalf("after a drop: %q, %v", ls, err)
	}
	if err := b.PutLease(ctx, "a/b", []byte("{}")); err == nil {
		t.Error("a lease under the id a/b accepted")
	}
	if err := b.PutLease(ctx, "router-c", bytes.Repeat([]byte("x"), MaxLeaseBytes+1)); err == nil {
		t.Error("a lease over MaxLeaseBytes accepted")
	}
}
