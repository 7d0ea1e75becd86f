package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/inquiry"
)

// A Ledger keeps a cell's inquiries in one stream: accepting an
// inquiry is one message, which is also its work, and each later state
// is another message of the same inquiry (docs/decisions/one-write-intake.md).
//
// An inquiry's messages are on
// cellkit.<cell>.ledger.<kind>.<lane>.<slot>.<unique>, one message per
// subject, where slot and unique are its id's (api.ParseInquiryID): a
// slot's inquiries are one filter away (a move reads them so), and an
// inquiry is found by its slot and unique part whatever cell accepted it
// (a keyed request's id made here finds the inquiry another cell took
// before the user's data came here). An id made before ids held a slot
// is on <kind>.<lane>._.<id>. The kinds:
//   - new: the record as accepted, or as re-queued by a retry: the work,
//     which the lanes' consumers read;
//   - rec: a later state (scores kept while pending, done, a crash counted);
//   - fail, dead: the final state of a failed or dead-lettered inquiry,
//     the retry console's two sets.
//
// The record is the last message over the inquiry's subjects, read from
// the stream's leader; its stream sequence is its revision. Every write
// expects the revision read (0 for a new inquiry), as the stream checks
// in the same write: the intake, a worker, a redelivered message and a
// retry cannot overwrite each other.
type Ledger struct {
	js     jetstream.JetStream
	nc     *nats.Conn
	cell   string
	stream jetstream.Stream
}

// Kinds of an inquiry's ledger messages.
const (
	KindNew  = "new"
	KindRec  = "rec"
	KindFail = "fail"
	KindDead = "dead"
)

// LedgerStream is the name of a cell's ledger stream.
func LedgerStream(cell string) string { return "cellkit-" + cell + "-ledger" }

// LedgerSubject is the subject of inquiry id's message of kind in lane.
func LedgerSubject(cell, kind string, lane inquiry.Priority, id string) string {
	return "cellkit." + cell + ".ledger." + kind + "." + string(laneOf(lane)) + "." + idTokens(id)
}

// LedgerLaneSubjects is the filter of every message of kind in lane.
func LedgerLaneSubjects(cell, kind string, lane inquiry.Priority) string {
	return "cellkit." + cell + ".ledger." + kind + "." + string(laneOf(lane)) + ".*.*"
}

// LedgerKindSubjects is the filter of every message of kind in every lane
// (kind "*": every kind).
func LedgerKindSubjects(cell, kind string) string {
	return "cellkit." + cell + ".ledger." + kind + ".*.*.*"
}

// inquirySubjects is the filter of every message of inquiry id.
func inquirySubjects(cell, id string) string {
	return "cellkit." + cell + ".ledger.*.*." + idTokens(id)
}

// idTokens are the last two tokens of id's subjects: its slot and unique
// part, or "_" and the whole id for an id without a slot (or one that
// does not parse, which no write makes).
func idTokens(id string) string {
	if _, slot, unique, ok := api.ParseInquiryID(id); ok && slot != api.NoSlot {
		return id[len(id)-len(unique)-api.IDSlotLen:len(id)-len(unique)] + "." + unique
	}
	return "_." + id
}

// laneOf is the lane a record's priority puts it in.
func laneOf(p inquiry.Priority) inquiry.Priority {
	if p == inquiry.High {
		return inquiry.High
	}
	return inquiry.Normal
}

// LedgerConfig shapes a cell's ledger.
type LedgerConfig struct {
	// Cell is the cell's id. Required.
	Cell string
	// TTL is how long an inquiry's messages are kept after each was
	// written [DefaultTTL].
	TTL time.Duration
	// Replicas is the stream's replica count [1]; 3 on a JetStream cluster.
	Replicas int
}

// DefaultLedgerConfig returns the defaults in brackets above.
func DefaultLedgerConfig() LedgerConfig {
	return LedgerConfig{TTL: DefaultTTL, Replicas: 1}
}

// withDefaults fills the zero fields of c from DefaultLedgerConfig,
// field by field (a negative Replicas too).
func (c LedgerConfig) withDefaults() LedgerConfig {
	d := DefaultLedgerConfig()
	c.TTL = cmp.Or(c.TTL, d.TTL)
	c.Replicas = max(c.Replicas, d.Replicas)
	return c
}

// OpenLedger creates or updates the ledger stream of cfg.Cell.
func OpenLedger(ctx context.Context, js jetstream.JetStream, cfg LedgerConfig) (*Ledger, error) {
	if cfg.Cell == "" {
		return nil, errors.New("ledger: cell id is required")
	}
	cfg = cfg.withDefaults()
	// An update keeps the stream's metadata: the time of the switch to the
	// ledger is there, and is never undone.
	var meta map[string]string
	if cur, err := js.Stream(ctx, LedgerStream(cfg.Cell)); err == nil {
		meta = cur.CachedInfo().Config.Metadata
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("open ledger %s: %w", LedgerStream(cfg.Cell), err)
	}
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:              LedgerStream(cfg.Cell),
		Description:       "inquiries of cell " + cfg.Cell + ": each one's acceptance (its work) and later states",
		Subjects:          []string{"cellkit." + cfg.Cell + ".ledger.*.*.*.*"},
		Retention:         jetstream.LimitsPolicy,
		MaxMsgsPerSubject: 1,
		MaxAge:            cfg.TTL,
		AllowMsgTTL:       true, // a message copied from another cell lives as long as it had left there
		Storage:           jetstream.FileStorage,
		Replicas:          cfg.Replicas,
		Metadata:          meta,
	})
	if err != nil {
		return nil, fmt.Errorf("open ledger %s: %w", LedgerStream(cfg.Cell), err)
	}
	return &Ledger{js: js, nc: js.Conn(), cell: cfg.Cell, stream: st}, nil
}

