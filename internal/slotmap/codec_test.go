package slotmap

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// validDoc is a small valid map in its canonical form, format 2; the invalid
// cases below each break one thing. Its table "AFU=" is the bytes 0x00 0x55:
// each slot's cell position in 2 bits (3 cells), 00 (c1) for slots 0-3 and
// 01 (c2) for slots 4-7.
const validDoc = `{"format":2,"version":3,"slots":8,"agencies":{"nice":80},` +
	`"cells":[` +
	`{"id":"c1","state":"active","weight":1,"intake":"http://127.0.0.1:8001","admin":"http://127.0.0.1:9001","quota":{"nice":40}},` +
	`{"id":"c2","state":"active","weight":1,"intake":"http://127.0.0.1:8002","admin":"http://127.0.0.1:9002","quota":{"nice":40}},` +
	`{"id":"c3","state":"drained","weight":1,"intake":"http://127.0.0.1:8003","admin":"http://127.0.0.1:9003"}],` +
	`"overrides":{"u1":"c1"},` +
	`"table":"AFU="}`

// format1Doc is the same map in format 1: no "format" field, the table as
// runs [from, to, "cell"].
var format1Doc = strings.NewReplacer(`{"format":2,`, `{`, `"table":"AFU="`, `"table":[[0,3,"c1"],[4,7,"c2"]]`).Replace(validDoc)

func TestDecodeValid(t *testing.T) {
	for name, doc := range map[string]string{"format 2": validDoc, "format 1": format1Doc} {
		t.Run(name, func(t *testing.T) {
			m, err := Decode([]byte(doc))
			if err != nil {
				t.Fatalf("Decode(%s) = %v", doc, err)
			}
			if m.Version() != 3 || m.Slots() != 8 {
				t.Fatalf("version, slots = %d, %d; want 3, 8", m.Version(), m.Slots())
			}
			for s, want := range []string{"c1", "c1", "c1", "c1", "c2", "c2", "c2", "c2"} {
				if got := m.Owner(s); got != want {
					t.Errorf("Owner(%d) = %q, want %q", s, got, want)
				}
			}
			if r := m.Lookup("u1"); r.Cell != "c1" || !r.Override {
				t.Errorf("Lookup(u1) = %+v, want the override to c1", r)
			}
			enc, err := m.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if string(enc) != doc {
				t.Errorf("Encode() =\n%s\nwant the canonical form, in the format it was read in\n%s", enc, doc)
			}
			if want := map[string]int{"format 2": 2, "format 1": 1}[name]; m.Format() != want {
				t.Errorf("Format() = %d, want %d", m.Format(), want)
			}
			p, err := m.SetFormat(2)
			if err != nil {
				t.Fatal(err)
			}
			enc = mustEncode(t, p.After)
			if want := strings.Replace(validDoc, `"version":3`, `"version":4`, 1); name == "format 1" && (p.NoChange() || !strings.HasPrefix(string(enc), `{"format":2,"version":4,`) || !strings.HasSuffix(string(enc), `"table":"AFU="}`)) {
				t.Errorf("SetFormat(2) of a format 1 map: no change %v, encoding\n%s\nwant the packed table (as %s)", p.NoChange(), enc, want)
			}
			if name == "format 2" && !p.NoChange() {
				t.Errorf("SetFormat(2) of a format 2 map changes it")
			}
		})
	}
	m, _ := Decode([]byte(validDoc))
	if _, err := m.SetFormat(3); !errors.Is(err, ErrInvalid) {
		t.Errorf("SetFormat(3) = %v, want ErrInvalid", err)
	}
}

