package console

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/httpx"
	"github.com/cellkit/cellkit/internal/problem"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// SlotTable is GET /api/map: each slot's owner, as an index into Cells
// (the map's order, as the view's MapSummary), little-endian uint16 per
// slot in base64; NoOwner where no cell is active.
type SlotTable struct {
	Version   int64          `json:"version"`
	Slots     int            `json:"slots"`
	Cells     []string       `json:"cells"`
	Owners    string         `json:"owners"`
	Overrides []OverrideSlot `json:"overrides"`
	// OverridesTotal counts every override; Overrides holds at most
	// maxOverridesShown of them.
	OverridesTotal int `json:"overrides_total"`
}

// NoOwner marks a slot without an active owner in SlotTable.Owners.
const NoOwner = 0xFFFF

// maxOverridesShown bounds the overrides sent to the page.
const maxOverridesShown = 1000

// OverrideSlot is one user pinned to a cell, and the slot it hashes to.
type OverrideSlot struct {
	User string `json:"user"`
	Cell string `json:"cell"`
	Slot int    `json:"slot"`
}

func (c *Console) mapOr503(w http.ResponseWriter) *slotmap.Map {
	m := c.col.currentMap()
	if m == nil {
		problem.WriteRetry(w, problem.New(http.StatusServiceUnavailable, problem.NoCellMap, "the console has not read a map yet"), time.Second)
	}
	return m
}

func (c *Console) serveMap(w http.ResponseWriter, _ *http.Request) {
	m := c.mapOr503(w)
	if m == nil {
		return
	}
	httpx.JSON(w, http.StatusOK, slotTable(m))
}

// slotTable encodes m's slots for the page.
func slotTable(m *slotmap.Map) SlotTable {
	cells := m.Cells()
	pos := make(map[string]uint16, len(cells))
	t := SlotTable{Version: m.Version(), Slots: m.Slots(), Cells: make([]string, len(cells)), Overrides: []OverrideSlot{}}
	for i, cell := range cells {
		t.Cells[i], pos[cell.ID] = cell.ID, uint16(i)
	}
	raw := make([]byte, 2*m.Slots())
	for s := range m.Slots() {
		o := uint16(NoOwner)
		if id := m.Owner(s); id != "" {
			o = pos[id]
		}
		binary.LittleEndian.PutUint16(raw[2*s:], o)
	}
	t.Owners = base64.StdEncoding.EncodeToString(raw)
	ov := m.Overrides()
	t.OverridesTotal = len(ov)
	for _, u := range sortedKeys(ov)[:min(len(ov), maxOverridesShown)] {
		t.Overrides = append(t.Overrides, OverrideSlot{User: u, Cell: ov[u], Slot: m.SlotOf(u)})
	}
	return t
}

// Lookup is GET /api/lookup?q=USER or ?q=SLOT (digits; slot:N and user:ID
// say which): where the query goes, and why, in the map the console last
// read.
type Lookup struct {
	Query     string `json:"query"`
	Kind      string `json:"kind"` // user or slot
	User      string `json:"user,omitempty"`
	Slot      int    `json:"slot"`
	Cell      string `json:"cell"` // "" when no cell is active
	CellState string `json:"cell_state,omitempty"`
	Override  bool   `json:"override"`
	// SlotOwner is the slot's owner (the same as Cell unless an override
	// pins the user elsewhere).
	SlotOwner string `json:"slot_owner"`
	Why       string `json:"why"`
	Version   int64  `json:"version"`
}

func (c *Console) serveLookup(w http.ResponseWriter, r *http.Request) {
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	if q == "" {
		problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidField, "give q: a user id (u-42) or a slot number").WithField("q"))
		return
	}
	m := c.mapOr503(w)
	if m == nil {
		return
	}
	l, err := lookup(m, q)
	if err != nil {
		problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidField, err.Error()).WithField("q"))
		return
	}
	httpx.JSON(w, http.StatusOK, l)
}

