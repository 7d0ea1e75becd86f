package pipeline

import (
	"errors"

	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/store"
)

// An outcome is how one delivery of a work message was settled: the
// outcome label of cellkit_cell_deliveries_total and of the delivery
// seconds.
type outcome string

const (
	outDone        outcome = "done"        // completed; the record written, the message acked
	outFailed      outcome = "failed"      // failed for good; listed, written, acked
	outDead        outcome = "dead"        // failed and dead-lettered; listed, written, acked
	outRetry       outcome = "retry"       // left for redelivery after a backoff
	outInterrupted outcome = "interrupted" // the drain's timeout came first; redelivered
	outDuplicate   outcome = "duplicate"   // the record was settled already; acked
	outStale       outcome = "stale"       // the record is gone or another enqueue's; acked
	outMalformed   outcome = "malformed"   // not a work message; terminated
)

var deliveryOutcomes = []outcome{outDone, outFailed, outDead, outRetry, outInterrupted, outDuplicate, outStale, outMalformed}

// A failureKind names why an attempt failed: the kind label of
// cellkit_cell_failures_total.
type failureKind string

const (
	kindPanic       failureKind = "panic"        // a step panicked (a poison)
	kindCircuitOpen failureKind = "circuit_open" // an agency's breaker is open
	kindLimited     failureKind = "limited"      // an agency's adaptive limit refused a permit
	kindNoSession   failureKind = "no_session"   // no agency session within the pool's wait
	kindAgencyError failureKind = "agency_error" // an agency answered an error code
	kindTimeout     failureKind = "timeout"      // an agency call timed out
	kindTransport   failureKind = "transport"    // an agency session broke
	kindBusy        failureKind = "busy"         // no place at an agency's gate within GateWait
	kindCSS         failureKind = "css"          // the scoring step failed
	kindInternal    failureKind = "internal"     // the cell's own step failed
	kindCoreBanking failureKind = "core_banking" // the core banking step failed
)

var failureKinds = []failureKind{kindPanic, kindCircuitOpen, kindLimited, kindNoSession, kindAgencyError, kindTimeout, kindTransport, kindBusy, kindCSS, kindInternal, kindCoreBanking}

// A triage is what a delivery needs before any attempt, decided from the
// inquiry's record: the rules of deduplication and of dead-lettering
// that need no agency.
type triage int

const (
	triageRun        triage = iota // attempt it
	triageGone                     // the record is gone (its enqueue rolled back): ack, stale
	triageUnreadable               // the record cannot be read: retry later
	triageSuperseded               // a later enqueue of the inquiry owns the record: ack, stale
	triageDone                     // done already (a redelivery): ack, duplicate
	triageRelist                   // failed already: list it again (idempotent), then ack
	triageExhausted                // no attempt finished in MaxDeliver deliveries: dead-letter
	triageSuspect                  // in flight at QuarantineAfter crashes: dead-letter at once
)

// triageOf decides delivery number attempt of a message for job, rec being
// the record read (err the read's error).
func triageOf(rec inquiry.Record, err error, job string, attempt int, cfg Config) triage {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return triageGone
	case err != nil:
		return triageUnreadable
	case rec.Job != job:
		return triageSuperseded
	case rec.Status == inquiry.Done:
		return triageDone
	case rec.Status == inquiry.Failed:
		// Listed before the record is written (see finish); a record
		// failed by an older version may not be.
		return triageRelist
	case attempt > cfg.MaxDeliver:
		// Attempts that never finished (crashes, drain timeouts).
		return triageExhausted
	case rec.Crashes >= cfg.QuarantineAfter:
		// Counted by another instance, or by this one's start while the
		// message was already on its way.
		return triageSuspect
	}
	return triageRun
}

// A verdict is what an attempt's end means for the inquiry.
type verdict int

const (
	verdictDone        verdict = iota // complete it
	verdictInterrupted                // the drain's timeout cut it: redeliver, no attempt counted against it
	verdictPoison                     // it panicked a step: fail and dead-letter at once
	verdictFailed                     // a final failure: fail it
	verdictDeadLetter                 // a transient failure on the last delivery: dead-letter
	verdictRetry                      // a transient failure: retry after a backoff
)

// verdictOf judges delivery number attempt's end: f the failure (nil on
// success), interrupted whether the pipeline's context ended meanwhile.
func verdictOf(f *failure, interrupted bool, attempt int, cfg Config) verdict {
	switch {
	case f == nil:
		return verdictDone
	case interrupted:
		return verdictInterrupted
	case f.poison:
		return verdictPoison
	case !f.retry:
		return verdictFailed
	case attempt >= cfg.MaxDeliver:
		return verdictDeadLetter
	}
	return verdictRetry
}
