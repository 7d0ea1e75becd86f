package intake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/httpx"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/problem"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/store"
)

// get answers GET /v1/inquiries/{id}. An id holding its user's slot is
// read where the user's inquiries live: here when this cell owns the
// slot (they moved here with it, docs/decisions/moving-users-data.md);
// an inquiry not found here is asked of the cells the slot's pinned
// users live in and of the cell that accepted it (one whose users' data
// did not move), each answering from its own store. A cell that does not
// own the slot and has not the inquiry answers 421: the router reads its
// map again. An id without a slot is read in the cell it names.
func (h *Handler) get(w http.ResponseWriter, r *http.Request, id string) {
	cell, slot, _, ok := api.ParseInquiryID(id)
	if !ok {
		problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidID, "malformed inquiry id "+strconv.Quote(id)).WithField("id"))
		return
	}
	if slot == api.NoSlot && cell != h.cfg.Cell {
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
	switch {
	case err == nil && client != "" && rec.Client != "" && rec.Client != client:
		// Another client's inquiry is answered as one that does not
		// exist: its existence is not the reader's to learn.
		problem.Write(w, problem.New(http.StatusNotFound, problem.UnknownInquiry, "no inquiry "+id))
		return
	case errors.Is(err, store.ErrNotFound) && slot != api.NoSlot && r.Header.Get(api.HeaderLocalRead) == "":
		h.getElsewhere(ctx, w, r, id, cell, slot)
		return
	case errors.Is(err, store.ErrNotFound):
		problem.Write(w, problem.New(http.StatusNotFound, problem.UnknownInquiry, "no inquiry "+id))
		return
	case err != nil:
		h.log.Warn("cannot read inquiry", "id", id, "err", err)
		problem.WriteRetry(w, problem.New(http.StatusServiceUnavailable, problem.StoreUnavailable, "cannot read the inquiry now"), time.Second)
		return
	}
	httpx.JSON(w, http.StatusOK, rec.View())
}

// getElsewhere answers the read of inquiry id, of a user of slot, that
// this cell does not have: 421 when the cell does not own the slot in
// its map (and the reader's map is not newer), else the answer of the
// first of the cells the slot's pinned users live in and the cell that
// accepted it (cell) that has it, or 404 when none has.
func (h *Handler) getElsewhere(ctx context.Context, w http.ResponseWriter, r *http.Request, id, cell string, slot int) {
	m := h.cmap()
	if m == nil || slot >= m.Slots() {
		problem.Write(w, problem.New(http.StatusNotFound, problem.UnknownInquiry, "no inquiry "+id))
		return
	}
	var theirs int64
	if v, err := strconv.ParseInt(r.Header.Get(api.HeaderMapVersion), 10, 64); err == nil {
		theirs = v
	}
	if owner := m.Owner(slot); owner != h.cfg.Cell && theirs <= m.Version() {
		h.m.misdirected.Inc()
		w.Header().Set(api.HeaderMapVersion, strconv.FormatInt(m.Version(), 10))
		problem.Write(w, problem.New(http.StatusMisdirectedRequest, problem.Misdirected,
			fmt.Sprintf("cell %s does not own slot %d in map version %d (owner: %s); refresh the map", h.cfg.Cell, slot, m.Version(), owner)).WithField("id"))
		return
	}
	ask := slices.DeleteFunc(m.PinnedCells(slot), func(c string) bool { return c == h.cfg.Cell })
	if cell != h.cfg.Cell && !slices.Contains(ask, cell) {
		ask = append(ask, cell)
	}
	failed := 0
	for _, other := range ask {
		c, ok := m.Cell(other)
		if !ok {
			continue
		}
		status, body, err := h.readAt(ctx, peerIntakes(c, id), id, r.Header.Get(api.HeaderClient))
		switch {
		case err != nil:
			h.log.Warn("cannot ask another cell for an inquiry", "id", id, "cell", other, "err", err)
			failed++
		case status == http.StatusOK:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(body)
			return
		}
	}
	if failed > 0 {
		problem.WriteRetry(w, problem.New(http.StatusServiceUnavailable, problem.StoreUnavailable, "cannot read the inquiry now: a cell that may hold it does not answer"), time.Second)
		return
	}
	problem.Write(w, problem.New(http.StatusNotFound, problem.UnknownInquiry, "no inquiry "+id))
}

// readAt reads inquiry id from one of a cell's intake URLs, in turn until
// one answers 200 or 404; the asked cell answers from its own store.
func (h *Handler) readAt(ctx context.Context, bases []string, id, client string) (int, []byte, error) {
	var last error
	for _, base := range bases {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+prefixByID+id, nil)
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set(api.HeaderLocalRead, "1")
		if client != "" {
			req.Header.Set(api.HeaderClient, client)
		}
		resp, err := h.peers.Do(req)
		if err != nil {
			last = err
			continue
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, inquiry.MaxBodyBytes*4))
		resp.Body.Close()
		if err == nil && (resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNotFound) {
			return resp.StatusCode, body, nil
		}
		last = fmt.Errorf("%s answered %d", base, resp.StatusCode)
	}
	return 0, nil, last
}

// peerIntakes are the intake URLs to ask a cell at: its instances', from
// the one pick chooses, then its own Intake.
func peerIntakes(c slotmap.Cell, pick string) []string {
	var out []string
	if n := len(c.Instances); n > 0 {
		first := int(xxhash.Sum64String(pick) % uint64(n))
		for i := range n {
			out = append(out, c.Instances[(first+i)%n].Intake)
		}
	}
	if !slices.Contains(out, c.Intake) {
		out = append(out, c.Intake)
	}
	return out
}