func TestDecodeInvalid(t *testing.T) {
	tests := []struct {
		name    string
		old     string // replaced once in validDoc and in format1Doc, where it occurs
		new     string
		wantErr string
		// packedErr is the error of format 2 where it differs.
		packedErr string
	}{
		{"unknown top-level field", `"version":3,`, `"version":3,"colour":"red",`, `unknown field "colour"`, ""},
		{"unknown cell field", `"weight":1,"intake":"http://127.0.0.1:8001"`, `"weight":1,"zone":"a","intake":"http://127.0.0.1:8001"`, `unknown field "zone"`, ""},
		{"version zero", `"version":3`, `"version":0`, "version 0 must be > 0", ""},
		{"version negative", `"version":3`, `"version":-1`, "version -1 must be > 0", ""},
		{"slot count zero", `"slots":8`, `"slots":0`, "slot count 0", ""},
		{"slot count too large", `"slots":8`, `"slots":2000000`, "slot count 2000000", ""},
		{"slot count mismatch", `"slots":8`, `"slots":16`, "slot 8 is unassigned", "table of 4 base64 characters, want 8 (16 slots of 2 bits for 3 cells)"},
		{"gap in table", `[0,3,"c1"],[4,7,"c2"]`, `[0,2,"c1"],[4,7,"c2"]`, "slot 3 is unassigned", ""},
		{"overlap in table", `[0,3,"c1"],[4,7,"c2"]`, `[0,3,"c1"],[3,7,"c2"]`, "slot 3 is assigned twice", ""},
		{"run past the last slot", `[4,7,"c2"]`, `[4,9,"c2"]`, "range outside 0..7", ""},
		{"reversed run", `[0,3,"c1"]`, `[3,0,"c1"]`, "reversed", ""},
		{"run of two elements", `[0,3,"c1"]`, `[0,3]`, `want [from, to, "cell"]`, ""},
		{"run with a string slot", `[0,3,"c1"]`, `["0",3,"c1"]`, "from is not an integer", ""},
		{"slot on unknown cell", `[4,7,"c2"]`, `[4,7,"c9"]`, `slot 4 is assigned to unknown cell "c9"`, ""},
		{"slot on drained cell", `[4,7,"c2"]`, `[4,7,"c3"]`, `slot 4 is assigned to drained cell "c3"`, ""},
		{"no active cell but slots assigned", `"state":"active","weight":1,"intake":"http://127.0.0.1:8002"`, `"state":"draining","weight":1,"intake":"http://127.0.0.1:8002"`, `slot 4 is assigned to draining cell "c2"`, ""},
		{"weight zero", `"weight":1,"intake":"http://127.0.0.1:8001"`, `"weight":0,"intake":"http://127.0.0.1:8001"`, `cell "c1": weight 0`, ""},
		{"weight negative", `"weight":1,"intake":"http://127.0.0.1:8001"`, `"weight":-5,"intake":"http://127.0.0.1:8001"`, `cell "c1": weight -5`, ""},
		{"quotas over the limit", `"quota":{"nice":40}}`, `"quota":{"nice":50}}`, `agency "nice": cell quotas sum to 90, over its session limit 80`, ""},
		{"quota of unknown agency", `"quota":{"nice":40}}`, `"quota":{"kcb":4}}`, `quota for unknown agency "kcb"`, ""},
		{"negative quota", `"quota":{"nice":40}}`, `"quota":{"nice":-1}}`, `quota -1`, ""},
		{"drained cell with quota", `"admin":"http://127.0.0.1:9003"}`, `"admin":"http://127.0.0.1:9003","quota":{"nice":1}}`, `cell "c3" is drained but holds a quota`, ""},
		{"duplicate cell id", `{"id":"c3"`, `{"id":"c2"`, `duplicate cell id "c2"`, ""},
		{"bad cell id", `{"id":"c3"`, `{"id":"C_3"`, `cell id "C_3"`, ""},
		{"unknown state", `"state":"drained"`, `"state":"paused"`, `state "paused"`, ""},
		{"malformed intake url", `"intake":"http://127.0.0.1:8001"`, `"intake":"not a url"`, `cell "c1": intake url "not a url" must be http:// or https://`, ""},
		{"admin url of another scheme", `"admin":"http://127.0.0.1:9001"`, `"admin":"ftp://127.0.0.1:9001"`, `cell "c1": admin url "ftp://127.0.0.1:9001"`, ""},
		{"url without host", `"intake":"http://127.0.0.1:8001"`, `"intake":"http://"`, `has no host`, ""},
		{"url with a bad port", `"intake":"http://127.0.0.1:8001"`, `"intake":"http://127.0.0.1:99999"`, `bad port`, ""},
		{"url with a query", `"intake":"http://127.0.0.1:8001"`, `"intake":"http://127.0.0.1:8001/?x=1"`, `must not carry`, ""},
		{"override to unknown cell", `"overrides":{"u1":"c1"}`, `"overrides":{"u1":"c7"}`, `override for user "u1" points at unknown cell "c7"`, ""},
		{"override of a bad user id", `"overrides":{"u1":"c1"}`, `"overrides":{"u 1":"c1"}`, `override for user "u 1"`, ""},
		{"agency limit zero", `"agencies":{"nice":80}`, `"agencies":{"nice":0}`, `agency "nice": session limit 0`, ""},
		{"bad agency name", `"agencies":{"nice":80}`, `"agencies":{"nice":80,"NICE!":3}`, `agency name "NICE!"`, ""},
		{"bad updated time", `"slots":8,`, `"slots":8,"updated":"yesterday",`, `updated "yesterday"`, ""},
		{"trailing data", validDoc, validDoc + `{}`, "trailing data", ""},
		{"not json", validDoc, `version: 3`, "invalid character", ""},
		{"wrong type", `"version":3`, `"version":"3"`, "cannot unmarshal string", ""},
		{"table of another type", `"table":"AFU="`, `"table":5`, "table 5: want an array of runs or a string", ""},

		// The table of format 2.
		{"format 2 with runs", `"table":"AFU="`, `"table":[[0,7,"c1"]]`, "format 2 takes the table as one string, not runs", ""},
		{"packed table without format", `{"format":2,`, `{`, `the table is a string, which only "format":2 reads`, ""},
		{"unknown format", `"format":2`, `"format":3`, "format 3 is not known", ""},
		{"format 1 spelt out", `"format":2`, `"format":1`, "format 1 is not known", ""},
		{"table too short", `"AFU="`, `"AF"`, "table of 2 base64 characters, want 4", ""},
		{"table too long", `"AFU="`, `"AFUAAA=="`, "table of 8 base64 characters, want 4", ""},
		{"table truncated to a byte", `"AFU="`, `"AA=="`, "table is not base64 of 2 bytes", ""},
		{"table a byte too long", `"AFU="`, `"AFUA"`, "table is not base64 of 2 bytes", ""},
		{"table not base64", `"AFU="`, `"AF!="`, "table is not base64 of 2 bytes", ""},
		{"table with stray base64 bits", `"AFU="`, `"AFV="`, "table is not base64 of 2 bytes", ""},
		{"table with a newline", `"AFU="`, `"AF\nU"`, "table is not base64 of 2 bytes", ""},
		{"table empty", `"AFU="`, `""`, "slot table has 0 slots, want 8", ""},
		{"slot past the last cell", `"AFU="`, `"AFc="`, "slot 7 is assigned to cell position 3, past the last of 3 cells", ""},
		{"packed slot on drained cell", `"AFU="`, `"AFY="`, `slot 7 is assigned to drained cell "c3"`, ""},
	}
	for _, tt := range tests {
		applied := false
		for _, base := range []struct{ name, doc, wantErr string }{
			{"format 2", validDoc, cmp.Or(tt.packedErr, tt.wantErr)},
			{"format 1", format1Doc, tt.wantErr},
		} {
			if !strings.Contains(base.doc, tt.old) {
				continue
			}
			applied = true
			t.Run(tt.name+"/"+base.name, func(t *testing.T) {
				doc := strings.Replace(base.doc, tt.old, tt.new, 1)
				m, err := Decode([]byte(doc))
				if err == nil {
					t.Fatalf("Decode(%s) = version %d, want error containing %q", doc, m.Version(), base.wantErr)
				}
				if !errors.Is(err, ErrInvalid) {
					t.Errorf("Decode error %v does not wrap ErrInvalid", err)
				}
				if !strings.Contains(err.Error(), base.wantErr) {
					t.Errorf("Decode error = %q, want it to contain %q", err, base.wantErr)
				}
			})
		}
		if !applied {
			t.Errorf("test case %q does not apply: %q is in neither document", tt.name, tt.old)
		}
	}
}

