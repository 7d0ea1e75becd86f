package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// MoveSpec says which users a move carries from one cell to another
// (docs/decisions/moving-users-data.md): the users of Slots but those in
// Keep, and the users named in Users (moved by an override).
type MoveSpec struct {
	// ID names the move: the same in both cells' records and the
	// control's. 1–64 of [A-Za-z0-9_-].
	ID   string `json:"id"`
	From string `json:"from"`
	To   string `json:"to"`
	// Slots are slots whose users move, but Keep.
	Slots []int `json:"slots,omitempty"`
	// Keep are users of Slots who do not move (pinned elsewhere).
	Keep []MoveUser `json:"keep,omitempty"`
	// Users are users of other slots who move.
	Users []MoveUser `json:"users,omitempty"`
}

// MoveUser is a user a move names, with the user's slot.
type MoveUser struct {
	User string `json:"user"`
	Slot int    `json:"slot"`
}

// Moves reports whether the move carries user, whose slot is slot.
func (s *MoveSpec) Moves(slot int, user string) bool {
	if _, ok := slices.BinarySearch(s.Slots, slot); ok {
		return !slices.ContainsFunc(s.Keep, func(u MoveUser) bool { return u.User == user })
	}
	return slices.ContainsFunc(s.Users, func(u MoveUser) bool { return u.User == user })
}

