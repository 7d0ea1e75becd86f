// Package apikey is the router's clients: the keys file parsed and
// checked, authentication of an X-API-Key in constant time without
// allocating, each client's lanes, and its token bucket. It knows nothing
// of connections or answers: the router asks, and answers.
package apikey

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/cellkit/cellkit/internal/api"
)

// MaxClients bounds the keys file, and so the number of rate limiters.
const MaxClients = 10_000

// maxKeyLen bounds the X-API-Key header: longer keys are unknown without
// being hashed.
const maxKeyLen = 256

// KeyPrefix starts every generated key, so that leaked keys are easy to scan for.
const KeyPrefix = "ck_"

// Client is an authenticated platform.
type Client struct {
	ID    string
	Rate  float64
	Burst int

	lanes     Lanes
	index     int    // position in Keys.clients, which indexes the limiters
	limitText []byte // X-RateLimit-Limit value: Burst
	idBytes   []byte // ID, for the Cellkit-Client header
}

// Index is the client's position in its keys' Clients.
func (c *Client) Index() int { return c.index }

// Lanes is the client's lane policy.
func (c *Client) Lanes() *Lanes { return &c.lanes }

// LimitText is the X-RateLimit-Limit value: the client's burst, the
// capacity of its bucket (what Verdict's Remaining counts down from).
func (c *Client) LimitText() []byte { return c.limitText }

// IDBytes is the client's ID as bytes (read only).
func (c *Client) IDBytes() []byte { return c.idBytes }

// Keys is the parsed keys file.
type Keys struct {
	byPrefix map[uint64]storedKey // first 8 bytes of the digest → the key
	clients  []*Client
	byID     map[string]*Client
}

// storedKey is one key of the file: its digest and its client.
type storedKey struct {
	digest [sha256.Size]byte
	client *Client
}

func digestPrefix(d *[sha256.Size]byte) uint64 { return binary.LittleEndian.Uint64(d[:8]) }

// Result is the outcome of Authenticate.
type Result uint8

// Authentication results.
const (
	OK Result = iota
	Missing
	Unknown
)

// Parse parses and validates a keys file.
func Parse(data []byte) (*Keys, error) {
	k, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("keys: %w", err)
	}
	return k, nil
}

func parse(data []byte) (*Keys, error) {
	entries, lines, err := decodeEntries(data)
	if err != nil {
		return nil, err
	}
	byID := map[string]*Client{}
	k := &Keys{byPrefix: make(map[uint64]storedKey, len(entries)), byID: byID}
	for i, e := range entries {
		i := entryAt{i, lines[i]}
		if !api.ValidClientID(e.Client) {
			return nil, fmt.Errorf("%s: client %q: want 1-64 of [A-Za-z0-9._-]", i, e.Client)
		}
		raw, err := hex.DecodeString(e.KeySHA256)
		if err != nil || len(raw) != sha256.Size {
			return nil, fmt.Errorf("%s (%s): key_sha256 must be 64 hex digits", i, e.Client)
		}
		if !(e.Rate > 0) || math.IsInf(e.Rate, 0) {
			return nil, fmt.Errorf("%s (%s): rate must be > 0", i, e.Client)
		}
		if e.Burst < 1 {
			return nil, fmt.Errorf("%s (%s): burst must be ≥ 1", i, e.Client)
		}
		lanes, err := parseLanes(e.Lanes, e.DefaultLane)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %v", i, e.Client, err)
		}
		d := [sha256.Size]byte(raw)
		if _, dup := k.byPrefix[digestPrefix(&d)]; dup {
			// The same key twice, or (with odds of 2^-64) two keys
			// sharing a prefix: either way, issue another key.
			return nil, fmt.Errorf("%s (%s): duplicate key", i, e.Client)
		}
		c, seen := byID[e.Client]
		switch {
		case !seen:
			c = &Client{ID: e.Client, Rate: e.Rate, Burst: e.Burst, lanes: lanes, index: len(k.clients),
				limitText: strconv.AppendInt(nil, int64(e.Burst), 10), idBytes: []byte(e.Client)}
			byID[e.Client] = c
			k.clients = append(k.clients, c)
		case c.Rate != e.Rate || c.Burst != e.Burst:
			return nil, fmt.Errorf("%s: client %s has keys with different limits", i, e.Client)
		case c.lanes != lanes:
			return nil, fmt.Errorf("%s: client %s has keys with different lanes", i, e.Client)
		}
		k.byPrefix[digestPrefix(&d)] = storedKey{digest: d, client: c}
	}
	if len(k.clients) == 0 {
		return nil, errNoKeys
	}
	return k, nil
}