func TestDecodeAcceptsNonCanonicalInput(t *testing.T) {
	// Cells out of order, a format 1 table split into more runs than needed,
	// spaces and other key orders decode to the same map, which then encodes
	// canonically.
	for name, doc := range map[string]string{
		"split runs": strings.Replace(format1Doc, `[0,3,"c1"],[4,7,"c2"]`, `[0,1,"c1"],[2,3,"c1"],[4,7,"c2"]`, 1),
		"cells out of order": strings.Replace(validDoc,
			`{"id":"c1","state":"active","weight":1,"intake":"http://127.0.0.1:8001","admin":"http://127.0.0.1:9001","quota":{"nice":40}},`+
				`{"id":"c2","state":"active","weight":1,"intake":"http://127.0.0.1:8002","admin":"http://127.0.0.1:9002","quota":{"nice":40}},`,
			`{"id":"c2","state":"active","weight":1,"intake":"http://127.0.0.1:8002","admin":"http://127.0.0.1:9002","quota":{"nice":40}},`+
				`{"id":"c1","state":"active","weight":1,"intake":"http://127.0.0.1:8001","admin":"http://127.0.0.1:9001","quota":{"nice":40}},`, 1),
		"indented":              indent(validDoc),
		"keys in another order": `{"table":"AFU=","overrides":{"u1":"c1"},` + strings.TrimPrefix(strings.Replace(validDoc, `,"overrides":{"u1":"c1"},"table":"AFU="`, ``, 1), `{`),
		"escapes":               strings.Replace(validDoc, `"http://127.0.0.1:8001"`, `"http:\/\/127.0.0.1:\u00380\u00301"`, 1),
	} {
		t.Run(name, func(t *testing.T) {
			m, err := Decode([]byte(doc))
			if err != nil {
				t.Fatalf("Decode(%s) = %v", doc, err)
			}
			want := validDoc
			if m.Format() == 1 {
				want = format1Doc
			}
			if enc := mustEncode(t, m); string(enc) != want {
				t.Errorf("Encode(Decode(%s)) =\n%s\nwant\n%s", name, enc, want)
			}
		})
	}
}

