package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/store"
)

// A Delivery is one delivery of an inquiry's work to a worker, from
// either layout: the message (ack it, nak it, say it is in progress) and
// the inquiry it names.
type Delivery struct {
	jetstream.Msg
	// ID and Job name the inquiry and the job the message is (ID empty:
	// a message that is not work, to terminate).
	ID, Job string
	// Attempt is the delivery's number, from 1.
	Attempt int

	ledger bool
	seq    uint64 // the ledger's: the message's stream sequence
}

// WorkSubjects are the subjects new work is published on, in both
// layouts: a subscriber learns of new work at once.
func (q *Queue) WorkSubjects() []string {
	var out []string
	for _, lane := range Lanes {
		out = append(out, store.LedgerLaneSubjects(q.cfg.Cell, store.KindNew, lane))
		if q.old != nil {
			out = append(out, laneSubject(q.cfg.Cell, lane))
		}
	}
	return out
}

// Fetch takes up to n deliveries of lane without waiting: the records
// layout's first (its work stream empties, then is left), then the
// ledger's.
func (q *Queue) Fetch(lane inquiry.Priority, n int) ([]*Delivery, error) {
	var out []*Delivery
	if q.old != nil {
		got, err := fetch(q.old.consumers[lane], n, false)
		if err != nil {
			return nil, err
		}
		out = got
	}
	if len(out) < n {
		got, err := fetch(q.lanes[lane], n-len(out), true)
		if err != nil {
			return out, err
		}
		out = append(out, got...)
	}
	return out, nil
}

func fetch(c jetstream.Consumer, n int, ledger bool) ([]*Delivery, error) {
	batch, err := c.FetchNoWait(n)
	if err != nil {
		return nil, err
	}
	var out []*Delivery
	for m := range batch.Messages() {
		out = append(out, delivery(m, ledger))
	}
	if err := batch.Error(); err != nil && err != jetstream.ErrNoMessages {
		return out, err
	}
	return out, nil
}

// delivery decodes m; one that is not work has no ID.
func delivery(m jetstream.Msg, ledger bool) *Delivery {
	d := &Delivery{Msg: m, ledger: ledger}
	md, err := m.Metadata()
	if err != nil {
		return d
	}
	d.Attempt = int(md.NumDelivered)
	if ledger {
		if rec, seq, err := store.Delivered(m); err == nil {
			d.ID, d.Job, d.seq = rec.ID, rec.Job, seq
		}
		return d
	}
	var msg Message
	if json.Unmarshal(m.Data(), &msg) == nil {
		d.ID, d.Job = msg.ID, msg.Job
	}
	return d
}

// Record reads the record of d's inquiry as it is now, wherever it is:
// from the ledger for the ledger's work (never the delivered message's
// copy, even on a first delivery: a server restarted after a crash may
// deliver again as a first delivery work it had delivered, or whose ack
// it had not yet written down, and the record may have moved on — a
// crash counted, scores kept, done); for a records layout's message, from
// either layout (an inquiry re-queued onto the ledger has another job
// there).
//
// On a replicated ledger the stream's leader may not yet have applied
// the message a follower's consumer delivered (each node applies what is
// committed on its own): the leader then answers an older state, or none
// — never taken for an inquiry that is gone, which would drop its work,
// but for a state not readable yet (ErrBehind: retried later).
func (q *Queue) Record(ctx context.Context, d *Delivery) (inquiry.Record, Ref, error) {
	if !d.ledger {
		return q.Get(ctx, d.ID)
	}
	rec, rev, err := q.ledger.Get(ctx, d.ID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && rev < d.seq) {
		return inquiry.Record{}, Ref{}, fmt.Errorf("%w: inquiry %s's work %d not yet applied by the ledger's leader", ErrBehind, d.ID, d.seq)
	}
	return rec, Ref{rev: rev, ledger: true}, err
}

// ErrBehind means the ledger's leader has not yet applied a message a
// consumer delivered: read again later.
var ErrBehind = errors.New("the ledger's leader is behind its delivery")
