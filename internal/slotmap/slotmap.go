// Package slotmap is the versioned cell map: which cell owns each of the
// slots that user ids hash to, which users are pinned to a cell, and how the
// agencies' session limits are split across cells.
//
// It is pure: no I/O, no clocks, no goroutines. A *Map is immutable once built
// (by Decode, New or a planning operation), so one value can be read by any
// number of goroutines while a new version is planned next to it.
//
// Guarantees:
//   - slot = xxhash64(userID) % Slots(); Lookup is one hash and an array
//     index (plus a map probe only for slots that carry an override) and does
//     not allocate.
//   - Every valid map assigns every slot to an active cell (or, with no active
//     cell at all, no slot), keeps each agency's quotas within its limit and
//     points overrides only at known cells. Decode and every operation refuse
//     anything else with an error wrapping ErrInvalid that names the problem.
//   - The target assignment is weighted rendezvous hashing of each slot over
//     the active cells, so adding a cell moves slots only onto it, draining a
//     cell moves only its slots, and drain then undrain restores the table.
//   - Planning never mutates its input: each operation returns a Plan holding
//     the new map (version+1) and what moves.
package slotmap

import (
	"maps"
	"slices"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Limits of a map document.
const (
	DefaultSlots = 16384
	MaxSlots     = 1 << 20
	MaxCells     = 4096
	MaxWeight    = 1_000_000
	MaxOverrides = 100_000
)

// State is a cell's place in its lifecycle.
type State string

const (
	// Active cells own slots and take new work.
	Active State = "active"
	// Draining cells own no slots but still finish queued work, so they keep
	// their session quota.
	Draining State = "draining"
	// Drained cells own nothing and hold no session quota.
	Drained State = "drained"
)

// Cell is one cell as the map describes it.
type Cell struct {
	// ID names the cell: 1–32 of [a-z0-9-], starting and ending with a
	// letter or digit. It prefixes the ids of the cell's inquiries.
	ID    string `json:"id"`
	State State  `json:"state"`
	// Weight is the cell's relative share of slots and derived session
	// quota, 1..MaxWeight.
	Weight int `json:"weight"`
	// Intake is the base URL of the cell's public API (http or https).
	Intake string `json:"intake"`
	// Admin is the base URL of the cell's admin API.
	Admin string `json:"admin"`
	// Quota is the number of sessions the cell may hold per agency. It is
	// derived from the agencies' limits unless FixedQuota sets it.
	Quota map[string]int `json:"quota,omitempty"`
	// FixedQuota holds the quotas an operator set explicitly; the rest of an
	// agency's limit is split over the other cells by weight.
	FixedQuota map[string]int `json:"fixed_quota,omitempty"`
	// Capacity is the request rate (req/s) the operator declared the cell
	// can take; 0 declares none. Plans flag a cell projected over it.
	Capacity int `json:"capacity,omitempty"`
	// Instances are the cell's processes when it runs several (on
	// different hosts, over one JetStream cluster), in id order. Empty: the
	// cell is the one process at Intake and Admin.
	Instances []Instance `json:"instances,omitempty"`
}

// Instance is one process of a cell.
type Instance struct {
	// ID names the instance within its cell: 1–32 of [a-z0-9-].
	ID string `json:"id"`
	// Intake and Admin are its base URLs.
	Intake string `json:"intake"`
	Admin  string `json:"admin"`
	// Drained takes it out of the routers' rotation (the others serve).
	Drained bool `json:"drained,omitempty"`
}

// MaxCapacity bounds a cell's declared capacity in req/s.
const MaxCapacity = 10_000_000

// MaxInstances bounds a cell's instances.
const MaxInstances = 16

// Intakes are the intake URLs requests to the cell go to: its instances'
// that are not drained, or Intake when it lists no instances.
func (c Cell) Intakes() []string {
	if len(c.Instances) == 0 {
		return []string{c.Intake}
	}
	var out []string
	for _, in := range c.Instances {
		if !in.Drained {
			out = append(out, in.Intake)
		}
	}
	return out
}

// Admins are the admin URLs of the cell's processes: its instances' (in
// rotation or not), or its own.
func (c Cell) Admins() []string {
	if len(c.Instances) == 0 {
		return []string{c.Admin}
	}
	out := make([]string, len(c.Instances))
	for i, in := range c.Instances {
		out[i] = in.Admin
	}
	return out
}

func (c Cell) clone() Cell {
	c.Quota = maps.Clone(c.Quota)
	c.FixedQuota = maps.Clone(c.FixedQuota)
	c.Instances = slices.Clone(c.Instances)
	return c
}

// takesQuota says whether the cell holds agency sessions: active cells and
// draining ones still finishing their queue.
func (c Cell) takesQuota() bool { return c.State == Active || c.State == Draining }

// Map is one version of the cell map. The zero value is not usable: build one
// with New, Decode or a planning operation.
type Map struct {
	version   int64
	slots     int
	slotMask  uint64 // slots-1 when slots is a power of two, else 0
	change    string
	updated   time.Time
	agencies  map[string]int
	cells     []Cell         // sorted by ID
	index     map[string]int // cell id → position in cells
	table     []uint16       // slot → position in cells; empty when no cell is active
	overrides map[string]string
	format1   bool // encoded in format 1 (the table as runs): read so, kept until SetFormat

	// Lookup acceleration, derived from overrides: only overrides to active
	// cells take effect, and a bit per slot says whether any does there.
	ovSlots []uint64
	ovCell  map[string]uint16
}

// Route is where Lookup sends a user.
type Route struct {
	Cell     string // "" when no cell is active
	Slot     int
	Override bool // the user is pinned by an override
}

// HashUser is the slot hash of a user id.
func HashUser(userID string) uint64 { return xxhash.Sum64String(userID) }

// Lookup routes a user: its override if one points at an active cell, else
// the owner of its slot. It does not allocate.
func (m *Map) Lookup(userID string) Route {
	s := m.SlotOf(userID)
	if m.ovSlots != nil && m.ovSlots[s>>6]&(1<<(s&63)) != 0 {
		if i, ok := m.ovCell[userID]; ok {
			return Route{Cell: m.cells[i].ID, Slot: s, Override: true}
		}
	}
	if len(m.table) == 0 {
		return Route{Slot: s}
	}
	return Route{Cell: m.cells[m.table[s]].ID, Slot: s}
}

// PinnedCells are the cells other than the slot's owner that users of
// slot are pinned to (sorted; nil for a slot with no pinned user: the
// common case costs one bit).
func (m *Map) PinnedCells(slot int) []string {
	if m.ovSlots == nil || slot < 0 || slot >= m.slots || m.ovSlots[slot>>6]&(1<<(slot&63)) == 0 {
		return nil
	}
	owner := m.Owner(slot)
	var out []string
	for user, i := range m.ovCell {
		if id := m.cells[i].ID; id != owner && m.SlotOf(user) == slot && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// SlotOf returns the slot a user id hashes to.
func (m *Map) SlotOf(userID string) int {
	h := HashUser(userID)
	if m.slotMask != 0 {
		return int(h & m.slotMask) // equal to h % slots, without a division
	}
	return int(h % uint64(m.slots))
}

// Owner returns the cell that owns slot, or "" when no cell is active or the
// slot is out of range.
func (m *Map) Owner(slot int) string {
	if slot < 0 || slot >= len(m.table) {
		return ""
	}
	return m.cells[m.table[slot]].ID
}

// Version is the map's version, 1 for a new map, +1 for every change.
func (m *Map) Version() int64 { return m.version }

// Slots is the number of slots user ids hash to.
func (m *Map) Slots() int { return m.slots }

// Change describes the operation that produced this version.
func (m *Map) Change() string { return m.change }

// Updated is when the writer committed this version (zero if not stamped).
func (m *Map) Updated() time.Time { return m.updated }

// Stamped returns a copy of m that records when it was committed.
// The version is unchanged; the copy shares m's immutable internals.
func (m *Map) Stamped(at time.Time) *Map {
	c := *m
	c.updated = at.UTC()
	return &c
}

// WithChange returns a copy of m whose change text is change (the writer
// notes where a change came from). The version is unchanged.
func (m *Map) WithChange(change string) *Map {
	c := *m
	c.change = change
	return &c
}

// Cells returns copies of the cells, sorted by id.
func (m *Map) Cells() []Cell {
	out := make([]Cell, len(m.cells))
	for i, c := range m.cells {
		out[i] = c.clone()
	}
	return out
}

// Cell returns a copy of the cell with the given id.
func (m *Map) Cell(id string) (Cell, bool) {
	i, ok := m.index[id]
	if !ok {
		return Cell{}, false
	}
	return m.cells[i].clone(), true
}

// ActiveCells returns the ids of the active cells, sorted.
func (m *Map) ActiveCells() []string {
	var ids []string
	for _, c := range m.cells {
		if c.State == Active {
			ids = append(ids, c.ID)
		}
	}
	return ids
}

// Agencies returns a copy of agency name → global session limit.
func (m *Map) Agencies() map[string]int { return maps.Clone(m.agencies) }

// AgencyNames returns the agency names, sorted.
func (m *Map) AgencyNames() []string { return slices.Sorted(maps.Keys(m.agencies)) }

// Quota is the number of sessions cell may hold with agency.
func (m *Map) Quota(cellID, agency string) int {
	i, ok := m.index[cellID]
	if !ok {
		return 0
	}
	return m.cells[i].Quota[agency]
}

// Overrides returns a copy of user → cell pins, including those to cells that
// are not active (which Lookup ignores until the cell is active again).
func (m *Map) Overrides() map[string]string { return maps.Clone(m.overrides) }

// SlotCounts returns cell id → number of slots it owns, with every cell
// present (0 for cells that own none).
func (m *Map) SlotCounts() map[string]int {
	counts := make(map[string]int, len(m.cells))
	for _, c := range m.cells {
		counts[c.ID] = 0
	}
	n := make([]int, len(m.cells))
	for _, ci := range m.table {
		n[ci]++
	}
	for i, c := range m.cells {
		counts[c.ID] = n[i]
	}
	return counts
}

// finish derives the index and the lookup acceleration from the document
// fields. It must run after every construction, before validation.
func (m *Map) finish() {
	m.slotMask = 0
	if m.slots > 1 && m.slots&(m.slots-1) == 0 {
		m.slotMask = uint64(m.slots - 1)
	}
	m.index = make(map[string]int, len(m.cells))
	for i, c := range m.cells {
		m.index[c.ID] = i
	}
	m.ovSlots, m.ovCell = nil, nil
	for user, id := range m.overrides {
		i, ok := m.index[id]
		if !ok || m.cells[i].State != Active {
			continue
		}
		if m.ovCell == nil {
			m.ovCell = make(map[string]uint16)
			m.ovSlots = make([]uint64, (m.slots+63)/64)
		}
		m.ovCell[user] = uint16(i)
		s := m.SlotOf(user)
		m.ovSlots[s>>6] |= 1 << (s & 63)
	}
}

// clone deep-copies m so that a plan can change the copy.
func (m *Map) clone() *Map {
	c := &Map{
		version:   m.version,
		slots:     m.slots,
		change:    m.change,
		updated:   m.updated,
		agencies:  maps.Clone(m.agencies),
		cells:     make([]Cell, len(m.cells)),
		table:     slices.Clone(m.table),
		overrides: maps.Clone(m.overrides),
		format1:   m.format1,
	}
	for i, cell := range m.cells {
		c.cells[i] = cell.clone()
	}
	c.finish()
	return c
}
