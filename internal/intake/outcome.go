package intake

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/problem"
	"github.com/cellkit/cellkit/internal/store"
)

// Inquiries whose outcome the intake cannot tell: a write of its record or
// message whose answer never came, a rollback that failed, a record found
// whose message cannot be confirmed. Such a request is never answered as
// if nothing was accepted (a retry without a key would make a second
// inquiry, processed too): it gets 503 outcome-unknown naming the inquiry,
// and the instance settles what it may have written (Settle).

const (
	// settleEvery is how often Settle tries the inquiries it holds.
	settleEvery = 250 * time.Millisecond
	// settleLate is how long an inquiry of unknown outcome whose record
	// cannot be found is watched before it counts as not accepted: a write
	// whose answer was lost may be applied later than the try that sent it
	// (a stream electing a leader applies what the old one had proposed).
	settleLate = 30 * time.Second
	// maxDoubts bounds the inquiries held for Settle; past it they are
	// left to a keyed retry (logged).
	maxDoubts = 10_000
)

// doubts are the inquiries of unknown outcome this instance may have
// written, with when each was answered.
type doubts struct {
	mu    sync.Mutex
	since map[string]time.Time
}

// unknownOutcome answers that whether inquiry id was accepted is unknown:
// 503 outcome-unknown with Retry-After, the id in the problem's
// inquiry_id and its status URL in Location. This instance may have
// written it: Settle completes it, and the answer is not marked
// overloaded (a router neither sends it to another instance, which would
// make a second inquiry of an unkeyed request, nor takes it for a choice:
// the instance's queue failed).
func (h *Handler) unknownOutcome(w http.ResponseWriter, id string, err error, detail string) {
	h.log.Warn("inquiry outcome unknown", "id", id, "err", err)
	h.doubt(id)
	w.Header().Set("Location", prefixByID+id)
	problem.WriteRetry(w, problem.New(http.StatusServiceUnavailable, problem.OutcomeUnknown, detail).WithInquiry(id), h.shed.RetryAfter())
}

// doubt holds id for Settle.
func (h *Handler) doubt(id string) {
	h.doubts.mu.Lock()
	defer h.doubts.mu.Unlock()
	if _, ok := h.doubts.since[id]; ok {
		return
	}
	if len(h.doubts.since) >= maxDoubts {
		h.log.Error("too many inquiries of unknown outcome to settle: this one is left to a keyed retry", "id", id, "held", len(h.doubts.since))
		return
	}
	h.doubts.since[id] = h.now()
}

// Settle settles, until ctx ends, the inquiries this instance answered
// outcome-unknown after it may have written them (the cell runs it beside
// the intake). Once the store answers, a pending record gets its work
// message unless the stream holds it (queue.Replay): the inquiry is then
// accepted, and processed once. One whose record is still not found
// settleLate after the answer was not accepted. So a GET of the inquiry
// tells its outcome once it is settled: pending or final if accepted, 404
// if not. An instance that stops first leaves the rest to keyed retries.
func (h *Handler) Settle(ctx context.Context) {
	tick := time.NewTicker(settleEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if h.q.Conn().Status() != nats.CONNECTED {
			continue
		}
		h.doubts.mu.Lock()
		held := make(map[string]time.Time, len(h.doubts.since))
		for id, since := range h.doubts.since {
			held[id] = since
		}
		h.doubts.mu.Unlock()
		for id, since := range held {
			if ctx.Err() != nil {
				return
			}
			if h.settle(ctx, id, since) {
				h.doubts.mu.Lock()
				delete(h.doubts.since, id)
				h.doubts.mu.Unlock()
			}
		}
	}
}

// settle tries once to settle inquiry id, answered outcome-unknown at
// since; it reports whether it is settled.
func (h *Handler) settle(ctx context.Context, id string, since time.Time) bool {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.TryTimeout)
	defer cancel()
	rec, ref, err := h.q.Get(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		if h.now().Sub(since) < settleLate {
			return false
		}
		h.log.Info("inquiry of unknown outcome settled: not accepted (no record)", "id", id)
		return true
	case err != nil:
		return false
	case rec.Status == inquiry.Pending:
		if err := h.q.Replay(ctx, rec, ref); err != nil {
			return false
		}
	}
	h.log.Info("inquiry of unknown outcome settled: accepted", "id", id, "status", rec.Status)
	return true
}