// lookup answers a query: digits (or slot:N) are a slot, anything else
// (or user:ID, for an id of digits only) a user id.
func lookup(m *slotmap.Map, q string) (Lookup, error) {
	l := Lookup{Query: q, Version: m.Version()}
	state := func(id string) string {
		if cell, ok := m.Cell(id); ok {
			return string(cell.State)
		}
		return ""
	}
	user, forced := strings.CutPrefix(q, "user:")
	if slot, ok := strings.CutPrefix(q, "slot:"); ok || (!forced && strings.Trim(q, "0123456789") == "") {
		n, err := strconv.Atoi(slot)
		if err != nil || n < 0 || n >= m.Slots() {
			return l, fmt.Errorf("slot %.20s is not in the map: its slots are 0 to %d", slot, m.Slots()-1)
		}
		l.Kind, l.Slot = "slot", n
		l.Cell, l.SlotOwner = m.Owner(n), m.Owner(n)
		l.CellState = state(l.Cell)
		pinned := 0
		for u := range m.Overrides() {
			if m.SlotOf(u) == n {
				pinned++
			}
		}
		l.Why = fmt.Sprintf("slot %d belongs to %s", n, cmp.Or(l.Cell, "no cell (none is active)"))
		if l.Cell != "" {
			l.Why += " (" + l.CellState + ")"
		}
		if pinned > 0 {
			l.Why += fmt.Sprintf("; %d of its users are pinned by overrides", pinned)
		}
		return l, nil
	}
	q = user
	if !api.ValidUserID(q) {
		if len(q) > api.MaxUserID {
			return l, fmt.Errorf("a query of %d bytes is neither a slot number nor a user id (at most %d bytes)", len(q), api.MaxUserID)
		}
		return l, fmt.Errorf("%q is neither a slot number nor a user id (1–%d of A-Z a-z 0-9 _ -)", q, api.MaxUserID)
	}
	route := m.Lookup(q)
	l.Kind, l.User, l.Slot, l.Cell, l.Override = "user", q, route.Slot, route.Cell, route.Override
	l.SlotOwner, l.CellState = m.Owner(route.Slot), state(route.Cell)
	hashed := fmt.Sprintf("%s hashes to slot %d of %d (xxhash64 of the id, modulo the slots)", q, route.Slot, m.Slots())
	switch pin, pinned := m.Overrides()[q]; {
	case route.Override:
		l.Why = fmt.Sprintf("%s is pinned to %s by an override; %s, which belongs to %s", q, route.Cell, hashed, cmp.Or(l.SlotOwner, "no cell"))
	case route.Cell == "":
		l.Why = hashed + "; no cell is active: the routers answer 503"
	case pinned:
		l.Why = fmt.Sprintf("%s; it belongs to %s (%s). An override pins %s to %s, which is %s: not in effect",
			hashed, route.Cell, l.CellState, q, pin, cmp.Or(state(pin), "not in the map"))
	default:
		l.Why = fmt.Sprintf("%s; it belongs to %s (%s)", hashed, route.Cell, l.CellState)
	}
	return l, nil
}

// historyCache keeps the map versions read from the history (a version
// never changes once committed).
type historyCache struct {
	h    control.History
	mu   sync.Mutex
	maps map[int64]*slotmap.Map
}

func newHistoryCache(h control.History) *historyCache {
	return &historyCache{h: h, maps: map[int64]*slotmap.Map{}}
}

func (hc *historyCache) load(ctx context.Context, v int64) (*slotmap.Map, error) {
	hc.mu.Lock()
	m, ok := hc.maps[v]
	hc.mu.Unlock()
	if ok {
		return m, nil
	}
	m, err := hc.h.Load(ctx, v)
	if err != nil {
		return nil, err
	}
	hc.mu.Lock()
	hc.maps[v] = m
	if len(hc.maps) > 2*control.HistoryKeep {
		for k := range hc.maps {
			if k < v-2*control.HistoryKeep {
				delete(hc.maps, k)
			}
		}
	}
	hc.mu.Unlock()
	return m, nil
}

// HistoryEntry is one version of the map in GET /api/history.
type HistoryEntry struct {
	Version int64     `json:"version"`
	Change  string    `json:"change"`
	Updated time.Time `json:"updated,omitzero"`
	Cells   int       `json:"cells"`
	Active  int       `json:"active"`
	// MovedSlots is how many slots changed owner from the version before
	// (-1: that version is not in the history); Moves sums them by
	// cell pair.
	MovedSlots int         `json:"moved_slots"`
	Moves      []PairMoves `json:"moves,omitempty"`
	Error      string      `json:"error,omitempty"`
}