// indent spreads a valid document over lines, as a person might write it.
func indent(doc string) string {
	var b bytes.Buffer
	if err := json.Indent(&b, []byte(doc), "", "\t"); err != nil {
		panic(err)
	}
	return b.String()
}

// A table whose slots do not fill its last byte must pad it with zero bits.
func TestDecodePackedTablePadding(t *testing.T) {
	// 6 slots of 2 bits: 00 00 00 01 01 01, then 4 bits of padding.
	doc := strings.NewReplacer(`"slots":8`, `"slots":6`, `"AFU="`, `"AVA="`).Replace(validDoc)
	m, err := Decode([]byte(doc))
	if err != nil {
		t.Fatalf("Decode(%s) = %v", doc, err)
	}
	if got := []string{m.Owner(2), m.Owner(3)}; got[0] != "c1" || got[1] != "c2" {
		t.Errorf("Owner(2), Owner(3) = %v, want c1, c2", got)
	}
	if enc := mustEncode(t, m); string(enc) != doc {
		t.Errorf("Encode() =\n%s\nwant\n%s", enc, doc)
	}
	_, err = Decode([]byte(strings.Replace(doc, `"AVA="`, `"AVE="`, 1)))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "the 4 bits after the last slot are not zero") {
		t.Errorf("Decode of a table with padding bits set = %v", err)
	}
	noCells := `{"format":2,"version":1,"slots":8,"agencies":{},"cells":[],"table":"AA=="}`
	if _, err := Decode([]byte(noCells)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "the table assigns slots but the map has no cells") {
		t.Errorf("Decode(%s) = %v", noCells, err)
	}
}

// encodeFormat1 writes m in format 1, as Encode did before format 2: no
// "format" field, the table as maximal runs [from, to, "cell"].
func encodeFormat1(t testing.TB, m *Map) []byte {
	t.Helper()
	c := m.clone()
	c.format1 = true
	return mustEncode(t, c)
}

// sameMap fails unless a and b are the same map, derived parts included.
func sameMap(t testing.TB, a, b *Map) {
	t.Helper()
	for _, f := range []struct {
		name string
		a, b any
	}{
		{"version", a.version, b.version}, {"slots", a.slots, b.slots}, {"slot mask", a.slotMask, b.slotMask},
		{"change", a.change, b.change}, {"updated", a.updated, b.updated}, {"agencies", a.agencies, b.agencies},
		{"cells", a.cells, b.cells}, {"index", a.index, b.index}, {"table", a.table, b.table},
		{"overrides", a.overrides, b.overrides}, {"override slots", a.ovSlots, b.ovSlots}, {"override cells", a.ovCell, b.ovCell},
	} {
		if !reflect.DeepEqual(f.a, f.b) {
			t.Fatalf("the maps' %s differ:\n%#v\n%#v", f.name, f.a, f.b)
		}
	}
	if !reflect.DeepEqual(*a, *b) {
		t.Fatalf("the maps differ")
	}
}

