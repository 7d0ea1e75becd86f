package slotmap

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"strconv"
	"time"
)

// ErrInvalid is wrapped by every error that rejects a map or an operation's
// arguments.
var ErrInvalid = errors.New("invalid cell map")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

const maxChange = 256

func isLower(c byte) bool { return c >= 'a' && c <= 'z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// Document formats. Format 1 has no "format" field and lists the table as
// runs; format 2 packs the table into one string. Decode reads both; a map
// keeps the format it was read in (so a registry written by older readers'
// version stays readable to them through every change) until SetFormat
// changes it, and a new map is in format 2.
const formatPacked = 2

// document is the JSON form. Field order here is the byte order of Encode.
type document struct {
	Format    int               `json:"format,omitempty"`
	Version   int64             `json:"version"`
	Slots     int               `json:"slots"`
	Updated   string            `json:"updated,omitempty"`
	Change    string            `json:"change,omitempty"`
	Agencies  map[string]int    `json:"agencies"`
	Cells     []Cell            `json:"cells"`
	Overrides map[string]string `json:"overrides,omitempty"`
	Table     docTable          `json:"table"`
}

// docTable is a document's "table": an array of runs in format 1, one string
// in format 2 (see packTable).
type docTable struct {
	kind   tableKind
	runs   []run
	packed string
}

type tableKind uint8

const (
	tableNone   tableKind = iota // absent or null
	tableRuns                    // a JSON array of runs
	tablePacked                  // a JSON string
)

// MarshalJSON writes the table in its kind: runs or packed.
func (t docTable) MarshalJSON() ([]byte, error) {
	if t.kind == tableRuns {
		b := make([]byte, 0, 24*len(t.runs)+2)
		b = append(b, '[')
		for i, r := range t.runs {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '[')
			b = strconv.AppendInt(b, int64(r.From), 10)
			b = append(b, ',')
			b = strconv.AppendInt(b, int64(r.To), 10)
			b = append(b, ',')
			b = strconv.AppendQuote(b, r.Cell)
			b = append(b, ']')
		}
		return append(b, ']'), nil
	}
	return strconv.AppendQuote(make([]byte, 0, len(t.packed)+2), t.packed), nil
}

// UnmarshalJSON reads either form; the document's format says which one it
// must be.
func (t *docTable) UnmarshalJSON(data []byte) error {
	switch data[0] {
	case 'n':
		*t = docTable{}
		return nil
	case '"':
		t.kind = tablePacked
		return json.Unmarshal(data, &t.packed)
	case '[':
		t.kind = tableRuns
		return json.Unmarshal(data, &t.runs)
	}
	return fmt.Errorf("table %s: want an array of runs or a string", clip(data))
}

// run is a slot range [From, To] (inclusive) owned by one cell, the JSON
// array [from, to, "cell"] of a format 1 table.
type run struct {
	From, To int
	Cell     string
}

// UnmarshalJSON reads [from, to, "cell"]. The common shape (no escapes in
// the cell id) is parsed by hand: a map has up to one run per slot, and the
// generic path costs a dozen allocations per run.
func (r *run) UnmarshalJSON(data []byte) error {
	if from, to, cell, ok := parseRun(data); ok {
		r.From, r.To, r.Cell = from, to, cell
		return nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(data, &parts); err != nil || len(parts) != 3 {
		return fmt.Errorf("table run %s: want [from, to, \"cell\"]", clip(data))
	}
	if err := json.Unmarshal(parts[0], &r.From); err != nil {
		return fmt.Errorf("table run %s: from is not an integer", clip(data))
	}
	if err := json.Unmarshal(parts[1], &r.To); err != nil {
		return fmt.Errorf("table run %s: to is not an integer", clip(data))
	}
	if err := json.Unmarshal(parts[2], &r.Cell); err != nil {
		return fmt.Errorf("table run %s: cell is not a string", clip(data))
	}
	return nil
}

// parseRun parses `[int,int,"string"]` with optional spaces and a string
// without escapes; ok is false for anything else.
func parseRun(b []byte) (from, to int, cell string, ok bool) {
	i := 0
	skip := func() {
		for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
			i++
		}
	}
	expect := func(c byte) bool {
		skip()
		if i < len(b) && b[i] == c {
			i++
			return true
		}
		return false
	}
	number := func() (int, bool) {
		skip()
		start, n := i, 0
		for i < len(b) && isDigit(b[i]) && i-start < 9 {
			n = n*10 + int(b[i]-'0')
			i++
		}
		if i == start || (i < len(b) && isDigit(b[i])) || (b[start] == '0' && i-start > 1) {
			return 0, false
		}
		return n, true
	}
	if !expect('[') {
		return
	}
	var ok1, ok2 bool
	if from, ok1 = number(); !ok1 || !expect(',') {
		return
	}
	if to, ok2 = number(); !ok2 || !expect(',') || !expect('"') {
		return
	}
	start := i
	for i < len(b) && b[i] != '"' {
		if b[i] == '\\' || b[i] < 0x20 || b[i] >= 0x80 {
			return
		}
		i++
	}
	if i >= len(b) {
		return
	}
	cell = string(b[start:i])
	i++
	if !expect(']') {
		return
	}
	skip()
	return from, to, cell, i == len(b)
}

