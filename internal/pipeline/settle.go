package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/queue"
	"github.com/cellkit/cellkit/internal/store"
)

// Settling a delivery: the record read, the triage, the attempt's verdict,
// the failure listed, the record written, the message acked or left for
// redelivery; see outcome.go for the rules.

// writeTimeout bounds a record write or a failure-stream publish; they run
// on their own context so that a drain timeout does not cut them half-way.
const writeTimeout = 5 * time.Second

// handle settles one message. free gives its worker's place back early, to
// a message that has to wait without working (a suspect).
func (p *Pipeline) handle(ctx context.Context, m *queue.Delivery, free func()) {
	began := p.now()
	if p.inflight.Add(1) == 1 {
		p.progress.Store(began.UnixNano())
	}
	p.m.inflight.Inc()
	defer func() {
		p.progress.Store(p.now().UnixNano())
		p.inflight.Add(-1)
		p.m.inflight.Dec()
	}()
	var service time.Duration
	out := p.settleGuarded(ctx, m, &service, free)
	p.m.inquiries.WithLabelValues(string(out)).Inc()
	p.m.seconds.WithLabelValues(string(out)).Observe(p.now().Sub(began).Seconds())
	switch out {
	case outRetry, outInterrupted:
	default:
		p.drained(service)
	}
}

// settleGuarded is settle, with a panic that escapes it (its own code,
// the store) recovered: the inquiry is then dead-lettered at once if it
// can be, else left for redelivery at the longest backoff, so that its
// attempts still end at MaxDeliver.
func (p *Pipeline) settleGuarded(ctx context.Context, m *queue.Delivery, service *time.Duration, free func()) (out outcome) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		f := p.panicked("pipeline", m.ID, r)
		out = p.deadLetterAfterPanic(m, f.reason)
	}()
	return p.settle(ctx, m, service, free)
}

// deadLetterAfterPanic fails and dead-letters m's inquiry after a panic
// outside its steps, reading its record again. A second panic, or a
// store that fails, leaves the message for redelivery at the longest
// backoff.
func (p *Pipeline) deadLetterAfterPanic(m *queue.Delivery, reason string) (out outcome) {
	later := func() outcome { // redelivered at the longest backoff
		p.nak(m, len(p.cfg.Backoff))
		return outRetry
	}
	defer func() {
		if r := recover(); r != nil {
			_ = p.panicked("pipeline", m.ID, r) // counted and logged; the message goes back at the longest backoff
			out = later()
		}
	}()
	if m.ID == "" {
		return later()
	}
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	rec, ref, err := p.q.Record(ctx, m)
	cancel()
	if err != nil || rec.Status != inquiry.Pending {
		return later()
	}
	return p.failDead(m, rec, ref, m.Attempt, reason)
}

// failDead fails rec for reason and dead-letters it at once.
func (p *Pipeline) failDead(m *queue.Delivery, rec inquiry.Record, ref queue.Ref, attempt int, reason string) outcome {
	rec.Dead = true
	rec.Fail(reason, p.now())
	return p.finish(m, rec, ref, attempt, outDead)
}

// settle handles m and returns the outcome; *service is set to the
// attempt's service time (see Options.Drained) when it made one.
func (p *Pipeline) settle(ctx context.Context, m *queue.Delivery, service *time.Duration, free func()) outcome {
	if m.ID == "" {
		p.log.Error("dropping a malformed work message", "subject", m.Subject(), "data", string(m.Data()))
		m.Term()
		return outMalformed
	}
	attempt := m.Attempt
	wctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	rec, ref, err := p.q.Record(wctx, m)
	cancel()
	if err == nil && p.held(rec.UserID) {
		// Nothing of a held user's is written here, not even a listing
		// or a dead letter: its inquiries are being copied elsewhere.
		return p.hold(ctx, m, rec.UserID, service, free)
	}
	switch triageOf(rec, err, m.Job, attempt, p.cfg) {
	case triageGone, triageSuperseded:
		m.Ack()
		return outStale
	case triageUnreadable:
		p.log.Warn("cannot read inquiry record", "id", m.ID, "err", err)
		p.nak(m, attempt)
		return outRetry
	case triageDone:
		m.Ack()
		return outDuplicate
	case triageRelist:
		wctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		defer cancel()
		if err := p.q.List(wctx, rec, ref); err != nil {
			p.nak(m, attempt)
			return outRetry
		}
		m.Ack()
		return outDuplicate
	case triageExhausted:
		return p.deadLetter(m, rec, ref, attempt, fmt.Sprintf("no attempt finished in %d deliveries", attempt-1))
	case triageSuspect:
		p.m.quarantined.Inc()
		return p.failDead(m, rec, ref, attempt, suspectedReason(rec.Crashes))
	}

	stopProgress := p.keepAlive(m)
	defer stopProgress()
	if rec.Crashes > 0 {
		// A suspect: in flight at a crash. It runs alone among suspects,
		// so that a crash while it runs names it; it waits for its turn
		// without holding a worker's place.
		free()
		select {
		case p.suspects <- struct{}{}:
			defer func() { <-p.suspects }()
		case <-ctx.Done():
			stopProgress()
			m.Nak()
			return outInterrupted
		}
	}
	rec.Attempts = attempt
	res, f := p.attempt(ctx, &rec, service)
	stopProgress()
	v := verdictOf(f, ctx.Err() != nil, attempt, p.cfg)
	if f != nil && v != verdictInterrupted {
		p.m.failures.WithLabelValues(string(f.kind)).Inc()
	}
	switch v {
	case verdictDone:
		rec.Complete(res, p.now())
		return p.finish(m, rec, ref, attempt, outDone)
	case verdictInterrupted:
		// Drain timeout: leave it for redelivery. The nak makes it
		// available at once to this server; after a restart the server
		// redelivers it when its ack wait expires.
		m.Nak()
		return outInterrupted
	case verdictPoison:
		return p.failDead(m, rec, ref, attempt, f.reason)
	case verdictFailed:
		rec.Fail(f.reason, p.now())
		return p.finish(m, rec, ref, attempt, outFailed)
	case verdictDeadLetter:
		return p.deadLetter(m, rec, ref, attempt, f.reason)
	}
	rec.Reason, rec.Updated = f.reason, p.now().UTC()
	p.write(m, &rec, ref) // keeps the partial scores; a lost write only costs calls
	p.nak(m, attempt)
	return outRetry
}

