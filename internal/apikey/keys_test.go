package apikey

import (
	"fmt"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	h1, h2 := Hash("k1"), Hash("k2")
	for _, tc := range []struct {
		name, file string
		err        string // "" for valid
		clients    int
	}{
		{"one", `[{"client":"platform-a","key_sha256":"` + h1 + `","rate":100,"burst":200}]`, "", 1},
		{"rotation shares a client", `[{"client":"a","key_sha256":"` + h1 + `","rate":1,"burst":1},{"client":"a","key_sha256":"` + h2 + `","rate":1,"burst":1}]`, "", 1},
		{"two clients", `[{"client":"a","key_sha256":"` + h1 + `","rate":1,"burst":1},{"client":"b","key_sha256":"` + h2 + `","rate":0.5,"burst":3}]`, "", 2},
		{"upper-case hex", `[{"client":"a","key_sha256":"` + strings.ToUpper(h1) + `","rate":1,"burst":1}]`, "", 1},
		{"empty", `[]`, "holds no keys", 0},
		{"not json", `{`, "keys:", 0},
		{"unknown field", `[{"client":"a","key":"` + h1 + `","rate":1,"burst":1}]`, "key_sha256", 0},
		{"bad client", `[{"client":"a b","key_sha256":"` + h1 + `","rate":1,"burst":1}]`, "client", 0},
		{"short hash", `[{"client":"a","key_sha256":"abcd","rate":1,"burst":1}]`, "64 hex", 0},
		{"zero rate", `[{"client":"a","key_sha256":"` + h1 + `","rate":0,"burst":1}]`, "rate", 0},
		{"zero burst", `[{"client":"a","key_sha256":"` + h1 + `","rate":1,"burst":0}]`, "burst", 0},
		{"duplicate key", `[{"client":"a","key_sha256":"` + h1 + `","rate":1,"burst":1},{"client":"b","key_sha256":"` + h1 + `","rate":1,"burst":1}]`, "duplicate", 0},
		{"limits disagree", `[{"client":"a","key_sha256":"` + h1 + `","rate":1,"burst":1},{"client":"a","key_sha256":"` + h2 + `","rate":2,"burst":1}]`, "different limits", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := Parse([]byte(tc.file))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Parse = %v, want an error about %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if len(k.Clients()) != tc.clients {
				t.Errorf("%d clients, want %d", len(k.Clients()), tc.clients)
			}
		})
	}
}

func TestAuthenticate(t *testing.T) {
	key, sum, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(key, KeyPrefix) || len(key) < 40 || sum != Hash(key) {
		t.Fatalf("Generate = %q, %q", key, sum)
	}
	other, _, _ := Generate()
	if other == key {
		t.Fatal("GenerateKey repeats itself")
	}
	k, err := Parse([]byte(fmt.Sprintf(`[{"client":"platform-a","key_sha256":%q,"rate":100,"burst":200},{"client":"platform-b","key_sha256":%q,"rate":1,"burst":1}]`, sum, Hash("second"))))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, key string
		want      Result
		client    string
	}{
		{"valid", key, OK, "platform-a"},
		{"second client", "second", OK, "platform-b"},
		{"missing", "", Missing, ""},
		{"unknown", "ck_wrong", Unknown, ""},
		{"one byte off", key[:len(key)-1] + "x", Unknown, ""},
		{"prefix of a key", key[:10], Unknown, ""},
		{"too long", strings.Repeat("a", maxKeyLen+1), Unknown, ""},
		{"hash instead of key", sum, Unknown, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, res := k.Authenticate([]byte(tc.key))
			if res != tc.want || (c != nil) != (tc.client != "") || (c != nil && c.ID != tc.client) {
				t.Errorf("Authenticate(%q) = %v, %v; want %v, %q", tc.key, c, res, tc.want, tc.client)
			}
		})
	}
	kb := []byte(key)
	if n := testing.AllocsPerRun(100, func() { k.Authenticate(kb) }); n != 0 {
		t.Errorf("Authenticate allocates %.1f times", n)
	}
}

