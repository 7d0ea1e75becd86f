package slotmap

import (
	"math"

	"github.com/cespare/xxhash/v2"
)

// Weighted rendezvous hashing (Schindelhauer and Schomaker's "weighted
// distributed hash tables"): each (cell, slot) pair gets a uniform u in (0,1)
// from a hash, the score is weight / -ln(u), and the slot's target is the cell
// with the highest score. -ln(u)/weight is exponential with rate weight, so a
// cell wins each slot with probability weight/Σweights exactly, and adding,
// removing or re-weighting one cell changes only the slots that cell wins or
// loses.

// candidate is a cell taking part in the target assignment.
type candidate struct {
	pos    uint16 // position in Map.cells
	seed   uint64
	weight float64
	id     string
}

func newCandidate(pos int, c Cell) candidate {
	return candidate{pos: uint16(pos), seed: xxhash.Sum64String(c.ID), weight: float64(c.Weight), id: c.ID}
}

// score is the candidate's bid for slot.
func (c candidate) score(slot int) float64 {
	h := mix64(c.seed ^ (uint64(slot)+1)*0x9e3779b97f4a7c15)
	u := (float64(h>>11) + 0.5) / (1 << 53) // uniform in (0,1), never 0 or 1
	return c.weight / -math.Log(u)
}

// mix64 is the SplitMix64 finaliser: a bijection whose output bits each
// depend on every input bit.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// winner returns the position of the candidate with the highest score for
// slot (ties, which need equal 64-bit hashes, go to the smaller id).
func winner(cands []candidate, slot int) uint16 {
	best, bestScore := cands[0], cands[0].score(slot)
	for _, c := range cands[1:] {
		if s := c.score(slot); s > bestScore || (s == bestScore && c.id < best.id) {
			best, bestScore = c, s
		}
	}
	return best.pos
}

// wins reports whether the candidate at position p beats every other
// candidate for slot. It checks the slot's current owner first and stops at
// the first cell that outbids p, so a cell that loses (most slots, for a new
// cell) costs a few scores instead of one per cell.
func wins(cands []candidate, p uint16, owner uint16, slot int) bool {
	var me candidate
	for _, c := range cands {
		if c.pos == p {
			me = c
		}
	}
	mine := me.score(slot)
	beats := func(c candidate) bool {
		s := c.score(slot)
		return s > mine || (s == mine && c.id < me.id)
	}
	for _, c := range cands {
		if c.pos == owner && c.pos != p && beats(c) {
			return false
		}
	}
	for _, c := range cands {
		if c.pos != p && c.pos != owner && beats(c) {
			return false
		}
	}
	return true
}

// candidates returns the active cells of m as candidates, with weight
// overrides applied by the caller beforehand.
func (m *Map) candidates() []candidate {
	var cands []candidate
	for i, c := range m.cells {
		if c.State == Active {
			cands = append(cands, newCandidate(i, c))
		}
	}
	return cands
}

// Target returns the cell that weighted rendezvous hashing assigns slot to
// over the active cells, or "" when none is active.
func (m *Map) Target(slot int) string {
	cands := m.candidates()
	if len(cands) == 0 || slot < 0 || slot >= m.slots {
		return ""
	}
	return m.cells[winner(cands, slot)].ID
}

// Drift returns the slots whose owner differs from their target, in order.
// A map that only ever changed through planning operations has none.
func (m *Map) Drift() []int {
	cands := m.candidates()
	if len(cands) == 0 {
		return nil
	}
	var drift []int
	for s, owner := range m.table {
		if winner(cands, s) != owner {
			drift = append(drift, s)
		}
	}
	return drift
}