// ScanSlots are the slots whose inquiries a move reads: Slots and those of
// Users, sorted.
func (s *MoveSpec) ScanSlots() []int {
	out := slices.Clone(s.Slots)
	for _, u := range s.Users {
		out = append(out, u.Slot)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Whole reports whether the move carries every user of slot (no user of
// it is kept, none of it named alone).
func (s *MoveSpec) Whole(slot int) bool {
	if _, ok := slices.BinarySearch(s.Slots, slot); !ok {
		return false
	}
	return !slices.ContainsFunc(s.Keep, func(u MoveUser) bool { return u.Slot == slot })
}

// ErrBadMoveSpec is what a spec that is not one is (Check's errors).
var ErrBadMoveSpec = errors.New("bad move spec")

// Check says what is wrong with a move's spec (ErrBadMoveSpec), or nil. The slots are
// sorted and below slots.
func (s *MoveSpec) Check(slots int) error {
	switch {
	case !ValidMoveID(s.ID):
		return fmt.Errorf("%w: move id %q: want 1–64 of [A-Za-z0-9_-]", ErrBadMoveSpec, s.ID)
	case !ValidCellID(s.From) || !ValidCellID(s.To) || s.From == s.To:
		return fmt.Errorf("%w: move %s: from %q to %q: want two cells", ErrBadMoveSpec, s.ID, s.From, s.To)
	case len(s.Slots) == 0 && len(s.Users) == 0:
		return fmt.Errorf("%w: move %s: no slot and no user", ErrBadMoveSpec, s.ID)
	case !slices.IsSorted(s.Slots):
		return fmt.Errorf("%w: move %s: slots not sorted", ErrBadMoveSpec, s.ID)
	}
	for _, slot := range s.Slots {
		if slot < 0 || slot >= slots {
			return fmt.Errorf("%w: move %s: slot %d not in [0, %d)", ErrBadMoveSpec, s.ID, slot, slots)
		}
	}
	for _, u := range append(slices.Clone(s.Keep), s.Users...) {
		if !ValidUserID(u.User) || u.Slot < 0 || u.Slot >= slots {
			return fmt.Errorf("%w: move %s: user %q of slot %d", ErrBadMoveSpec, s.ID, u.User, u.Slot)
		}
	}
	return nil
}

// ValidMoveID: a move's id, 1–64 of [A-Za-z0-9_-] (a key in a cell's
// JetStream bucket and a path segment).
func ValidMoveID(id string) bool { return of(id, userChars, MaxUserID) }

// The roles of a cell in a move.
const (
	MoveSource      = "source"
	MoveDestination = "destination"
)

// CellMove is a cell's record of its part in a move (PUT and GET
// /v1/admin/moves/{id}): kept in the cell's JetStream, so that every
// instance follows it and a restarted one finds it.
type CellMove struct {
	Spec MoveSpec `json:"spec"`
	Role string   `json:"role"`
	// Fenced, at the source: the moving users' new inquiries are refused
	// (user-moving) and no attempt of theirs starts.
	Fenced bool      `json:"fenced,omitempty"`
	Since  time.Time `json:"since"`
	// Inflight (read only) is how many attempts of the moving users the
	// instance that answered has in flight.
	Inflight int `json:"inflight"`
	// RecordTTLSeconds (read only) is how long the cell keeps a record
	// after its last write: a digest leaves out what may be expiring.
	RecordTTLSeconds int64 `json:"record_ttl_seconds,omitempty"`
}

// MovedMessage is one ledger message a move carries (the export's page,
// the import's body).
type MovedMessage struct {
	Seq     uint64          `json:"seq"`
	Kind    string          `json:"kind"`
	Written time.Time       `json:"written"`
	Record  json.RawMessage `json:"record"`
}

// MovePage is a page of a source's export (GET
// /v1/admin/moves/{id}/export?after=SEQ&limit=N) and an import's body
// (POST /v1/admin/moves/{id}/import).
type MovePage struct {
	Messages []MovedMessage `json:"messages"`
	// Next is the cursor to ask after; Done says the source had no more.
	Next uint64 `json:"next"`
	Done bool   `json:"done"`
}

// MoveDigest is a cell's digest of a move's users (GET
// /v1/admin/moves/{id}/digest?horizon=RFC3339): per slot, the messages
// first written after the horizon.
type MoveDigest struct {
	Slots map[int]SlotDigest `json:"slots"`
}

// SlotDigest is one slot's messages: how many, and the sum of their
// hashes.
type SlotDigest struct {
	Messages int    `json:"messages"`
	Sum      uint64 `json:"sum"`
}

// The paths of a cell's part in moves (admin API): PathCellMoves lists
// them (GET); PathCellMoves + id is one (PUT, GET, DELETE); its actions
// are PathCellMoves + id + "/" + one of MoveActions.
const PathCellMoves = "/v1/admin/moves/"

// PathCellMoveSize measures what a move would carry out of the cell
// (POST a MoveSpec; answered with a MoveSize): a plan's estimate, nothing
// recorded.
const PathCellMoveSize = "/v1/admin/move-size"

// MoveSize is what a move would carry out of its source: the moving
// users' messages and their records' bytes.
type MoveSize struct {
	Messages int `json:"messages"`
	Bytes    int `json:"bytes"`
}

// Actions on a cell's move.
const (
	MoveExport   = "export"   // GET: a page of the source's messages
	MoveImport   = "import"   // POST: a page into the destination
	MoveDigestOf = "digest"   // GET: the digest of the move's users
	MoveHand     = "hand"     // POST: the source hands its pending inquiries over
	MoveDiscard  = "discard"  // POST: the cell lets the move's users' messages go ({"slots": [...]}: only those)
	MoveActivate = "activate" // POST: the handed inquiries become work (at the source, for a move called off)
)

// MovesDocument is the name of the record of the data moves of a map
// change under way, beside the map (registry.DocumentFor): written by the
// control library before each step, read by cellctl move status and the
// console.
const MovesDocument = "moves"

// The phases of a map change's data moves.
const (
	MovesPreparing = "preparing" // copying, fencing, verifying; the map unchanged
	MovesCommitted = "committed" // the map gives the users to their new cells; finishing
)

// MovesRecord is the record of a map change's data moves.
type MovesRecord struct {
	// Version is the map version the change commits.
	Version int64  `json:"version"`
	Change  string `json:"change"`
	Phase   string `json:"phase"`
	Holder  string `json:"holder"`
	// Moves are the change's moves, each with what its steps did so far.
	Moves   []MoveProgress `json:"moves"`
	Started time.Time      `json:"started"`
	Updated time.Time      `json:"updated"`
}

// MoveProgress is one move of a change and where it stands.
type MoveProgress struct {
	Spec MoveSpec `json:"spec"`
	// Admins are the admin URLs of its two cells (each cell's own, then
	// its instances'): a cell that the change was adding is in no
	// committed map when the change is called off.
	Admins map[string][]string `json:"admins,omitempty"`
	// Step is the last step begun: recorded (nothing asked of a cell
	// yet), recording, copying, fenced, handed, copied, verified, done; or
	// called-off, skipped.
	Step     string `json:"step"`
	Copied   int    `json:"copied"`
	Bytes    int    `json:"bytes"`
	Again    int    `json:"again,omitempty"`
	Handed   int    `json:"handed"`
	Slots    int    `json:"slots"`
	Messages int    `json:"messages"`
	Verified bool   `json:"verified"`
	// Fenced is when the users' new inquiries began to be refused;
	// Finished when the destination took them (the fence's end).
	Fenced    *time.Time `json:"fenced,omitempty"`
	Finished  *time.Time `json:"finished,omitempty"`
	Activated int        `json:"activated"`
	Error     string     `json:"error,omitempty"`
}
