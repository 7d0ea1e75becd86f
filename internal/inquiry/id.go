package inquiry

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"strings"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/rs/xid"
)

// An inquiry id is "<cell>-<unique>": the cell id (which may itself hold
// '-') and 20 characters of lower-case base32hex ([0-9a-v]) that hold no
// '-'. The cell is everything before the last '-', so the router can route
// GET /v1/inquiries/{id} without a lookup.
const uniqueLen = 20

var b32 = base32.HexEncoding.WithPadding(base32.NoPadding)

// NewID returns a fresh id: 100 random bits after the cell id, so that
// ids cannot be guessed from one another (or from the time).
func NewID(cell string) string {
	var b [(uniqueLen*5 + 7) / 8]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return cell + "-" + strings.ToLower(b32.EncodeToString(b[:]))[:uniqueLen]
}

// KeyID returns the id an Idempotency-Key stands for: the same client,
// user and key always give the same id, so a retried request finds its
// inquiry, and a key is the client's own (another client's same key names
// another inquiry). An empty client (a caller that is not a router's
// client) gives the id the key had before clients were recorded.
func KeyID(cell, client, userID, key string) string {
	in := userID + "\x00" + key
	if client != "" {
		in = client + "\x00" + in
	}
	h := sha256.Sum256([]byte(in))
	return cell + "-" + strings.ToLower(b32.EncodeToString(h[:]))[:uniqueLen]
}

// NewJob returns a fresh enqueue token (see Record.Job).
func NewJob() string { return xid.New().String() }

// CellOf returns the cell an id belongs to, and whether the id is well
// formed.
func CellOf(id string) (string, bool) {
	i := strings.LastIndexByte(id, '-')
	if i <= 0 || len(id)-i-1 != uniqueLen {
		return "", false
	}
	cell, unique := id[:i], id[i+1:]
	if !api.ValidCellID(cell) {
		return "", false
	}
	for j := 0; j < len(unique); j++ {
		if c := unique[j]; !(c >= '0' && c <= '9') && !(c >= 'a' && c <= 'v') {
			return "", false
		}
	}
	return cell, true
}
