package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/store"
)

// Failure sets.
const (
	SetError = "error" // the pipeline failed the inquiry (an agency, CSS or core banking said no)
	SetDLQ   = "dlq"   // every attempt failed for a transient reason
)

// Failure is one entry of the failed or the dead-lettered set.
type Failure struct {
	ID       string    `json:"id"`
	UserID   string    `json:"user_id"`
	Set      string    `json:"set"`
	Reason   string    `json:"reason"`
	Attempts int       `json:"attempts"`
	At       time.Time `json:"at"`
}

func failureOf(rec inquiry.Record) Failure {
	f := Failure{ID: rec.ID, UserID: rec.UserID, Set: SetError, Reason: rec.Reason, Attempts: rec.Attempts, At: rec.Updated}
	if rec.Dead {
		f.Set = SetDLQ
	}
	return f
}

// List puts a failed record read at ref in its set before the record is
// written (an inquiry anyone can see failed is always in the retry
// console). On the ledger the record's write is its listing: nothing to
// do. On records it is a message on the error stream, or the DLQ if
// dead; the same failure listed twice within the duplicate window is
// stored once.
func (q *Queue) List(ctx context.Context, rec inquiry.Record, ref Ref) error {
	if ref.ledger {
		return nil
	}
	ctx, cancel := q.pubCtx(ctx)
	defer cancel()
	return q.old.list(ctx, rec, true)
}

// Unlist withdraws a listing of List whose record could not be written.
func (q *Queue) Unlist(ctx context.Context, id string, ref Ref) error {
	if ref.ledger {
		return nil
	}
	return q.old.unlist(ctx, id)
}

func (r *records) list(ctx context.Context, rec inquiry.Record, dedup bool) error {
	f := failureOf(rec)
	subj := errorSubject(r.cfg.Cell, rec.ID)
	if rec.Dead {
		subj = dlqSubject(r.cfg.Cell, rec.ID)
	}
	data, err := json.Marshal(f)
	if err != nil {
		return err
	}
	var opts []jetstream.PublishOpt
	if dedup {
		opts = append(opts, jetstream.WithMsgID(rec.MsgID()+"."+f.Set))
	}
	if _, err = r.js.PublishMsg(ctx, &nats.Msg{Subject: subj, Data: data}, opts...); err != nil {
		return fmt.Errorf("put %s on the %s stream: %w", rec.ID, f.Set, err)
	}
	return nil
}

