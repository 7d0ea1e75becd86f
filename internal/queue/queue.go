// Package queue is a cell's work queue on JetStream: the work stream with
// its high and normal lanes, the error stream and the dead-letter stream,
// and the enqueue step that writes an inquiry's record and its message
// without ever leaving one half-written.
//
// Guarantees:
//   - Enqueue answers nil only after the record is stored and the message's
//     PubAck came back (file store, synced writes): an accepted inquiry
//     survives a crash. Its errors say which of two things happened.
//     Nothing was accepted (ErrFull, ErrNotQueued): the server refused the
//     record, or refused the message and the record was rolled back. Or the
//     outcome is unknown (ErrUncertain): an answer never came (a timeout, a
//     lost connection), so the server may have stored the write and its
//     message may be at a worker already; or a rollback failed. An unknown
//     outcome is not rolled back: a record deleted under a message a
//     worker runs would leave the agencies called and the result dropped,
//     and a retry would call them again. Replay completes it instead: it
//     gives a pending record its message unless the stream holds it. So a
//     caller told "no" never sees the inquiry processed, a caller told
//     "yes" always does, and one told "unknown" sees it processed at most
//     once, whoever replays it.
//   - Messages carry Nats-Msg-Id = "<id>.<job>": a job published twice within
//     the duplicate window (2 minutes) is stored once.
//   - The work stream has WorkQueue retention and DiscardNew limits: when it
//     is full, Enqueue fails with ErrFull rather than dropping old work.
//   - The error and DLQ streams keep the latest entry per inquiry (one
//     subject per id), so they are the sets of failed and dead-lettered
//     inquiries that the retry console lists and re-enqueues.
package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/store"
)

var (
	// ErrFull means the work stream is at its size limit (DiscardNew).
	ErrFull = errors.New("work queue full")
	// ErrNotQueued means the server refused the record, or refused the
	// message and the record was rolled back: nothing was accepted.
	ErrNotQueued = errors.New("inquiry not queued")
	// ErrUncertain means the outcome is unknown: the record, its message
	// or both may be stored (a write whose answer never came, a rollback
	// that failed, a record another writer holds). The caller must not
	// answer that nothing was accepted: a retry with the same
	// Idempotency-Key finds the record, and Replay completes it.
	ErrUncertain = errors.New("inquiry enqueue outcome unknown")
	// ErrNotFailed means a retry was asked for an inquiry that is not failed.
	ErrNotFailed = errors.New("inquiry is not failed")
)

// Config sizes a cell's streams. Zero values mean the defaults in brackets
// (see DefaultConfig).
type Config struct {
	// Cell is the cell id; every stream and subject name includes it.
	Cell string
	// MaxMsgs is the hard depth limit of the work stream [100000]; intake
	// sheds well before it (see package shed).
	MaxMsgs int64
	// MaxBytes is the hard size limit of the work stream [256 MiB].
	MaxBytes int64
	// Duplicates is the Nats-Msg-Id duplicate window [2m].
	Duplicates time.Duration
	// AckWait is how long a delivered message may go without an ack or an
	// in-progress signal before it is redelivered [30s].
	AckWait time.Duration
	// MaxAckPending caps the messages delivered and not yet acked, per lane
	// [1000].
	MaxAckPending int
	// Retention is how long error and DLQ entries are kept [7 days, the
	// record TTL].
	Retention time.Duration
	// PublishTimeout bounds the wait for a PubAck when the caller's context
	// has no earlier deadline [5s].
	PublishTimeout time.Duration
	// Replicas is the streams' replica count [1]: 3 on a JetStream
	// cluster, so that a stored message survives the loss of a node.
	Replicas int
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		MaxMsgs: 100_000, MaxBytes: 256 << 20, Duplicates: 2 * time.Minute, AckWait: 30 * time.Second,
		MaxAckPending: 1000, Retention: store.DefaultTTL, PublishTimeout: 5 * time.Second, Replicas: 1,
	}
}

