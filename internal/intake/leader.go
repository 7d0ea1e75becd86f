package intake

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/cellkit/cellkit/internal/backoff"
	"github.com/cellkit/cellkit/internal/httpx"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/problem"
	"github.com/cellkit/cellkit/internal/queue"
	"github.com/cellkit/cellkit/internal/store"
)

// The cell's streams and their leader: new inquiries wait out an election
// (untilLeader), and the routers' health check says when an instance has
// had none for a while.

// The health answer of an instance waiting for its streams' leader.
const (
	leaderlessHealth = time.Second
	pingTimeout      = 150 * time.Millisecond
)

// attempt is one request's taking of a new inquiry: until when it waits
// for the streams' leader, whether it did (counted once per request), and
// the jobs its tries wrote under (see replay), and whether its id is an
// Idempotency-Key's.
type attempt struct {
	deadline time.Time
	keyed    bool
	waited   bool
	jobs     []string
}

// untilLeader runs f, a write or read of the cell's streams, again while
// they have no leader (queue.NotReady), until a's deadline: a new inquiry
// waits out an election instead of failing. Each try is bounded by
// TryTimeout. Trying again is safe: a record that a try wrote before its
// answer was lost is found by the next (store.ErrExists: replayed), and a
// message stored by a try whose PubAck was lost is the same job,
// deduplicated by its Nats-Msg-Id.
func (h *Handler) untilLeader(ctx context.Context, a *attempt, f func(context.Context) error) error {
	for n := 1; ; n++ {
		tctx, cancel := context.WithTimeout(ctx, h.cfg.TryTimeout)
		err := f(tctx)
		cancel()
		notReady := queue.NotReady(err)
		switch {
		case notReady:
			h.leaderless.CompareAndSwap(0, h.now().UnixNano())
		case err == nil:
			// Only a write that went through says the streams have a
			// leader again (a record found to exist is a read).
			h.leaderless.Store(0)
		}
		a.waited = a.waited || n > 1
		if !notReady || ctx.Err() != nil || !h.now().Before(a.deadline) || (h.disk != nil && h.disk.Refusing()) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff.Jittered(50*time.Millisecond, 200*time.Millisecond, n)):
		}
	}
}

// enqueue is Enqueue, waiting for the streams' leader; a.jobs gets the
// jobs its tries wrote under (see replay). Each try after
// the first is a new job: a message of an earlier try's job that the
// server refused is not the next try's, and a record of that job rolled
// back leaves nothing of it behind. A try whose outcome is unknown (its
// record and message kept) is found by the next (store.ErrExists:
// replayed), and once one try's outcome is unknown, so is the whole
// enqueue's unless a later one settles it.
func (h *Handler) enqueue(ctx context.Context, a *attempt, rec *inquiry.Record) (inquiry.Record, error) {
	var got inquiry.Record
	doubt, tries := false, 0
	err := h.untilLeader(ctx, a, func(tctx context.Context) (err error) {
		if tries++; tries > 1 {
			rec.Job = inquiry.NewJob()
		}
		a.jobs = append(a.jobs, rec.Job)
		got, err = h.q.Enqueue(tctx, rec, a.keyed)
		doubt = doubt || errors.Is(err, queue.ErrUncertain)
		return err
	})
	if doubt && err != nil && !errors.Is(err, queue.ErrUncertain) && !errors.Is(err, store.ErrExists) {
		err = fmt.Errorf("%w: an earlier try's outcome is unknown, the last failed: %w", queue.ErrUncertain, err)
	}
	return got, err
}

