package intake

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/httpx"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/problem"
	"github.com/cellkit/cellkit/internal/store"
)

func (h *Handler) get(w http.ResponseWriter, r *http.Request, id string) {
	cell, ok := inquiry.CellOf(id)
	if !ok {
		problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidID, "malformed inquiry id "+strconv.Quote(id)).WithField("id"))
		return
	}
	if cell != h.cfg.Cell {
		problem.Write(w, problem.New(http.StatusMisdirectedRequest, problem.Misdirected, "inquiry "+id+" belongs to cell "+cell+", not "+h.cfg.Cell).WithField("id"))
		return
	}
	client, ok := clientOf(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	rec, _, err := h.q.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && client != "" && rec.Client != "" && rec.Client != client {
		// Another client's inquiry is answered as one that does not
		// exist: its existence is not the reader's to learn.
		problem.Write(w, problem.New(http.StatusNotFound, problem.UnknownInquiry, "no inquiry "+id))
		return
	}
	if err != nil {
		h.log.Warn("cannot read inquiry", "id", id, "err", err)
		problem.WriteRetry(w, problem.New(http.StatusServiceUnavailable, problem.StoreUnavailable, "cannot read the inquiry now"), time.Second)
		return
	}
	if fp := r.Header.Get(api.HeaderFingerprint); fp != "" && fp != rec.Fingerprint {
		// A cell that gained the user's slot asks on behalf of a keyed
		// retry (see askPrevious): the key was used for another request.
		problem.Write(w, keyReused(rec.ID))
		return
	}
	httpx.JSON(w, http.StatusOK, rec.View())
}