func (c *Config) defaults() {
	d := DefaultConfig()
	if c.MaxMsgs <= 0 {
		c.MaxMsgs = d.MaxMsgs
	}
	if c.Replicas <= 0 {
		c.Replicas = d.Replicas
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = d.MaxBytes
	}
	if c.Duplicates <= 0 {
		c.Duplicates = d.Duplicates
	}
	if c.AckWait <= 0 {
		c.AckWait = d.AckWait
	}
	if c.MaxAckPending <= 0 {
		c.MaxAckPending = d.MaxAckPending
	}
	if c.Retention <= 0 {
		c.Retention = d.Retention
	}
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = d.PublishTimeout
	}
}

// Lanes in the order workers serve them.
var Lanes = []inquiry.Priority{inquiry.High, inquiry.Normal}

// Names of a cell's JetStream resources.
func WorkStream(cell string) string  { return "cellkit-" + cell + "-work" }
func ErrorStream(cell string) string { return "cellkit-" + cell + "-errors" }
func DLQStream(cell string) string   { return "cellkit-" + cell + "-dlq" }

// LaneSubject is the subject filter of a lane: its messages have one
// subject per inquiry (MessageSubject), so that Replay can tell whether an
// inquiry's message is still queued.
func LaneSubject(cell string, lane inquiry.Priority) string {
	return MessageSubject(cell, lane, "*")
}

// MessageSubject is the subject of an inquiry's work message.
func MessageSubject(cell string, lane inquiry.Priority, id string) string {
	return "cellkit." + cell + ".work." + string(lane) + "." + id
}
func LaneConsumer(lane inquiry.Priority) string { return "work-" + string(lane) }
func errorSubject(cell, id string) string       { return "cellkit." + cell + ".errors." + id }
func dlqSubject(cell, id string) string         { return "cellkit." + cell + ".dlq." + id }

// Message is the body of a work message.
type Message struct {
	ID  string `json:"id"`
	Job string `json:"job"`
}

// Queue is a cell's set of streams. It is safe for concurrent use.
type Queue struct {
	cfg       Config
	js        jetstream.JetStream
	store     *store.Store
	work      jetstream.Stream
	errs, dlq jetstream.Stream
	consumers map[inquiry.Priority]jetstream.Consumer
	now       func() time.Time
}

// Setup creates or updates the streams and lane consumers of a cell.
func Setup(ctx context.Context, js jetstream.JetStream, st *store.Store, cfg Config) (*Queue, error) {
	cfg.defaults()
	if cfg.Cell == "" {
		return nil, errors.New("queue: cell id is required")
	}
	q := &Queue{cfg: cfg, js: js, store: st, consumers: map[inquiry.Priority]jetstream.Consumer{}, now: time.Now}
	var err error
	q.work, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        WorkStream(cfg.Cell),
		Description: "inquiries waiting for the pipeline of cell " + cfg.Cell,
		Subjects:    []string{LaneSubject(cfg.Cell, inquiry.High), LaneSubject(cfg.Cell, inquiry.Normal)},
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
		{&q.errs, ErrorStream(cfg.Cell), errorSubject(cfg.Cell, "*"), "failed inquiries of cell " + cfg.Cell},
		{&q.dlq, DLQStream(cfg.Cell), dlqSubject(cfg.Cell, "*"), "dead-lettered inquiries of cell " + cfg.Cell},
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
		c, err := q.work.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable:       LaneConsumer(lane),
			Description:   string(lane) + " lane of cell " + cfg.Cell,
			FilterSubject: LaneSubject(cfg.Cell, lane),
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       cfg.AckWait,
			// Attempts are counted and capped by the workers, which move
			// the message to the DLQ themselves: a server-side MaxDeliver
			// would strand the message in the WorkQueue stream, still
			// counted in its depth and oldest age, delivered never again.
			MaxDeliver:    -1,
			MaxAckPending: cfg.MaxAckPending,
		})
		if err != nil {
			return nil, fmt.Errorf("consumer %s: %w", LaneConsumer(lane), err)
		}
		q.consumers[lane] = c
	}
	return q, nil
}