// replay answers a request whose inquiry's record exists: the inquiry
// an earlier request with the same Idempotency-Key made, or the one an
// earlier try of this request wrote (its job is one of a.jobs: the answer
// is then a new inquiry's, not a replay's), waiting for the streams'
// leader. The record exists, so a failure from here on leaves the
// inquiry's outcome unknown.
func (h *Handler) replay(ctx context.Context, a *attempt, w http.ResponseWriter, want inquiry.Record) {
	// A conflict is a concurrent write (another instance, a replay, the
	// rollback of a try whose answer was lost): read again, three times,
	// and while the leader deadline lasts (an election makes tries that
	// time out, and their rollbacks, conflict more).
	for n := 0; n < 3 || (h.now().Before(a.deadline) && ctx.Err() == nil); n++ {
		if n >= 3 {
			time.Sleep(backoff.Jittered(50*time.Millisecond, 200*time.Millisecond, n-2))
		}
		var cur inquiry.Record
		var ref queue.Ref
		err := h.untilLeader(ctx, a, func(tctx context.Context) (err error) {
			cur, ref, err = h.q.Get(tctx, want.ID)
			return err
		})
		if errors.Is(err, store.ErrNotFound) {
			// Rolled back meanwhile: take it as new.
			got, err := h.enqueue(ctx, a, &want)
			if errors.Is(err, store.ErrExists) {
				continue
			}
			if err != nil {
				h.enqueueFailed(w, want.ID, err)
				return
			}
			h.taken(got.Priority)
			h.accepted(w, got, false)
			return
		}
		if err != nil {
			h.enqueueFailed(w, want.ID, fmt.Errorf("%w: its record exists and cannot be read: %w", queue.ErrUncertain, err))
			return
		}
		if cur.Fingerprint != want.Fingerprint {
			problem.Write(w, keyReused(cur.ID))
			return
		}
		if cur.Status == inquiry.Pending {
			// Make sure it is queued (on records, the first attempt may
			// have died between record and message).
			err := h.untilLeader(ctx, a, func(tctx context.Context) error { return h.q.Replay(tctx, cur, ref) })
			if errors.Is(err, store.ErrConflict) {
				continue
			}
			if err != nil {
				h.enqueueFailed(w, want.ID, fmt.Errorf("%w: its record is pending and its message not confirmed: %w", queue.ErrUncertain, err))
				return
			}
		}
		if slices.Contains(a.jobs, cur.Job) {
			h.taken(cur.Priority)
			h.accepted(w, cur, false)
			return
		}
		h.accepted(w, cur, true)
		return
	}
	h.enqueueFailed(w, want.ID, fmt.Errorf("%w: its record kept changing", queue.ErrUncertain))
}

// health answers a router's probe, at once: the routers take an instance
// that answers late for one that hangs. An instance whose new inquiries
// have waited for a leader for over leaderlessHealth answers 503 unless
// its ledger's leader answered a ping within the last
// leaderlessHealth (a ping it sends in the background, within
// pingTimeout, while none is under way): the routers then send new
// inquiries to the cell's other instances, if they can take them. An
// instance cut from its cluster's majority is one; in an election every
// instance is, and the routers go on sending to them all.
func (h *Handler) health(w http.ResponseWriter) {
	if h.leaving.Load() {
		problem.WriteRetry(w, problem.New(http.StatusServiceUnavailable, problem.NotReady, "cell "+h.cfg.Cell+"'s instance is stopping: it closes its intake shortly"), time.Second)
		return
	}
	if h.q.Conn().Status() != nats.CONNECTED {
		problem.WriteRetry(w, problem.New(http.StatusServiceUnavailable, problem.QueueUnavailable, "cell "+h.cfg.Cell+" cannot reach its queue"), time.Second)
		return
	}
	if since := h.leaderless.Load(); since != 0 && h.now().Sub(time.Unix(0, since)) > leaderlessHealth {
		h.pingLeader()
		if at := h.pinged.Load(); at <= 0 || h.now().Sub(time.Unix(0, at)) > leaderlessHealth {
			problem.WriteRetry(w, problem.New(http.StatusServiceUnavailable, problem.QueueUnavailable,
				fmt.Sprintf("cell %s's streams have had no leader for %v", h.cfg.Cell, h.now().Sub(time.Unix(0, since)).Round(time.Millisecond))), time.Second)
			return
		}
		h.leaderless.CompareAndSwap(since, 0)
	}
	w.Header().Set("Cache-Control", "no-store")
	httpx.JSON(w, http.StatusOK, map[string]any{"status": "ok", "cell": h.cfg.Cell, "open": h.IsOpen()})
}

// pingLeader pings the ledger's leader in the background, unless a
// ping runs already, and records when it answered (h.pinged; negative
// when it did not).
func (h *Handler) pingLeader() {
	if !h.pinging.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer h.pinging.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
		err := h.q.Ping(ctx)
		cancel()
		if err != nil {
			h.pinged.Store(-1)
			return
		}
		h.pinged.Store(h.now().UnixNano())
	}()
}