func clip(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "…"
	}
	return string(b)
}

// Encode returns the map's canonical JSON: the same map always gives the same
// bytes (cells sorted by id, maps by key, the table packed, or as runs for a
// map in format 1).
func (m *Map) Encode() ([]byte, error) {
	d := document{
		Format:    formatPacked,
		Version:   m.version,
		Slots:     m.slots,
		Change:    m.change,
		Agencies:  m.agencies,
		Cells:     m.cells,
		Overrides: m.overrides,
	}
	if m.format1 {
		d.Format, d.Table = 0, docTable{kind: tableRuns, runs: m.runs()}
	} else {
		d.Table = docTable{kind: tablePacked, packed: m.packTable()}
	}
	if !m.updated.IsZero() {
		d.Updated = m.updated.UTC().Format(time.RFC3339Nano)
	}
	if d.Agencies == nil {
		d.Agencies = map[string]int{}
	}
	if d.Cells == nil {
		d.Cells = []Cell{}
	}
	return json.Marshal(d)
}

// runs are the table as maximal runs of one owner, for format 1.
func (m *Map) runs() []run {
	runs := []run{}
	for s := 0; s < len(m.table); {
		e := s
		for e+1 < len(m.table) && m.table[e+1] == m.table[s] {
			e++
		}
		runs = append(runs, run{From: s, To: e, Cell: m.cells[m.table[s]].ID})
		s = e + 1
	}
	return runs
}

// Format is the document format the map encodes in: 1 or 2.
func (m *Map) Format() int {
	if m.format1 {
		return 1
	}
	return formatPacked
}

// MarshalJSON makes a *Map encode as its canonical document.
func (m *Map) MarshalJSON() ([]byte, error) { return m.Encode() }

// tableEncoding is the base64 of a packed table: standard, padded, and
// strict, so that one table has one spelling.
var tableEncoding = base64.StdEncoding.Strict()

// tableBits is the width of a cell position in a packed table: enough bits
// to number n cells, at least one.
func tableBits(n int) int { return max(1, bits.Len(uint(n-1))) }

// packTable is the format 2 table: each slot's cell position (its index in
// the cells sorted by id) in tableBits(cells) bits, slot 0 first and most
// significant bit first, the last byte filled up with zero bits, in base64.
// It is "" when no slot is assigned (no cell is active).
func (m *Map) packTable() string {
	if len(m.table) == 0 {
		return ""
	}
	w := uint(tableBits(len(m.cells)))
	buf := make([]byte, (len(m.table)*int(w)+7)/8)
	var acc uint64 // the low n bits are not written yet
	n, j := uint(0), 0
	for _, p := range m.table {
		acc = acc<<w | uint64(p)
		for n += w; n >= 8; j++ {
			n -= 8
			buf[j] = byte(acc >> n)
		}
	}
	if n > 0 {
		buf[j] = byte(acc << (8 - n))
	}
	return tableEncoding.EncodeToString(buf)
}

// unpackTable reads a format 2 table, refusing one of the wrong length,
// padding bits that are not zero and positions past the last cell.
func (m *Map) unpackTable(packed string) error {
	if packed == "" {
		return nil // checked by Validate: only allowed with no active cell
	}
	if len(m.cells) == 0 {
		return invalid("the table assigns slots but the map has no cells")
	}
	w := uint(tableBits(len(m.cells)))
	size := (m.slots*int(w) + 7) / 8
	if want := tableEncoding.EncodedLen(size); len(packed) != want {
		return invalid("table of %d base64 characters, want %d (%d slots of %d bits for %d cells)", len(packed), want, m.slots, w, len(m.cells))
	}
	buf := make([]byte, tableEncoding.DecodedLen(len(packed)))
	if n, err := tableEncoding.Decode(buf, []byte(packed)); err != nil || n != size {
		return invalid("table is not base64 of %d bytes", size)
	}
	if pad := uint(size*8 - m.slots*int(w)); buf[size-1]&(1<<pad-1) != 0 {
		return invalid("table: the %d bits after the last slot are not zero", pad)
	}
	m.table = make([]uint16, m.slots)
	mask := uint64(1)<<w - 1
	var acc uint64 // the low n bits are not read yet
	n, j := uint(0), 0
	for s := range m.table {
		for ; n < w; n += 8 {
			acc = acc<<8 | uint64(buf[j])
			j++
		}
		n -= w
		p := int(acc >> n & mask)
		if p >= len(m.cells) {
			return invalid("slot %d is assigned to cell position %d, past the last of %d cells", s, p, len(m.cells))
		}
		m.table[s] = uint16(p)
	}
	return nil
}

