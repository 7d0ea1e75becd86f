package inquiry

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"strings"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/rs/xid"
)

// An inquiry id is "<cell>-<slot><unique>" (api.ParseInquiryID): the
// cell that accepted it, its user's slot, 20 characters that say which
// inquiry.

var b32 = base32.HexEncoding.WithPadding(base32.NoPadding)

// NewID returns a fresh id of an inquiry of a user in slot, accepted by
// cell: 100 random bits, so that ids cannot be guessed from one another
// (or from the time).
func NewID(cell string, slot int) string {
	var b [(api.IDUniqueLen*5 + 7) / 8]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return makeID(cell, slot, b[:])
}

// KeyID returns the id an Idempotency-Key stands for: the same client,
// user and key always give the same unique part, whatever cell accepts
// it (so a retried request finds its inquiry wherever the user's data
// lives), and a key is the client's own (another client's same
// key names another inquiry). An empty client (a caller that is not a
// router's client) gives the unique part the key had before clients were
// recorded.
func KeyID(cell string, slot int, client, userID, key string) string {
	in := userID + "\x00" + key
	if client != "" {
		in = client + "\x00" + in
	}
	h := sha256.Sum256([]byte(in))
	return makeID(cell, slot, h[:])
}

func makeID(cell string, slot int, bits []byte) string {
	b := make([]byte, 0, len(cell)+1+api.IDSlotLen+api.IDUniqueLen)
	b = append(append(b, cell...), '-')
	b = api.AppendIDSlot(b, slot)
	return string(append(b, strings.ToLower(b32.EncodeToString(bits))[:api.IDUniqueLen]...))
}

// NewJob returns a fresh enqueue token (see Record.Job).
func NewJob() string { return xid.New().String() }

// CellOf returns the cell that accepted an id, and whether the id is well
// formed.
func CellOf(id string) (string, bool) {
	cell, _, _, ok := api.ParseInquiryID(id)
	return cell, ok
}

// Unslotted is the id a keyed id had before ids held the slot (the cell
// and the unique part), or "" for an id that holds no slot: what the
// records layout keeps a key's inquiry under when it was accepted before.
func Unslotted(id string) string {
	cell, slot, unique, ok := api.ParseInquiryID(id)
	if !ok || slot == api.NoSlot {
		return ""
	}
	return cell + "-" + unique
}