// TestFormat1Document reads a format 1 document the encoder wrote before
// format 2 (instances, a draining and a drained cell, a fixed quota,
// overrides, escapes in the change text) and checks that it is the same map
// as its format 2 encoding, and that encodeFormat1 writes what that encoder
// wrote.
func TestFormat1Document(t *testing.T) {
	old, err := os.ReadFile("testdata/codec-format1.json")
	if err != nil {
		t.Fatal(err)
	}
	old = bytes.TrimSpace(old)
	m, err := Decode(old)
	if err != nil {
		t.Fatalf("Decode(format 1) = %v", err)
	}
	if got := mustEncode(t, m); !bytes.Equal(got, old) || m.Format() != 1 {
		t.Fatalf("Encode of a map read in format 1 =\n%s\nwant the document back, as that encoder wrote it\n%s", got, old)
	}
	p, err := m.SetFormat(2)
	if err != nil {
		t.Fatal(err)
	}
	m = p.After
	enc := mustEncode(t, m)
	if !bytes.HasPrefix(enc, []byte(`{"format":2,"version":15,`)) || bytes.Contains(enc, []byte(`"table":[`)) {
		t.Fatalf("Encode() is not format 2: %s", enc)
	}
	back, err := Decode(enc)
	if err != nil {
		t.Fatalf("Decode(format 2) = %v", err)
	}
	sameMap(t, m, back)
	if enc2 := mustEncode(t, back); !bytes.Equal(enc, enc2) {
		t.Fatalf("the round trip changed the bytes:\n%s\n%s", enc, enc2)
	}
}

// The fast path must know every field: a document with a field it does
// not know is read by encoding/json, right but ten times slower. The map of
// testdata/codec-format1.json sets every field of a cell and an instance;
// a field added to them must be set there too, and read by the parser.
func TestFastPathReadsEveryField(t *testing.T) {
	old, err := os.ReadFile("testdata/codec-format1.json")
	if err != nil {
		t.Fatal(err)
	}
	m, err := Decode(old)
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, c := range m.cells {
		markSet(set, "cell", reflect.ValueOf(c))
		for _, in := range c.Instances {
			markSet(set, "instance", reflect.ValueOf(in))
		}
	}
	packed := m.clone()
	packed.format1 = false
	enc := mustEncode(t, packed)
	for _, typ := range []reflect.Type{reflect.TypeFor[Cell](), reflect.TypeFor[Instance](), reflect.TypeFor[document]()} {
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case typ == reflect.TypeFor[document]() && !bytes.Contains(enc, []byte(`"`+name+`":`)):
				t.Errorf("the test map's document has no %q", name)
			case typ == reflect.TypeFor[Cell]() && !set["cell."+f.Name], typ == reflect.TypeFor[Instance]() && !set["instance."+f.Name]:
				t.Errorf("no %s of the test map sets %s", strings.ToLower(typ.Name()), f.Name)
			}
		}
	}
	if _, ok := parseDocument(enc); !ok {
		t.Errorf("the fast path does not read the canonical document\n%s", enc)
	}
	if _, ok := parseDocument(old); !ok {
		t.Errorf("the fast path does not read the format 1 document")
	}
}

func markSet(set map[string]bool, kind string, v reflect.Value) {
	for i := range v.NumField() {
		if !v.Field(i).IsZero() {
			set[kind+"."+v.Type().Field(i).Name] = true
		}
	}
}

// randomMap is a valid map of n cells over slots slots, with random states
// (at least one cell active), weights, instances, fixed quotas, overrides
// and a random table over the active cells. It is assembled directly, not
// planned, so that large maps are cheap.
func randomMap(t testing.TB, rng *rand.Rand, n, slots int) *Map {
	t.Helper()
	m, err := New(slots, testAgencies)
	if err != nil {
		t.Fatal(err)
	}
	var active []uint16
	for i := 0; i < n; i++ {
		c := testCell(fmt.Sprintf("c%04d", i), 1+rng.IntN(9))
		c.State = []State{Active, Active, Draining, Drained}[rng.IntN(4)]
		if i == n-1 && len(active) == 0 {
			c.State = Active
		}
		if c.State == Active {
			active = append(active, uint16(i))
		}
		if rng.IntN(5) == 0 {
			c.Instances = []Instance{{ID: "a", Intake: c.Intake, Admin: c.Admin}, {ID: "b", Intake: "https://b.example:8443", Admin: "https://b.example:9443", Drained: rng.IntN(2) == 0}}
			c.followInstances()
		}
		if i < 20 && rng.IntN(4) == 0 && c.takesQuota() {
			c.FixedQuota = map[string]int{"kcb": rng.IntN(2)}
		}
		m.cells = append(m.cells, c)
	}
	m.table = make([]uint16, slots)
	for s := range m.table {
		m.table[s] = active[rng.IntN(len(active))]
	}
	m.overrides = map[string]string{}
	for i := rng.IntN(20); i > 0; i-- {
		m.overrides[fmt.Sprintf("user-%d", rng.IntN(1000))] = m.cells[rng.IntN(n)].ID
	}
	if len(m.overrides) == 0 {
		m.overrides = nil
	}
	return settled(t, m)
}

