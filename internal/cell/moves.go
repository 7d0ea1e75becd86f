package cell

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/httpx"
	"github.com/cellkit/cellkit/internal/move"
	"github.com/cellkit/cellkit/internal/problem"
	"github.com/cellkit/cellkit/internal/queue"
)

// The admin API of the cell's part in moves (internal/move; the control
// library drives the steps, docs/decisions/moving-users-data.md):
//
//	GET    /v1/admin/moves/                 the cell's moves
//	PUT    /v1/admin/moves/{id}             its part in a move, or its fence (api.CellMove)
//	GET    /v1/admin/moves/{id}             the same, with this instance's attempts in flight of the moving users
//	DELETE /v1/admin/moves/{id}             forget it (and its fence)
//	GET    /v1/admin/moves/{id}/export      ?after=SEQ&limit=N[&slots=A,B]: a page of the source's messages
//	POST   /v1/admin/moves/{id}/import      a page into the destination
//	GET    /v1/admin/moves/{id}/digest      ?horizon=RFC3339: per slot, the moving users' messages
//	POST   /v1/admin/moves/{id}/hand        the source hands its pending inquiries over
//	POST   /v1/admin/moves/{id}/discard     {"slots": [...]} or {}: let the moving users' messages go
//	POST   /v1/admin/moves/{id}/activate    the handed inquiries become work
//	POST   /v1/admin/move-size              a spec: what it would carry out of this cell (nothing recorded)
func (c *Cell) moveRoutes(mux *http.ServeMux) {
	mux.HandleFunc(api.PathCellMoves, only(http.MethodGet, func(w http.ResponseWriter, r *http.Request) {
		moves := c.mover.List()
		for i := range moves {
			moves[i].Inflight = c.movingInflight(moves[i].Spec)
		}
		httpx.Indent(w, http.StatusOK, map[string]any{"moves": append([]api.CellMove{}, moves...)})
	}))
	mux.HandleFunc(api.PathCellMoves+"{id}", c.moveRecord)
	mux.HandleFunc(api.PathCellMoves+"{id}/{action}", c.moveAction)
	mux.HandleFunc(api.PathCellMoveSize, only(http.MethodPost, func(w http.ResponseWriter, r *http.Request) {
		var spec api.MoveSpec
		if !decodeMoveBody(w, r, maxMoveSpecBytes, &spec) || !c.movesAllowed(w) {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), moveStepTimeout)
		defer cancel()
		size, err := c.mover.Size(ctx, spec, c.follower.Map().Slots())
		if err != nil {
			moveProblem(w, err)
			return
		}
		httpx.Indent(w, http.StatusOK, size)
	}))
}

// Bounds of the bodies a move's steps take.
const (
	maxMoveSpecBytes = 1 << 20  // a spec: thousands of slots and users
	maxMovePageBytes = 16 << 20 // a page: up to 1,000 records
	moveStepTimeout  = time.Minute
)

func (c *Cell) moveRecord(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), moveStepTimeout)
	defer cancel()
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		cm, err := c.mover.Get(ctx, id)
		if err != nil {
			moveProblem(w, err)
			return
		}
		cm.Inflight = c.movingInflight(cm.Spec)
		httpx.Indent(w, http.StatusOK, cm)
	case http.MethodPut:
		var cm api.CellMove
		if !decodeMoveBody(w, r, maxMoveSpecBytes, &cm) {
			return
		}
		if cm.Spec.ID != id {
			problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidField, "the spec's id is not the path's").WithField("spec.id"))
			return
		}
		if !c.movesAllowed(w) {
			return
		}
		cur, err := c.mover.Put(ctx, cm, c.follower.Map().Slots())
		if err != nil {
			moveProblem(w, err)
			return
		}
		c.log.Info("move recorded", "move", id, "role", cm.Role, "fenced", cm.Fenced)
		httpx.Indent(w, http.StatusOK, cur)
	case http.MethodDelete:
		if err := c.mover.Delete(ctx, id); err != nil {
			moveProblem(w, err)
			return
		}
		c.log.Info("move forgotten", "move", id)
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Allow", "GET, PUT, DELETE")
		problem.Write(w, problem.New(http.StatusMethodNotAllowed, problem.MethodNotAllowed, "allowed: GET, PUT, DELETE"))
	}
}

