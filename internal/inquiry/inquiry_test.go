package inquiry

import (
	"bytes"
	"encoding/json"
	"errors"
	"github.com/cellkit/cellkit/internal/api"
	"strings"
	"testing"
	"time"
)

func TestDecodeRequest(t *testing.T) {
	for _, tc := range []struct {
		body  string
		field string // "" for a valid request; "!" for a syntax error
		want  Request
	}{
		{`{"user_id":"u-1_A","product":"credit_loan","amount":1}`, "", Request{UserID: "u-1_A", Product: "credit_loan", Amount: 1, Priority: Normal}},
		{`{"user_id":"u","product":"p","amount":1000000000000,"priority":"high","callback_url":"https://x.test/cb"}`, "", Request{UserID: "u", Product: "p", Amount: MaxAmount, Priority: High, CallbackURL: "https://x.test/cb"}},
		{`{"user_id":"u","product":"p","amount":1,"priority":null}`, "", Request{UserID: "u", Product: "p", Amount: 1, Priority: Normal}},
		{`{"user_id":"u","product":"p","amount":1} x`, "!", Request{}},
		{`"str"`, "!", Request{}},
		{`{"user_id":"u","product":"p","amount":1,"extra":true}`, "extra", Request{}},
		{`{"user_id":"","product":"p","amount":1}`, "user_id", Request{}},
		{`{"user_id":"` + strings.Repeat("a", 64) + `","product":"p","amount":1}`, "", Request{UserID: strings.Repeat("a", 64), Product: "p", Amount: 1, Priority: Normal}},
		{`{"user_id":"` + strings.Repeat("a", 65) + `","product":"p","amount":1}`, "user_id", Request{}},
		{`{"user_id":"u","product":"` + strings.Repeat("p", 32) + `","amount":1}`, "", Request{UserID: "u", Product: strings.Repeat("p", 32), Amount: 1, Priority: Normal}},
		{`{"user_id":"u","product":"p-1","amount":1}`, "product", Request{}},
		{`{"user_id":"u","product":"p","amount":true}`, "amount", Request{}},
		{`{"user_id":"u","product":"p","amount":01}`, "!", Request{}},
		{`{"user_id":"u","product":"p","amount":-0}`, "amount", Request{}},
		{`{"user_id":"u","product":"p","amount":99999999999999999999}`, "amount", Request{}},
		{`{"user_id":"u","product":"p","amount":1,"priority":"low"}`, "priority", Request{}},
		{`{"user_id":"u","product":"p","amount":1,"callback_url":"http://user:pw@x/"}`, "callback_url", Request{}},
		{`{"user_id":"u","product":"p","amount":1,"callback_url":"/relative"}`, "callback_url", Request{}},
		// encoding/json matches names in any case and keeps the last of
		// two: both are refused, so that the router (which routes by the
		// first user_id, exactly spelt) and the cell read the same request.
		{`{"USER_ID":"u","product":"p","amount":1}`, "USER_ID", Request{}},
		{`{"user_id":"u","Product":"p","amount":1}`, "Product", Request{}},
		{`{"user_id":"a","product":"p","amount":1,"user_id":"b"}`, "user_id", Request{}},
		{`{"user_id":"u","product":"p","amount":1,"amount":2}`, "amount", Request{}},
		{`{"\u0075ser_id":"u","product":"p","amount":1}`, `\u0075ser_id`, Request{}},
		// Quotes and commas inside values are not keys.
		{`{"user_id":"u\",\"product","product":"p","amount":1}`, "user_id", Request{}},
		{`{"product":"p","amount":1,"user_id":"u","callback_url":"https://x.test/?a=\"user_id\",b"}`, "", Request{UserID: "u", Product: "p", Amount: 1, Priority: Normal, CallbackURL: `https://x.test/?a="user_id",b`}},
		{` { "user_id" : "u" , "product" : "p" , "amount" : 1 } `, "", Request{UserID: "u", Product: "p", Amount: 1, Priority: Normal}},
	} {
		got, err := DecodeRequest([]byte(tc.body))
		var fe *FieldError
		switch {
		case tc.field == "":
			if err != nil || got != tc.want {
				t.Errorf("DecodeRequest(%s) = %+v, %v, want %+v", tc.body, got, err, tc.want)
			}
		case tc.field == "!":
			if !errors.Is(err, ErrSyntax) {
				t.Errorf("DecodeRequest(%s) = %v, want a syntax error", tc.body, err)
			}
		case !errors.As(err, &fe) || fe.Field != tc.field:
			t.Errorf("DecodeRequest(%s) = %v, want an error on %s", tc.body, err, tc.field)
		}
	}
}

