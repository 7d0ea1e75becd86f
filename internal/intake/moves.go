package intake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/hedgepolicy"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/atomicfile"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// Moves remembers, for the slots this cell gained, which cell owned them
// before and when they moved; and the same for single users whose route
// came to this cell by an override (a user pinned here, or unpinned from
// another cell back to this one). It is fed every map the cell follows. With a
// file (MovesConfig.Path) it survives a restart: the moves are written to
// it whenever they change, and read back within api.MoveWindow.
type Moves struct {
	cell  string
	path  string // "" keeps the log in memory only
	mu    sync.Mutex
	prev  *slotmap.Map
	from  map[int]moved
	users map[string]moved // users routed here by an override change
	err   error            // the last failure to write path
	log   *slog.Logger     // for write failures; nil: none
}

type moved struct {
	cell string
	at   time.Time
}

// movedJSON is one move in the file.
type movedJSON struct {
	Slot int       `json:"slot"`           // -1 for a user's move
	User string    `json:"user,omitempty"` // a user moved by an override
	From string    `json:"from"`
	At   time.Time `json:"at"`
}

// MovesConfig names a Moves log.
type MovesConfig struct {
	// Cell is this cell's id. Required.
	Cell string
	// Path is the file that keeps the log across restarts ["": memory
	// only].
	Path string
}

// MovesOptions carry a Moves log's collaborators. The zero value is usable.
type MovesOptions struct {
	// Logger hears of failures to write the file (the moves stay in
	// memory). Nil means none.
	Logger *slog.Logger
	// Now is the clock that ages the moves read back from the file. Nil
	// means time.Now.
	Now func() time.Time
}

// NewMoves returns the log of cfg.Cell. With a Path it holds the moves the
// file has that are younger than api.MoveWindow now; a missing file is an
// empty log, an unreadable one is an error.
func NewMoves(cfg MovesConfig, opts MovesOptions) (*Moves, error) {
	if cfg.Cell == "" {
		return nil, errors.New("slot moves: cell id is required")
	}
	mv := &Moves{cell: cfg.Cell, path: cfg.Path, from: map[int]moved{}, users: map[string]moved{}, log: opts.Logger}
	if cfg.Path == "" {
		return mv, nil
	}
	path := cfg.Path
	now := time.Now()
	if opts.Now != nil {
		now = opts.Now()
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return mv, nil
	}
	if err != nil {
		return nil, fmt.Errorf("slot moves: %w", err)
	}
	var list []movedJSON
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("slot moves %s: %w", path, err)
	}
	for _, e := range list {
		switch {
		case now.Sub(e.At) > api.MoveWindow || e.From == "":
		case e.User != "":
			mv.users[e.User] = moved{cell: e.From, at: e.At}
		case e.Slot >= 0:
			mv.from[e.Slot] = moved{cell: e.From, at: e.At}
		}
	}
	return mv, nil
}

// Observe records the slots that m gives this cell and the map before did
// not. The first map observed records nothing: the moves from before a
// restart are those NewMoves read back.
func (mv *Moves) Observe(m *slotmap.Map, now time.Time) {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	changed := false
	for s, e := range mv.from {
		if now.Sub(e.at) > api.MoveWindow {
			delete(mv.from, s)
			changed = true
		}
	}
	for u, e := range mv.users {
		if now.Sub(e.at) > api.MoveWindow {
			delete(mv.users, u)
			changed = true
		}
	}
	if mv.prev != nil && mv.prev.Slots() == m.Slots() && m.Version() > mv.prev.Version() {
		for s := 0; s < m.Slots(); s++ {
			if before := mv.prev.Owner(s); m.Owner(s) == mv.cell && before != "" && before != mv.cell {
				mv.from[s] = moved{cell: before, at: now}
				changed = true
			}
		}
		// Users pinned or unpinned: those routed here now and elsewhere
		// before.
		for _, overrides := range []map[string]string{mv.prev.Overrides(), m.Overrides()} {
			for u := range overrides {
				if before := mv.prev.Lookup(u).Cell; m.Lookup(u).Cell == mv.cell && before != "" && before != mv.cell {
					mv.users[u] = moved{cell: before, at: now}
					changed = true
				}
			}
		}
	}
	if mv.prev == nil || m.Version() > mv.prev.Version() {
		mv.prev = m
	}
	if changed && mv.path != "" {
		mv.err = mv.saveLocked()
		if mv.err != nil && mv.log != nil {
			mv.log.Warn("cannot keep the slot moves across a restart", "err", mv.err)
		}
	}
}