func (c *Cell) moveAction(w http.ResponseWriter, r *http.Request) {
	id, action := r.PathValue("id"), r.PathValue("action")
	method := http.MethodPost
	if action == api.MoveExport || action == api.MoveDigestOf {
		method = http.MethodGet
	}
	only(method, func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), moveStepTimeout)
		defer cancel()
		q := r.URL.Query()
		switch action {
		case api.MoveExport:
			after, err1 := strconv.ParseUint(cmp.Or(q.Get("after"), "0"), 10, 64)
			limit, err2 := strconv.Atoi(cmp.Or(q.Get("limit"), "1000"))
			if err1 != nil || err2 != nil || limit <= 0 {
				problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidField, "after must be a sequence and limit a positive count").WithField("after"))
				return
			}
			var slots []int
			if v := q.Get("slots"); v != "" {
				for _, part := range strings.Split(v, ",") {
					n, err := strconv.Atoi(part)
					if err != nil || n < 0 {
						problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidField, "slots must be slot numbers, comma-separated").WithField("slots"))
						return
					}
					slots = append(slots, n)
				}
			}
			page, err := c.mover.Export(ctx, id, after, limit, slots)
			respondMove(w, page, err)
		case api.MoveImport:
			var page api.MovePage
			if !decodeMoveBody(w, r, maxMovePageBytes, &page) {
				return
			}
			err := c.mover.Import(ctx, id, page)
			respondMove(w, map[string]int{"imported": len(page.Messages)}, err)
		case api.MoveDigestOf:
			horizon, err := time.Parse(time.RFC3339Nano, q.Get("horizon"))
			if err != nil {
				problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidField, "horizon must be an RFC 3339 time").WithField("horizon"))
				return
			}
			d, err := c.mover.Digest(ctx, id, horizon)
			respondMove(w, d, err)
		case api.MoveHand:
			n, err := c.mover.Hand(ctx, id)
			if err == nil {
				c.log.Info("pending inquiries handed over", "move", id, "handed", n)
			}
			respondMove(w, map[string]int{"handed": n}, err)
		case api.MoveDiscard:
			var body struct {
				Slots []int `json:"slots"`
			}
			if !decodeMoveBody(w, r, maxMoveSpecBytes, &body) {
				return
			}
			err := c.mover.Discard(ctx, id, body.Slots)
			if err == nil {
				c.log.Info("moved users' inquiries let go", "move", id, "slots", len(body.Slots))
			}
			respondMove(w, map[string]bool{"discarded": err == nil}, err)
		case api.MoveActivate:
			n, err := c.mover.Activate(ctx, id)
			if err == nil {
				c.log.Info("handed inquiries made work", "move", id, "activated", n)
			}
			respondMove(w, map[string]int{"activated": n}, err)
		default:
			problem.Write(w, problem.New(http.StatusNotFound, problem.NotFound, "no such action of a move: "+action))
		}
	})(w, r)
}

// movesAllowed answers 409 unless the cell follows a map and its intake
// writes the ledger: a move reads and writes ledgers only.
func (c *Cell) movesAllowed(w http.ResponseWriter) bool {
	switch {
	case c.follower.Map() == nil:
		problem.Write(w, problem.New(http.StatusConflict, problem.NotReady, "cell "+c.cfg.ID+" has no cell map yet"))
		return false
	case c.queue.Layout() != queue.LayoutLedger:
		problem.Write(w, problem.New(http.StatusConflict, problem.MoveConflict, "cell "+c.cfg.ID+" does not write the ledger yet: switch it first (cellctl layout "+c.cfg.ID+" ledger)"))
		return false
	}
	return true
}

// movingInflight is how many attempts of spec's users this instance has
// under way.
func (c *Cell) movingInflight(spec api.MoveSpec) int {
	return c.pipe.Attempting(func(user string) bool {
		slot, ok := c.slotOf(user)
		return ok && spec.Moves(slot, user)
	})
}

// decodeMoveBody reads a JSON body of at most limit bytes into v, every
// field known; a bad one is answered 400.
func decodeMoveBody(w http.ResponseWriter, r *http.Request, limit int64, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			problem.Write(w, problem.New(http.StatusRequestEntityTooLarge, problem.BodyTooLarge, "the body is over "+strconv.FormatInt(limit, 10)+" bytes"))
			return false
		}
		problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidJSON, "the body is not the JSON expected: "+err.Error()))
		return false
	}
	return true
}

// respondMove answers a step: v, or the problem err is.
func respondMove(w http.ResponseWriter, v any, err error) {
	if err != nil {
		moveProblem(w, err)
		return
	}
	httpx.Indent(w, http.StatusOK, v)
}

// moveProblem answers a step's failure: an unknown move 404, a step that
// does not fit 409, a spec that is not one 400, the store 503.
func moveProblem(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, move.ErrUnknown):
		problem.Write(w, problem.New(http.StatusNotFound, problem.UnknownMove, err.Error()))
	case errors.Is(err, move.ErrConflict):
		problem.Write(w, problem.New(http.StatusConflict, problem.MoveConflict, err.Error()))
	case errors.Is(err, api.ErrBadMoveSpec):
		problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidField, err.Error()).WithField("spec"))
	default:
		problem.WriteRetry(w, problem.New(http.StatusServiceUnavailable, problem.StoreUnavailable, strings.TrimSpace(err.Error())), time.Second)
	}
}