func TestIDs(t *testing.T) {
	for _, cell := range []string{"c1", "eu-west-1"} {
		for _, slot := range []int{0, 1, 4095, 1<<20 - 1} {
			id := NewID(cell, slot)
			gotCell, gotSlot, unique, ok := api.ParseInquiryID(id)
			if !ok || gotCell != cell || gotSlot != slot || len(unique) != api.IDUniqueLen || strings.Contains(id[len(cell)+1:], "-") {
				t.Errorf("ParseInquiryID(%q) = %q, %d, %q, %v; want %q, %d", id, gotCell, gotSlot, unique, ok, cell, slot)
			}
			k := KeyID(cell, slot, "a", "u1", "key")
			if k != KeyID(cell, slot, "a", "u1", "key") || k == KeyID(cell, slot, "a", "u2", "key") || k == KeyID(cell, slot, "a", "u1", "key2") ||
				k == KeyID(cell, slot, "b", "u1", "key") || k == KeyID(cell, slot, "", "u1", "key") {
				t.Errorf("KeyID is not a function of (client, user, key)")
			}
			if got, ok := CellOf(k); !ok || got != cell {
				t.Errorf("CellOf(%q) = %q, %v", k, got, ok)
			}
			// A key's inquiry is the same one whatever cell takes it.
			if other := KeyID("c9", slot, "a", "u1", "key"); other[len("c9"):] != k[len(cell):] {
				t.Errorf("KeyID in c9 = %q, in %s %q: want the same slot and unique part", other, cell, k)
			}
		}
	}
	// Ids from before ids held the slot: the cell and 20 characters.
	if cell, slot, unique, ok := api.ParseInquiryID("eu-west-1-0123456789abcdefghij"); !ok || cell != "eu-west-1" || slot != api.NoSlot || unique != "0123456789abcdefghij" {
		t.Errorf("an id without a slot parsed as %q %d %q %v", cell, slot, unique, ok)
	}
	for _, bad := range []string{"", "c1", "c1-", "-0123456789abcdefghij", "c1-0123456789abcdefghi", "c1-0123456789abcdefghiz",
		"C1-0123456789abcdefghij", "c1-0123456789ABCDEFGHIJ", "c1-000000123456789abcdefghij", "c1-0000123456789abcdefghij", "c1-w000" + "0123456789abcdefghij"} {
		if _, ok := CellOf(bad); ok {
			t.Errorf("CellOf(%q) accepted", bad)
		}
	}
	a, b := NewID("c1", 7), NewID("c1", 7)
	j1, j2 := NewJob(), NewJob()
	if a == b || j1 == j2 {
		t.Error("ids repeat")
	}
}

// TestNewIDsAreNotGuessable: ids made one after the other share no more
// than chance would (an id made of time and a counter shares its start
// with the next one).
func TestNewIDsAreNotGuessable(t *testing.T) {
	const n = 2000
	prev := NewID("c1", 0)[3+api.IDSlotLen:]
	same := 0
	for range n {
		id := NewID("c1", 0)[3+api.IDSlotLen:]
		for i := range id {
			if id[i] == prev[i] {
				same++
			}
		}
		prev = id
	}
	// 32 symbols: a position matches the previous id's with p = 1/32.
	if want := float64(n*api.IDUniqueLen) / 32; float64(same) > 1.5*want {
		t.Errorf("consecutive ids share %d positions of %d; random ids would share about %.0f", same, n*api.IDUniqueLen, want)
	}
}

