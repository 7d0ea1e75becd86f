package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/store"
)

// Fault containment. A panic while one inquiry is processed (an agency's
// answer, the score, core banking, the store, the pipeline's own code) is
// recovered where that inquiry's work runs: the inquiry is failed with
// ReasonInternal and dead-lettered at once, the panic is logged with its
// stack and counted (cellkit_cell_panics_total{step}), and the cell's other
// work goes on. Resources the panicking code held (a place at an agency's
// gate, a session, a breaker permit) are released by deferred code on the
// way out, so a panic leaks nothing.
//
// A panic no recover reaches (another goroutine's), an OOM kill or any
// other crash ends the process. The inquiries it had in flight (the
// journal, Options.Journal) are then suspects: Crashed counts the crash in
// their records. A suspect runs alone among suspects, so that a crash while
// it runs names it; an inquiry in flight at Config.QuarantineAfter crashes
// is quarantined, failed with ReasonSuspected and dead-lettered, and a
// crash loop ends after that many crashes.

// Reasons of the inquiries failed by containment.
const (
	ReasonInternal  = inquiry.ReasonInternal
	ReasonSuspected = "suspected poison"
)

// Journal records the inquiries being processed (internal/inflight).
type Journal interface {
	Begin(id string)
	End(id string)
}

type noJournal struct{}

func (noJournal) Begin(string) {}
func (noJournal) End(string)   {}

// guard runs f, the step of inquiry id's processing, turning a panic into
// a failure that dead-letters the inquiry.
func (p *Pipeline) guard(step, id string, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = p.panicked(step, id, r)
		}
	}()
	return f()
}

// panicked logs and counts a panic recovered in inquiry id's processing
// and returns the failure that dead-letters it; call it from the deferred
// function that recovered r.
func (p *Pipeline) panicked(step, id string, r any) *failure {
	logPanic(p.log, p.m, "panic while processing an inquiry: it is failed and dead-lettered; the cell goes on", step, r, "id", id)
	return &failure{kind: kindPanic, reason: ReasonInternal, poison: true}
}

// Recovered logs and counts a panic the cell recovered outside the
// pipeline (an intake or admin request: step "intake", "admin"); call it
// from the deferred function that recovered r.
func (p *Pipeline) Recovered(step string, r any, attrs ...any) {
	logPanic(p.log, p.m, "panic recovered: the request gets 500; the cell goes on", step, r, attrs...)
}

// logPanic logs a recovered panic with its stack and counts it in
// cellkit_cell_panics_total{step}. Called (indirectly) from the deferred
// function that recovered r, the stack still holds the panic's frames.
func logPanic(log *slog.Logger, m *metrics, msg, step string, r any, attrs ...any) {
	m.panics.WithLabelValues(step).Inc()
	log.Error(msg, append([]any{"step", step, "panic", fmt.Sprint(r), "stack", string(debug.Stack())}, attrs...)...)
}

// Crashed counts a crash of the process in the records of the inquiries
// it had in flight (ids, from the journal), and quarantines those in flight
// at QuarantineAfter crashes: failed with ReasonSuspected, dead-lettered.
// Call it before Run. It returns the quarantined IDs; done, if not nil, is
// called after each ID has been dealt with (so that a crash meanwhile does
// not count it twice).
func (p *Pipeline) Crashed(ctx context.Context, ids []string, done func(id string)) ([]string, error) {
	var quarantined []string
	for _, id := range ids {
		q, err := p.crashedOne(ctx, id)
		if err != nil {
			return quarantined, fmt.Errorf("count a crash for inquiry %s: %w", id, err)
		}
		if q {
			quarantined = append(quarantined, id)
		}
		if done != nil {
			done(id)
		}
	}
	return quarantined, nil
}

func (p *Pipeline) crashedOne(ctx context.Context, id string) (bool, error) {
	for range 8 { // a conflict is a concurrent write (another instance, a replay): read again
		rec, ref, err := p.q.Get(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if rec.Status != inquiry.Pending {
			return false, nil
		}
		rec.Crashes++
		quarantine := rec.Crashes >= p.cfg.QuarantineAfter
		if quarantine {
			rec.Dead = true
			rec.Fail(suspectedReason(rec.Crashes), p.now())
			if err := p.q.List(ctx, rec, ref); err != nil {
				return false, err
			}
		}
		_, err = p.q.Update(ctx, &rec, ref)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return false, err
		}
		if quarantine {
			p.m.quarantined.Inc()
			p.log.Error("inquiry quarantined: it was in flight at every one of the cell's last crashes", "id", id, "crashes", rec.Crashes)
		} else {
			p.log.Warn("inquiry in flight at a crash: it will run alone among suspects", "id", id, "crashes", rec.Crashes)
		}
		return quarantine, nil
	}
	return false, errors.New("too many concurrent writes")
}

// suspectedReason is the failure reason of an inquiry quarantined after it
// was in flight at n crashes.
func suspectedReason(n int) string {
	return fmt.Sprintf("%s: in flight at %d crashes of the cell", ReasonSuspected, n)
}
