// Package route is what the router reads of a request to choose its cell:
// the path and method (a new inquiry, or the read of one whose id names
// its cell) and, for a new inquiry, the user_id and priority in its JSON
// body. Pure functions over bytes, without allocating on the common path.
package route

import (
	"bytes"
	"encoding/json"
	"strings"
	"unsafe"

	"github.com/cellkit/cellkit/internal/api"
)

// The public API the router serves.
const (
	pathInquiries  = api.PathInquiries
	pathInquiryPre = api.PathInquiries + "/"
)

// Kind is what a request path asks for.
type Kind uint8

// The kinds of request path.
const (
	NotFound   Kind = iota
	BadMethod       // a known path with the wrong method
	Create          // POST /v1/inquiries: routed by the user_id in the body
	Read            // GET|HEAD /v1/inquiries/{id}: routed by the cell in the id
	BadInquiry      // /v1/inquiries/{id} with an id that names no cell
)

// Classify maps a (normalised) path and method to a route. For Read it
// returns the cell id inside the inquiry id.
func Classify(method, path []byte) (Kind, []byte) {
	switch {
	case string(path) == pathInquiries:
		if string(method) != "POST" {
			return BadMethod, nil
		}
		return Create, nil
	case bytes.HasPrefix(path, []byte(pathInquiryPre)):
		if string(method) != "GET" && string(method) != "HEAD" {
			return BadMethod, nil
		}
		cell, ok := cellOfInquiry(path[len(pathInquiryPre):])
		if !ok {
			return BadInquiry, nil
		}
		return Read, cell
	}
	return NotFound, nil
}

// SlotOfRead is the user's slot an inquiry id in a Read path holds
// (api.ParseInquiryID), or api.NoSlot: the router sends the read to the
// slot's owner, where the user's inquiries live, and a read of an id
// without a slot to the cell the id names.
func SlotOfRead(path []byte) int {
	if !bytes.HasPrefix(path, []byte(pathInquiryPre)) {
		return api.NoSlot
	}
	_, slot, _, ok := api.ParseInquiryID(path[len(pathInquiryPre):])
	if !ok {
		return api.NoSlot
	}
	return slot
}

// Allowed is the Allow header's value for a BadMethod path.
func Allowed(path []byte) []byte {
	if len(path) >= len(pathInquiryPre) {
		return allowRead
	}
	return allowCreate
}

var (
	allowCreate = []byte("POST")
	allowRead   = []byte("GET, HEAD")
)

// cellOfInquiry returns the cell named by an inquiry id "<cell>-<unique>":
// everything before the last '-' (see api.ValidInquiryID).
func cellOfInquiry(id []byte) ([]byte, bool) {
	if !api.ValidInquiryID(id) {
		return nil, false
	}
	dash := bytes.LastIndexByte(id, '-')
	if dash <= 0 || dash == len(id)-1 {
		return nil, false
	}
	cell := id[:dash]
	if !api.ValidCellID(bstr(cell)) {
		return nil, false
	}
	return cell, true
}

// inquiryUser is what the router needs from an inquiry body; the cell
// decodes the same body with encoding/json into a struct with this field
// (internal/inquiry: a *string, so a later "user_id": null clears it).
type inquiryUser struct {
	UserID *string `json:"user_id"`
}

func (u inquiryUser) id() string {
	if u.UserID == nil {
		return ""
	}
	return *u.UserID
}

// inquiryLane is the other field the router reads from an inquiry body:
// the priority it asks for, which the client's policy allows or not. The
// cell decodes it the same way (a *string: null is none).
type inquiryLane struct {
	Priority *string `json:"priority"`
}

// InquiryFields returns the user id of an inquiry body, whether it is a
// valid one, and the priority the body asks for (nil for none, or when the
// body cannot be decoded: the cell then refuses it). The results are always
// what encoding/json decodes into inquiryUser and inquiryLane (the cell
// routes nothing, but must see the same user and lane the router saw): a
// scanner handles plain bodies without allocating and leaves everything
// unusual (escapes, non-ASCII or case-folded keys, type errors, deep
// nesting, invalid JSON) to encoding/json. FuzzInquiryFields holds the two
// together.
func InquiryFields(body []byte) (id []byte, idOK bool, priority []byte) {
	if id, priority, ok := scanInquiry(body); ok {
		return id, api.ValidUserID(bstr(id)), priority
	}
	var l inquiryLane
	if json.Unmarshal(body, &l) == nil && l.Priority != nil {
		priority = []byte(*l.Priority)
	}
	var v inquiryUser
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, false, priority
	}
	return []byte(v.id()), api.ValidUserID(v.id()), priority
}