// holdPoll is how often a held delivery looks whether its user is let go
// or its inquiry handed over.
const holdPoll = 250 * time.Millisecond

// hold keeps m, whose user is held (Options.Held), in progress with its
// worker's place given back until the user is let go or the inquiry is
// handed over to another cell (its record's job then is not m's: stale),
// then settles it again.
func (p *Pipeline) hold(ctx context.Context, m *queue.Delivery, user string, service *time.Duration, free func()) outcome {
	free()
	stop := p.keepAlive(m)
	defer stop()
	for p.held(user) {
		select {
		case <-ctx.Done():
			m.Nak()
			return outInterrupted
		case <-time.After(holdPoll):
		}
		wctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		rec, _, err := p.q.Record(wctx, m)
		cancel()
		if err == nil && rec.Job != m.Job {
			m.Ack()
			return outStale
		}
	}
	stop()
	return p.settle(ctx, m, service, func() {})
}

func (p *Pipeline) deadLetter(m *queue.Delivery, rec inquiry.Record, ref queue.Ref, attempt int, reason string) outcome {
	return p.failDead(m, rec, ref, attempt, fmt.Sprintf("dead-lettered after %d attempts: %s", min(attempt, p.cfg.MaxDeliver), reason))
}

// finish lists a failure, writes the final record, then acks. The listing
// comes first so that an inquiry anyone can see failed is always in the
// retry console (on the ledger the write is the listing); a listing
// whose record write then fails is withdrawn, and the console hides one
// whose record is not failed (see queue.Failed).
func (p *Pipeline) finish(m *queue.Delivery, rec inquiry.Record, ref queue.Ref, attempt int, out outcome) outcome {
	if rec.Status == inquiry.Failed {
		wctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		err := p.q.List(wctx, rec, ref)
		cancel()
		if err != nil {
			p.log.Warn("cannot list failed inquiry", "id", rec.ID, "err", err)
			p.nak(m, attempt)
			return outRetry
		}
	}
	switch p.write(m, &rec, ref) {
	case writeOK:
	case writeSettled:
		return outDuplicate
	case writeStale:
		return outStale
	case writeFailed:
		if rec.Status == inquiry.Failed {
			wctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
			if err := p.q.Unlist(wctx, rec.ID, ref); err != nil {
				p.log.Warn("cannot withdraw the listing of an inquiry not failed", "id", rec.ID, "err", err)
			}
			cancel()
		}
		p.nak(m, attempt)
		return outRetry
	}
	m.Ack()
	p.m.latency.Observe(p.now().Sub(rec.Created).Seconds())
	p.notify.enqueue(rec)
	return out
}

type writeResult int

const (
	writeOK      writeResult = iota
	writeSettled             // someone else settled the record: ack
	writeStale               // the record is gone or has another job: ack
	writeFailed              // the store failed: retry later
)

// write stores rec over ref. On a conflict it re-reads: another
// delivery may have settled it, a replay may have touched it (then it is
// written over the new revision), or it may have been rolled back.
func (p *Pipeline) write(m *queue.Delivery, rec *inquiry.Record, ref queue.Ref) writeResult {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	// Each lap loses to a concurrent replay (an idempotent retry of the
	// request touches the record); there are only as many as the client
	// sent at once.
	for range 32 {
		_, err := p.q.Update(ctx, rec, ref)
		if err == nil {
			return writeOK
		}
		if !errors.Is(err, store.ErrConflict) {
			p.log.Warn("cannot write inquiry record", "id", rec.ID, "err", err)
			return writeFailed
		}
		cur, curRef, err := p.q.Record(ctx, m) // never gone for a message the ledger holds: behind, retried
		switch {
		case errors.Is(err, store.ErrNotFound) || (err == nil && cur.Job != rec.Job):
			m.Ack()
			return writeStale
		case err != nil:
			return writeFailed
		case cur.Status != inquiry.Pending:
			m.Ack()
			return writeSettled
		}
		ref = curRef
	}
	return writeFailed
}

func (p *Pipeline) nak(m *queue.Delivery, attempt int) {
	i := min(max(attempt-1, 0), len(p.cfg.Backoff)-1)
	m.NakWithDelay(p.cfg.Backoff[i])
}
