package slotmap

import (
	"encoding/json"
	"slices"
	"strings"
)

// parseDocument is Decode's fast path. It reads documents of the shape
// Encode writes, in any key order and with any JSON whitespace, without
// reflection and with few allocations: data is copied into one string once,
// and the strings of the map are substrings of it (a string with an escape
// or a byte outside ASCII gets its own, read by encoding/json). ok is false
// for anything outside that shape: a syntax error, a null, a key it does not
// know or meets twice, a number that is not a plain integer. Decode then
// reads the document with encoding/json, which decides and words the error.
// Whatever parseDocument accepts, decodeJSON reads to the same document
// (FuzzDecode checks it), so Decode means the same on both paths.
//
// The decoded strings keep the whole copy of data alive while any of them
// lives; the copy is the size of the document.
func parseDocument(data []byte) (d document, ok bool) {
	p := &parser{s: string(data)}
	p.fields(func(key string) bool {
		switch key {
		case "format":
			d.Format = p.int()
		case "version":
			d.Version = p.int64()
		case "slots":
			d.Slots = p.int()
		case "updated":
			d.Updated = p.str()
		case "change":
			d.Change = p.str()
		case "agencies":
			d.Agencies = p.intMap()
		case "cells":
			d.Cells = p.cells()
		case "overrides":
			d.Overrides = p.stringMap()
		case "table":
			d.Table = p.table()
		default:
			return false
		}
		return true
	})
	p.space()
	if p.bad || p.i != len(p.s) {
		return document{}, false
	}
	return d, true
}

// parser reads JSON from s. Its methods set bad instead of returning errors:
// the caller gives up on the fast path as a whole.
type parser struct {
	s   string
	i   int
	bad bool
	// instances is where the cells' instance lists are cut from, so that a
	// list is not an allocation of its own.
	instances []Instance
}

func (p *parser) space() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// peek returns the next byte after whitespace, 0 at the end.
func (p *parser) peek() byte {
	p.space()
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *parser) expect(c byte) {
	if p.peek() != c {
		p.bad = true
		return
	}
	p.i++
}

// fields reads an object with fixed keys, calling field with each key; field
// reads the value and reports whether it knows the key. A key it does not
// know or meets twice is left to encoding/json (which refuses the first and
// keeps the last value of the second).
func (p *parser) fields(field func(key string) bool) {
	var seen [16]string
	n := 0
	p.object(func(key string) {
		if n == len(seen) || slices.Contains(seen[:n], key) || !field(key) {
			p.bad = true
			return
		}
		seen[n] = key
		n++
	})
}

// object reads an object, calling member with each key; member reads the
// value.
func (p *parser) object(member func(key string)) {
	if p.expect('{'); p.bad {
		return
	}
	if p.peek() == '}' {
		p.i++
		return
	}
	for !p.bad {
		key := p.str()
		p.expect(':')
		if p.bad {
			return
		}
		member(key)
		if !p.more('}') {
			return
		}
	}
}

// array reads an array, calling elem to read each element.
func (p *parser) array(elem func()) {
	if p.expect('['); p.bad {
		return
	}
	if p.peek() == ']' {
		p.i++
		return
	}
	for !p.bad {
		elem()
		if !p.more(']') {
			return
		}
	}
}

// more reads the comma before another member or element (true) or the
// closing bracket (false).
func (p *parser) more(end byte) bool {
	switch p.peek() {
	case ',':
		p.i++
		return true
	case end:
		p.i++
		return false
	}
	p.bad = true
	return false
}

// plainByte says which bytes stand for themselves in a JSON string: not the
// quote, the backslash, control bytes or bytes outside ASCII.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str reads a string: a substring of s when it holds no escape and only
// ASCII, else encoding/json's reading of it.
func (p *parser) str() string {
	if p.peek() != '"' {
		p.bad = true
		return ""
	}
	start := p.i + 1
	j := start
	for j < len(p.s) && plainByte[p.s[j]] {
		j++
	}
	if j < len(p.s) && p.s[j] == '"' {
		p.i = j + 1
		return p.s[start:j]
	}
	for ; j < len(p.s); j++ {
		switch c := p.s[j]; {
		case c == '"':
			p.i = j + 1
			var v string
			if json.Unmarshal([]byte(p.s[start-1:j+1]), &v) != nil {
				p.bad = true
			}
			return v
		case c == '\\':
			j++ // the escaped byte cannot end the string
		case c < 0x20:
			p.bad = true
			return ""
		}
	}
	p.bad = true
	return ""
}

