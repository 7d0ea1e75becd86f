package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/cellkit/cellkit/internal/agency"
)

// failure is why an attempt did not produce a result.
type failure struct {
	kind   failureKind
	reason string // for the record and the error stream
	retry  bool   // transient: retry with backoff, dead-letter after the last attempt
	poison bool   // a panic: failed and dead-lettered at once
}

func (f *failure) Error() string { return f.reason }

// agencyFailure classifies an agency call's error. An agency failure is
// final for the attempt: the breaker exists to fail fast, and the retry
// console re-enqueues such inquiries once the agency is back. The one
// exception is a permit refused by the adaptive limit: the gate follows
// the limit, so a refusal is a race with a limit that just shrank, and the
// inquiry is retried rather than failed for the agency being slow.
func agencyFailure(name string, err error) *failure {
	var ce *agency.CodeError
	switch {
	case errors.Is(err, agency.ErrCircuitOpen):
		return &failure{kind: kindCircuitOpen, reason: name + ": circuit breaker open, agency calls suspended"}
	case errors.Is(err, agency.ErrLimited):
		return &failure{kind: kindLimited, reason: name + ": agency slowed down, concurrency limit reached", retry: true}
	case errors.Is(err, agency.ErrPoolExhausted):
		return &failure{kind: kindNoSession, reason: name + ": no agency session available (agency unreachable?)"}
	case errors.As(err, &ce):
		return &failure{kind: kindAgencyError, reason: fmt.Sprintf("%s: agency answered code %s", name, ce.Code)}
	case errors.Is(err, context.DeadlineExceeded):
		return &failure{kind: kindTimeout, reason: name + ": agency call timed out"}
	default:
		return &failure{kind: kindTransport, reason: name + ": " + err.Error()}
	}
}
