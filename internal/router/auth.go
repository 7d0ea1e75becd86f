package router

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/problem"
)

// MaxClients bounds the keys file, and so the number of rate limiters.
const MaxClients = 10_000

// maxKeyLen bounds the X-API-Key header: longer keys are unknown without
// being hashed.
const maxKeyLen = 256

// lanePolicy is which lanes a client may use and its default, as the
// values of the Cellkit-Priority header the cell gets.
type lanePolicy struct {
	high, normal bool
	def          []byte // "high" or "normal"
}

// allowed names the lanes for a message: "normal", "high" or "high, normal".
func (p lanePolicy) allowed() string {
	switch {
	case p.high && p.normal:
		return "high, normal"
	case p.high:
		return "high"
	}
	return "normal"
}

var (
	laneHigh   = []byte("high")
	laneNormal = []byte("normal")
)

// parseLanes checks an entry's lanes and default.
func parseLanes(lanes []string, def string) (lanePolicy, error) {
	var p lanePolicy
	if lanes == nil {
		lanes = []string{"normal"}
	}
	if len(lanes) == 0 {
		return p, errors.New(`lanes must name at least one of "high" and "normal"`)
	}
	for _, l := range lanes {
		switch {
		case l == "high" && !p.high:
			p.high = true
		case l == "normal" && !p.normal:
			p.normal = true
		default:
			return p, fmt.Errorf(`lanes: %q: want "high" or "normal", each at most once`, l)
		}
	}
	switch {
	case def == "" && p.normal, def == "normal" && p.normal:
		p.def = laneNormal
	case def == "" && p.high, def == "high" && p.high:
		p.def = laneHigh
	default:
		return p, fmt.Errorf("default_lane %q must be one of its lanes (%s)", def, p.allowed())
	}
	return p, nil
}

// lane is the lane of an inquiry whose body asks for priority (nil: none
// asked, or the router could not tell, in which case the cell refuses a
// body it cannot read and otherwise the default holds). ok is false when
// the client may not use the lane it asks for. A priority that is no lane
// gets the default: the cell refuses it with 400 invalid-field.
func (p *lanePolicy) lane(priority []byte) (lane []byte, ok bool) {
	switch string(priority) {
	case "high":
		return laneHigh, p.high
	case "normal":
		return laneNormal, p.normal
	}
	return p.def, true
}

// Client is an authenticated platform.
type Client struct {
	ID    string
	Rate  float64
	Burst int

	lanes       lanePolicy
	laneRefusal prob   // 403 for a priority the client may not use
	index       int    // position in Keys.clients, which indexes the limiters
	limitText   []byte // X-RateLimit-Limit value
	idBytes     []byte // ID, for the Cellkit-Client header
}

// Keys is the parsed keys file.
type Keys struct {
	byPrefix map[uint64]storedKey // first 8 bytes of the digest → the key
	clients  []*Client
}

// storedKey is one key of the file: its digest and its client.
type storedKey struct {
	digest [sha256.Size]byte
	client *Client
}

func digestPrefix(d *[sha256.Size]byte) uint64 { return binary.LittleEndian.Uint64(d[:8]) }

// authResult is the outcome of Authenticate.
type authResult uint8

const (
	authOK authResult = iota
	authMissing
	authUnknown
)

// ParseKeys parses and validates a keys file.
func ParseKeys(data []byte) (*Keys, error) {
	k, err := parseKeys(data)
	if err != nil {
		return nil, fmt.Errorf("keys: %w", err)
	}
	return k, nil
}

