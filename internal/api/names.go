package api

// The names of the contracts: which bytes each kind of name may hold and
// how long it may be. The router, the cells, the map and the CLI check a
// name with these functions only, so that what one accepts the others do.

// The longest names.
const (
	MaxUserID    = 64
	MaxClientID  = 64
	MaxCellID    = 32
	MaxAgency    = 32
	MaxProduct   = 32
	MaxRequestID = 64
	MaxInquiryID = 128
	MaxIdemKey   = 255
)

// charset is the set of bytes a kind of name may hold.
type charset [256]bool

// newCharset builds a charset from single bytes and ranges: "a-z0-9_-"
// (a '-' last stands for itself).
func newCharset(spec string) *charset {
	var cs charset
	for i := 0; i < len(spec); i++ {
		if i+2 < len(spec) && spec[i+1] == '-' {
			for c := spec[i]; c <= spec[i+2]; c++ {
				cs[c] = true
			}
			i += 2
			continue
		}
		cs[spec[i]] = true
	}
	return &cs
}

var (
	userChars    = newCharset("A-Za-z0-9_-")
	nameChars    = newCharset("A-Za-z0-9._-")
	cellChars    = newCharset("a-z0-9-")
	agencyChars  = newCharset("a-z0-9_")
	requestChars = newCharset("A-Za-z0-9._:-")
	hostChars    = newCharset("A-Za-z0-9.:[]-")
	printable    = newCharset(" -~")
)

// of reports whether s is 1–max bytes of cs.
func of[T ~string | ~[]byte](s T, cs *charset, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !cs[s[i]] {
			return false
		}
	}
	return true
}

// ValidUserID: a user id, the key of the routing: 1–64 of [A-Za-z0-9_-].
func ValidUserID[T ~string | ~[]byte](id T) bool { return of(id, userChars, MaxUserID) }

// ValidInquiryID: what a router takes for an inquiry id in a path before
// the cell that owns it checks the rest: 1–128 of [A-Za-z0-9_-] (the cell
// is everything before its last '-').
func ValidInquiryID[T ~string | ~[]byte](id T) bool { return of(id, userChars, MaxInquiryID) }

// ValidClientID: a client of the router (the holder of API keys) or a
// router's own id: 1–64 of [A-Za-z0-9._-].
func ValidClientID(id string) bool { return of(id, nameChars, MaxClientID) }

// ValidCellID: a cell's or an instance's id: 1–32 of [a-z0-9-], starting
// and ending with a letter or digit.
func ValidCellID[T ~string | ~[]byte](id T) bool {
	return of(id, cellChars, MaxCellID) && id[0] != '-' && id[len(id)-1] != '-'
}

// ValidAgency: an agency's name: 1–32 of [a-z0-9_], starting with a letter.
func ValidAgency(name string) bool {
	return of(name, agencyChars, MaxAgency) && name[0] >= 'a' && name[0] <= 'z'
}

// ValidProduct: an inquiry's product: 1–32 of [a-z0-9_].
func ValidProduct(p string) bool { return of(p, agencyChars, MaxProduct) }

// ValidRequestID: a client's X-Request-Id the router keeps: 1–64 of
// [A-Za-z0-9._:-].
func ValidRequestID(id []byte) bool { return of(id, requestChars, MaxRequestID) }

// ValidIdempotencyKey: 1–255 bytes of printable ASCII.
func ValidIdempotencyKey(k string) bool { return of(k, printable, MaxIdemKey) }

// ValidForwardedHost: what may stand inside a quoted Forwarded host, a
// host name or address with an optional port: 1–100 of [A-Za-z0-9.:[]-].
func ValidForwardedHost(h []byte) bool { return of(h, hostChars, 100) }
