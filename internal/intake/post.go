package intake

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/httpx"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/problem"
	"github.com/cellkit/cellkit/internal/queue"
	"github.com/cellkit/cellkit/internal/store"
	"github.com/nats-io/nats.go"
)

// post takes a new inquiry: the request read, the cell's refusals
// (closed, disk, shedding, queue), the key and the map's fence, then the
// record and the queued job. One piece: each step answers and returns,
// and their order is the contract (nothing is written before every
// refusal was made). A keyed retry finds its inquiry here whichever cell
// accepted it: the user's inquiries moved here with the user.
func (h *Handler) post(w http.ResponseWriter, r *http.Request) {
	if !h.IsOpen() {
		// A closed intake is usually a drain: a user this cell no longer
		// owns gets 421, so that the router refreshes its map and retries on
		// the new owner instead of failing the user; only users it still
		// owns get the 503.
		req, ok := h.readRequest(w, r)
		if !ok {
			return
		}
		if m := h.cmap(); m != nil {
			if owner := m.Lookup(req.UserID).Cell; owner != "" && owner != h.cfg.Cell && !h.fence(w, r, req.UserID) {
				return
			}
		}
		h.shedNow(w, shedClosed, "cell "+h.cfg.Cell+" is not taking new inquiries (draining or starting)", h.cfg.ClosedRetryAfter)
		return
	}
	lane, ok := laneOf(w, r)
	if !ok {
		return
	}
	if h.disk != nil && h.disk.Refusing() {
		h.shedNow(w, shedStorage, "cell "+h.cfg.Cell+" is not taking new inquiries: its store is near full (queued ones go on)", h.cfg.StorageRetryAfter)
		return
	}
	if d := h.shed.Admit(lane); !d.OK {
		h.m.laneShed.WithLabelValues(laneName(lane)).Inc()
		h.shedNow(w, d.Reason, fmt.Sprintf("cell %s is overloaded: oldest pending %s inquiry %s old, %d queued ahead", h.cfg.Cell, laneName(lane), d.Age.Round(time.Millisecond), d.Depth), d.RetryAfter)
		return
	}
	if h.q.Conn().Status() != nats.CONNECTED {
		h.shedNow(w, shedNATS, "cell "+h.cfg.Cell+" cannot reach its queue", h.shed.RetryAfter())
		return
	}
	req, ok := h.readRequest(w, r)
	if !ok {
		return
	}
	if lane != "" {
		req.Priority = lane // the router's decision, from its client's policy
	}
	idemKey := r.Header.Get(api.HeaderIdemKey)
	if _, set := r.Header[http.CanonicalHeaderKey(api.HeaderIdemKey)]; set && !api.ValidIdempotencyKey(idemKey) {
		problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidHeader, "Idempotency-Key must be 1–255 printable ASCII characters").WithField(api.HeaderIdemKey))
		return
	}
	client, ok := clientOf(w, r)
	if !ok {
		return
	}
	if !h.fence(w, r, req.UserID) {
		return
	}
	if h.moving != nil && h.moving(req.UserID) {
		h.shedNow(w, shedMoving, "the user's inquiries are being moved from cell "+h.cfg.Cell+" to the cell that takes the user's slot; nothing was accepted", time.Second)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	h.cancelOnStoreFailure(ctx, cancel)
	slot := h.cmap().SlotOf(req.UserID)
	id := inquiry.NewID(h.cfg.Cell, slot)
	if idemKey != "" {
		id = inquiry.KeyID(h.cfg.Cell, slot, client, req.UserID, idemKey)
	}
	rec := inquiry.NewRecord(id, h.cfg.Cell, req, h.now())
	rec.Client = client
	a := &attempt{deadline: h.now().Add(h.cfg.LeaderWait), keyed: idemKey != ""}
	defer func() {
		if a.waited {
			h.m.leaderWaits.Inc()
		}
	}()
	faultAccept(pointBeforeWrite, r)
	got, err := h.enqueue(ctx, a, &rec)
	if err == nil {
		faultAccept(pointAfterWrite, r)
	}
	if errors.Is(err, store.ErrExists) {
		h.replay(ctx, a, w, rec)
		return
	}
	if err != nil {
		h.enqueueFailed(w, rec.ID, err)
		return
	}
	h.taken(got.Priority)
	h.accepted(w, got, false)
}

