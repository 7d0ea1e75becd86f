package route

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cellkit/cellkit/internal/api"
)

// referenceUserID is what the cell sees: encoding/json into the same struct.
func referenceUserID(body []byte) (string, bool) {
	var v inquiryUser
	if err := json.Unmarshal(body, &v); err != nil {
		return "", false
	}
	return v.id(), api.ValidUserID(v.id())
}

// referencePriority is the priority encoding/json finds ("" with false for
// none or for a body it cannot decode into inquiryLane).
func referencePriority(body []byte) (string, bool) {
	var l inquiryLane
	if json.Unmarshal(body, &l) != nil || l.Priority == nil {
		return "", false
	}
	return *l.Priority, true
}

var userIDCases = []struct {
	name, body string
	want       string // "" with ok false
	ok         bool
	fast       bool // the scanner decides without encoding/json
}{
	{"plain", `{"user_id":"u-123","product":"loan","amount":1000}`, "u-123", true, true},
	{"spaces", " \n{ \"amount\" : 1.5e3 , \"user_id\" :\t\"U_9\" }\r\n", "U_9", true, true},
	{"nested before", `{"meta":{"a":[1,{"b":null}],"c":"x\"y\u00e9"},"user_id":"a"}`, "a", true, true},
	{"last wins", `{"user_id":"first","user_id":"second"}`, "second", true, true},
	{"null clears", `{"user_id":"gone","user_id":null}`, "", false, true},
	{"null then value", `{"user_id":null,"user_id":"back"}`, "back", true, true},
	{"null only", `{"user_id":null}`, "", false, true},
	{"missing", `{"product":"loan"}`, "", false, true},
	{"empty object", `{}`, "", false, true},
	{"empty id", `{"user_id":""}`, "", false, true},
	{"bad chars", `{"user_id":"a b"}`, "", false, true},
	{"too long", `{"user_id":"` + strings.Repeat("x", 65) + `"}`, "", false, true},
	{"max length", `{"user_id":"` + strings.Repeat("x", 64) + `"}`, strings.Repeat("x", 64), true, true},
	{"number", `{"user_id":123}`, "", false, false},
	{"number then string", `{"user_id":1,"user_id":"a"}`, "", false, false},
	{"escaped value", `{"user_id":"\u0041bc"}`, "Abc", true, false},
	{"escaped key", `{"user\u005fid":"abc"}`, "abc", true, false},
	{"folded key", `{"USER_ID":"abc"}`, "abc", true, false},
	{"folded key last", `{"user_id":"a","User_Id":"b"}`, "b", true, false},
	{"kelvin fold", `{"user_id":"a","uſer_id":"b"}`, "b", true, false},
	{"trailing garbage", `{"user_id":"a"} x`, "", false, false},
	{"trailing comma", `{"user_id":"a",}`, "", false, false},
	{"leading zero", `{"n":01,"user_id":"a"}`, "", false, false},
	{"bad literal", `{"n":tru,"user_id":"a"}`, "", false, false},
	{"control char", "{\"n\":\"a\x01\",\"user_id\":\"a\"}", "", false, false},
	{"invalid utf8 elsewhere", "{\"n\":\"\xff\xfe\",\"user_id\":\"a\"}", "a", true, true},
	{"array", `[{"user_id":"a"}]`, "", false, false},
	{"top null", `null`, "", false, false},
	{"empty", ``, "", false, false},
	{"truncated", `{"user_id":"a"`, "", false, false},
	{"deep", `{"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `,"user_id":"a"}`, "a", true, false},
}

func TestUserIDFrom(t *testing.T) {
	for _, tc := range userIDCases {
		t.Run(tc.name, func(t *testing.T) {
			id, ok, _ := InquiryFields([]byte(tc.body))
			if ok != tc.ok || (ok && string(id) != tc.want) {
				t.Errorf("InquiryFields(%q) = %q, %v; want %q, %v", tc.body, id, ok, tc.want, tc.ok)
			}
			if want, wantOK := referenceUserID([]byte(tc.body)); ok != wantOK || (ok && string(id) != want) {
				t.Errorf("InquiryFields(%q) = %q, %v; encoding/json gives %q, %v", tc.body, id, ok, want, wantOK)
			}
			if _, _, fast := scanInquiry([]byte(tc.body)); fast != tc.fast {
				t.Errorf("scanInquiry(%q) decided = %v, want %v", tc.body, fast, tc.fast)
			}
		})
	}
}

// TestPriorityFrom: the priority the router holds against the client's
// lanes is the one encoding/json (and so the cell) finds, whatever the
// spelling; the cell refuses whatever it cannot decode.
func TestPriorityFrom(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       string // "" for none
		fast       bool
	}{
		{"high", `{"user_id":"a","priority":"high"}`, "high", true},
		{"before the user", `{"priority":"normal","user_id":"a"}`, "normal", true},
		{"none", `{"user_id":"a"}`, "", true},
		{"null", `{"user_id":"a","priority":null}`, "", true},
		{"last wins", `{"priority":"normal","user_id":"a","priority":"high"}`, "high", true},
		{"null clears", `{"priority":"high","priority":null,"user_id":"a"}`, "", true},
		{"not a lane", `{"user_id":"a","priority":"urgent"}`, "urgent", true},
		{"folded key", `{"user_id":"a","PRIORITY":"high"}`, "high", false},
		{"folded after", `{"user_id":"a","priority":"normal","Priority":"high"}`, "high", false},
		{"escaped key", `{"user_id":"a","pr\u0069ority":"high"}`, "high", false},
		{"escaped value", `{"user_id":"a","priority":"h\u0069gh"}`, "high", false},
		{"number", `{"user_id":"a","priority":1}`, "", false},
		{"invalid json", `{"user_id":"a","priority":"high"`, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, p := InquiryFields([]byte(tc.body))
			if string(p) != tc.want {
				t.Errorf("priority %q, want %q", p, tc.want)
			}
			if want, _ := referencePriority([]byte(tc.body)); string(p) != want {
				t.Errorf("priority %q, encoding/json gives %q", p, want)
			}
			if _, _, fast := scanInquiry([]byte(tc.body)); fast != tc.fast {
				t.Errorf("scanInquiry decided = %v, want %v", fast, tc.fast)
			}
		})
	}
}

func TestUserIDFastPathDoesNotAllocate(t *testing.T) {
	body := []byte(`{"user_id":"user-000123","product":"credit-line","amount":5000000,"priority":"normal","callback_url":"https://p.example/cb"}`)
	if n := testing.AllocsPerRun(1000, func() { InquiryFields(body) }); n != 0 {
		t.Fatalf("InquiryFields allocates %.1f times, want 0", n)
	}
}

// FuzzInquiryFields holds the scanner to encoding/json: same user id, same
// verdict, same priority, no panics, whatever the body.
func FuzzInquiryFields(f *testing.F) {
	for _, tc := range userIDCases {
		f.Add([]byte(tc.body))
	}
	f.Add([]byte(`{"user_id":"a","priority":"high"}`))
	f.Add([]byte(`{"priority":null,"user_id":"a","Priority":"normal"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		id, ok, p := InquiryFields(body)
		want, wantOK := referenceUserID(body)
		if ok != wantOK || (ok && string(id) != want) {
			t.Fatalf("InquiryFields(%q) = %q, %v; encoding/json gives %q, %v", body, id, ok, want, wantOK)
		}
		if wantP, _ := referencePriority(body); string(p) != wantP {
			t.Fatalf("InquiryFields(%q) priority %q; encoding/json gives %q", body, p, wantP)
		}
		if sid, sp, fast := scanInquiry(body); fast {
			var v inquiryUser
			var l inquiryLane
			if err := json.Unmarshal(body, &v); err != nil {
				t.Fatalf("scanInquiry(%q) decided, but encoding/json fails: %v", body, err)
			}
			if err := json.Unmarshal(body, &l); err != nil {
				t.Fatalf("scanInquiry(%q) decided, but encoding/json fails on the priority: %v", body, err)
			}
			if string(sid) != v.id() {
				t.Fatalf("scanInquiry(%q) = %q, encoding/json gives %q", body, sid, v.id())
			}
			if (sp == nil) != (l.Priority == nil) || (sp != nil && string(sp) != *l.Priority) {
				t.Fatalf("scanInquiry(%q) priority %q, encoding/json gives %v", body, sp, l.Priority)
			}
		}
	})
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		want         Kind
		cell         string
	}{
		{"POST", "/v1/inquiries", Create, ""},
		{"GET", "/v1/inquiries", BadMethod, ""},
		{"PUT", "/v1/inquiries", BadMethod, ""},
		{"GET", "/v1/inquiries/c1-01JDXYZ", Read, "c1"},
		{"HEAD", "/v1/inquiries/c1-01JDXYZ", Read, "c1"},
		{"GET", "/v1/inquiries/cell-a-2-cu7h3kf0000000000000", Read, "cell-a-2"},
		{"POST", "/v1/inquiries/c1-x", BadMethod, ""},
		{"GET", "/v1/inquiries/", BadInquiry, ""},
		{"GET", "/v1/inquiries/nodash", BadInquiry, ""},
		{"GET", "/v1/inquiries/c1-", BadInquiry, ""},
		{"GET", "/v1/inquiries/-abc", BadInquiry, ""},
		{"GET", "/v1/inquiries/C1-abc", BadInquiry, ""}, // cell ids are lower case
		{"GET", "/v1/inquiries/c1-a/b", BadInquiry, ""},
		{"GET", "/v1/inquiries/c1-a.b", BadInquiry, ""},
		{"GET", "/v1/inquiries/" + strings.Repeat("a", 130) + "-x", BadInquiry, ""},
		{"GET", "/", NotFound, ""},
		{"GET", "/v1/inquiriesx", NotFound, ""},
		{"GET", "/v2/inquiries", NotFound, ""},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			got, cell := Classify([]byte(tc.method), []byte(tc.path))
			if got != tc.want || string(cell) != tc.cell {
				t.Errorf("Classify(%s %s) = %v, %q; want %v, %q", tc.method, tc.path, got, cell, tc.want, tc.cell)
			}
		})
	}
}

