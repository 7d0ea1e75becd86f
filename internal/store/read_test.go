package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/store"
	"github.com/cellkit/cellkit/internal/testkit"
)

// readAll is Read's messages' sequences and subjects.
func readAll(ctx context.Context, st jetstream.Stream, from uint64, filters []string, fn func(jetstream.Msg) error) ([]uint64, error) {
	var seqs []uint64
	err := store.Read(ctx, st, from, filters, func(m jetstream.Msg, md *jetstream.MsgMetadata) error {
		seqs = append(seqs, md.Sequence.Stream)
		if fn != nil {
			return fn(m)
		}
		return nil
	})
	return seqs, err
}

// seqRange is from..to.
func seqRange(from, to, step uint64) []uint64 {
	var out []uint64
	for s := from; s <= to; s += step {
		out = append(out, s)
	}
	return out
}

// Read gives a stream's messages in order from a sequence on, those of
// its filters only, across batches, stops on ErrReadStop, and reads
// nothing of an empty stream or past its end.
func TestReadGivesAStreamsMessagesInOrder(t *testing.T) {
	_, js := celltest.NATS(t)
	ctx := testkit.Context(t, 30*time.Second)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "r", Subjects: []string{"r.>"}})
	if err != nil {
		t.Fatal(err)
	}
	if seqs, err := readAll(ctx, st, 0, nil, nil); err != nil || len(seqs) != 0 {
		t.Fatalf("an empty stream read %v, %v; want nothing", seqs, err)
	}
	const n = 700 // more than two batches
	for i := 1; i <= n; i++ {
		if _, err := js.Publish(ctx, fmt.Sprintf("r.%d", i%2), nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name    string
		from    uint64
		filters []string
		want    []uint64
	}{
		{"all", 0, nil, seqRange(1, n, 1)},
		{"from 300", 300, nil, seqRange(300, n, 1)},
		{"the odd subject", 0, []string{"r.1"}, seqRange(1, n, 2)},
		{"the even subject from 101", 101, []string{"r.0"}, seqRange(102, n, 2)},
		{"past the end", n + 1, nil, nil},
	} {
		seqs, err := readAll(ctx, st, c.from, c.filters, nil)
		if err != nil || !slices.Equal(seqs, c.want) {
			t.Errorf("%s: read %d messages (%v…), %v; want %d", c.name, len(seqs), seqs[:min(3, len(seqs))], err, len(c.want))
		}
	}
	seqs, err := readAll(ctx, st, 0, nil, func(jetstream.Msg) error { return store.ErrReadStop })
	if err != nil || !slices.Equal(seqs, []uint64{1}) {
		t.Fatalf("a read stopped at its first message read %v, %v", seqs, err)
	}
	if names := consumers(ctx, t, st); len(names) != 0 {
		t.Fatalf("consumers left behind: %v", names)
	}
}

func consumers(ctx context.Context, t *testing.T, st jetstream.Stream) []string {
	t.Helper()
	var names []string
	l := st.ConsumerNames(ctx)
	for name := range l.Name() {
		names = append(names, name)
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// On a three-node cluster, through a client of each node: a read's
// consumer lives on one node, and its first pulls from the others may
// arrive before its interest ("no responders"); a consumer lost in the
// middle of a read (deleted, as a restart of its node loses it) is made
// again from the next message. Every read gives every message once, in
// order.
func TestReadAcrossAClusterAndALostConsumer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node JetStream cluster")
	}
	nodes := threeNodes(t, "read")
	_, js := celltest.Connect(t, nodes[0])
	ctx := testkit.Context(t, 2*time.Minute)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "r", Subjects: []string{"r.>"}, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	const n = 600
	for i := 1; i <= n; i++ {
		firstWrite(t, func() error { _, err := js.Publish(ctx, fmt.Sprintf("r.%d", i%3), nil); return err })
	}
	for round := range 10 {
		for i, node := range nodes {
			_, js := celltest.Connect(t, node)
			st, err := js.Stream(ctx, "r")
			if err != nil {
				t.Fatal(err)
			}
			from := uint64(1 + 37*round)
			if seqs, err := readAll(ctx, st, from, nil, nil); err != nil || !slices.Equal(seqs, seqRange(from, n, 1)) {
				t.Fatalf("round %d, through node %d: read %d messages from %d, %v; want %d", round, i, len(seqs), from, err, n-int(from)+1)
			}
			want := slices.DeleteFunc(seqRange(from, n, 1), func(s uint64) bool { return s%3 != 2 })
			if seqs, err := readAll(ctx, st, from, []string{"r.2"}, nil); err != nil || !slices.Equal(seqs, want) {
				t.Fatalf("round %d, through node %d: a filtered read read %d messages from %d, %v; want %d", round, i, len(seqs), from, err, len(want))
			}
		}
	}
	// The consumer deleted at the 100th message: the read goes on.
	seqs, err := readAll(ctx, st, 0, nil, func(m jetstream.Msg) error {
		md, _ := m.Metadata()
		if md.Sequence.Stream == 100 {
			for _, name := range consumers(ctx, t, st) {
				if err := st.DeleteConsumer(ctx, name); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil || !slices.Equal(seqs, seqRange(1, n, 1)) {
		t.Fatalf("a read whose consumer was deleted at 100 read %d messages, %v; want each of %d once, in order", len(seqs), err, n)
	}
	testkit.WaitFor(t, 10*time.Second, "no consumer left", func() bool { return len(consumers(ctx, t, st)) == 0 })
}
