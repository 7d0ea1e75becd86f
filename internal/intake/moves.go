package intake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// MoveWindow is how long a cell remembers which cell owned a slot before it.
// A client retrying a request with the same Idempotency-Key after the user's
// slot moved (a drain, a rebalance) reaches the new owner, which must not
// accept it a second time: within this window it asks the previous owner
// first.
const MoveWindow = 10 * time.Minute

// Moves remembers, for the slots this cell gained, which cell owned them
// before and when they moved. It is fed every map the cell follows.
type Moves struct {
	cell string
	mu   sync.Mutex
	prev *slotmap.Map
	from map[int]moved
}

type moved struct {
	cell string
	at   time.Time
}

// NewMoves returns an empty log for cell.
func NewMoves(cell string) *Moves { return &Moves{cell: cell, from: map[int]moved{}} }

// Observe records the slots that m gives this cell and the map before did
// not. The first map observed records nothing (a restart forgets).
func (mv *Moves) Observe(m *slotmap.Map, now time.Time) {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	for s, e := range mv.from {
		if now.Sub(e.at) > MoveWindow {
			delete(mv.from, s)
		}
	}
	if mv.prev != nil && mv.prev.Slots() == m.Slots() && m.Version() > mv.prev.Version() {
		for s := 0; s < m.Slots(); s++ {
			if before := mv.prev.Owner(s); m.Owner(s) == mv.cell && before != "" && before != mv.cell {
				mv.from[s] = moved{cell: before, at: now}
			}
		}
	}
	if mv.prev == nil || m.Version() > mv.prev.Version() {
		mv.prev = m
	}
}

// Previous returns the cell that owned slot within MoveWindow, if any.
func (mv *Moves) Previous(slot int, now time.Time) (string, bool) {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	e, ok := mv.from[slot]
	if !ok || now.Sub(e.at) > MoveWindow {
		return "", false
	}
	return e.cell, true
}

// Follow feeds mv every new map until ctx is done.
func (mv *Moves) Follow(ctx context.Context, current func() *slotmap.Map, changed func() <-chan struct{}, now func() time.Time) {
	for {
		ch := changed()
		if m := current(); m != nil {
			mv.Observe(m, now())
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}

// errKeyReused: the previous cell holds the key's inquiry, made by another
// request.
var errKeyReused = errors.New("idempotency key used for another request")

// askPrevious looks for the inquiry a keyed request made at the cell that
// owned the user's slot before: its id is deterministic in (cell, user,
// key). found is false when that cell has none; errKeyReused means it has
// one with another fingerprint than fp; another error means it could not be
// asked.
func (h *Handler) askPrevious(ctx context.Context, prev, user, key, fp string) (rec Accepted, found bool, err error) {
	m := h.cmap()
	c, ok := m.Cell(prev)
	if !ok {
		return rec, false, nil // removed from the map: nothing to ask
	}
	id := inquiry.KeyID(prev, user, key)
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Intake+prefixByID+id, nil)
	if err != nil {
		return rec, false, err
	}
	req.Header.Set(headerFingerprint, fp)
	resp, err := h.peers.Do(req)
	if err != nil {
		return rec, false, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		var got struct {
			ID     string         `json:"id"`
			Status inquiry.Status `json:"status"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || got.ID != id {
			return rec, false, fmt.Errorf("cell %s answered an unreadable inquiry %s", prev, id)
		}
		return Accepted{ID: id, Cell: prev, Status: got.Status, StatusURL: prefixByID + id}, true, nil
	case http.StatusNotFound:
		return rec, false, nil
	case http.StatusUnprocessableEntity:
		return rec, false, errKeyReused
	default:
		return rec, false, fmt.Errorf("cell %s answered %d for inquiry %s", prev, resp.StatusCode, id)
	}
}