func parseKeys(data []byte) (*Keys, error) {
	var entries []api.KeyEntry
	if err := json.Unmarshal(data, &entries); err != nil {
		return nil, err
	}
	if len(entries) > MaxClients {
		return nil, fmt.Errorf("%d entries, at most %d", len(entries), MaxClients)
	}
	k := &Keys{byPrefix: make(map[uint64]storedKey, len(entries))}
	byID := map[string]*Client{}
	for i, e := range entries {
		if !api.ValidClientID(e.Client) {
			return nil, fmt.Errorf("entry %d: client %q: want 1-64 of [A-Za-z0-9._-]", i, e.Client)
		}
		raw, err := hex.DecodeString(e.KeySHA256)
		if err != nil || len(raw) != sha256.Size {
			return nil, fmt.Errorf("entry %d (%s): key_sha256 must be 64 hex digits", i, e.Client)
		}
		if !(e.Rate > 0) || math.IsInf(e.Rate, 0) {
			return nil, fmt.Errorf("entry %d (%s): rate must be > 0", i, e.Client)
		}
		if e.Burst < 1 {
			return nil, fmt.Errorf("entry %d (%s): burst must be ≥ 1", i, e.Client)
		}
		lanes, err := parseLanes(e.Lanes, e.DefaultLane)
		if err != nil {
			return nil, fmt.Errorf("entry %d (%s): %v", i, e.Client, err)
		}
		d := [sha256.Size]byte(raw)
		if _, dup := k.byPrefix[digestPrefix(&d)]; dup {
			// The same key twice, or (with odds of 2^-64) two keys
			// sharing a prefix: either way, issue another key.
			return nil, fmt.Errorf("entry %d (%s): duplicate key", i, e.Client)
		}
		c, seen := byID[e.Client]
		switch {
		case !seen:
			c = &Client{ID: e.Client, Rate: e.Rate, Burst: e.Burst, lanes: lanes, index: len(k.clients),
				limitText: strconv.AppendFloat(nil, e.Rate, 'f', -1, 64), idBytes: []byte(e.Client)}
			c.laneRefusal = newProb(problem.New(http.StatusForbidden, problem.LaneForbidden,
				"this API key may send only priority "+lanes.allowed()+" (its client's lanes)").WithField("priority"))
			byID[e.Client] = c
			k.clients = append(k.clients, c)
		case c.Rate != e.Rate || c.Burst != e.Burst:
			return nil, fmt.Errorf("entry %d: client %s has keys with different limits", i, e.Client)
		case c.lanes.high != lanes.high || c.lanes.normal != lanes.normal || string(c.lanes.def) != string(lanes.def):
			return nil, fmt.Errorf("entry %d: client %s has keys with different lanes", i, e.Client)
		}
		k.byPrefix[digestPrefix(&d)] = storedKey{digest: d, client: c}
	}
	if len(k.clients) == 0 {
		return nil, errNoKeys
	}
	return k, nil
}

// LoadKeys reads the keys file at path; its error names the file.
func LoadKeys(path string) (*Keys, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("keys: %w", err)
	}
	k, err := parseKeys(data)
	if err != nil {
		return nil, fmt.Errorf("keys file %s: %w", path, err)
	}
	return k, nil
}

// Clients returns the clients, in file order.
func (k *Keys) Clients() []*Client { return k.clients }

// Authenticate finds the client holding key.
//
// The key is hashed; the first 8 bytes of the hash pick the candidate stored
// key and the whole hash is then compared with crypto/subtle in constant
// time. What the lookup's timing can depend on is the hash of the presented
// key, which says nothing usable about any stored key; raw keys are never
// held in memory.
func (k *Keys) Authenticate(key []byte) (*Client, authResult) {
	if len(key) == 0 {
		return nil, authMissing
	}
	if len(key) > maxKeyLen {
		return nil, authUnknown
	}
	d := sha256.Sum256(key)
	sk, ok := k.byPrefix[digestPrefix(&d)]
	if !ok || subtle.ConstantTimeCompare(sk.digest[:], d[:]) != 1 {
		return nil, authUnknown
	}
	return sk.client, authOK
}

// keyring is the keys in use and their clients' token buckets, swapped
// whole by SetKeys: a request authenticates and takes its token from the
// one it loaded, so a Client always indexes its own keys' buckets.
type keyring struct {
	keys   *Keys
	limits *limits
}

// ring is the keyring in use: one atomic load per request, no lock.
func (r *Router) ring() *keyring { return r.keyring.Load() }

// Keys returns the keys in use.
func (r *Router) Keys() *Keys { return r.ring().keys }

// SetKeys replaces the API keys, for the requests that follow, on every
// connection (a request is authenticated on its own, kept-alive connection
// or not): a key k lacks is refused from the next request on. A client in
// both keeps its rate-limit bucket, and the tokens in it, under its new
// limits; a client k lacks loses its bucket. It refuses nil or empty keys.
func (r *Router) SetKeys(k *Keys) error {
	if k == nil || len(k.clients) == 0 {
		return errors.New("router: no API keys")
	}
	r.keysMu.Lock()
	defer r.keysMu.Unlock()
	old := r.ring()
	r.metrics.addClients(k)
	r.keyring.Store(&keyring{keys: k, limits: carryLimits(old, k, r.now)})
	kept := make(map[string]bool, len(k.clients))
	for _, c := range k.clients {
		kept[c.ID] = true
	}
	removed := 0
	for _, c := range old.keys.clients {
		if !kept[c.ID] {
			removed++
			r.metrics.limited.DeleteLabelValues(c.ID)
		}
	}
	r.log.Info("API keys replaced", "clients", len(k.clients), "keys", len(k.byPrefix),
		"clients_removed", removed)
	return nil
}

// KeyPrefix starts every generated key, so that leaked keys are easy to scan for.
const KeyPrefix = "ck_"

// GenerateKey returns a new random API key (256 bits) and the hex SHA-256
// that goes into the keys file.
func GenerateKey() (key, sha string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("generate key: %w", err)
	}
	key = KeyPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return key, HashKey(key), nil
}

// HashKey is the hex SHA-256 of key, as stored in the keys file.
func HashKey(key string) string {
	d := sha256.Sum256([]byte(key))
	return hex.EncodeToString(d[:])
}

var errNoKeys = errors.New("holds no keys")