// scanInquiry is the fast path of InquiryFields. ok means body is a JSON
// object that encoding/json decodes into inquiryUser and inquiryLane
// without error and id and priority are the values they yield (nil for
// none); !ok means "ask encoding/json".
func scanInquiry(b []byte) (id, priority []byte, ok bool) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, nil, false
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return nil, nil, skipWS(b, i+1) == len(b)
	}
	for {
		key, j, ok := plainString(b, i)
		if !ok {
			return nil, nil, false
		}
		i = skipWS(b, j)
		if i >= len(b) || b[i] != ':' {
			return nil, nil, false
		}
		i = skipWS(b, i+1)
		switch {
		case string(key) == "user_id" || string(key) == "priority":
			var v []byte
			if i < len(b) && b[i] == '"' {
				if v, j, ok = plainString(b, i); !ok {
					return nil, nil, false
				}
				i = j
			} else if bytes.HasPrefix(b[i:], []byte("null")) {
				v, i = nil, i+4 // null clears a *string field
			} else {
				return nil, nil, false // a type error: encoding/json says what
			}
			if key[0] == 'u' {
				id = v
			} else {
				priority = v
			}
		case len(key) == len("user_id") && strings.EqualFold(bstr(key), "user_id"),
			len(key) == len("priority") && strings.EqualFold(bstr(key), "priority"):
			return nil, nil, false // encoding/json matches keys case-insensitively
		default:
			if i, ok = skipValue(b, i, 0); !ok {
				return nil, nil, false
			}
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return nil, nil, false
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
			continue
		case '}':
			return id, priority, skipWS(b, i+1) == len(b)
		}
		return nil, nil, false
	}
}

// plainString reads a JSON string at b[i] made only of printable ASCII
// without escapes, returning its content and the index after it.
func plainString(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

func skipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// maxScanDepth bounds the scanner's recursion; deeper bodies go to
// encoding/json, which has its own limit.
const maxScanDepth = 64

// skipValue checks and skips one JSON value at b[i] with the grammar
// encoding/json accepts, returning the index after it.
func skipValue(b []byte, i, depth int) (int, bool) {
	if i >= len(b) || depth > maxScanDepth {
		return 0, false
	}
	switch c := b[i]; {
	case c == '"':
		return skipString(b, i)
	case c == '{':
		i = skipWS(b, i+1)
		if i < len(b) && b[i] == '}' {
			return i + 1, true
		}
		for {
			var ok bool
			if i >= len(b) || b[i] != '"' {
				return 0, false
			}
			if i, ok = skipString(b, i); !ok {
				return 0, false
			}
			i = skipWS(b, i)
			if i >= len(b) || b[i] != ':' {
				return 0, false
			}
			if i, ok = skipValue(b, skipWS(b, i+1), depth+1); !ok {
				return 0, false
			}
			i = skipWS(b, i)
			if i >= len(b) {
				return 0, false
			}
			if b[i] == '}' {
				return i + 1, true
			}
			if b[i] != ',' {
				return 0, false
			}
			i = skipWS(b, i+1)
		}
	case c == '[':
		i = skipWS(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1, true
		}
		for {
			var ok bool
			if i, ok = skipValue(b, i, depth+1); !ok {
				return 0, false
			}
			i = skipWS(b, i)
			if i >= len(b) {
				return 0, false
			}
			if b[i] == ']' {
				return i + 1, true
			}
			if b[i] != ',' {
				return 0, false
			}
			i = skipWS(b, i+1)
		}
	case c == '-' || c >= '0' && c <= '9':
		return skipNumber(b, i)
	case c == 't':
		return skipLiteral(b, i, "true")
	case c == 'f':
		return skipLiteral(b, i, "false")
	case c == 'n':
		return skipLiteral(b, i, "null")
	}
	return 0, false
}

func skipLiteral(b []byte, i int, lit string) (int, bool) {
	if !bytes.HasPrefix(b[i:], []byte(lit)) {
		return 0, false
	}
	return i + len(lit), true
}

// skipString skips a string: no control characters, only JSON's escapes.
// Other bytes, even invalid UTF-8, are accepted as encoding/json does.
func skipString(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return j + 1, true
		case c < 0x20:
			return 0, false
		case c == '\\':
			j++
			if j >= len(b) {
				return 0, false
			}
			switch b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(b) {
					return 0, false
				}
				for _, h := range b[j+1 : j+5] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return 0, false
					}
				}
				j += 4
			default:
				return 0, false
			}
		}
	}
	return 0, false
}

// skipNumber skips -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func skipNumber(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = skipDigits(b, i)
	default:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		j := skipDigits(b, i+1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := skipDigits(b, i)
		if j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// bstr views b as a string without copying. The caller must not keep the
// string beyond b's lifetime nor change b while it is in use: it is only
// passed to functions that read it and keep nothing (map lookups, hashing,
// validation).
func bstr(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}
