// Package queue is a cell's work queue on JetStream: the inquiries it
// accepted, their records, their high and normal lanes, and the sets of
// failed and dead-lettered inquiries the retry console lists.
//
// A cell keeps them in one of two layouts (docs/decisions/one-write-intake.md):
//   - the ledger: one stream, each inquiry's acceptance one message (its
//     record and its work at once), each later state another message of
//     the inquiry (store.Ledger). Accepting costs one synced write.
//   - records, the layout before the ledger: a record in a key-value
//     bucket (store.Store), then a message on the work stream, and the
//     failed and dead-lettered inquiries on two streams of their own.
//
// A new cell starts on the ledger. A cell that has data in the records
// layout keeps writing it after an upgrade, until it is switched (Switch,
// recorded in its JetStream and never undone, so that instances of an
// older release, which know only records, never serve beside an intake
// that writes the ledger); then its intake writes the ledger, its
// workers work both until the old work stream is empty, and a record not
// in the ledger is read from the bucket until the bucket's records expire.
//
// Guarantees:
//   - Enqueue answers nil only after the inquiry is stored (file store,
//     synced writes): an accepted inquiry survives a crash. Its errors say
//     which of two things happened. Nothing was accepted (ErrFull,
//     ErrNotQueued): the server refused the write (or, on records, refused
//     the message and the record was rolled back). Or the outcome is
//     unknown (ErrUncertain): an answer never came (a timeout, a lost
//     connection), so the server may have stored the write and a worker
//     may have it already; or, on records, a rollback failed. An unknown
//     outcome is not rolled back: a record deleted under a message a
//     worker runs would leave the agencies called and the result dropped.
//     On the ledger the record is its work, so a write whose answer was
//     lost is whole or absent; on records Replay completes it (it gives a
//     pending record its message unless the stream holds it). So a caller
//     told "no" never sees the inquiry processed, a caller told "yes"
//     always does, and one told "unknown" sees it processed at most once.
//   - An inquiry's writes each expect the revision read (0 to accept): the
//     intake, a worker, a redelivered message and a retry cannot overwrite
//     each other (store.ErrConflict, store.ErrExists).
//   - The work has a hard depth limit (MaxMsgs): past it, Enqueue fails
//     with ErrFull rather than dropping old work. The shedder turns work
//     away well before it.
//   - The failed and dead-lettered sets hold the latest failure of each
//     inquiry, so that the retry console lists and re-enqueues them.
package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/store"
)

var (
	// ErrFull means the queue is at its depth limit (or, on records, the
	// work stream at its size limit).
	ErrFull = errors.New("work queue full")
	// ErrNotQueued means the server refused the inquiry's write, or on
	// records refused the message and the record was rolled back:
	// nothing was accepted.
	ErrNotQueued = errors.New("inquiry not queued")
	// ErrUncertain means the outcome is unknown: the inquiry may be
	// stored (a write whose answer never came, a rollback that failed, a
	// record another writer holds). The caller must not answer that
	// nothing was accepted: a retry with the same Idempotency-Key finds
	// the record.
	ErrUncertain = errors.New("inquiry enqueue outcome unknown")
	// ErrNotFailed means a retry was asked for an inquiry that is not failed.
	ErrNotFailed = errors.New("inquiry is not failed")
)

// Layouts a cell keeps its inquiries in.
const (
	LayoutLedger  = api.LayoutLedger
	LayoutRecords = api.LayoutRecords
)

