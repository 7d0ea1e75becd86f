package slotmap

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// validDoc is a small valid map; the invalid cases below each break one thing.
const validDoc = `{"version":3,"slots":8,"agencies":{"nice":80},` +
	`"cells":[` +
	`{"id":"c1","state":"active","weight":1,"intake":"http://127.0.0.1:8001","admin":"http://127.0.0.1:9001","quota":{"nice":40}},` +
	`{"id":"c2","state":"active","weight":1,"intake":"http://127.0.0.1:8002","admin":"http://127.0.0.1:9002","quota":{"nice":40}},` +
	`{"id":"c3","state":"drained","weight":1,"intake":"http://127.0.0.1:8003","admin":"http://127.0.0.1:9003"}],` +
	`"overrides":{"u1":"c1"},` +
	`"table":[[0,3,"c1"],[4,7,"c2"]]}`

func TestDecodeValid(t *testing.T) {
	m, err := Decode([]byte(validDoc))
	if err != nil {
		t.Fatalf("Decode(validDoc) = %v", err)
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
	if string(enc) != validDoc {
		t.Errorf("Encode() =\n%s\nwant the canonical input back\n%s", enc, validDoc)
	}
}

func TestDecodeInvalid(t *testing.T) {
	tests := []struct {
		name    string
		old     string // replaced once in validDoc
		new     string
		wantErr string
	}{
		{"unknown top-level field", `"version":3,`, `"version":3,"colour":"red",`, `unknown field "colour"`},
		{"unknown cell field", `"weight":1,"intake":"http://127.0.0.1:8001"`, `"weight":1,"zone":"a","intake":"http://127.0.0.1:8001"`, `unknown field "zone"`},
		{"version zero", `"version":3`, `"version":0`, "version 0 must be > 0"},
		{"version negative", `"version":3`, `"version":-1`, "version -1 must be > 0"},
		{"slot count zero", `"slots":8`, `"slots":0`, "slot count 0"},
		{"slot count too large", `"slots":8`, `"slots":2000000`, "slot count 2000000"},
		{"slot count mismatch", `"slots":8`, `"slots":16`, "slot 8 is unassigned"},
		{"gap in table", `[0,3,"c1"],[4,7,"c2"]`, `[0,2,"c1"],[4,7,"c2"]`, "slot 3 is unassigned"},
		{"overlap in table", `[0,3,"c1"],[4,7,"c2"]`, `[0,3,"c1"],[3,7,"c2"]`, "slot 3 is assigned twice"},
		{"run past the last slot", `[4,7,"c2"]`, `[4,9,"c2"]`, "range outside 0..7"},
		{"reversed run", `[0,3,"c1"]`, `[3,0,"c1"]`, "reversed"},
		{"run of two elements", `[0,3,"c1"]`, `[0,3]`, `want [from, to, "cell"]`},
		{"run with a string slot", `[0,3,"c1"]`, `["0",3,"c1"]`, "from is not an integer"},
		{"slot on unknown cell", `[4,7,"c2"]`, `[4,7,"c9"]`, `slot 4 is assigned to unknown cell "c9"`},
		{"slot on drained cell", `[4,7,"c2"]`, `[4,7,"c3"]`, `slot 4 is assigned to drained cell "c3"`},
		{"no active cell but slots assigned", `"state":"active","weight":1,"intake":"http://127.0.0.1:8002"`, `"state":"draining","weight":1,"intake":"http://127.0.0.1:8002"`, `slot 4 is assigned to draining cell "c2"`},
		{"weight zero", `"weight":1,"intake":"http://127.0.0.1:8001"`, `"weight":0,"intake":"http://127.0.0.1:8001"`, `cell "c1": weight 0`},
		{"weight negative", `"weight":1,"intake":"http://127.0.0.1:8001"`, `"weight":-5,"intake":"http://127.0.0.1:8001"`, `cell "c1": weight -5`},
		{"quotas over the limit", `"quota":{"nice":40}}`, `"quota":{"nice":50}}`, `agency "nice": cell quotas sum to 90, over its session limit 80`},
		{"quota of unknown agency", `"quota":{"nice":40}}`, `"quota":{"kcb":4}}`, `quota for unknown agency "kcb"`},
		{"negative quota", `"quota":{"nice":40}}`, `"quota":{"nice":-1}}`, `quota -1`},
		{"drained cell with quota", `"admin":"http://127.0.0.1:9003"}`, `"admin":"http://127.0.0.1:9003","quota":{"nice":1}}`, `cell "c3" is drained but holds a quota`},
		{"duplicate cell id", `{"id":"c3"`, `{"id":"c2"`, `duplicate cell id "c2"`},
		{"bad cell id", `{"id":"c3"`, `{"id":"C_3"`, `cell id "C_3"`},
		{"unknown state", `"state":"drained"`, `"state":"paused"`, `state "paused"`},
		{"malformed intake url", `"intake":"http://127.0.0.1:8001"`, `"intake":"not a url"`, `cell "c1": intake url "not a url" must be http:// or https://`},
		{"admin url of another scheme", `"admin":"http://127.0.0.1:9001"`, `"admin":"ftp://127.0.0.1:9001"`, `cell "c1": admin url "ftp://127.0.0.1:9001"`},
		{"url without host", `"intake":"http://127.0.0.1:8001"`, `"intake":"http://"`, `has no host`},
		{"url with a bad port", `"intake":"http://127.0.0.1:8001"`, `"intake":"http://127.0.0.1:99999"`, `bad port`},
		{"url with a query", `"intake":"http://127.0.0.1:8001"`, `"intake":"http://127.0.0.1:8001/?x=1"`, `must not carry`},
		{"override to unknown cell", `"overrides":{"u1":"c1"}`, `"overrides":{"u1":"c7"}`, `override for user "u1" points at unknown cell "c7"`},
		{"override of a bad user id", `"overrides":{"u1":"c1"}`, `"overrides":{"u 1":"c1"}`, `override for user "u 1"`},
		{"agency limit zero", `"agencies":{"nice":80}`, `"agencies":{"nice":0}`, `agency "nice": session limit 0`},
		{"bad agency name", `"agencies":{"nice":80}`, `"agencies":{"nice":80,"NICE!":3}`, `agency name "NICE!"`},
		{"bad updated time", `"slots":8,`, `"slots":8,"updated":"yesterday",`, `updated "yesterday"`},
		{"trailing data", validDoc, validDoc + `{}`, "trailing data"},
		{"not json", validDoc, `version: 3`, "invalid character"},
		{"wrong type", `"version":3`, `"version":"3"`, "cannot unmarshal string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(validDoc, tt.old) {
				t.Fatalf("test case does not apply: %q not in validDoc", tt.old)
			}
			doc := strings.Replace(validDoc, tt.old, tt.new, 1)
			m, err := Decode([]byte(doc))
			if err == nil {
				t.Fatalf("Decode(%s) = version %d, want error containing %q", doc, m.Version(), tt.wantErr)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("Decode error %v does not wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Decode error = %q, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestDecodeAcceptsNonCanonicalInput(t *testing.T) {
	// Cells out of order and a table split into more runs than needed decode
	// to the same map, which then encodes canonically.
	doc := strings.NewReplacer(
		`[0,3,"c1"],[4,7,"c2"]`, `[0,1,"c1"],[2,3,"c1"],[4,7,"c2"]`,
	).Replace(validDoc)
	m, err := Decode([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := m.Encode()
	if string(enc) != validDoc {
		t.Errorf("Encode(Decode(split runs)) =\n%s\nwant\n%s", enc, validDoc)
	}
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

func FuzzDecode(f *testing.F) {
	f.Add([]byte(validDoc))
	f.Add([]byte(`{"version":1,"slots":4,"agencies":{},"cells":[],"table":[]}`))
	f.Add([]byte(`{"version":1,"slots":4,"table":[[0,3,"x"]]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data)
		if err != nil {
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
