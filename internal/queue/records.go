package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/store"
)

// The records layout, the one before the ledger: an inquiry's record in
// the cell's bucket (store.Store), its work a message on the work stream
// (WorkQueue retention, DiscardNew limits), its failure on the error
// stream or the dead-letter stream (the latest per inquiry, one subject
// per id). Accepting costs two synced writes, one after the other: the
// record created, then the message published (with Nats-Msg-Id
// "<id>.<job>": a job published twice within the duplicate window is
// stored once); a message refused rolls the record back.

// Names of the records layout's JetStream resources.
func WorkStream(cell string) string  { return "cellkit-" + cell + "-work" }
func ErrorStream(cell string) string { return "cellkit-" + cell + "-errors" }
func DLQStream(cell string) string   { return "cellkit-" + cell + "-dlq" }

// MessageSubject is the subject of an inquiry's work message on records.
func MessageSubject(cell string, lane inquiry.Priority, id string) string {
	return "cellkit." + cell + ".work." + string(lane) + "." + id
}

// laneSubject is the subject filter of a records lane: one subject per
// inquiry, so that a replay can tell whether its message is still queued.
func laneSubject(cell string, lane inquiry.Priority) string { return MessageSubject(cell, lane, "*") }

// LaneConsumer is the durable consumer of a records lane.
func LaneConsumer(lane inquiry.Priority) string { return "work-" + string(lane) }
func errorSubject(cell, id string) string       { return "cellkit." + cell + ".errors." + id }
func dlqSubject(cell, id string) string         { return "cellkit." + cell + ".dlq." + id }

// Message is the body of a records work message.
type Message struct {
	ID  string `json:"id"`
	Job string `json:"job"`
}

// records is a cell's records layout.
type records struct {
	cfg       Config
	js        jetstream.JetStream
	store     *store.Store
	work      jetstream.Stream
	errs, dlq jetstream.Stream
	consumers map[inquiry.Priority]jetstream.Consumer
}

// hasRecords reports whether cell has the records layout's work stream.
func hasRecords(ctx context.Context, js jetstream.JetStream, cell string) (bool, error) {
	_, err := js.Stream(ctx, WorkStream(cell))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return false, nil
	default:
		return false, fmt.Errorf("look for the work stream: %w", err)
	}
}

// openRecords creates or updates the records layout of a cell.
func openRecords(ctx context.Context, js jetstream.JetStream, cfg Config) (*records, error) {
	r := &records{cfg: cfg, js: js, consumers: map[inquiry.Priority]jetstream.Consumer{}}
	var err error
	if r.store, err = store.OpenReplicated(ctx, js, cfg.Cell, cfg.Retention, cfg.Replicas); err != nil {
		return nil, err
	}
	r.work, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        WorkStream(cfg.Cell),
		Description: "inquiries waiting for the pipeline of cell " + cfg.Cell,
		Subjects:    []string{laneSubject(cfg.Cell, inquiry.High), laneSubject(cfg.Cell, inquiry.Normal)},
		Retention:   jetstream.WorkQueuePolicy,
		Discard:     jetstream.DiscardNew,
		MaxMsgs:     cfg.MaxMsgs,
		MaxBytes:    cfg.MaxBytes,
		Duplicates:  cfg.Duplicates,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("work stream: %w", err)
	}
	for _, set := range []struct {
		s    *jetstream.Stream
		name string
		subj string
		desc string
	}{
		{&r.errs, ErrorStream(cfg.Cell), errorSubject(cfg.Cell, "*"), "failed inquiries of cell " + cfg.Cell},
		{&r.dlq, DLQStream(cfg.Cell), dlqSubject(cfg.Cell, "*"), "dead-lettered inquiries of cell " + cfg.Cell},
	} {
		*set.s, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:              set.name,
			Description:       set.desc,
			Subjects:          []string{set.subj},
			Retention:         jetstream.LimitsPolicy,
			MaxMsgsPerSubject: 1,
			MaxAge:            cfg.Retention,
			Duplicates:        cfg.Duplicates,
			Storage:           jetstream.FileStorage,
			Replicas:          cfg.Replicas,
		})
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", set.name, err)
		}
	}
	for _, lane := range Lanes {
		c, err := r.work.CreateOrUpdateConsumer(ctx, laneConsumerConfig(cfg, LaneConsumer(lane), lane, laneSubject(cfg.Cell, lane)))
		if err != nil {
			return nil, fmt.Errorf("consumer %s: %w", LaneConsumer(lane), err)
		}
		r.consumers[lane] = c
	}
	return r, nil
}

// laneConsumerConfig is the durable pull consumer of a lane, in either
// layout.
func laneConsumerConfig(cfg Config, name string, lane inquiry.Priority, filter string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       name,
		Description:   string(lane) + " lane of cell " + cfg.Cell,
		FilterSubject: filter,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		// Attempts are counted and capped by the workers, which
		// dead-letter the inquiry themselves: a server-side MaxDeliver
		// would strand the message, still counted in the lane's depth
		// and oldest age, delivered never again.
		MaxDeliver:    -1,
		MaxAckPending: cfg.MaxAckPending,
	}
}

