package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/natsembed"
	"github.com/cellkit/cellkit/internal/store"
	"github.com/cellkit/cellkit/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

func TestStoreCompareAndSwap(t *testing.T) {
	_, js := celltest.NATS(t)
	testCompareAndSwap(t, js, 1)
}

// TestReplicatedStoreReadsTheLeader runs the same on a three-node cluster,
// where reads go to the stream's leader (a client connected to each node
// in turn): revisions, not-found and delete markers come out the same.
func TestReplicatedStoreReadsTheLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node JetStream cluster")
	}
	for _, n := range threeNodes(t, "store") {
		_, js := celltest.Connect(t, n)
		testCompareAndSwap(t, js, 3)
	}
}

// firstWrite makes a test's first write to a stream, tried again while no
// server received it: its leader elected, a replicated stream still
// answers no one until the routes carry its interest to the node the
// client is on, and a write nobody received was surely not made.
func firstWrite(t *testing.T, write func() error) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, "the stream answering through this node", func() bool {
		err := write()
		if err != nil && !errors.Is(err, jetstream.ErrNoStreamResponse) && !errors.Is(err, nats.ErrNoResponders) {
			t.Fatal(err)
		}
		return err == nil
	})
}

// threeNodes starts a three-node JetStream cluster for the test.
func threeNodes(t *testing.T, name string) []*natsembed.Server {
	t.Helper()
	nodes, err := natsembed.StartCluster(natsembed.ClusterConfig{Name: name, Dirs: []string{t.TempDir(), t.TempDir(), t.TempDir()}}, natsembed.Options{Logger: testkit.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.Shutdown()
		}
	})
	return nodes
}

func testCompareAndSwap(t *testing.T, js jetstream.JetStream, replicas int) {
	t.Helper()
	ctx := testkit.Context(t, 30*time.Second)
	st, err := store.OpenReplicated(ctx, js, "c1", time.Hour, replicas)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Get(ctx, inquiry.NewID("c1", 0)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get of an unknown id = %v, want ErrNotFound", err)
	}
	rec := inquiry.NewRecord(inquiry.NewID("c1", 0), "c1", inquiry.Request{UserID: "u", Product: "p", Amount: 1}, time.Now())
	var rev uint64
	firstWrite(t, func() error { rev, err = st.Create(ctx, &rec); return err })
	if _, err := st.Create(ctx, &rec); !errors.Is(err, store.ErrExists) {
		t.Fatalf("Create twice = %v", err)
	}
	rev2, err := st.Update(ctx, &rec, rev)
	if err != nil {
		t.Fatal(err)
	}
	if got, gotRev, err := st.Get(ctx, rec.ID); err != nil || gotRev != rev2 || got.ID != rec.ID {
		t.Fatalf("Get after Update = %+v at %d, %v; want revision %d", got, gotRev, err, rev2)
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

// TestRefusedTellsARefusalFromAnAnswerThatNeverCame: a write the server
// answered with a refusal, or that no server received, was surely not
// made; one whose answer never came may have been.
func TestRefusedTellsARefusalFromAnAnswerThatNeverCame(t *testing.T) {
	_, js := celltest.NATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := store.Open(ctx, js, "c1", 0)
	if err != nil {
		t.Fatal(err)
	}
	rec := inquiry.NewRecord(inquiry.NewID("c1", 0), "c1", inquiry.Request{UserID: "u", Product: "p", Amount: 1}, time.Now())
	var rev uint64
	firstWrite(t, func() error { rev, err = st.Create(ctx, &rec); return err })
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "one", Subjects: []string{"one"}, MaxMsgs: 1, Discard: jetstream.DiscardNew}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "one", nil); err != nil {
		t.Fatal(err)
	}
	expired, cancelExpired := context.WithTimeout(ctx, time.Nanosecond)
	defer cancelExpired()
	<-expired.Done()
	for _, tc := range []struct {
		name    string
		err     error
		refused bool
	}{
		{"a record that exists", func() error { _, err := st.Create(ctx, &rec); return err }(), true},
		{"a record at another revision", func() error { _, err := st.Update(ctx, &rec, rev+1); return err }(), true},
		{"a full stream", func() error { _, err := js.Publish(ctx, "one", nil); return err }(), true},
		{"no stream", func() error { _, err := js.Publish(ctx, "none", nil); return err }(), true},
		{"no answer in time", func() error { _, err := js.Publish(expired, "one", nil); return err }(), false},
		{"a record's write without an answer in time", func() error {
			other := inquiry.NewRecord(inquiry.NewID("c1", 0), "c1", inquiry.Request{UserID: "u", Product: "p", Amount: 1}, time.Now())
			_, err := st.Create(expired, &other)
			return err
		}(), false},
		{"a lost connection", fmt.Errorf("publish: %w", nats.ErrConnectionClosed), false},
		{"a wait cut short", fmt.Errorf("publish: %w", context.Canceled), false},
	} {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if got := store.Refused(tc.err); got != tc.refused {
			t.Errorf("%s (%v): Refused = %v, want %v", tc.name, tc.err, got, tc.refused)
		}
	}
}