func BenchmarkAuthenticate(b *testing.B) {
	key, sum, _ := Generate()
	k, err := Parse([]byte(fmt.Sprintf(`[{"client":"a","key_sha256":%q,"rate":1,"burst":1}]`, sum)))
	if err != nil {
		b.Fatal(err)
	}
	kb := []byte(key)
	b.ReportAllocs()
	for b.Loop() {
		k.Authenticate(kb)
	}
}

func TestParseLanes(t *testing.T) {
	h1, h2 := Hash("k1"), Hash("k2")
	entry := func(hash, lanes string) string {
		return `{"client":"a","key_sha256":"` + hash + `","rate":1,"burst":1` + lanes + `}`
	}
	for _, tc := range []struct {
		name, file   string
		err          string // "" for valid
		high, normal bool
		def          string
	}{
		{"none: normal only", `[` + entry(h1, "") + `]`, "", false, true, "normal"},
		{"both, normal first by default", `[` + entry(h1, `,"lanes":["high","normal"]`) + `]`, "", true, true, "normal"},
		{"both, high by default", `[` + entry(h1, `,"lanes":["normal","high"],"default_lane":"high"`) + `]`, "", true, true, "high"},
		{"high only", `[` + entry(h1, `,"lanes":["high"]`) + `]`, "", true, false, "high"},
		{"rotation agrees", `[` + entry(h1, `,"lanes":["high"]`) + `,` + entry(h2, `,"lanes":["high"],"default_lane":"high"`) + `]`, "", true, false, "high"},
		{"empty lanes", `[` + entry(h1, `,"lanes":[]`) + `]`, "at least one", false, false, ""},
		{"unknown lane", `[` + entry(h1, `,"lanes":["urgent"]`) + `]`, `"urgent"`, false, false, ""},
		{"lane twice", `[` + entry(h1, `,"lanes":["high","high"]`) + `]`, "at most once", false, false, ""},
		{"default not allowed", `[` + entry(h1, `,"default_lane":"high"`) + `]`, "default_lane", false, false, ""},
		{"default not a lane", `[` + entry(h1, `,"lanes":["high","normal"],"default_lane":"low"`) + `]`, "default_lane", false, false, ""},
		{"rotation disagrees", `[` + entry(h1, `,"lanes":["high","normal"]`) + `,` + entry(h2, "") + `]`, "different lanes", false, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := Parse([]byte(tc.file))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Parse = %v, want an error about %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			p := k.Clients()[0].lanes
			if p.high != tc.high || p.normal != tc.normal || p.def != tc.def {
				t.Fatalf("lanes high=%v normal=%v default %q; want %v %v %q", p.high, p.normal, p.def, tc.high, tc.normal, tc.def)
			}
		})
	}
}

// TestBadEntriesNameTheirLine: a keys file is edited by hand; an entry it
// refuses is named by the line it starts on.
func TestBadEntriesNameTheirLine(t *testing.T) {
	good := `{"client": "a", "key_sha256": "` + Hash("a") + `", "rate": 5, "burst": 5}`
	for _, tc := range []struct {
		name, bad, want string
	}{
		{"zero rate", `{"client": "b", "key_sha256": "` + Hash("b") + `", "rate": 0, "burst": 5}`, "line 3: entry 1 (b): rate must be > 0"},
		{"negative rate", `{"client": "b", "key_sha256": "` + Hash("b") + `", "rate": -2, "burst": 5}`, "line 3: entry 1 (b): rate must be > 0"},
		{"burst below one", `{"client": "b", "key_sha256": "` + Hash("b") + `", "rate": 2, "burst": 0}`, "line 3: entry 1 (b): burst must be ≥ 1"},
		{"unknown lane", `{"client": "b", "key_sha256": "` + Hash("b") + `", "rate": 2, "burst": 1, "lanes": ["urgent"]}`, `line 3: entry 1 (b): lanes: "urgent"`},
		{"a string for a number", `{"client": "b", "key_sha256": "` + Hash("b") + `", "rate": "2", "burst": 1}`, "line 3: "},
		{"broken JSON", `{"client": "b",, }`, "line 3: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte("[\n  " + good + ",\n  " + tc.bad + "\n]\n"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse = %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := Parse([]byte("[" + good + "] []")); err == nil || !strings.Contains(err.Error(), "after the array") {
		t.Fatalf("two arrays: %v", err)
	}
}