func TestScoring(t *testing.T) {
	if k := AgencyKey("short"); k != "short" {
		t.Errorf("AgencyKey(short) = %q", k)
	}
	long := strings.Repeat("x", 64)
	if k := AgencyKey(long); len(k) != 20 || k != AgencyKey(long) || k == AgencyKey(long[1:]) {
		t.Errorf("AgencyKey(long) = %q", k)
	}
	prevRate := MaxRateBps + 1
	var prevLimit int64 = -1
	for s := MinScore; s <= MaxScore; s += 13 {
		rate, limit := Decide(map[string]int{"a": s}, 1<<40)
		if rate > prevRate || limit < prevLimit || rate < MinRateBps || rate > MaxRateBps {
			t.Fatalf("score %d: rate %d limit %d after %d %d: want monotonic and in range", s, rate, limit, prevRate, prevLimit)
		}
		prevRate, prevLimit = rate, limit
	}
	if _, limit := Decide(map[string]int{"a": MaxScore}, 5); limit != 5 {
		t.Errorf("limit %d over the amount asked (5)", limit)
	}
	if s := CSSScore("u"); s < MinScore || s > MaxScore || s != CSSScore("u") {
		t.Errorf("CSSScore = %d", s)
	}
}

func TestRecordLifecycle(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := NewRecord("c1-0123456789abcdefghij", "c1", Request{UserID: "u", Product: "p", Amount: 9, Priority: High}, now)
	if r.Status != Pending || r.Job == "" || r.MsgID() != r.ID+"."+r.Job || r.Fingerprint == "" {
		t.Fatalf("new record %+v", r)
	}
	r.Fail("nope", now.Add(time.Second))
	if v := r.View(); v.Status != Failed || v.Reason != "nope" || v.CompletedAt == nil {
		t.Fatalf("failed view %+v", v)
	}
	job := r.Job
	r.Requeue(now.Add(2 * time.Second))
	if r.Status != Pending || r.Job == job || r.Reason != "" || r.Completed != nil {
		t.Fatalf("requeued %+v", r)
	}
	r.Complete(Result{RateBps: 1, Limit: 2}, now.Add(3*time.Second))
	b, _ := json.Marshal(r.View())
	if strings.Contains(string(b), "job") || strings.Contains(string(b), "fingerprint") {
		t.Errorf("public view leaks internals: %s", b)
	}
}

func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"user_id":"u","product":"p","amount":1}`,
		`{"user_id":"u","product":"p","amount":1,"priority":"high","callback_url":"http://x/"}`,
		`{"amount":1e3}`, `[]`, `{"user_id":7}`, ``,
		`{"USER_ID":"u","product":"p","amount":1}`, `{"user_id":"a","product":"p","amount":1,"user_id":"b"}`,
		`{"user_id":"u\",\"x","product":"p","amount":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := DecodeRequest(body)
		if err != nil {
			return
		}
		// What is accepted has, as encoding/json reads it, only the
		// request's field names, each once: the allocation-free key scan
		// agrees with json's tokens.
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.Token()
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			k, _ := tok.(string)
			if err != nil || fieldIndex([]byte(k)) < 0 || seen[k] {
				t.Fatalf("accepted %q with key %q (seen %v, err %v)", body, k, seen, err)
			}
			seen[k] = true
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				t.Fatalf("accepted %q: %v", body, err)
			}
		}
		// Whatever is accepted is valid and survives a round trip.
		if err := r.Validate(); err != nil {
			t.Fatalf("accepted an invalid request %+v: %v", r, err)
		}
		b, _ := json.Marshal(r)
		r2, err := DecodeRequest(b)
		if err != nil || r2 != r {
			t.Fatalf("round trip of %+v: %+v, %v", r, r2, err)
		}
	})
}

func BenchmarkDecodeRequest(b *testing.B) {
	body := []byte(`{"user_id":"user-0000000042","product":"credit_loan","amount":5000000,"priority":"high"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeRequest(body); err != nil {
			b.Fatal(err)
		}
	}
}