// Consumer is the pull consumer of a lane.
func (q *Queue) Consumer(lane inquiry.Priority) jetstream.Consumer { return q.consumers[lane] }

// Store is the record store the queue writes with.
func (q *Queue) Store() *store.Store { return q.store }

// Cell is the queue's cell id.
func (q *Queue) Cell() string { return q.cfg.Cell }

// AckWait is the lane consumers' ack wait.
func (q *Queue) AckWait() time.Duration { return q.cfg.AckWait }

func (q *Queue) pubCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, q.cfg.PublishTimeout)
}

// publish stores the work message of rec's current job and waits for the
// PubAck.
func (q *Queue) publish(ctx context.Context, rec *inquiry.Record) error {
	data, err := json.Marshal(Message{ID: rec.ID, Job: rec.Job})
	if err != nil {
		return err
	}
	ctx, cancel := q.pubCtx(ctx)
	defer cancel()
	msg := &nats.Msg{Subject: q.subject(rec), Data: data, Header: nats.Header{}}
	_, err = q.js.PublishMsg(ctx, msg, jetstream.WithMsgID(rec.MsgID()), jetstream.WithRetryAttempts(0))
	if err != nil {
		if isFull(err) {
			return fmt.Errorf("%w: %w", ErrFull, err) // the server's answer kept: store.Refused
		}
		return err
	}
	return nil
}

// NotReady reports whether err is what JetStream answers (or fails to)
// while a stream or bucket has no leader: a cluster forming, or electing
// after losing a node (no answer, no responders, "temporarily
// unavailable", no suitable peers yet, no leader, insufficient resources
// while its peers come back). Waiting for the leader and trying again is
// safe: a work message carries its job's Nats-Msg-Id, and a record
// written by a try whose answer was lost is found by the next
// (store.ErrExists).
func NotReady(err error) bool {
	if errors.Is(err, ErrFull) {
		return false // the stream answered, and is full
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jetstream.JSErrCodeJetStreamNotEnabled, 10008, // JetStream temporarily unavailable
			10005, // no suitable peers for placement (too few yet)
			10009, // the cluster cannot handle the request (no leader)
			10023, // insufficient resources
			10158: // a publish of the same message id is still in process (a try whose answer was late): asked again once it is done, the answer is its
			return true
		}
		return apiErr.Code == 503 || apiErr.Code == 408
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled)
}

// subject is the subject of rec's work message.
func (q *Queue) subject(rec *inquiry.Record) string {
	lane := rec.Priority
	if lane != inquiry.High {
		lane = inquiry.Normal
	}
	return MessageSubject(q.cfg.Cell, lane, rec.ID)
}

func isFull(err error) bool {
	s := err.Error()
	return strings.Contains(s, "maximum messages") || strings.Contains(s, "maximum bytes")
}

// Enqueue stores a new pending record and its work message. It returns
// store.ErrExists when the id is taken (see Replay), ErrFull or
// ErrNotQueued when nothing was accepted, and ErrUncertain when the
// outcome is unknown (see the package doc).
func (q *Queue) Enqueue(ctx context.Context, rec *inquiry.Record) (inquiry.Record, error) {
	rev, err := q.store.Create(ctx, rec)
	if errors.Is(err, store.ErrExists) {
		return inquiry.Record{}, err
	}
	if err != nil {
		if store.Refused(err) {
			return inquiry.Record{}, fmt.Errorf("%w: %w", ErrNotQueued, err)
		}
		return inquiry.Record{}, fmt.Errorf("%w: the record's write got no answer: %w", ErrUncertain, err)
	}
	perr := q.publish(ctx, rec)
	if perr == nil {
		return *rec, nil
	}
	if !store.Refused(perr) {
		return inquiry.Record{}, fmt.Errorf("%w: the message's write got no answer: %w", ErrUncertain, perr)
	}
	return q.rollback(rec.ID, rev, perr)
}