// subject is the subject of rec's work message.
func (r *records) subject(rec *inquiry.Record) string {
	lane := rec.Priority
	if lane != inquiry.High {
		lane = inquiry.Normal
	}
	return MessageSubject(r.cfg.Cell, lane, rec.ID)
}

// publish stores the work message of rec's current job and waits for the
// PubAck.
func (r *records) publish(ctx context.Context, rec *inquiry.Record) error {
	data, err := json.Marshal(Message{ID: rec.ID, Job: rec.Job})
	if err != nil {
		return err
	}
	msg := &nats.Msg{Subject: r.subject(rec), Data: data, Header: nats.Header{}}
	_, err = r.js.PublishMsg(ctx, msg, jetstream.WithMsgID(rec.MsgID()), jetstream.WithRetryAttempts(0))
	if err != nil {
		if isFull(err) {
			return fmt.Errorf("%w: %w", ErrFull, err) // the server's answer kept: store.Refused
		}
		return err
	}
	return nil
}

func isFull(err error) bool {
	s := err.Error()
	return strings.Contains(s, "maximum messages") || strings.Contains(s, "maximum bytes")
}

// enqueue creates rec's record, then publishes its message; a message
// refused rolls the record back.
// get reads inquiry id's record, or that of the id a keyed id had before
// ids held the slot (inquiry.Unslotted): a key's inquiry accepted then.
func (r *records) get(ctx context.Context, id string) (inquiry.Record, uint64, error) {
	rec, rev, err := r.store.Get(ctx, id)
	if old := inquiry.Unslotted(id); errors.Is(err, store.ErrNotFound) && old != "" {
		return r.store.Get(ctx, old)
	}
	return rec, rev, err
}

func (r *records) enqueue(ctx context.Context, rec *inquiry.Record) (inquiry.Record, error) {
	rev, err := r.store.Create(ctx, rec)
	if errors.Is(err, store.ErrExists) {
		return inquiry.Record{}, err
	}
	if err != nil {
		if store.Refused(err) {
			return inquiry.Record{}, fmt.Errorf("%w: %w", ErrNotQueued, err)
		}
		return inquiry.Record{}, fmt.Errorf("%w: the record's write got no answer: %w", ErrUncertain, err)
	}
	perr := r.publish(ctx, rec)
	if perr == nil {
		return *rec, nil
	}
	if !store.Refused(perr) {
		return inquiry.Record{}, fmt.Errorf("%w: the message's write got no answer: %w", ErrUncertain, perr)
	}
	return r.rollback(rec.ID, rev, perr)
}

// rollback deletes the record written at rev after the server refused its
// message. If someone else wrote the record meanwhile, a worker took a
// message of it (done or failed: it was accepted after all) or a replay
// holds it (unknown: ErrUncertain).
func (r *records) rollback(id string, rev uint64, cause error) (inquiry.Record, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.PublishTimeout)
	defer cancel()
	err := r.store.Delete(ctx, id, rev)
	if errors.Is(err, store.ErrConflict) {
		cur, _, gerr := r.store.Get(ctx, id)
		if gerr == nil && cur.Status != inquiry.Pending {
			return cur, nil
		}
		return inquiry.Record{}, fmt.Errorf("%w: %w (and a replay holds the record)", ErrUncertain, cause)
	}
	if err != nil {
		return inquiry.Record{}, fmt.Errorf("%w: %w (and the record could not be rolled back: %v)", ErrUncertain, cause, err)
	}
	if errors.Is(cause, ErrFull) {
		return inquiry.Record{}, cause
	}
	return inquiry.Record{}, fmt.Errorf("%w: %w", ErrNotQueued, cause)
}

// replay touches rec at rev, then publishes its job again unless the
// work stream still holds the job's message: the duplicate window alone
// would let a retry that comes after it add a second message.
func (r *records) replay(ctx context.Context, rec inquiry.Record, rev uint64) error {
	if _, err := r.store.Update(ctx, &rec, rev); err != nil {
		return err
	}
	queued, err := r.queued(ctx, &rec)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUncertain, err) // a cause NotReady may tell: tried again
	}
	if queued {
		return nil
	}
	return r.publish(ctx, &rec)
}

// queued reports whether the work stream holds the message of rec's job
// (not yet acked: acked messages leave a work-queue stream).
func (r *records) queued(ctx context.Context, rec *inquiry.Record) (bool, error) {
	m, err := r.work.GetLastMsgForSubject(ctx, r.subject(rec))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var msg Message
	return json.Unmarshal(m.Data, &msg) == nil && msg.Job == rec.Job, nil
}