// Stream is the ledger's stream.
func (j *Ledger) Stream() jetstream.Stream { return j.stream }

// metaSince is the ledger stream's metadata key holding when the cell's
// intake writes the ledger (RFC 3339).
const metaSince = "cellkit.io/ledger-since"

// Since reads when the cell's intake writes the ledger: zero while it
// has not been switched to it.
func (j *Ledger) Since(ctx context.Context) (time.Time, error) {
	info, err := j.stream.Info(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("read ledger %s: %w", LedgerStream(j.cell), err)
	}
	return SinceOf(info.Config.Metadata)
}

// SinceOf is the switch's time in a ledger stream's metadata (zero: none).
func SinceOf(meta map[string]string) (time.Time, error) {
	v, ok := meta[metaSince]
	if !ok {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("ledger metadata %s=%q: %w", metaSince, v, err)
	}
	return t, nil
}

// Switch records that the cell's intake writes the ledger from at on,
// unless it was recorded already: it returns the time recorded, which
// is never changed.
func (j *Ledger) Switch(ctx context.Context, at time.Time) (time.Time, error) {
	info, err := j.stream.Info(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("read ledger %s: %w", LedgerStream(j.cell), err)
	}
	if since, err := SinceOf(info.Config.Metadata); err != nil || !since.IsZero() {
		return since, err
	}
	cfg := info.Config
	cfg.Metadata = maps.Clone(cfg.Metadata)
	if cfg.Metadata == nil {
		cfg.Metadata = map[string]string{}
	}
	cfg.Metadata[metaSince] = at.UTC().Format(time.RFC3339Nano)
	st, err := j.js.UpdateStream(ctx, cfg)
	if err != nil {
		return time.Time{}, fmt.Errorf("switch ledger %s: %w", LedgerStream(j.cell), err)
	}
	return SinceOf(st.CachedInfo().Config.Metadata)
}

// Accept writes r as a new inquiry, its work in its lane: ErrExists when
// the inquiry has a message already. It returns the record's revision.
func (j *Ledger) Accept(ctx context.Context, r *inquiry.Record) (uint64, error) {
	return j.write(ctx, KindNew, r, 0)
}

// Requeue writes r, pending again under a new job, as new work over
// revision rev (ErrConflict if the record moved on), and takes its
// failed entry out of the retry console's sets.
func (j *Ledger) Requeue(ctx context.Context, r *inquiry.Record, rev uint64) (uint64, error) {
	seq, err := j.write(ctx, KindNew, r, rev)
	if err != nil {
		return 0, err
	}
	// The entries listed are only those still their inquiry's last
	// message: one left by a purge that failed is not listed.
	for _, kind := range []string{KindFail, KindDead} {
		_ = j.stream.Purge(ctx, jetstream.WithPurgeSubject(LedgerSubject(j.cell, kind, r.Priority, r.ID)))
	}
	return seq, nil
}

// Update writes r's next state over revision rev: ErrConflict if the
// record moved on. A failed record goes to the retry console's sets (a
// dead one to the dead-letter set), any other to its record subject.
func (j *Ledger) Update(ctx context.Context, r *inquiry.Record, rev uint64) (uint64, error) {
	kind := KindRec
	if r.Status == inquiry.Failed {
		kind = KindFail
		if r.Dead {
			kind = KindDead
		}
	}
	return j.write(ctx, kind, r, rev)
}

// write publishes r as its message of kind, expecting rev as the last
// sequence over the inquiry's subjects.
func (j *Ledger) write(ctx context.Context, kind string, r *inquiry.Record, rev uint64) (uint64, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return 0, err
	}
	msg := &nats.Msg{Subject: LedgerSubject(j.cell, kind, r.Priority, r.ID), Data: data}
	ack, err := j.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequenceForSubject(rev, inquirySubjects(j.cell, r.ID)), jetstream.WithRetryAttempts(0))
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return ack.Sequence, nil
	case errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant):
		if rev == 0 {
			return 0, ErrExists
		}
		return 0, ErrConflict
	default:
		return 0, fmt.Errorf("write %s of inquiry %s: %w", kind, r.ID, err)
	}
}

// Get reads inquiry id's record and revision from the stream's leader,
// which has applied every write it acknowledged.
func (j *Ledger) Get(ctx context.Context, id string) (inquiry.Record, uint64, error) {
	var r inquiry.Record
	req, err := json.Marshal(map[string]string{"last_by_subj": inquirySubjects(j.cell, id)})
	if err != nil {
		return r, 0, err
	}
	msg, err := j.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+LedgerStream(j.cell), req)
	if err != nil {
		return r, 0, fmt.Errorf("read inquiry %s: %w", id, err)
	}
	data, seq, err := leaderAnswer(msg.Data)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return r, 0, ErrNotFound
	}
	if err != nil {
		return r, 0, fmt.Errorf("read inquiry %s: %w", id, err)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, 0, fmt.Errorf("decode inquiry %s: %w", id, err)
	}
	return r, seq, nil
}

// Delivered decodes the record a lane consumer delivered in m, with its
// revision: the record as of its acceptance (or re-queue). Later states
// are newer revisions: a redelivered message's record may be stale.
func Delivered(m jetstream.Msg) (inquiry.Record, uint64, error) {
	var r inquiry.Record
	md, err := m.Metadata()
	if err != nil {
		return r, 0, err
	}
	if err := json.Unmarshal(m.Data(), &r); err != nil || r.ID == "" {
		return r, 0, fmt.Errorf("undecodable ledger message on %s", m.Subject())
	}
	return r, md.Sequence.Stream, nil
}