// unlist drops an inquiry from both of the records layout's sets.
func (r *records) unlist(ctx context.Context, id string) error {
	var errs []error
	for _, s := range []struct {
		st   jetstream.Stream
		subj string
	}{{r.errs, errorSubject(r.cfg.Cell, id)}, {r.dlq, dlqSubject(r.cfg.Cell, id)}} {
		if err := s.st.Purge(ctx, jetstream.WithPurgeSubject(s.subj)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// FailedCounts returns the sizes of the failed and dead-lettered sets.
func (q *Queue) FailedCounts(ctx context.Context) (failed, dead int, err error) {
	for _, set := range []struct {
		name string
		n    *int
	}{{SetError, &failed}, {SetDLQ, &dead}} {
		ci, err := q.counters[set.name].Info(ctx)
		if err != nil {
			return 0, 0, err
		}
		*set.n = int(ci.NumPending)
	}
	if q.old != nil {
		for _, set := range []struct {
			st jetstream.Stream
			n  *int
		}{{q.old.errs, &failed}, {q.old.dlq, &dead}} {
			info, err := set.st.Info(ctx)
			if err != nil {
				return 0, 0, err
			}
			*set.n += int(info.State.Msgs)
		}
	}
	return failed, dead, nil
}

// unlistedAfter is how long an entry whose inquiry is not failed may stay
// listed before Failed withdraws it: on records the pipeline lists a
// failure just before it writes the record, so a young one may be about
// to become true.
const unlistedAfter = time.Minute

// Failed lists up to limit entries of each set, oldest first. Only
// entries that are their inquiry's failed record are listed: on the
// ledger one left behind by a retry (a new message of the inquiry, its
// entry's purge failed), on records one left by a record write that
// failed or by a retry onto the ledger, is hidden and withdrawn once it
// is older than unlistedAfter.
func (q *Queue) Failed(ctx context.Context, limit int) ([]Failure, error) {
	var out []Failure
	for _, kind := range []string{store.KindFail, store.KindDead} {
		entries, err := q.ledgerEntries(ctx, kind, limit)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			_, ref, err := q.Get(ctx, e.rec.ID)
			switch {
			case err == nil && ref.ledger && ref.rev == e.seq:
				out = append(out, failureOf(e.rec))
			case err != nil && !errors.Is(err, store.ErrNotFound):
				return nil, err
			case q.now().Sub(e.rec.Updated) > unlistedAfter:
				if err := q.ledger.Stream().Purge(ctx, jetstream.WithPurgeSubject(e.subject), jetstream.WithPurgeSequence(e.seq+1)); err != nil {
					return nil, err
				}
			}
		}
	}
	if q.old == nil {
		return out, nil
	}
	for _, st := range []jetstream.Stream{q.old.errs, q.old.dlq} {
		fs, err := readFailures(ctx, st, limit)
		if err != nil {
			return nil, err
		}
		for _, f := range fs {
			rec, ref, err := q.Get(ctx, f.ID)
			switch {
			case err == nil && !ref.ledger && rec.Status == inquiry.Failed:
				out = append(out, f)
			case err != nil && !errors.Is(err, store.ErrNotFound):
				return nil, err
			case q.now().Sub(f.At) > unlistedAfter:
				if err := q.old.unlist(ctx, f.ID); err != nil {
					return nil, err
				}
			}
		}
	}
	return out, nil
}

// entry is a failed record of the ledger, with where it is.
type entry struct {
	rec     inquiry.Record
	subject string
	seq     uint64
}

// ledgerEntries reads up to limit of the ledger's messages of kind
// (fail or dead), oldest first.
func (q *Queue) ledgerEntries(ctx context.Context, kind string, limit int) ([]entry, error) {
	var out []entry
	err := readOrdered(ctx, q.ledger.Stream(), store.LedgerKindSubjects(q.cfg.Cell, kind), q.counters[setOf(kind)], limit, func(m jetstream.Msg) {
		rec, seq, err := store.Delivered(m)
		if err == nil {
			out = append(out, entry{rec: rec, subject: m.Subject(), seq: seq})
		}
	})
	return out, err
}

func setOf(kind string) string {
	if kind == store.KindDead {
		return SetDLQ
	}
	return SetError
}

// readFailures reads up to limit entries of a records layout's set.
func readFailures(ctx context.Context, st jetstream.Stream, limit int) ([]Failure, error) {
	var out []Failure
	err := readOrdered(ctx, st, "", nil, limit, func(m jetstream.Msg) {
		var f Failure
		if json.Unmarshal(m.Data(), &f) == nil {
			out = append(out, f)
		}
	})
	return out, err
}

// readOrdered reads up to limit messages of st on filter ("": all),
// oldest first (store.Read); count, if not nil, is a consumer whose
// pending count says whether there are any (else the stream's).
func readOrdered(ctx context.Context, st jetstream.Stream, filter string, count jetstream.Consumer, limit int, each func(jetstream.Msg)) error {
	if limit <= 0 {
		return nil
	}
	if count != nil {
		ci, err := count.Info(ctx)
		if err != nil {
			return err
		}
		if ci.NumPending == 0 {
			return nil
		}
	}
	var filters []string
	if filter != "" {
		filters = []string{filter}
	}
	got := 0
	return store.Read(ctx, st, 0, filters, func(m jetstream.Msg, _ *jetstream.MsgMetadata) error {
		each(m)
		if got++; got >= limit {
			return store.ErrReadStop
		}
		return nil
	})
}

// Retry re-enqueues a failed inquiry under a new job, its scores kept:
// the record becomes pending again and leaves its set. Once the intake
// writes the ledger, a failed inquiry of the records layout is
// re-enqueued on the ledger. On error the inquiry stays failed and
// listed.
func (q *Queue) Retry(ctx context.Context, id string) error {
	rec, ref, err := q.Get(ctx, id)
	if err != nil {
		return err
	}
	if rec.Status != inquiry.Failed {
		return fmt.Errorf("%w: %s is %s", ErrNotFailed, id, rec.Status)
	}
	old := rec
	rec.Requeue(q.now())
	ctx, cancel := q.pubCtx(ctx)
	defer cancel()
	switch {
	case ref.ledger:
		_, err = q.ledger.Requeue(ctx, &rec, ref.rev)
		return err
	case q.writesLedger():
		// The ledger has no message of the inquiry (Get read it there
		// first): it takes the inquiry over; the records layout's entry
		// is then hidden (see Failed) and withdrawn.
		if _, err = q.ledger.Requeue(ctx, &rec, 0); err != nil {
			return err
		}
		_ = q.old.unlist(ctx, id)
		return nil
	}
	return q.old.retry(ctx, old, rec, ref.rev)
}

// retry re-enqueues failed record old, read at rev, as rec on records.
func (r *records) retry(ctx context.Context, old, rec inquiry.Record, rev uint64) error {
	newRev, err := r.store.Update(ctx, &rec, rev)
	if err != nil {
		return err
	}
	if err := r.unlist(ctx, rec.ID); err != nil {
		return r.undoRetry(old, newRev, err)
	}
	if err := r.publish(ctx, &rec); err != nil {
		return r.undoRetry(old, newRev, err)
	}
	return nil
}

func (r *records) undoRetry(old inquiry.Record, rev uint64, cause error) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.PublishTimeout)
	defer cancel()
	if _, err := r.store.Update(ctx, &old, rev); err != nil {
		return fmt.Errorf("retry %s: %w (and the record could not be restored: %v)", old.ID, cause, err)
	}
	// Not deduplicated: the same entry may have been purged a moment ago.
	if err := r.list(ctx, old, false); err != nil {
		return fmt.Errorf("retry %s: %w (and it could not be listed again: %v)", old.ID, cause, err)
	}
	return fmt.Errorf("retry %s: %w", old.ID, cause)
}