// Decode parses and validates a map document of either format. Unknown
// fields, trailing data and every broken invariant are errors wrapping
// ErrInvalid.
func Decode(data []byte) (*Map, error) {
	d, ok := parseDocument(data)
	if !ok {
		var err error
		if d, err = decodeJSON(data); err != nil {
			return nil, err
		}
	}
	return d.toMap()
}

// decodeJSON reads a document with encoding/json: the reference reading,
// whose errors Decode reports, for whatever parseDocument leaves to it.
func decodeJSON(data []byte) (document, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var d document
	if err := dec.Decode(&d); err != nil {
		return document{}, invalid("%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return document{}, invalid("trailing data after the document")
	}
	return d, nil
}

// toMap builds and validates the map a document describes. It takes
// ownership of the document's maps and slices.
func (d *document) toMap() (*Map, error) {
	switch {
	case d.Format == 0 && d.Table.kind == tablePacked:
		return nil, invalid(`the table is a string, which only "format":%d reads`, formatPacked)
	case d.Format == formatPacked && d.Table.kind == tableRuns:
		return nil, invalid("format %d takes the table as one string, not runs", formatPacked)
	case d.Format != 0 && d.Format != formatPacked:
		return nil, invalid("format %d is not known: want %d (or no format for a table of runs)", d.Format, formatPacked)
	}
	m := &Map{
		version:   d.Version,
		slots:     d.Slots,
		change:    d.Change,
		agencies:  d.Agencies,
		cells:     d.Cells,
		overrides: d.Overrides,
	}
	if d.Updated != "" {
		t, err := time.Parse(time.RFC3339Nano, d.Updated)
		if err != nil {
			return nil, invalid("updated %q is not an RFC 3339 time", d.Updated)
		}
		m.updated = t.UTC()
	}
	if m.agencies == nil {
		m.agencies = map[string]int{}
	}
	if len(m.overrides) == 0 {
		m.overrides = nil
	}
	if len(m.cells) == 0 {
		m.cells = nil
	}
	for i := range m.cells {
		c := &m.cells[i]
		if len(c.Quota) == 0 {
			c.Quota = nil
		}
		if len(c.FixedQuota) == 0 {
			c.FixedQuota = nil
		}
		if len(c.Instances) == 0 {
			c.Instances = nil
		}
	}
	slices.SortFunc(m.cells, func(a, b Cell) int { return cmpString(a.ID, b.ID) })
	if err := m.checkHeader(); err != nil {
		return nil, err
	}
	if err := m.checkCells(); err != nil {
		return nil, err
	}
	m.finish()
	m.format1 = d.Format == 0
	var err error
	if d.Table.kind == tablePacked {
		err = m.unpackTable(d.Table.packed)
	} else {
		err = m.buildTable(d.Table.runs)
	}
	if err != nil {
		return nil, err
	}
	if err := m.checkTable(); err != nil {
		return nil, err
	}
	return m, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// buildTable expands runs into the slot table, refusing gaps, overlaps and
// unknown cells.
func (m *Map) buildTable(runs []run) error {
	if len(runs) == 0 {
		return nil // checked by Validate: only allowed with no active cell
	}
	m.table = make([]uint16, m.slots)
	next := 0
	for _, r := range runs {
		if r.From < 0 || r.To < r.From || r.To >= m.slots {
			return invalid("table run [%d, %d, %q]: range outside 0..%d or reversed", r.From, r.To, r.Cell, m.slots-1)
		}
		if r.From > next {
			return invalid("slot %d is unassigned", next)
		}
		if r.From < next {
			return invalid("slot %d is assigned twice", r.From)
		}
		i, ok := m.index[r.Cell]
		if !ok {
			return invalid("slot %d is assigned to unknown cell %q", r.From, r.Cell)
		}
		for s := r.From; s <= r.To; s++ {
			m.table[s] = uint16(i)
		}
		next = r.To + 1
	}
	if next != m.slots {
		return invalid("slot %d is unassigned (the table ends at %d of %d slots)", next, next-1, m.slots)
	}
	return nil
}