// int64 reads an integer of at most 18 digits, without fraction or
// exponent; anything else (including -0) is left to encoding/json.
func (p *parser) int64() int64 {
	p.space()
	neg := p.i < len(p.s) && p.s[p.i] == '-'
	if neg {
		p.i++
	}
	start := p.i
	var n int64
	for p.i < len(p.s) && isDigit(p.s[p.i]) {
		if p.i-start == 18 {
			p.bad = true
			return 0
		}
		n = n*10 + int64(p.s[p.i]-'0')
		p.i++
	}
	switch {
	case p.i == start, p.s[start] == '0' && (p.i-start > 1 || neg):
		p.bad = true
	case p.i < len(p.s) && (p.s[p.i] == '.' || p.s[p.i] == 'e' || p.s[p.i] == 'E'):
		p.bad = true
	}
	if neg {
		n = -n
	}
	return n
}

func (p *parser) int() int {
	n := p.int64()
	if int64(int(n)) != n {
		p.bad = true
	}
	return int(n)
}

func (p *parser) bool() bool {
	p.space()
	switch {
	case len(p.s)-p.i >= 4 && p.s[p.i:p.i+4] == "true":
		p.i += 4
		return true
	case len(p.s)-p.i >= 5 && p.s[p.i:p.i+5] == "false":
		p.i += 5
		return false
	}
	p.bad = true
	return false
}

func (p *parser) intMap() map[string]int {
	m := make(map[string]int, 2)
	p.object(func(key string) {
		n := len(m)
		if m[key] = p.int(); len(m) == n {
			p.bad = true // a key met twice
		}
	})
	return m
}

// stringMap reads an object of strings. It gathers the members first so
// that the map is made at its size: the overrides are up to MaxOverrides,
// and growing a map rehashes it.
func (p *parser) stringMap() map[string]string {
	type member struct{ key, value string }
	var members []member
	p.object(func(key string) {
		members = append(members, member{key, p.str()})
	})
	m := make(map[string]string, len(members))
	for _, kv := range members {
		m[kv.key] = kv.value
	}
	if len(m) != len(members) {
		p.bad = true // a key met twice
	}
	return m
}

func (p *parser) cells() []Cell {
	// Every cell has an id, and so has every instance: counting them is
	// cheap and makes the slice once.
	cells := make([]Cell, 0, strings.Count(p.s[p.i:], `"id":`))
	p.array(func() {
		var c Cell
		p.fields(func(key string) bool {
			switch key {
			case "id":
				c.ID = p.str()
			case "state":
				c.State = State(p.str())
			case "weight":
				c.Weight = p.int()
			case "intake":
				c.Intake = p.str()
			case "admin":
				c.Admin = p.str()
			case "quota":
				c.Quota = p.intMap()
			case "fixed_quota":
				c.FixedQuota = p.intMap()
			case "capacity":
				c.Capacity = p.int()
			case "instances":
				c.Instances = p.cellInstances()
			default:
				return false
			}
			return true
		})
		cells = append(cells, c)
	})
	return cells
}

// cellInstances reads a cell's instances into the shared backing array,
// starting a new one when fewer than MaxInstances places are left.
func (p *parser) cellInstances() []Instance {
	if cap(p.instances)-len(p.instances) < MaxInstances {
		p.instances = make([]Instance, 0, 8*MaxInstances)
	}
	start := len(p.instances)
	p.array(func() {
		var in Instance
		p.fields(func(key string) bool {
			switch key {
			case "id":
				in.ID = p.str()
			case "intake":
				in.Intake = p.str()
			case "admin":
				in.Admin = p.str()
			case "drained":
				in.Drained = p.bool()
			default:
				return false
			}
			return true
		})
		p.instances = append(p.instances, in)
	})
	end := len(p.instances)
	return p.instances[start:end:end]
}

// table reads the table in either form: a string (format 2) or an array of
// [from, to, "cell"] runs (format 1).
func (p *parser) table() docTable {
	switch p.peek() {
	case '"':
		return docTable{kind: tablePacked, packed: p.str()}
	case '[':
		runs := make([]run, 0, 64)
		p.array(func() {
			var r run
			p.expect('[')
			r.From = p.int()
			p.expect(',')
			r.To = p.int()
			p.expect(',')
			r.Cell = p.str()
			p.expect(']')
			runs = append(runs, r)
		})
		return docTable{kind: tableRuns, runs: runs}
	}
	p.bad = true
	return docTable{}
}