// Config sizes a cell's queue. Zero values mean the defaults in brackets
// (see DefaultConfig).
type Config struct {
	// Cell is the cell id; every stream and subject name includes it.
	Cell string
	// MaxMsgs is the hard depth limit of the work [100000]; intake sheds
	// well before it (see package shed).
	MaxMsgs int64
	// MaxBytes is the hard size limit of the records layout's work
	// stream [256 MiB]; the ledger holds the records too, and the
	// store's watermarks hold its disk.
	MaxBytes int64
	// Duplicates is the records layout's Nats-Msg-Id duplicate window [2m].
	Duplicates time.Duration
	// AckWait is how long a delivered message may go without an ack or an
	// in-progress signal before it is redelivered [30s].
	AckWait time.Duration
	// MaxAckPending caps the messages delivered and not yet acked, per lane
	// [1000].
	MaxAckPending int
	// Retention is how long an inquiry is kept after its last write, its
	// failed entry with it [7 days].
	Retention time.Duration
	// PublishTimeout bounds the wait for a PubAck when the caller's context
	// has no earlier deadline [5s].
	PublishTimeout time.Duration
	// Replicas is the streams' replica count [1]: 3 on a JetStream
	// cluster, so that a stored message survives the loss of a node.
	Replicas int
	// Layout is the layout a cell with no data starts in [ledger].
	// LayoutRecords makes a cell as a release before the ledger did: for
	// the tests of an upgrade.
	Layout string
	// SwitchGrace is how long after Switch the intake starts writing the
	// ledger [15s]: every instance reads the switch within it (see Stats)
	// and, meanwhile, looks a key up in both layouts.
	SwitchGrace time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		MaxMsgs: 100_000, MaxBytes: 256 << 20, Duplicates: 2 * time.Minute, AckWait: 30 * time.Second,
		MaxAckPending: 1000, Retention: store.DefaultTTL, PublishTimeout: 5 * time.Second, Replicas: 1,
		Layout: LayoutLedger, SwitchGrace: 15 * time.Second,
	}
}

// withDefaults fills the zero fields of c field by field.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.MaxMsgs = cmp.Or(max(c.MaxMsgs, 0), d.MaxMsgs)
	c.MaxBytes = cmp.Or(max(c.MaxBytes, 0), d.MaxBytes)
	c.Duplicates = cmp.Or(max(c.Duplicates, 0), d.Duplicates)
	c.AckWait = cmp.Or(max(c.AckWait, 0), d.AckWait)
	c.MaxAckPending = cmp.Or(max(c.MaxAckPending, 0), d.MaxAckPending)
	c.Retention = cmp.Or(max(c.Retention, 0), d.Retention)
	c.PublishTimeout = cmp.Or(max(c.PublishTimeout, 0), d.PublishTimeout)
	c.Replicas = cmp.Or(max(c.Replicas, 0), d.Replicas)
	c.Layout = cmp.Or(c.Layout, d.Layout)
	c.SwitchGrace = cmp.Or(max(c.SwitchGrace, 0), d.SwitchGrace)
	return c
}

// Lanes in the order workers serve them.
var Lanes = []inquiry.Priority{inquiry.High, inquiry.Normal}

// Queue is a cell's inquiries and their work. It is safe for concurrent
// use.
type Queue struct {
	cfg Config
	js  jetstream.JetStream
	now func() time.Time

	ledger *store.Ledger
	lanes  map[inquiry.Priority]jetstream.Consumer // the ledger's
	// counters count the ledger's failed and dead entries (their
	// consumers are never read: their pending count is the set's size).
	counters map[string]jetstream.Consumer
	// since is when the intake writes the ledger (unix ns; 0: not
	// switched), read at Setup and at each Stats.
	since atomic.Int64
	// depth is the work's depth at the last Stats, for MaxMsgs.
	depth atomic.Int64

	old *records // nil on a cell that never had the records layout
}