// Err is the last failure to write the log's file (nil: written).
func (mv *Moves) Err() error {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	return mv.err
}

// saveLocked writes the moves to mv.path, atomically (see
// internal/atomicfile).
func (mv *Moves) saveLocked() error {
	list := make([]movedJSON, 0, len(mv.from))
	for s, e := range mv.from {
		list = append(list, movedJSON{Slot: s, From: e.cell, At: e.at.UTC()})
	}
	for u, e := range mv.users {
		list = append(list, movedJSON{Slot: -1, User: u, From: e.cell, At: e.at.UTC()})
	}
	slices.SortFunc(list, func(a, b movedJSON) int {
		if a.Slot != b.Slot {
			return a.Slot - b.Slot
		}
		return strings.Compare(a.User, b.User)
	})
	b, err := json.Marshal(list)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(mv.path, b, 0o600); err != nil {
		return fmt.Errorf("slot moves: %w", err)
	}
	return nil
}

// Previous returns the cell that user was routed to before, if the user
// or its slot came to this cell within api.MoveWindow: the user's own move
// first (an override), else the slot's.
func (mv *Moves) Previous(user string, slot int, now time.Time) (string, bool) {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	if e, ok := mv.users[user]; ok && now.Sub(e.at) <= api.MoveWindow {
		return e.cell, true
	}
	e, ok := mv.from[slot]
	if !ok || now.Sub(e.at) > api.MoveWindow {
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
// owned the user's slot before: its id is deterministic in (cell, client,
// user, key), and the previous cell checks the client as for any read.
// found is false when that cell has none; errKeyReused means it has one
// with another fingerprint than fp (rec.ID names it); another error means
// it could not be asked. Any instance of that cell can answer (they read
// one store), and a drained cell's instances still answer reads while a
// load balancer in front of them (a Kubernetes Service) may have taken
// them out with their readiness. So the addresses of peerIntakes are
// asked as hedges (failsafe-go's hedge policy): the first at once, each
// next one askHedgeDelay after the one before, until one of them settles
// it (found, not found, or the key reused); an instance that is slow on a
// loaded node, refuses, or answers an error does not decide alone.
// askBudget bounds the whole.
func (h *Handler) askPrevious(ctx context.Context, prev, client, user, key, fp string) (rec Accepted, found bool, err error) {
	m := h.cmap()
	c, ok := m.Cell(prev)
	if !ok {
		return rec, false, nil // removed from the map: nothing to ask
	}
	id := inquiry.KeyID(prev, m.SlotOf(user), client, user, key)
	addrs := peerIntakes(c, id)
	type answer struct {
		rec   Accepted
		found bool
	}
	settled := func(_ answer, err error) bool { return err == nil || errors.Is(err, errKeyReused) }
	hedges := hedgepolicy.NewBuilderWithDelay[answer](askHedgeDelay).
		WithMaxHedges(len(addrs) - 1).
		CancelIf(settled).
		Build()
	ctx, cancel := context.WithTimeout(ctx, askBudget)
	defer cancel()
	var next atomic.Int32
	got, err := failsafe.With[answer](hedges).WithContext(ctx).GetWithExecution(func(exec failsafe.Execution[answer]) (answer, error) {
		base := addrs[int(next.Add(1)-1)%len(addrs)]
		rec, found, err := h.askAt(exec.Context(), base, prev, id, client, fp)
		return answer{rec, found}, err
	})
	return got.rec, got.found, err
}

// askHedgeDelay is how long an ask of the previous cell waits for one of
// its addresses before it asks the next as well; askBudget bounds the
// whole ask (each address's own request is bounded by the peers client's
// timeout).
const (
	askHedgeDelay = 300 * time.Millisecond
	askBudget     = 3 * time.Second
)

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

// askAt asks the cell prev's intake at base for inquiry id; see
// askPrevious.
func (h *Handler) askAt(ctx context.Context, base, prev, id, client, fp string) (rec Accepted, found bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+prefixByID+id, nil)
	if err != nil {
		return rec, false, err
	}
	req.Header.Set(api.HeaderFingerprint, fp)
	if client != "" {
		req.Header.Set(api.HeaderClient, client)
	}
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
	case http.StatusNotFound, http.StatusMisdirectedRequest:
		// 421: the cell has it not and owns the slot no more (the user's
		// inquiries moved on with it, here or elsewhere).
		return rec, false, nil
	case http.StatusUnprocessableEntity:
		return Accepted{ID: id}, false, errKeyReused
	default:
		return rec, false, fmt.Errorf("cell %s answered %d for inquiry %s", prev, resp.StatusCode, id)
	}
}