// PairMoves is how many slots went from one cell to another.
type PairMoves struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Slots int    `json:"slots"`
}

func (c *Console) serveHistory(w http.ResponseWriter, r *http.Request) {
	out := struct {
		Where    string         `json:"where"`
		Versions []HistoryEntry `json:"versions"`
	}{Versions: []HistoryEntry{}}
	if c.history.h == nil {
		out.Where = "this registry keeps no history"
		httpx.JSON(w, http.StatusOK, out)
		return
	}
	out.Where = c.history.h.Describe()
	ctx, cancel := context.WithTimeout(r.Context(), c.cfg.CallTimeout*2)
	defer cancel()
	vs, err := c.history.h.Versions(ctx)
	if err != nil {
		problem.Write(w, problem.New(http.StatusBadGateway, problem.StoreUnavailable, "the map history cannot be read: "+err.Error()))
		return
	}
	slices.Reverse(vs)
	vs = vs[:min(len(vs), control.HistoryKeep)]
	for _, v := range vs {
		e := HistoryEntry{Version: v, MovedSlots: -1}
		m, err := c.history.load(ctx, v)
		if err != nil {
			e.Error = err.Error()
			out.Versions = append(out.Versions, e)
			continue
		}
		e.Change, e.Updated, e.Cells, e.Active = m.Change(), m.Updated(), len(m.Cells()), len(m.ActiveCells())
		if prev, err := c.history.load(ctx, v-1); err == nil {
			if p, err := slotmap.Compare(prev, m); err == nil {
				e.MovedSlots, e.Moves = p.MovedSlots, pairMoves(p)
			}
		}
		out.Versions = append(out.Versions, e)
	}
	httpx.JSON(w, http.StatusOK, out)
}

// pairMoves sums a plan's moves by cell pair, the largest first.
func pairMoves(p *slotmap.Plan) []PairMoves {
	sum := map[[2]string]int{}
	for _, mv := range p.Moves {
		sum[[2]string{mv.FromCell, mv.ToCell}] += mv.To - mv.From + 1
	}
	out := make([]PairMoves, 0, len(sum))
	for k, n := range sum {
		out = append(out, PairMoves{From: k[0], To: k[1], Slots: n})
	}
	slices.SortFunc(out, func(a, b PairMoves) int {
		return cmp.Or(b.Slots-a.Slots, cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To))
	})
	return out
}

// Diff is GET /api/history/VERSION: what that version changed from the
// one before.
type Diff struct {
	From int64         `json:"from"`
	To   int64         `json:"to"`
	Plan *slotmap.Plan `json:"plan"`
}

func (c *Console) serveDiff(w http.ResponseWriter, r *http.Request) {
	v, err := strconv.ParseInt(r.PathValue("version"), 10, 64)
	if err != nil || v < 2 {
		problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidField, "the version is a number from 2 (what it changed from the one before)").WithField("version"))
		return
	}
	if c.history.h == nil {
		problem.Write(w, problem.New(http.StatusNotFound, problem.NotFound, "this registry keeps no history"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), c.cfg.CallTimeout*2)
	defer cancel()
	after, err1 := c.history.load(ctx, v)
	before, err2 := c.history.load(ctx, v-1)
	if err := errors.Join(err1, err2); err != nil {
		status := http.StatusBadGateway
		if errors.Is(err, control.ErrNotInHistory) {
			status = http.StatusNotFound
		}
		problem.Write(w, problem.New(status, problem.NotFound, fmt.Sprintf("versions %d and %d: %v", v-1, v, err)))
		return
	}
	p, err := slotmap.Compare(before, after)
	if err != nil {
		problem.Write(w, problem.New(http.StatusConflict, problem.InvalidField, err.Error()))
		return
	}
	d := Diff{From: v - 1, To: v, Plan: p}
	dropNonFinite(&d) // a plan's projected rates, should one be NaN or ±Inf: not a 500
	httpx.JSON(w, http.StatusOK, d)
}
