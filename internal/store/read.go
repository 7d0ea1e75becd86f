package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellkit/cellkit/internal/backoff"
)

// Read calls fn with the messages of st from sequence from on (1 and 0:
// the first), in the stream's order, those of filters only (none: all),
// until the last one the stream held when it was reached or fn returns
// an error (which Read returns; ErrReadStop ends it with none).
//
// It reads through one ephemeral pull consumer of its own, not through
// nats.go's ordered consumer, whose Fetch makes a new consumer for each
// batch (a request through the JetStream cluster's meta leader every 256
// messages). Either way, in a cluster the consumer's first pull may
// arrive at the server the client is connected to before the consumer's
// interest has crossed the routes from the server that holds it: the
// pull is answered "no responders". Read waits for the interest then, up
// to readStall without a message; a consumer lost with its server (not
// found, or a gap in its sequence) is made again from the next message.
func Read(ctx context.Context, st jetstream.Stream, from uint64, filters []string, fn func(jetstream.Msg, *jetstream.MsgMetadata) error) error {
	r := reader{st: st, next: max(from, 1), filters: filters}
	defer r.close()
	err := r.run(ctx, fn)
	if errors.Is(err, ErrReadStop) {
		return nil
	}
	return err
}

// ErrReadStop, returned by Read's fn, ends the read without an error.
var ErrReadStop = errors.New("read stopped")

// readBatch is how many messages a read asks for at once.
const readBatch = 256

// readWait is how long a read waits for messages its consumer has not
// delivered yet, or for its interest to reach the server; readStall is
// how long it waits in all without a message before it fails.
const (
	readWait  = 10 * time.Millisecond
	readStall = 10 * time.Second
)

// reader is one Read: its consumer and where it is.
type reader struct {
	st      jetstream.Stream
	filters []string
	cons    jetstream.Consumer
	next    uint64 // the stream sequence to go on from
	seq     uint64 // the consumer's last delivery sequence
}

// open makes the consumer that reads on from r.next; it says whether the
// stream holds anything there.
func (r *reader) open(ctx context.Context) (bool, error) {
	r.close()
	cons, err := r.st.CreateConsumer(ctx, jetstream.ConsumerConfig{
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       r.next,
		FilterSubjects:    r.filters,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return false, fmt.Errorf("read stream %s: %w", r.st.CachedInfo().Config.Name, err)
	}
	r.cons, r.seq = cons, 0
	return cons.CachedInfo().NumPending > 0, nil
}

// close deletes the consumer; one left behind (the server unreachable)
// goes after its inactive threshold.
func (r *reader) close() {
	if r.cons == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.st.DeleteConsumer(ctx, r.cons.CachedInfo().Name)
	r.cons = nil
}

// run reads until the end, fn's error, or a stall.
func (r *reader) run(ctx context.Context, fn func(jetstream.Msg, *jetstream.MsgMetadata) error) error {
	// No consumer for a stream with nothing from r.next on.
	info, err := r.st.Info(ctx)
	if err != nil {
		return err
	}
	if info.State.Msgs == 0 || info.State.LastSeq < r.next {
		return nil
	}
	if more, err := r.open(ctx); err != nil || !more {
		return err
	}
	progress := time.Now()
	for {
		batch, err := r.cons.FetchNoWait(readBatch)
		if err != nil {
			return err
		}
		read, end, err := r.take(ctx, batch, fn)
		if err != nil || end {
			return err
		}
		if read > 0 {
			progress = time.Now()
			continue
		}
		lost := false
		switch err := batch.Error(); {
		case err == nil, errors.Is(err, jetstream.ErrNoMessages), errors.Is(err, nats.ErrTimeout):
			// Nothing had reached the consumer yet: its own count says
			// whether anything is left.
			info, err := r.cons.Info(ctx)
			switch {
			case errors.Is(err, jetstream.ErrConsumerNotFound):
				lost = true
			case err != nil:
				return err
			case info.NumPending == 0:
				return nil
			}
		case errors.Is(err, nats.ErrNoResponders):
			// The consumer's interest has not reached this server yet,
			// or the consumer is gone.
			if _, err := r.cons.Info(ctx); errors.Is(err, jetstream.ErrConsumerNotFound) {
				lost = true
			}
		case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrConsumerDeleted):
			lost = true
		default:
			return err
		}
		if time.Since(progress) > readStall {
			return fmt.Errorf("read stream %s from %d: no message for %v", r.st.CachedInfo().Config.Name, r.next, readStall)
		}
		if lost {
			if more, err := r.open(ctx); err != nil || !more {
				return err
			}
		}
		if err := backoff.Sleep(ctx, readWait); err != nil {
			return err
		}
	}
}

// take calls fn with batch's messages; end says the read is over (the
// last message the stream held, or fn's error). A message out of the
// consumer's sequence (its server lost it and a new one took its name)
// ends the batch and makes the consumer again from the next message.
func (r *reader) take(ctx context.Context, batch jetstream.MessageBatch, fn func(jetstream.Msg, *jetstream.MsgMetadata) error) (read int, end bool, err error) {
	defer func() {
		for range batch.Messages() {
			// the rest of a batch given up
		}
	}()
	for m := range batch.Messages() {
		md, err := m.Metadata()
		if err != nil {
			return read, true, err
		}
		if md.Sequence.Consumer != r.seq+1 {
			more, err := r.open(ctx)
			return read, err != nil || !more, err
		}
		read++
		r.seq, r.next = md.Sequence.Consumer, md.Sequence.Stream+1
		if err := fn(m, md); err != nil {
			return read, true, err
		}
		if md.NumPending == 0 {
			return read, true, nil
		}
	}
	return read, false, nil
}