// cancelOnStoreFailure cancels an acceptance's context when the store
// fails a write (a publish waiting on a full disk gets no answer).
func (h *Handler) cancelOnStoreFailure(ctx context.Context, cancel context.CancelFunc) {
	if h.disk == nil {
		return
	}
	failing := h.disk.Failing()
	go func() {
		select {
		case <-failing:
			cancel()
		case <-ctx.Done():
		}
	}()
}

// Points of an acceptance a faults build can kill the process at
// (faults.go).
const (
	pointBeforeWrite = "before-write" // every refusal made, nothing written
	pointAfterWrite  = "after-write"  // the write acknowledged, not yet answered
)

// enqueueFailed answers a new inquiry the queue did not take: 503
// outcome-unknown when it may have been (queue.ErrUncertain), whatever
// else is wrong; else the reason nothing was accepted.
func (h *Handler) enqueueFailed(w http.ResponseWriter, id string, err error) {
	if errors.Is(err, queue.ErrUncertain) {
		h.unknownOutcome(w, id, err, "cell "+h.cfg.Cell+" cannot tell whether inquiry "+id+" was accepted: a write to its queue got no answer. "+
			"Retry with the same Idempotency-Key; without one, do not send it again: GET the inquiry, which the cell settles once its queue answers")
		return
	}
	if h.disk != nil && h.disk.Refusing() {
		h.log.Warn("inquiry not accepted: the store refuses new work", "id", id, "err", err)
		h.shedNow(w, shedStorage, "cell "+h.cfg.Cell+" could not store the inquiry: its store is near full or failed a write; nothing was accepted", h.cfg.StorageRetryAfter)
		return
	}
	if errors.Is(err, queue.ErrFull) {
		h.shedNow(w, shedFull, "cell "+h.cfg.Cell+" queue is full", h.shed.RetryAfter())
		return
	}
	h.log.Warn("inquiry not accepted", "id", id, "err", err)
	h.shedNow(w, shedNATS, "cell "+h.cfg.Cell+" could not queue the inquiry; nothing was accepted", h.shed.RetryAfter())
}

// taken counts a new inquiry accepted into lane.
func (h *Handler) taken(lane inquiry.Priority) {
	h.shed.Accepted(lane)
	h.m.laneTaken.WithLabelValues(laneName(lane)).Inc()
}

func (h *Handler) accepted(w http.ResponseWriter, rec inquiry.Record, replayed bool) {
	body := Accepted{ID: rec.ID, Cell: h.cfg.Cell, Status: rec.Status, StatusURL: prefixByID + rec.ID}
	w.Header().Set("Location", body.StatusURL)
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	httpx.JSON(w, http.StatusAccepted, body)
}

// Accepted is the 202 body.
type Accepted struct {
	ID        string         `json:"id"`
	Cell      string         `json:"cell"`
	Status    inquiry.Status `json:"status"`
	StatusURL string         `json:"status_url"`
}

// fence answers 421 unless this cell owns the user in its newest map or
// the caller's map is newer.
func (h *Handler) fence(w http.ResponseWriter, r *http.Request, user string) bool {
	m := h.cmap()
	if m == nil {
		h.shedNow(w, shedClosed, "cell "+h.cfg.Cell+" has no cell map yet", h.cfg.ClosedRetryAfter)
		return false
	}
	var theirs int64
	if v := r.Header.Get(api.HeaderMapVersion); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidHeader, api.HeaderMapVersion+" must be a positive integer").WithField(api.HeaderMapVersion))
			return false
		}
		theirs = n
	}
	if v := r.Header.Get(api.HeaderSlot); v != "" {
		if n, err := strconv.Atoi(v); err != nil || n < 0 || n >= m.Slots() {
			problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidHeader, fmt.Sprintf("%s must be a slot in [0, %d)", api.HeaderSlot, m.Slots())).WithField(api.HeaderSlot))
			return false
		}
	}
	if theirs > m.Version() {
		return true // the caller knows a newer map than ours
	}
	route := m.Lookup(user)
	if route.Cell == h.cfg.Cell {
		return true
	}
	h.m.misdirected.Inc()
	w.Header().Set(api.HeaderMapVersion, strconv.FormatInt(m.Version(), 10))
	owner := route.Cell
	if owner == "" {
		owner = "no active cell"
	}
	problem.Write(w, problem.New(http.StatusMisdirectedRequest, problem.Misdirected,
		fmt.Sprintf("cell %s does not own slot %d in map version %d (owner: %s); refresh the map", h.cfg.Cell, route.Slot, m.Version(), owner)).WithField(api.HeaderMapVersion))
	return false
}
