package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/store"
)

// ledgerLane is the durable consumer of a ledger lane: the lane's new
// work, `new.<lane>.*`.
func ledgerLane(lane inquiry.Priority) string { return "ledger-" + string(lane) }

// ledgerConsumers creates or updates the ledger's lane consumers, and
// the two that count its failed and dead entries.
func (q *Queue) ledgerConsumers(ctx context.Context) (map[inquiry.Priority]jetstream.Consumer, error) {
	st := q.ledger.Stream()
	lanes := map[inquiry.Priority]jetstream.Consumer{}
	for _, lane := range Lanes {
		c, err := st.CreateOrUpdateConsumer(ctx, laneConsumerConfig(q.cfg, ledgerLane(lane), lane, store.LedgerLaneSubjects(q.cfg.Cell, store.KindNew, lane)))
		if err != nil {
			return nil, fmt.Errorf("consumer %s: %w", ledgerLane(lane), err)
		}
		lanes[lane] = c
	}
	for _, set := range []struct{ name, kind string }{{SetError, store.KindFail}, {SetDLQ, store.KindDead}} {
		c, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable:       "count-" + set.name,
			Description:   "counts the " + set.name + " set of cell " + q.cfg.Cell + " (never read)",
			FilterSubject: store.LedgerKindSubjects(q.cfg.Cell, set.kind),
			AckPolicy:     jetstream.AckNonePolicy,
		})
		if err != nil {
			return nil, fmt.Errorf("consumer count-%s: %w", set.name, err)
		}
		q.counters[set.name] = c
	}
	return lanes, nil
}

// Stats is a snapshot of the work.
type Stats struct {
	Depth  map[inquiry.Priority]int `json:"depth"`  // inquiries queued or in flight, per lane
	Total  int                      `json:"total"`  // inquiries queued or in flight
	Bytes  uint64                   `json:"bytes"`  // the size of the streams that hold them
	Oldest time.Time                `json:"oldest"` // when the oldest unacked message was stored; zero if none
	// OldestByLane is Oldest per lane, for the lanes with messages.
	OldestByLane map[inquiry.Priority]time.Time `json:"oldest_by_lane,omitempty"`
}

// Ping asks the ledger's leader for its state: nil when the stream has a
// leader that answers.
func (q *Queue) Ping(ctx context.Context) error {
	_, err := q.ledger.Stream().Info(ctx)
	return err
}

// Stats reads the lanes of both layouts, and the ledger's switch (see
// Switch).
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	info, err := q.ledger.Stream().Info(ctx)
	if err != nil {
		return Stats{}, fmt.Errorf("ledger info: %w", err)
	}
	if since, err := store.SinceOf(info.Config.Metadata); err == nil {
		q.setSince(since)
	}
	st := Stats{Depth: map[inquiry.Priority]int{}, Bytes: info.State.Bytes}
	oldest := func(lane inquiry.Priority, t time.Time) {
		if st.OldestByLane == nil {
			st.OldestByLane = map[inquiry.Priority]time.Time{}
		}
		if o, ok := st.OldestByLane[lane]; !ok || t.Before(o) {
			st.OldestByLane[lane] = t
		}
		if st.Oldest.IsZero() || t.Before(st.Oldest) {
			st.Oldest = t
		}
	}
	for _, lane := range Lanes {
		ci, err := q.lanes[lane].Info(ctx)
		if err != nil {
			return Stats{}, fmt.Errorf("consumer %s info: %w", ledgerLane(lane), err)
		}
		n := int(ci.NumPending) + ci.NumAckPending
		st.Depth[lane] += n
		if n == 0 {
			continue
		}
		at, err := q.oldestAfter(ctx, lane, ci.AckFloor.Stream+1, info.State.FirstSeq)
		if err != nil {
			return Stats{}, fmt.Errorf("oldest message of the ledger's %s lane: %w", lane, err)
		}
		if !at.IsZero() {
			oldest(lane, at)
		}
	}
	if q.old != nil {
		if err := q.old.stats(ctx, &st, oldest); err != nil {
			return Stats{}, err
		}
	}
	for _, n := range st.Depth {
		st.Total += n
	}
	q.depth.Store(int64(st.Total))
	return st, nil
}

// oldestAfter is when the first work of lane at or after sequence start
// was stored (zero: none): the lane's oldest unacked work is at or after
// its consumer's ack floor. The file store answers a next-by-subject
// from the stream's first message by walking every subject of the
// stream that the wildcard matches (every inquiry the ledger holds), and
// from a later one by reading forward from it: so the first message is
// looked at alone, and the search starts after it. Reading forward costs
// the messages between the ack floor and the lane's next work: few
// while the lane is busy, all written since its last work when it is
// sparse (a high lane idle for hours).
func (q *Queue) oldestAfter(ctx context.Context, lane inquiry.Priority, start, first uint64) (time.Time, error) {
	filter := store.LedgerLaneSubjects(q.cfg.Cell, store.KindNew, lane)
	st := q.ledger.Stream()
	if start <= first {
		m, err := st.GetMsg(ctx, first)
		switch {
		case err == nil && strings.HasPrefix(m.Subject, strings.TrimSuffix(filter, "*.*")):
			return m.Time, nil
		case err != nil && !errors.Is(err, jetstream.ErrMsgNotFound):
			return time.Time{}, err
		}
		start = first + 1
	}
	m, err := st.GetMsg(ctx, start, jetstream.WithGetMsgSubject(filter))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return time.Time{}, nil
	case err != nil:
		return time.Time{}, err
	}
	return m.Time, nil
}

// stats adds the records layout's work to st.
func (r *records) stats(ctx context.Context, st *Stats, oldest func(inquiry.Priority, time.Time)) error {
	info, err := r.work.Info(ctx)
	if err != nil {
		return fmt.Errorf("work stream info: %w", err)
	}
	st.Bytes += info.State.Bytes
	for lane, c := range r.consumers {
		ci, err := c.Info(ctx)
		if err != nil {
			return fmt.Errorf("consumer %s info: %w", LaneConsumer(lane), err)
		}
		st.Depth[lane] += int(ci.NumPending) + ci.NumAckPending
	}
	// The work stream drops what is acked, so the first message of a
	// lane's subject is its oldest pending one.
	for _, lane := range Lanes {
		if info.State.Msgs == 0 {
			break
		}
		msg, err := r.work.GetMsg(ctx, info.State.FirstSeq, jetstream.WithGetMsgSubject(laneSubject(r.cfg.Cell, lane)))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // acked meanwhile
		}
		if err != nil {
			return fmt.Errorf("oldest message of the %s lane: %w", lane, err)
		}
		oldest(lane, msg.Time)
	}
	return nil
}