func BenchmarkUserIDFrom(b *testing.B) {
	body := []byte(`{"user_id":"user-000123","product":"credit-line","amount":5000000,"priority":"normal"}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		InquiryFields(body)
	}
}

func BenchmarkUserIDEncodingJSON(b *testing.B) {
	body := []byte(`{"user_id":"user-000123","product":"credit-line","amount":5000000,"priority":"normal"}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		referenceUserID(body)
	}
}

// FuzzClassify: any method and path Classify without panicking, and a
// read always names a valid cell that prefixes the id.
func FuzzClassify(f *testing.F) {
	f.Add("GET", "/v1/inquiries/c1-abc")
	f.Add("POST", "/v1/inquiries")
	f.Add("GET", "/v1/inquiries/a-b-c-")
	f.Add("HEAD", "/v1/inquiries/-")
	f.Fuzz(func(t *testing.T, method, path string) {
		kind, cell := Classify([]byte(method), []byte(path))
		if kind == Read {
			id := strings.TrimPrefix(path, pathInquiryPre)
			if !api.ValidCellID(string(cell)) || !strings.HasPrefix(id, string(cell)+"-") || len(id) <= len(cell)+1 {
				t.Fatalf("Classify(%q, %q) = read of cell %q", method, path, cell)
			}
		}
	})
}