// Every map round-trips through both formats, at every width of a cell
// position (1 bit for 2 cells to 12 for MaxCells) and slot counts that do
// and do not fill the table's last byte.
func TestPropertyPackedRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for _, n := range []int{1, 2, 3, 4, 5, 8, 9, 63, 64, 65, 255, 256, 257, 1000, 1024, 1025, 2049, MaxCells} {
		slotCounts := []int{1, 7, 8, 100}
		if n == 3 || n == 64 || n == 1000 || n == MaxCells {
			slotCounts = append(slotCounts, DefaultSlots)
		}
		for _, slots := range slotCounts {
			m := randomMap(t, rng, n, slots)
			enc := mustEncode(t, m)
			back, err := Decode(enc)
			if err != nil {
				t.Fatalf("%d cells, %d slots: Decode(Encode(m)) = %v", n, slots, err)
			}
			sameMap(t, m, back)
			if enc2 := mustEncode(t, back); !bytes.Equal(enc, enc2) {
				t.Fatalf("%d cells, %d slots: Encode(Decode(Encode(m))) differs", n, slots)
			}
			if _, ok := parseDocument(enc); !ok {
				t.Fatalf("%d cells, %d slots: the fast path does not read the canonical document", n, slots)
			}
			old, err := Decode(encodeFormat1(t, m))
			if err != nil {
				t.Fatalf("%d cells, %d slots: Decode(format 1) = %v", n, slots, err)
			}
			if old.Format() != 1 {
				t.Fatalf("%d cells, %d slots: a map read in format 1 says format %d", n, slots, old.Format())
			}
			old.format1 = false
			sameMap(t, m, old)
		}
	}
	m := randomMap(t, rng, 3, MaxSlots)
	back, err := Decode(mustEncode(t, m))
	if err != nil {
		t.Fatalf("MaxSlots: %v", err)
	}
	sameMap(t, m, back)
}