// Setup opens a cell's queue: the ledger, and the records layout if the
// cell has data in it (or cfg.Layout asks for it on a new cell).
func Setup(ctx context.Context, js jetstream.JetStream, cfg Config) (*Queue, error) {
	cfg = cfg.withDefaults()
	if cfg.Cell == "" {
		return nil, errors.New("queue: cell id is required")
	}
	if cfg.Layout != LayoutLedger && cfg.Layout != LayoutRecords {
		return nil, fmt.Errorf("queue: layout %q is neither %s nor %s", cfg.Layout, LayoutLedger, LayoutRecords)
	}
	q := &Queue{cfg: cfg, js: js, now: time.Now, counters: map[string]jetstream.Consumer{}}
	var err error
	if q.ledger, err = store.OpenLedger(ctx, js, store.LedgerConfig{Cell: cfg.Cell, TTL: cfg.Retention, Replicas: cfg.Replicas}); err != nil {
		return nil, err
	}
	if q.lanes, err = q.ledgerConsumers(ctx); err != nil {
		return nil, err
	}
	since, err := q.ledger.Since(ctx)
	if err != nil {
		return nil, err
	}
	hadRecords, err := hasRecords(ctx, js, cfg.Cell)
	if err != nil {
		return nil, err
	}
	if hadRecords || (since.IsZero() && cfg.Layout == LayoutRecords) {
		if q.old, err = openRecords(ctx, js, cfg); err != nil {
			return nil, err
		}
	}
	if since.IsZero() && q.old == nil {
		// A new cell: nothing in another layout, nobody to wait for.
		if since, err = q.ledger.Switch(ctx, q.now()); err != nil {
			return nil, err
		}
	}
	q.setSince(since)
	return q, nil
}

func (q *Queue) setSince(t time.Time) {
	if !t.IsZero() {
		q.since.Store(t.UnixNano())
	}
}

// Ledger is the cell's ledger (a move reads and writes it directly).
func (q *Queue) Ledger() *store.Ledger { return q.ledger }

// Layout is the layout the intake writes now (LayoutLedger once the
// switch has taken effect).
func (q *Queue) Layout() string {
	if q.writesLedger() {
		return LayoutLedger
	}
	return LayoutRecords
}

// Switched reports when the intake writes the ledger from (zero: not
// switched).
func (q *Queue) Switched() time.Time {
	if n := q.since.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// writesLedger reports whether the switch has taken effect.
func (q *Queue) writesLedger() bool {
	n := q.since.Load()
	return n != 0 && !q.now().Before(time.Unix(0, n))
}

// readsLedger reports whether the ledger may hold inquiries: the switch
// was recorded (or is taking effect).
func (q *Queue) readsLedger() bool { return q.since.Load() != 0 }

// Switch records that the cell's intake writes the ledger from
// SwitchGrace on (every instance reads it within that time), unless it
// was recorded already; it returns when the intake writes the ledger
// from. It is never undone: call it only once no instance of a release
// that does not know the ledger serves the cell.
func (q *Queue) Switch(ctx context.Context) (time.Time, error) {
	since, err := q.ledger.Switch(ctx, q.now().Add(q.cfg.SwitchGrace))
	if err != nil {
		return time.Time{}, err
	}
	q.setSince(since)
	return since, nil
}

// Cell is the queue's cell id.
func (q *Queue) Cell() string { return q.cfg.Cell }

// AckWait is the lane consumers' ack wait.
func (q *Queue) AckWait() time.Duration { return q.cfg.AckWait }

// Conn is the NATS connection the queue uses.
func (q *Queue) Conn() *nats.Conn { return q.js.Conn() }

func (q *Queue) pubCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, q.cfg.PublishTimeout)
}

// A Ref is the revision of an inquiry's record as read, and which layout
// holds it: a write passes it back.
type Ref struct {
	rev    uint64
	ledger bool
}

// Get reads inquiry id's record: from the ledger, then (on a cell that
// had the records layout) from the bucket.
func (q *Queue) Get(ctx context.Context, id string) (inquiry.Record, Ref, error) {
	if q.readsLedger() || q.old == nil {
		rec, rev, err := q.ledger.Get(ctx, id)
		if err == nil || !errors.Is(err, store.ErrNotFound) || q.old == nil {
			return rec, Ref{rev: rev, ledger: true}, err
		}
	}
	rec, rev, err := q.old.get(ctx, id)
	return rec, Ref{rev: rev}, err
}

// Update writes rec's next state over ref: store.ErrConflict if the
// record moved on. On the ledger a failed record's write lists it in its
// set too (see Listed).
func (q *Queue) Update(ctx context.Context, rec *inquiry.Record, ref Ref) (Ref, error) {
	if ref.ledger {
		rev, err := q.ledger.Update(ctx, rec, ref.rev)
		return Ref{rev: rev, ledger: true}, err
	}
	if q.old == nil {
		return Ref{}, fmt.Errorf("write inquiry %s: no record of it was read", rec.ID)
	}
	rev, err := q.old.store.Update(ctx, rec, ref.rev)
	return Ref{rev: rev}, err
}

