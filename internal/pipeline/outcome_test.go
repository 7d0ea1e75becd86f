package pipeline

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/store"
)

// The rules that settle a delivery before any attempt: a redelivery of
// what is settled is a duplicate, a message of an enqueue that was rolled
// back or superseded is stale, and an inquiry is dead-lettered once its
// deliveries run out or its crashes make it a suspect; each rule in the
// order it is asked, so a settled record wins over a spent count.
func TestTriage(t *testing.T) {
	cfg := Config{MaxDeliver: 5, QuarantineAfter: 2}
	pending := inquiry.Record{Status: inquiry.Pending, Job: "j1"}
	with := func(f func(*inquiry.Record)) inquiry.Record { r := pending; f(&r); return r }
	for _, tc := range []struct {
		name    string
		rec     inquiry.Record
		err     error
		job     string
		attempt int
		want    triage
	}{
		{"a pending record, first delivery", pending, nil, "j1", 1, triageRun},
		{"the last delivery still runs", pending, nil, "j1", 5, triageRun},
		{"a delivery past MaxDeliver", pending, nil, "j1", 6, triageExhausted},
		{"the record is gone", inquiry.Record{}, store.ErrNotFound, "j1", 1, triageGone},
		{"gone, wrapped", inquiry.Record{}, fmt.Errorf("get: %w", store.ErrNotFound), "j1", 1, triageGone},
		{"the store fails", inquiry.Record{}, errors.New("timeout"), "j1", 1, triageUnreadable},
		{"another enqueue's record", pending, nil, "j0", 1, triageSuperseded},
		{"superseded wins over spent deliveries", pending, nil, "j0", 9, triageSuperseded},
		{"done: a redelivery", with(func(r *inquiry.Record) { r.Status = inquiry.Done }), nil, "j1", 2, triageDone},
		{"done wins over spent deliveries", with(func(r *inquiry.Record) { r.Status = inquiry.Done }), nil, "j1", 9, triageDone},
		{"failed: listed again", with(func(r *inquiry.Record) { r.Status = inquiry.Failed }), nil, "j1", 2, triageRelist},
		{"failed and dead: listed again", with(func(r *inquiry.Record) { r.Status, r.Dead = inquiry.Failed, true }), nil, "j1", 9, triageRelist},
		{"one crash: a suspect that runs", with(func(r *inquiry.Record) { r.Crashes = 1 }), nil, "j1", 2, triageRun},
		{"crashes at QuarantineAfter", with(func(r *inquiry.Record) { r.Crashes = 2 }), nil, "j1", 2, triageSuspect},
		{"spent deliveries before crashes", with(func(r *inquiry.Record) { r.Crashes = 3 }), nil, "j1", 6, triageExhausted},
	} {
		if got := triageOf(tc.rec, tc.err, tc.job, tc.attempt, cfg); got != tc.want {
			t.Errorf("%s: triage %d, want %d", tc.name, got, tc.want)
		}
	}
}

// What an attempt's end means: a success completes even when the drain's
// timeout came meanwhile; a failure cut by the drain is redelivered
// whatever its kind; a panic is dead-lettered at once; a final failure
// fails; a transient one is retried until the last delivery, which
// dead-letters it.
func TestVerdict(t *testing.T) {
	cfg := Config{MaxDeliver: 3}
	final := &failure{kind: kindCircuitOpen, reason: "open"}
	transient := &failure{kind: kindBusy, reason: "busy", retry: true}
	poison := &failure{kind: kindPanic, reason: "panic", poison: true}
	for _, tc := range []struct {
		name        string
		f           *failure
		interrupted bool
		attempt     int
		want        verdict
	}{
		{"success", nil, false, 1, verdictDone},
		{"success as the drain ends", nil, true, 1, verdictDone},
		{"success on the last delivery", nil, false, 3, verdictDone},
		{"a final failure", final, false, 1, verdictFailed},
		{"a final failure cut by the drain", final, true, 1, verdictInterrupted},
		{"a poison", poison, false, 1, verdictPoison},
		{"a poison cut by the drain", poison, true, 1, verdictInterrupted},
		{"transient, first delivery", transient, false, 1, verdictRetry},
		{"transient, before the last", transient, false, 2, verdictRetry},
		{"transient, the last delivery", transient, false, 3, verdictDeadLetter},
		{"transient, past the last", transient, false, 4, verdictDeadLetter},
		{"transient cut by the drain on the last", transient, true, 3, verdictInterrupted},
	} {
		if got := verdictOf(tc.f, tc.interrupted, tc.attempt, cfg); got != tc.want {
			t.Errorf("%s: verdict %d, want %d", tc.name, got, tc.want)
		}
	}
}