// The 1000-cell map of the benchmarks encodes under 256 KB (half of what
// Consul takes in one value) and decodes in at most 5 allocations a cell.
func TestEncodedSizeAndDecodeAllocs(t *testing.T) {
	m := codecBenchMap(t, 1000)
	enc := mustEncode(t, m)
	if len(enc) >= 256<<10 {
		t.Errorf("the 1000-cell map encodes to %d bytes, want under %d", len(enc), 256<<10)
	}
	allocs := testing.AllocsPerRun(3, func() {
		if _, err := Decode(enc); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 5*1000 {
		t.Errorf("Decode of the 1000-cell map makes %.0f allocations, want at most 5 a cell", allocs)
	}
	t.Logf("%d bytes, %.0f allocations", len(enc), allocs)
}

func TestEmptyMapRoundTrip(t *testing.T) {
	m, err := New(0, map[string]int{"nice": 80, "kcb": 40})
	if err != nil {
		t.Fatal(err)
	}
	if r := m.Lookup("anyone"); r.Cell != "" {
		t.Errorf("Lookup on a map without cells = %+v, want no cell", r)
	}
	enc, _ := m.Encode()
	back, err := Decode(enc)
	if err != nil {
		t.Fatalf("Decode(Encode(New)) = %v\n%s", err, enc)
	}
	enc2, _ := back.Encode()
	if !bytes.Equal(enc, enc2) {
		t.Errorf("round trip changed the bytes:\n%s\n%s", enc, enc2)
	}
}

// FuzzDecode checks that Decode never panics, that its fast path reads
// whatever it accepts as encoding/json does, and that whatever decodes is
// valid and re-encodes to bytes that decode to the same map.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(validDoc))
	f.Add([]byte(format1Doc))
	f.Add([]byte(indent(validDoc)))
	f.Add([]byte(strings.Replace(validDoc, `"AFU="`, `"AFc="`, 1)))
	f.Add([]byte(strings.Replace(validDoc, `"AFU="`, `"AF\u0055="`, 1)))
	f.Add([]byte(strings.NewReplacer(`"slots":8`, `"slots":6`, `"AFU="`, `"AVA="`).Replace(validDoc)))
	f.Add([]byte(`{"format":2,"version":1,"slots":4,"agencies":{},"cells":[],"table":""}`))
	f.Add([]byte(`{"version":1,"slots":4,"agencies":{},"cells":[],"table":[]}`))
	f.Add([]byte(`{"version":1,"slots":4,"table":[[0,3,"x"]]}`))
	f.Add([]byte(`{"Version":1,"slots":4,"slots":4,"cells":null,"table":null}`))
	if old, err := os.ReadFile("testdata/codec-format1.json"); err == nil {
		f.Add(old)
		if m, err := Decode(old); err == nil {
			f.Add(mustEncode(f, m))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if fast, ok := parseDocument(data); ok {
			slow, err := decodeJSON(data)
			if err != nil {
				t.Fatalf("the fast path read a document encoding/json refuses: %v", err)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("the fast path read\n%+v\nencoding/json\n%+v", fast, slow)
			}
		}
		m, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Decode error %v does not wrap ErrInvalid", err)
			}
			return
		}
		// Whatever decodes is valid and round-trips to canonical bytes.
		if err := m.Validate(); err != nil {
			t.Fatalf("Decode accepted a map Validate rejects: %v", err)
		}
		enc, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		back, err := Decode(enc)
		if err != nil {
			t.Fatalf("Decode(Encode(m)) = %v", err)
		}
		sameMap(t, m, back)
		enc2, _ := back.Encode()
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable:\n%s\n%s", enc, enc2)
		}
		for _, u := range []string{"u1", "user-42", ""} {
			r := m.Lookup(u)
			if r.Slot < 0 || r.Slot >= m.Slots() {
				t.Fatalf("Lookup(%q).Slot = %d out of range", u, r.Slot)
			}
		}
	})
}

// FuzzPlainURL checks checkURL's shortcut: every URL plainURL accepts passes
// the full check.
func FuzzPlainURL(f *testing.F) {
	for _, seed := range []string{"http://10.1.2.3:8080", "https://cell-1.example:8443/api/v1", "http://h", "http://h:0", "http://h:65536", "http://h:080", "http://-:1/~x_y", "http://h/a?b", "http://H", "http://h:8080x"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !plainURL(s) {
			return
		}
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			t.Fatalf("plainURL accepts %q, which url.Parse reads as %#v, %v", s, u, err)
		}
		if p := u.Port(); p != "" {
			if n, err := strconv.Atoi(p); err != nil || n <= 0 || n > 65535 {
				t.Fatalf("plainURL accepts %q with port %q", s, p)
			}
		}
	})
}

// FuzzParseRun checks the hand-written run parser against encoding/json:
// whatever the fast path accepts, the generic path reads the same way.
func FuzzParseRun(f *testing.F) {
	for _, seed := range []string{`[0,3,"c1"]`, ` [ 12 , 13 , "cell-9" ] `, `[01,2,"x"]`, `[1,2,"a\"b"]`, `[1,2,"é"]`, `[1e3,2,"x"]`, `[1,2,"x"]x`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		from, to, cell, ok := parseRun(data)
		if !ok {
			return
		}
		var parts []json.RawMessage
		if err := json.Unmarshal(data, &parts); err != nil || len(parts) != 3 {
			t.Fatalf("parseRun accepted %q, encoding/json does not: %v", data, err)
		}
		var f2, t2 int
		var c2 string
		if json.Unmarshal(parts[0], &f2) != nil || json.Unmarshal(parts[1], &t2) != nil || json.Unmarshal(parts[2], &c2) != nil {
			t.Fatalf("parseRun accepted %q, encoding/json cannot read its parts", data)
		}
		if from != f2 || to != t2 || cell != c2 {
			t.Fatalf("parseRun(%q) = %d, %d, %q; encoding/json reads %d, %d, %q", data, from, to, cell, f2, t2, c2)
		}
	})
}