// Enqueue stores a new pending record as accepted work. keyed says its
// id is an Idempotency-Key's: on a cell switching layouts, or switched
// with records in the bucket, the key's inquiry is looked up in the
// other layout first. It returns store.ErrExists when the id is taken
// (see Replay), ErrFull or ErrNotQueued when nothing was accepted, and
// ErrUncertain when the outcome is unknown (see the package doc).
func (q *Queue) Enqueue(ctx context.Context, rec *inquiry.Record, keyed bool) (inquiry.Record, error) {
	if q.depth.Load() >= q.cfg.MaxMsgs {
		return inquiry.Record{}, fmt.Errorf("%w: %d inquiries queued", ErrFull, q.depth.Load())
	}
	ctx, cancel := q.pubCtx(ctx)
	defer cancel()
	if !q.writesLedger() {
		if keyed && q.readsLedger() {
			if err := q.taken(ctx, rec.ID, func(ctx context.Context, id string) error {
				_, _, err := q.ledger.Get(ctx, id)
				return err
			}); err != nil {
				return inquiry.Record{}, err
			}
		}
		if keyed && inquiry.Unslotted(rec.ID) != "" {
			// The key's inquiry, accepted before ids held the slot, is
			// under the id it had then.
			if err := q.taken(ctx, inquiry.Unslotted(rec.ID), func(ctx context.Context, id string) error {
				_, _, err := q.old.store.Get(ctx, id)
				return err
			}); err != nil {
				return inquiry.Record{}, err
			}
		}
		return q.old.enqueue(ctx, rec)
	}
	if keyed && q.old != nil {
		if err := q.taken(ctx, rec.ID, func(ctx context.Context, id string) error {
			_, _, err := q.old.get(ctx, id)
			return err
		}); err != nil {
			return inquiry.Record{}, err
		}
	}
	_, err := q.ledger.Accept(ctx, rec)
	switch {
	case err == nil:
		return *rec, nil
	case errors.Is(err, store.ErrExists):
		return inquiry.Record{}, err
	case store.Refused(err):
		return inquiry.Record{}, fmt.Errorf("%w: %w", ErrNotQueued, err)
	default:
		return inquiry.Record{}, fmt.Errorf("%w: the write got no answer: %w", ErrUncertain, err)
	}
}

// taken looks inquiry id up with get before it is written: store.ErrExists
// if found, ErrNotQueued if it cannot be read (nothing was written).
func (q *Queue) taken(ctx context.Context, id string, get func(context.Context, string) error) error {
	err := get(ctx, id)
	switch {
	case err == nil:
		return store.ErrExists
	case errors.Is(err, store.ErrNotFound):
		return nil
	default:
		return fmt.Errorf("%w: the key's inquiry cannot be looked up: %w", ErrNotQueued, err)
	}
}

// Replay makes sure a pending record read at ref is queued. On the
// ledger the record is its work: nothing to do. On records it touches
// the record (so that a concurrent rollback of the first attempt fails
// instead of deleting it), then publishes its job again unless the work
// stream still holds the job's message. An error but store.ErrConflict
// (read the record again) leaves the inquiry's outcome unknown.
func (q *Queue) Replay(ctx context.Context, rec inquiry.Record, ref Ref) error {
	if ref.ledger {
		return nil
	}
	rec.Updated = q.now().UTC()
	ctx, cancel := q.pubCtx(ctx)
	defer cancel()
	return q.old.replay(ctx, rec, ref.rev)
}

// NotReady reports whether err is what JetStream answers (or fails to)
// while a stream or bucket has no leader: a cluster forming, or electing
// after losing a node (no answer, no responders, "temporarily
// unavailable", no suitable peers yet, no leader, insufficient resources
// while its peers come back). Waiting for the leader and trying again is
// safe: every write expects a revision (a record written by a try whose
// answer was lost is found by the next: store.ErrExists), and a records
// layout's work message carries its job's Nats-Msg-Id.
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