// rollback deletes the record written at rev after the server refused its
// message. If someone else wrote the record meanwhile, a worker took a
// message of it (done or failed: it was accepted after all) or a replay
// holds it (unknown: ErrUncertain).
func (q *Queue) rollback(id string, rev uint64, cause error) (inquiry.Record, error) {
	ctx, cancel := context.WithTimeout(context.Background(), q.cfg.PublishTimeout)
	defer cancel()
	err := q.store.Delete(ctx, id, rev)
	if errors.Is(err, store.ErrConflict) {
		cur, _, gerr := q.store.Get(ctx, id)
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

// Replay makes sure a pending record read at rev has its work message: it
// touches the record (so that a concurrent rollback of the first attempt
// fails instead of deleting it), then publishes its job again unless the
// stream still holds the job's message. The duplicate window alone would
// let a retry that comes after it add a second message for the same job.
// An error but store.ErrConflict (read the record again) leaves the
// inquiry's outcome unknown: its record is pending and its message may
// or may not be queued.
func (q *Queue) Replay(ctx context.Context, rec inquiry.Record, rev uint64) error {
	rec.Updated = q.now().UTC()
	if _, err := q.store.Update(ctx, &rec, rev); err != nil {
		return err
	}
	queued, err := q.queued(ctx, &rec)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUncertain, err) // a cause NotReady may tell: tried again
	}
	if queued {
		return nil
	}
	return q.publish(ctx, &rec)
}

// queued reports whether the work stream holds the message of rec's job
// (not yet acked: acked messages leave a work-queue stream).
func (q *Queue) queued(ctx context.Context, rec *inquiry.Record) (bool, error) {
	ctx, cancel := q.pubCtx(ctx)
	defer cancel()
	m, err := q.work.GetLastMsgForSubject(ctx, q.subject(rec))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var msg Message
	return json.Unmarshal(m.Data, &msg) == nil && msg.Job == rec.Job, nil
}

// Stats is a snapshot of the work stream.
type Stats struct {
	Depth  map[inquiry.Priority]int `json:"depth"` // messages not yet acked, per lane
	Total  int                      `json:"total"` // messages in the work stream
	Bytes  uint64                   `json:"bytes"`
	Oldest time.Time                `json:"oldest"` // when the oldest unacked message was stored; zero if none
	// OldestByLane is Oldest per lane, for the lanes with messages.
	OldestByLane map[inquiry.Priority]time.Time `json:"oldest_by_lane,omitempty"`
}

// Stats reads the work stream and its lane consumers.
// Ping asks the work stream's leader for the stream's state: nil when the
// stream has a leader that answers.
func (q *Queue) Ping(ctx context.Context) error {
	_, err := q.work.Info(ctx)
	return err
}

func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	info, err := q.work.Info(ctx)
	if err != nil {
		return Stats{}, fmt.Errorf("work stream info: %w", err)
	}
	st := Stats{Depth: map[inquiry.Priority]int{}, Total: int(info.State.Msgs), Bytes: info.State.Bytes}
	if info.State.Msgs > 0 {
		st.Oldest = info.State.FirstTime
	}
	for lane, c := range q.consumers {
		ci, err := c.Info(ctx)
		if err != nil {
			return Stats{}, fmt.Errorf("consumer %s info: %w", LaneConsumer(lane), err)
		}
		st.Depth[lane] = int(ci.NumPending) + ci.NumAckPending
	}
	// The work stream drops what is acked, so the first message of a
	// lane's subject is its oldest pending one.
	for _, lane := range Lanes {
		if st.Depth[lane] == 0 || info.State.Msgs == 0 {
			continue
		}
		msg, err := q.work.GetMsg(ctx, info.State.FirstSeq, jetstream.WithGetMsgSubject(LaneSubject(q.cfg.Cell, lane)))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // acked meanwhile
		}
		if err != nil {
			return Stats{}, fmt.Errorf("oldest message of the %s lane: %w", lane, err)
		}
		if st.OldestByLane == nil {
			st.OldestByLane = map[inquiry.Priority]time.Time{}
		}
		st.OldestByLane[lane] = msg.Time
	}
	return st, nil
}

// Conn is the NATS connection the queue uses.
func (q *Queue) Conn() *nats.Conn { return q.js.Conn() }