var errNoKeys = errors.New("holds no keys")

// entryAt names an entry of the file in errors: its number and its line.
type entryAt struct{ n, line int }

func (e entryAt) String() string { return fmt.Sprintf("line %d: entry %d", e.line, e.n) }

// decodeEntries reads the file's array of entries, with the line each
// starts on; its errors name the line too.
func decodeEntries(data []byte) ([]api.KeyEntry, []int, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	syntax := func(err error) error {
		if se := (*json.SyntaxError)(nil); errors.As(err, &se) {
			return fmt.Errorf("line %d: %w", lineAt(data, se.Offset), err)
		}
		return err
	}
	if tok, err := dec.Token(); err != nil {
		return nil, nil, syntax(err)
	} else if tok != json.Delim('[') {
		return nil, nil, errors.New("line 1: want a JSON array of entries")
	}
	var entries []api.KeyEntry
	var lines []int
	for dec.More() {
		if len(entries) == MaxClients {
			return nil, nil, fmt.Errorf("over %d entries", MaxClients)
		}
		line := lineAt(data, dec.InputOffset())
		var e api.KeyEntry
		if err := dec.Decode(&e); err != nil {
			// The decoder's offsets are within the entry: its line names it.
			return nil, nil, fmt.Errorf("%s: %w", entryAt{len(entries), line}, err)
		}
		entries, lines = append(entries, e), append(lines, line)
	}
	if _, err := dec.Token(); err != nil {
		return nil, nil, syntax(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, fmt.Errorf("line %d: data after the array", lineAt(data, dec.InputOffset()))
	}
	return entries, lines, nil
}

// lineAt is the line of the first byte from off on that is not space or
// a comma (where the next value starts), counting from 1.
func lineAt(data []byte, off int64) int {
	i := int(min(max(off, 0), int64(len(data))))
	for i < len(data) && strings.IndexByte(" \t\r\n,", data[i]) >= 0 {
		i++
	}
	return 1 + bytes.Count(data[:i], []byte{'\n'})
}

// Load reads the keys file at path; its error names the file.
func Load(path string) (*Keys, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("keys: %w", err)
	}
	k, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("keys file %s: %w", path, err)
	}
	return k, nil
}

// Clients returns the clients, in file order.
func (k *Keys) Clients() []*Client { return k.clients }

// Client returns the client of that id, or nil.
func (k *Keys) Client(id string) *Client { return k.byID[id] }

// Len is the number of keys (a client may hold several, while one is
// rotated).
func (k *Keys) Len() int { return len(k.byPrefix) }

// Authenticate finds the client holding key.
//
// The key is hashed; the first 8 bytes of the hash pick the candidate stored
// key and the whole hash is then compared with crypto/subtle in constant
// time. What the lookup's timing can depend on is the hash of the presented
// key, which says nothing usable about any stored key; raw keys are never
// held in memory.
func (k *Keys) Authenticate(key []byte) (*Client, Result) {
	if len(key) == 0 {
		return nil, Missing
	}
	if len(key) > maxKeyLen {
		return nil, Unknown
	}
	d := sha256.Sum256(key)
	sk, ok := k.byPrefix[digestPrefix(&d)]
	if !ok || subtle.ConstantTimeCompare(sk.digest[:], d[:]) != 1 {
		return nil, Unknown
	}
	return sk.client, OK
}

// Generate returns a new random API key (256 bits) and the hex SHA-256
// that goes into the keys file.
func Generate() (key, sha string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("generate key: %w", err)
	}
	key = KeyPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return key, Hash(key), nil
}

// Hash is the hex SHA-256 of key, as stored in the keys file.
func Hash(key string) string {
	d := sha256.Sum256([]byte(key))
	return hex.EncodeToString(d[:])
}
