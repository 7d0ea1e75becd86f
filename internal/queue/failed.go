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

// Failure is one entry of the error stream or the DLQ.
type Failure struct {
	ID       string    `json:"id"`
	UserID   string    `json:"user_id"`
	Set      string    `json:"set"`
	Reason   string    `json:"reason"`
	Attempts int       `json:"attempts"`
	At       time.Time `json:"at"`
}

// AddFailure puts a failed record on the error stream, or on the DLQ if
// dead. Publishing the same failure twice within the duplicate window
// stores it once.
func (q *Queue) AddFailure(ctx context.Context, rec inquiry.Record, dead bool) error {
	return q.addFailure(ctx, rec, dead, true)
}

func (q *Queue) addFailure(ctx context.Context, rec inquiry.Record, dead, dedup bool) error {
	f := Failure{ID: rec.ID, UserID: rec.UserID, Set: SetError, Reason: rec.Reason, Attempts: rec.Attempts, At: rec.Updated}
	subj := errorSubject(q.cfg.Cell, rec.ID)
	if dead {
		f.Set, subj = SetDLQ, dlqSubject(q.cfg.Cell, rec.ID)
	}
	data, err := json.Marshal(f)
	if err != nil {
		return err
	}
	ctx, cancel := q.pubCtx(ctx)
	defer cancel()
	var opts []jetstream.PublishOpt
	if dedup {
		opts = append(opts, jetstream.WithMsgID(rec.MsgID()+"."+f.Set))
	}
	_, err = q.js.PublishMsg(ctx, &nats.Msg{Subject: subj, Data: data}, opts...)
	if err != nil {
		return fmt.Errorf("put %s on the %s stream: %w", rec.ID, f.Set, err)
	}
	return nil
}

// Unlist withdraws an inquiry's entries from both sets: the pipeline calls
// it when the record of an inquiry it has just listed could not be written.
func (q *Queue) Unlist(ctx context.Context, id string) error { return q.removeFailure(ctx, id) }

// removeFailure drops an inquiry from both sets.
func (q *Queue) removeFailure(ctx context.Context, id string) error {
	var errs []error
	for _, s := range []struct {
		st   jetstream.Stream
		subj string
	}{{q.errs, errorSubject(q.cfg.Cell, id)}, {q.dlq, dlqSubject(q.cfg.Cell, id)}} {
		if err := s.st.Purge(ctx, jetstream.WithPurgeSubject(s.subj)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// FailedCounts returns the sizes of the error stream and the DLQ.
func (q *Queue) FailedCounts(ctx context.Context) (failed, dead int, err error) {
	ei, err := q.errs.Info(ctx)
	if err != nil {
		return 0, 0, err
	}
	di, err := q.dlq.Info(ctx)
	if err != nil {
		return 0, 0, err
	}
	return int(ei.State.Msgs), int(di.State.Msgs), nil
}

// unlistedAfter is how long an entry whose record is not failed may stay
// listed before Failed withdraws it: the pipeline lists a failure just
// before it writes the record, so a young one may be about to become true.
const unlistedAfter = time.Minute

// Failed lists up to limit entries of each set, oldest first. Only entries
// whose record is failed are listed: one left behind by a record write that
// failed (the inquiry was then retried and may have succeeded) is hidden,
// and withdrawn once it is older than unlistedAfter.
func (q *Queue) Failed(ctx context.Context, limit int) ([]Failure, error) {
	var out []Failure
	for _, st := range []jetstream.Stream{q.errs, q.dlq} {
		fs, err := readAll(ctx, st, limit)
		if err != nil {
			return nil, err
		}
		for _, f := range fs {
			rec, _, err := q.store.Get(ctx, f.ID)
			switch {
			case err == nil && rec.Status == inquiry.Failed:
				out = append(out, f)
			case err != nil && !errors.Is(err, store.ErrNotFound):
				return nil, err
			case q.now().Sub(f.At) > unlistedAfter:
				if err := q.removeFailure(ctx, f.ID); err != nil {
					return nil, err
				}
			}
		}
	}
	return out, nil
}

func readAll(ctx context.Context, st jetstream.Stream, limit int) ([]Failure, error) {
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	n := min(int(info.State.Msgs), limit)
	if n <= 0 {
		return nil, nil
	}
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	var out []Failure
	for len(out) < n {
		batch, err := c.Fetch(n-len(out), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return nil, err
		}
		got := 0
		for m := range batch.Messages() {
			got++
			var f Failure
			if json.Unmarshal(m.Data(), &f) == nil {
				out = append(out, f)
			}
			if md, err := m.Metadata(); err == nil && md.NumPending == 0 {
				return out, nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return out, err
		}
		if got == 0 {
			break
		}
	}
	return out, nil
}

// Retry re-enqueues a failed inquiry under a new job: the record becomes
// pending again, leaves the failure sets and gets a fresh work message. On
// error the record is failed again and stays listed.
func (q *Queue) Retry(ctx context.Context, id string) error {
	rec, rev, err := q.store.Get(ctx, id)
	if err != nil {
		return err
	}
	if rec.Status != inquiry.Failed {
		return fmt.Errorf("%w: %s is %s", ErrNotFailed, id, rec.Status)
	}
	old := rec
	rec.Requeue(q.now())
	newRev, err := q.store.Update(ctx, &rec, rev)
	if err != nil {
		return err
	}
	if err := q.removeFailure(ctx, id); err != nil {
		return q.undoRetry(old, newRev, err)
	}
	if err := q.publish(ctx, &rec); err != nil {
		return q.undoRetry(old, newRev, err)
	}
	return nil
}

func (q *Queue) undoRetry(old inquiry.Record, rev uint64, cause error) error {
	ctx, cancel := context.WithTimeout(context.Background(), q.cfg.PublishTimeout)
	defer cancel()
	if _, err := q.store.Update(ctx, &old, rev); err != nil {
		return fmt.Errorf("retry %s: %w (and the record could not be restored: %v)", old.ID, cause, err)
	}
	// Not deduplicated: the same entry may have been purged a moment ago.
	if err := q.addFailure(ctx, old, old.Dead, false); err != nil {
		return fmt.Errorf("retry %s: %w (and it could not be listed again: %v)", old.ID, cause, err)
	}
	return fmt.Errorf("retry %s: %w", old.ID, cause)
}
