package intake

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/queue"
	"github.com/cellkit/cellkit/internal/shed"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/store"
)

func TestNewRequiresACellIDAndStartsClosed(t *testing.T) {
	if _, err := New(Config{}, Options{}); err == nil {
		t.Fatal("New without a cell id succeeded")
	}
	e := newEnv(t)
	e.maps.Set(testMapOf(t, nil, "c1"))
	c := e.cell(cellOpts{closed: true})
	if c.h.IsOpen() {
		t.Fatal("a new intake is open before Open")
	}
	c.wantShed(t, c.post(t, request("u-1"), nil), "intake-closed", "5")
	c.wantStored(t, 0, 0, 0)
}

func TestPostAcceptsStoresAndQueues(t *testing.T) {
	e := newEnv(t)
	m := testMapOf(t, nil, "c1", "c2")
	e.maps.Set(m)
	c := e.cell(cellOpts{})
	u := userOf(t, m, "c1", "u-", 0)

	a := c.accept(t, request(u), nil)
	c.wantStored(t, 1, 1, 0)
	if got := c.sh.Mark().All; got != 1 {
		t.Errorf("shedder counted %d accepted inquiries, want 1", got)
	}

	// The record is readable by GET, as it was stored.
	v := c.view(t, a.ID)
	if !v.CreatedAt.Equal(e.clk.Now()) || !v.UpdatedAt.Equal(e.clk.Now()) {
		t.Errorf("timestamps %v %v, want the intake's clock %v", v.CreatedAt, v.UpdatedAt, e.clk.Now())
	}
	v.CreatedAt, v.UpdatedAt = time.Time{}, time.Time{}
	want := inquiry.View{ID: a.ID, Cell: "c1", Status: inquiry.Pending, UserID: u, Product: "credit_loan", Amount: 5_000_000, Priority: inquiry.High}
	if v.Result != nil || v.CompletedAt != nil || v.ID != want.ID || v.Cell != want.Cell || v.Status != want.Status ||
		v.UserID != want.UserID || v.Product != want.Product || v.Amount != want.Amount || v.Priority != want.Priority ||
		v.Attempts != 0 || v.Reason != "" || v.DeadLetter {
		t.Fatalf("view %+v, want %+v", v, want)
	}

	// The message on the high lane names the record's current job.
	rec, _, ok := c.record(t, a.ID)
	if !ok {
		t.Fatal("accepted record not in the store")
	}
	wantReq := inquiry.Request{UserID: u, Product: "credit_loan", Amount: 5_000_000, Priority: inquiry.High}
	if rec.Job == "" || rec.Fingerprint != inquiry.Fingerprint(wantReq) || rec.Status != inquiry.Pending {
		t.Errorf("record %+v", rec)
	}
	msg, body, ok := c.fetch(t, inquiry.High)
	if !ok {
		t.Fatal("no message on the high lane")
	}
	if body != (queue.Message{ID: a.ID, Job: rec.Job}) || msg.Subject() != store.LedgerSubject("c1", store.KindNew, inquiry.High, a.ID) {
		t.Fatalf("work %+v on %s, want %s job %s", body, msg.Subject(), a.ID, rec.Job)
	}

	// Normal and default priorities go to the normal lane.
	normal := request(userOf(t, m, "c1", "u-", 1))
	normal["priority"] = "normal"
	c.accept(t, normal, nil)
	dflt := request(userOf(t, m, "c1", "u-", 2))
	delete(dflt, "priority")
	d := c.accept(t, dflt, nil)
	if v := c.view(t, d.ID); v.Priority != inquiry.Normal {
		t.Errorf("no priority stored as %q, want normal", v.Priority)
	}
	c.wantStored(t, 3, 1, 2)
	if _, body, ok := c.fetch(t, inquiry.Normal); !ok || body.ID == a.ID {
		t.Fatalf("normal lane message %+v, %v", body, ok)
	}

	if got := testutil.ToFloat64(c.h.m.requests.WithLabelValues("post", "202")); got != 3 {
		t.Errorf("requests_total{post,202} = %v, want 3", got)
	}
	if got := testutil.ToFloat64(c.h.m.requests.WithLabelValues("get", "200")); got != 2 {
		t.Errorf("requests_total{get,200} = %v, want 2", got)
	}
}

func TestPostRejectsInvalidRequests(t *testing.T) {
	e := newEnv(t)
	e.maps.Set(testMapOf(t, nil, "c1"))
	c := e.cell(cellOpts{})
	obj := func(fields string) string { return `{` + fields + `}` }
	const ok = `"user_id":"u-1","product":"credit_loan","amount":100`
	cases := []struct {
		name  string
		body  string
		kind  string
		field string
	}{
		{"user_id missing", obj(`"product":"p","amount":1`), "invalid-field", "user_id"},
		{"user_id empty", obj(`"user_id":"","product":"p","amount":1`), "invalid-field", "user_id"},
		{"user_id null", obj(`"user_id":null,"product":"p","amount":1`), "invalid-field", "user_id"},
		{"user_id 65 characters", obj(`"user_id":"` + strings.Repeat("u", 65) + `","product":"p","amount":1`), "invalid-field", "user_id"},
		{"user_id with a dot", obj(`"user_id":"u.1","product":"p","amount":1`), "invalid-field", "user_id"},
		{"user_id with a space", obj(`"user_id":"u 1","product":"p","amount":1`), "invalid-field", "user_id"},
		{"user_id with a slash", obj(`"user_id":"u/1","product":"p","amount":1`), "invalid-field", "user_id"},
		{"user_id not ASCII", obj(`"user_id":"ü","product":"p","amount":1`), "invalid-field", "user_id"},
		{"user_id a number", obj(`"user_id":7,"product":"p","amount":1`), "invalid-field", "user_id"},
		{"product missing", obj(`"user_id":"u","amount":1`), "invalid-field", "product"},
		{"product empty", obj(`"user_id":"u","product":"","amount":1`), "invalid-field", "product"},
		{"product 33 characters", obj(`"user_id":"u","product":"` + strings.Repeat("p", 33) + `","amount":1`), "invalid-field", "product"},
		{"product upper case", obj(`"user_id":"u","product":"Loan","amount":1`), "invalid-field", "product"},
		{"product with a hyphen", obj(`"user_id":"u","product":"credit-loan","amount":1`), "invalid-field", "product"},
		{"product a number", obj(`"user_id":"u","product":5,"amount":1`), "invalid-field", "product"},
		{"amount missing", obj(`"user_id":"u","product":"p"`), "invalid-field", "amount"},
		{"amount null", obj(`"user_id":"u","product":"p","amount":null`), "invalid-field", "amount"},
		{"amount zero", obj(`"user_id":"u","product":"p","amount":0`), "invalid-field", "amount"},
		{"amount negative", obj(`"user_id":"u","product":"p","amount":-5`), "invalid-field", "amount"},
		{"amount over 10^12", obj(`"user_id":"u","product":"p","amount":1000000000001`), "invalid-field", "amount"},
		{"amount over int64", obj(`"user_id":"u","product":"p","amount":9223372036854775808`), "invalid-field", "amount"},
		{"amount with a fraction", obj(`"user_id":"u","product":"p","amount":1.5`), "invalid-field", "amount"},
		{"amount with an exponent", obj(`"user_id":"u","product":"p","amount":1e3`), "invalid-field", "amount"},
		{"amount a string", obj(`"user_id":"u","product":"p","amount":"100"`), "invalid-field", "amount"},
		{"amount a boolean", obj(`"user_id":"u","product":"p","amount":true`), "invalid-field", "amount"},
		{"priority unknown", obj(ok + `,"priority":"urgent"`), "invalid-field", "priority"},
		{"priority upper case", obj(ok + `,"priority":"HIGH"`), "invalid-field", "priority"},
		{"priority a number", obj(ok + `,"priority":1`), "invalid-field", "priority"},
		{"callback_url ftp", obj(ok + `,"callback_url":"ftp://example.com/cb"`), "invalid-field", "callback_url"},
		{"callback_url relative", obj(ok + `,"callback_url":"/cb"`), "invalid-field", "callback_url"},
		{"callback_url not a URL", obj(ok + `,"callback_url":"not a url"`), "invalid-field", "callback_url"},
		{"callback_url without a host", obj(ok + `,"callback_url":"http://"`), "invalid-field", "callback_url"},
		{"callback_url with credentials", obj(ok + `,"callback_url":"https://user:pw@example.com/cb"`), "invalid-field", "callback_url"},
		{"callback_url over 2048 bytes", obj(ok + `,"callback_url":"https://example.com/` + strings.Repeat("a", 2048) + `"`), "invalid-field", "callback_url"},
		{"callback_url a number", obj(ok + `,"callback_url":5`), "invalid-field", "callback_url"},
		{"unknown field", obj(ok + `,"extra":1`), "invalid-field", "extra"},
		{"body null", `null`, "invalid-field", "user_id"},
		{"truncated JSON", `{"user_id":`, "invalid-json", ""},
		{"not JSON", `user_id=u`, "invalid-json", ""},
		{"an array", `[1]`, "invalid-json", ""},
		{"a string", `"u-1"`, "invalid-json", ""},
		{"empty body", ``, "invalid-json", ""},
		{"data after the object", obj(ok) + ` {}`, "invalid-json", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := c.wantProblem(t, c.post(t, tc.body, nil), http.StatusBadRequest, tc.kind, tc.field)
			if tc.field != "" && !strings.HasPrefix(p.Detail, tc.field+": ") {
				t.Errorf("detail %q does not start with the field", p.Detail)
			}
			c.wantStored(t, 0, 0, 0)
		})
	}
	if got := testutil.ToFloat64(c.h.m.requests.WithLabelValues("post", "400")); got != float64(len(cases)) {
		t.Errorf("requests_total{post,400} = %v, want %d", got, len(cases))
	}
}

func TestPostAcceptsBoundaryValues(t *testing.T) {
	e := newEnv(t)
	e.maps.Set(testMapOf(t, nil, "c1")) // c1 owns every user
	c := e.cell(cellOpts{})
	long := "https://example.com/" + strings.Repeat("a", inquiry.MaxCallbackURL-len("https://example.com/"))
	high := 0
	for i, tc := range []struct {
		name string
		body string
		want inquiry.Request
	}{
		{"user_id of 64 characters", `{"user_id":"` + strings.Repeat("aZ09_-", 10) + `abcd","product":"p","amount":1}`,
			inquiry.Request{UserID: strings.Repeat("aZ09_-", 10) + "abcd", Product: "p", Amount: 1, Priority: inquiry.Normal}},
		{"user_id of 1 character", `{"user_id":"x","product":"p","amount":1,"priority":"high"}`,
			inquiry.Request{UserID: "x", Product: "p", Amount: 1, Priority: inquiry.High}},
		{"product of 32 characters", `{"user_id":"u","product":"` + strings.Repeat("a_0", 10) + `zz","amount":7}`,
			inquiry.Request{UserID: "u", Product: strings.Repeat("a_0", 10) + "zz", Amount: 7, Priority: inquiry.Normal}},
		{"amount 10^12", `{"user_id":"u","product":"p","amount":1000000000000,"priority":"normal"}`,
			inquiry.Request{UserID: "u", Product: "p", Amount: inquiry.MaxAmount, Priority: inquiry.Normal}},
		{"priority null", `{"user_id":"u","product":"p","amount":2,"priority":null}`,
			inquiry.Request{UserID: "u", Product: "p", Amount: 2, Priority: inquiry.Normal}},
		{"priority empty", `{"user_id":"u","product":"p","amount":3,"priority":""}`,
			inquiry.Request{UserID: "u", Product: "p", Amount: 3, Priority: inquiry.Normal}},
		{"callback_url https", `{"user_id":"u","product":"p","amount":4,"callback_url":"https://example.com/cb?x=1"}`,
			inquiry.Request{UserID: "u", Product: "p", Amount: 4, Priority: inquiry.Normal, CallbackURL: "https://example.com/cb?x=1"}},
		{"callback_url of 2048 bytes", `{"user_id":"u","product":"p","amount":5,"callback_url":"` + long + `"}`,
			inquiry.Request{UserID: "u", Product: "p", Amount: 5, Priority: inquiry.Normal, CallbackURL: long}},
		{"callback_url null", `{"user_id":"u","product":"p","amount":6,"callback_url":null}`,
			inquiry.Request{UserID: "u", Product: "p", Amount: 6, Priority: inquiry.Normal}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := c.accept(t, tc.body, nil)
			rec, _, ok := c.record(t, a.ID)
			if !ok {
				t.Fatal("no record")
			}
			got := inquiry.Request{UserID: rec.UserID, Product: rec.Product, Amount: rec.Amount, Priority: rec.Priority, CallbackURL: rec.CallbackURL}
			if got != tc.want || rec.Fingerprint != inquiry.Fingerprint(tc.want) {
				t.Fatalf("stored %+v, want %+v", got, tc.want)
			}
			if tc.want.Priority == inquiry.High {
				high++
			}
			c.wantStored(t, i+1, high, i+1-high)
		})
	}
}

func TestPostContentType(t *testing.T) {
	e := newEnv(t)
	e.maps.Set(testMapOf(t, nil, "c1"))
	c := e.cell(cellOpts{})
	accepted := 0
	for _, tc := range []struct {
		ct string
		ok bool
	}{
		{"-", false},
		{"text/plain", false},
		{"text/json", false},
		{"application/x-www-form-urlencoded", false},
		{"multipart/form-data; boundary=x", false},
		{"application/jsonx", false},
		{"application/json+xml", false},
		{"json", false},
		{"application/json; charset", false},
		{"application/json", true},
		{"application/json; charset=utf-8", true},
		{"Application/JSON", true},
		{"application/vnd.cellkit.inquiry+json", true},
	} {
		t.Run(tc.ct, func(t *testing.T) {
			r := c.post(t, request(fmt.Sprintf("ct-%d", accepted)), map[string]string{"Content-Type": tc.ct})
			if tc.ok {
				c.wantAccepted(t, r, inquiry.Pending, false)
				accepted++
			} else {
				p := c.wantProblem(t, r, http.StatusUnsupportedMediaType, "unsupported-media-type", "Content-Type")
				if !strings.Contains(p.Detail, "application/json") {
					t.Errorf("detail %q does not say what to send", p.Detail)
				}
			}
			c.wantStored(t, accepted, accepted, 0)
		})
	}
}

func TestPostBodyLimit(t *testing.T) {
	e := newEnv(t)
	e.maps.Set(testMapOf(t, nil, "c1"))
	c := e.cell(cellOpts{})
	pad := func(n int) string {
		b, _ := json.Marshal(request("big"))
		return string(b) + strings.Repeat(" ", n-len(b))
	}
	// Exactly the limit is taken.
	c.accept(t, pad(inquiry.MaxBodyBytes), nil)
	c.wantStored(t, 1, 1, 0)
	for _, tc := range []struct {
		name string
		body any
	}{
		{"one byte over, with Content-Length", pad(inquiry.MaxBodyBytes + 1)},
		{"one byte over, chunked", struct{ io.Reader }{strings.NewReader(pad(inquiry.MaxBodyBytes + 1))}},
		{"1 MiB, with Content-Length", pad(1 << 20)},
		{"1 MiB, chunked", struct{ io.Reader }{strings.NewReader(pad(1 << 20))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := c.wantProblem(t, c.post(t, tc.body, map[string]string{"Idempotency-Key": "big-" + tc.name}), http.StatusRequestEntityTooLarge, "body-too-large", "")
			if !strings.Contains(p.Detail, strconv.Itoa(inquiry.MaxBodyBytes)) {
				t.Errorf("detail %q does not name the limit", p.Detail)
			}
			c.wantStored(t, 1, 1, 0)
		})
	}
}

func TestMethodsAndPaths(t *testing.T) {
	e := newEnv(t)
	e.maps.Set(testMapOf(t, nil, "c1"))
	c := e.cell(cellOpts{})
	byID := prefixByID + inquiry.NewID("c1", 0)
	for _, tc := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{http.MethodGet, api.PathInquiries, 405, "POST"},
		{http.MethodPut, api.PathInquiries, 405, "POST"},
		{http.MethodDelete, api.PathInquiries, 405, "POST"},
		{http.MethodPatch, api.PathInquiries, 405, "POST"},
		{http.MethodHead, api.PathInquiries, 405, "POST"},
		{http.MethodPost, byID, 405, "GET, HEAD"},
		{http.MethodPut, byID, 405, "GET, HEAD"},
		{http.MethodDelete, byID, 405, "GET, HEAD"},
		{http.MethodPost, prefixByID, 405, "GET, HEAD"},
		{http.MethodGet, "/", 404, ""},
		{http.MethodGet, "/v2/inquiries", 404, ""},
		{http.MethodPost, "/v1/inquiriesx", 404, ""},
		{http.MethodPost, "/v1/inquiry", 404, ""},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			var body any
			if tc.method != http.MethodGet && tc.method != http.MethodHead {
				body = request("u-1")
			}
			r := c.do(t, tc.method, tc.path, body, nil)
			if got := r.header.Get("Allow"); got != tc.allow {
				t.Errorf("Allow %q, want %q", got, tc.allow)
			}
			switch {
			case tc.method == http.MethodHead:
				if r.status != tc.status || len(r.body) != 0 {
					t.Fatalf("HEAD = %s, want %d without a body", r, tc.status)
				}
			case tc.status == 405:
				c.wantProblem(t, r, tc.status, "method-not-allowed", "")
			default:
				c.wantProblem(t, r, tc.status, "not-found", "")
			}
			c.wantStored(t, 0, 0, 0)
		})
	}
}

func TestGet(t *testing.T) {
	e := newEnv(t)
	m := testMapOf(t, nil, "c1", "c2")
	e.maps.Set(m)
	c := e.cell(cellOpts{})
	a := c.accept(t, request(userOf(t, m, "c1", "g-", 0)), nil)

	if v := c.view(t, a.ID); v.ID != a.ID || v.Status != inquiry.Pending {
		t.Fatalf("view %+v", v)
	}
	head := c.do(t, http.MethodHead, a.StatusURL, nil, nil)
	if head.status != http.StatusOK || head.header.Get("Content-Type") != "application/json" || len(head.body) != 0 {
		t.Fatalf("HEAD = %s", head)
	}

	unknown := inquiry.NewID("c1", 0)
	p := c.wantProblem(t, c.get(t, unknown), http.StatusNotFound, "unknown-inquiry", "")
	if !strings.Contains(p.Detail, unknown) {
		t.Errorf("404 detail %q does not name the id", p.Detail)
	}
	if r := c.do(t, http.MethodHead, prefixByID+unknown, nil, nil); r.status != http.StatusNotFound {
		t.Errorf("HEAD of an unknown id = %d", r.status)
	}

	zeros := strings.Repeat("0", 20)
	for _, id := range []string{
		"", "nope", "c1", "c1-", "-" + zeros, "c1-abc", "c1-" + zeros + "0", "c1-" + zeros[1:],
		"c1-" + strings.Repeat("A", 20), "c1-" + strings.Repeat("w", 20), "c1-" + zeros[:19] + "_",
		"C1-" + zeros, "c_1-" + zeros, "c1--" + zeros, strings.Repeat("c", 33) + "-" + zeros,
	} {
		t.Run("malformed "+id, func(t *testing.T) {
			c.wantProblem(t, c.get(t, id), http.StatusBadRequest, "invalid-id", "id")
		})
	}
	// An id holding the slot names its inquiry whatever cell it names.
	if r := c.get(t, "cx"+a.ID[2:]); r.status != http.StatusOK || !strings.Contains(string(r.body), a.ID) {
		t.Errorf("GET of %s under another cell's name = %d %s, want %s", a.ID, r.status, r.body, a.ID)
	}
	for _, id := range []string{"c2-" + zeros, "c10-" + zeros, "cell-with-dashes-" + zeros} {
		t.Run("other cell "+id, func(t *testing.T) {
			cell, _ := inquiry.CellOf(id)
			p := c.wantProblem(t, c.get(t, id), http.StatusMisdirectedRequest, "misdirected", "id")
			if !strings.Contains(p.Detail, "belongs to cell "+cell) {
				t.Errorf("421 detail %q does not name cell %s", p.Detail, cell)
			}
		})
	}
	c.wantStored(t, 1, 1, 0)
}

func TestIdempotencyKey(t *testing.T) {
	e := newEnv(t)
	e.maps.Set(testMapOf(t, nil, "c1"))
	c := e.cell(cellOpts{})
	key := map[string]string{api.HeaderIdemKey: "order-42"}

	a := c.accept(t, request("u-1"), key)
	if want := keyID("c1", "u-1", "order-42"); a.ID != want {
		t.Fatalf("keyed id %s, want %s", a.ID, want)
	}
	first, _, _ := c.record(t, a.ID)
	c.wantStored(t, 1, 1, 0)

	// Retries: the same id, replayed, and no second message or record.
	for range 3 {
		r := c.wantAccepted(t, c.post(t, request("u-1"), key), inquiry.Pending, true)
		if r != a {
			t.Fatalf("retry answered %+v, want %+v", r, a)
		}
		c.wantStored(t, 1, 1, 0)
	}
	if rec, _, _ := c.record(t, a.ID); rec.Job != first.Job || rec.Fingerprint != first.Fingerprint {
		t.Fatalf("a retry changed the job or the request: %+v, was %+v", rec, first)
	}
	// The same request spelled differently (the default priority written
	// out, fields reordered) is the same request.
	k2 := map[string]string{api.HeaderIdemKey: "order-44"}
	b := c.accept(t, `{"user_id":"u-1","product":"credit_loan","amount":7}`, k2)
	same := `{"priority":"normal","amount":7,"product":"credit_loan","user_id":"u-1"}`
	if r := c.wantAccepted(t, c.post(t, same, k2), inquiry.Pending, true); r != b {
		t.Fatalf("equivalent body answered %+v, want %+v", r, b)
	}
	c.wantStored(t, 2, 1, 1)
	if got := c.sh.Mark().All; got != 2 {
		t.Errorf("shedder counted %d accepted, want 2 (retries accept nothing)", got)
	}

	// The key with another body is refused.
	for _, change := range []func(map[string]any){
		func(b map[string]any) { b["amount"] = 5_000_001 },
		func(b map[string]any) { b["priority"] = "normal" },
		func(b map[string]any) { b["product"] = "other" },
		func(b map[string]any) { b["callback_url"] = "https://example.com/cb" },
	} {
		body := request("u-1")
		change(body)
		p := c.wantProblem(t, c.post(t, body, key), http.StatusUnprocessableEntity, "idempotency-key-reused", api.HeaderIdemKey)
		if !strings.Contains(p.Detail, a.ID) {
			t.Errorf("422 detail %q does not name the inquiry", p.Detail)
		}
	}
	c.wantStored(t, 2, 1, 1)

	// Keys are per user; another key is another inquiry; no key, a new one
	// every time.
	other := c.accept(t, request("u-2"), key)
	if other.ID != keyID("c1", "u-2", "order-42") || other.ID == a.ID {
		t.Fatalf("same key, another user: id %s", other.ID)
	}
	if n := c.accept(t, request("u-1"), map[string]string{api.HeaderIdemKey: "order-43"}); n.ID == a.ID {
		t.Fatal("another key gave the same id")
	}
	x, y := c.accept(t, request("u-1"), nil), c.accept(t, request("u-1"), nil)
	if x.ID == y.ID || x.ID == a.ID {
		t.Fatalf("unkeyed posts share an id: %s %s", x.ID, y.ID)
	}
	c.wantStored(t, 6, 5, 1)

	// Key syntax: 1–255 printable ASCII characters.
	for _, tc := range []struct {
		name, key string
		ok        bool
	}{
		{"empty", "", false},
		{"256 characters", strings.Repeat("k", 256), false},
		{"with a tab", "a\tb", false},
		{"not ASCII", "ключ", false},
		{"255 characters", strings.Repeat("k", 255), true},
		{"one character", "k", true},
		{"printable punctuation", `a b~!"#$%&'()*+,-./:;<=>?@[\]^_{|}`, true},
	} {
		t.Run("key "+tc.name, func(t *testing.T) {
			before := len(c.keys(t))
			r := c.post(t, request("u-3"), map[string]string{api.HeaderIdemKey: tc.key})
			if !tc.ok {
				c.wantProblem(t, r, http.StatusBadRequest, "invalid-header", api.HeaderIdemKey)
				if n := len(c.keys(t)); n != before {
					t.Fatalf("%d records after a bad key, want %d", n, before)
				}
				return
			}
			if got := c.wantAccepted(t, r, inquiry.Pending, false); got.ID != keyID("c1", "u-3", tc.key) {
				t.Fatalf("id %s, want the key's", got.ID)
			}
		})
	}
}

func TestIdempotentReplayOfAFinishedInquiryEnqueuesNothing(t *testing.T) {
	e := newEnv(t)
	e.maps.Set(testMapOf(t, nil, "c1"))
	c := e.cell(cellOpts{})
	key := map[string]string{api.HeaderIdemKey: "k"}
	a := c.accept(t, request("u-1"), key)

	// A worker takes the message and finishes the inquiry.
	msg, _, ok := c.fetch(t, inquiry.High)
	if !ok {
		t.Fatal("no message")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := msg.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	rec, ref, _ := c.record(t, a.ID)
	rec.Complete(inquiry.Result{Scores: map[string]int{"nice": 500}, RateBps: 1500, Limit: 1000, CoreRef: "X"}, e.clk.Now())
	if _, err := c.q.Update(ctx, &rec, ref); err != nil {
		t.Fatal(err)
	}
	c.wantStored(t, 1, 0, 0)

	r := c.wantAccepted(t, c.post(t, request("u-1"), key), inquiry.Done, true)
	if r.ID != a.ID || r.Cell != "c1" {
		t.Fatalf("replay %+v, want %s", r, a.ID)
	}
	c.wantStored(t, 1, 0, 0)
	if v := c.view(t, a.ID); v.Status != inquiry.Done || v.Result == nil || v.Result.CoreRef != "X" {
		t.Fatalf("view after replay %+v", v)
	}
}

// A keyed retry of an inquiry whose first attempt died between the record
// and the message (the process was killed) queues the message: the
// records layout's half state (the ledger has none).
func TestIdempotentReplayQueuesAMissingMessage(t *testing.T) {
	e := newEnv(t)
	e.maps.Set(testMapOf(t, nil, "c1"))
	c := e.cell(cellOpts{queue: queue.Config{Layout: queue.LayoutRecords}})
	r := inquiry.Request{UserID: "u-1", Product: "credit_loan", Amount: 5_000_000, Priority: inquiry.High}
	rec := inquiry.NewRecord(keyID("c1", "u-1", "k"), "c1", r, e.clk.Now())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.st.Create(ctx, &rec); err != nil {
		t.Fatal(err)
	}
	c.wantStored(t, 1, 0, 0)

	a := c.wantAccepted(t, c.post(t, request("u-1"), map[string]string{api.HeaderIdemKey: "k"}), inquiry.Pending, true)
	if a.ID != rec.ID {
		t.Fatalf("id %s, want %s", a.ID, rec.ID)
	}
	c.wantStored(t, 1, 1, 0)
	if _, msg, ok := c.fetch(t, inquiry.High); !ok || msg != (queue.Message{ID: rec.ID, Job: rec.Job}) {
		t.Fatalf("message %+v, want the record's job %s", msg, rec.Job)
	}
	// Another retry publishes the same job again: the duplicate window
	// keeps one message.
	c.wantAccepted(t, c.post(t, request("u-1"), map[string]string{api.HeaderIdemKey: "k"}), inquiry.Pending, true)
	c.wantStored(t, 1, 1, 0)
}

// A keyed retry re-publishes the pending inquiry's job; the stream's
// duplicate window must not be all that stands between it and a second
// message.
func TestKeyedRetryAfterTheDuplicateWindowEnqueuesNothing(t *testing.T) {
	e := newEnv(t)
	e.maps.Set(testMapOf(t, nil, "c1"))
	c := e.cell(cellOpts{queue: queue.Config{Duplicates: 200 * time.Millisecond}})
	key := map[string]string{api.HeaderIdemKey: "k"}
	a := c.accept(t, request("u-1"), key)
	time.Sleep(300 * time.Millisecond) // past the window; the message is still queued
	if r := c.wantAccepted(t, c.post(t, request("u-1"), key), inquiry.Pending, true); r.ID != a.ID {
		t.Fatalf("id %s, want %s", r.ID, a.ID)
	}
	c.wantStored(t, 1, 1, 0)
}

func TestIdempotencyKeyConcurrentPosts(t *testing.T) {
	e := newEnv(t)
	e.maps.Set(testMapOf(t, nil, "c1"))
	c := e.cell(cellOpts{})
	want := keyID("c1", "u-1", "same")
	body, _ := json.Marshal(request("u-1"))
	type result struct {
		status int
		body   string
		retry  string
		err    error
	}
	results := make(chan result, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			req, err := http.NewRequest(http.MethodPost, c.url+api.PathInquiries, strings.NewReader(string(body)))
			if err != nil {
				results <- result{err: err}
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(api.HeaderIdemKey, "same")
			resp, err := c.ts.Client().Do(req)
			if err != nil {
				results <- result{err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			results <- result{status: resp.StatusCode, body: string(b), retry: resp.Header.Get("Retry-After"), err: err}
		})
	}
	wg.Wait()
	close(results)
	accepted := 0
	for r := range results {
		switch {
		case r.err != nil:
			t.Fatal(r.err)
		case r.status == http.StatusAccepted:
			var a Accepted
			if err := json.Unmarshal([]byte(r.body), &a); err != nil || a.ID != want {
				t.Fatalf("concurrent post answered %s, want id %s", r.body, want)
			}
			accepted++
		case r.status == http.StatusServiceUnavailable && r.retry != "":
			// Allowed: nothing accepted, retry later.
		default:
			t.Fatalf("concurrent post answered %d %s", r.status, r.body)
		}
	}
	if accepted == 0 {
		t.Fatal("no concurrent post was accepted")
	}
	c.wantStored(t, 1, 1, 0)
	if a := c.wantAccepted(t, c.post(t, request("u-1"), map[string]string{api.HeaderIdemKey: "same"}), inquiry.Pending, true); a.ID != want {
		t.Fatalf("retry after the race: %s", a.ID)
	}
	c.wantStored(t, 1, 1, 0)
}

func TestShedding(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cfg        shed.Config
		prime      func(t *testing.T, c *testCell) // ends with the shedder saying no
		reason     shed.Reason
		retryAfter string
	}{
		{
			name: "oldest pending over the age budget",
			cfg:  shed.Config{LaneBlind: true, MaxAge: 10 * time.Second, MaxDepth: 100},
			prime: func(t *testing.T, c *testCell) {
				now := c.e.clk.Now()
				c.sh.Observe(shed.Sample{Depth: 3, Oldest: now.Add(-5 * time.Second), At: now, Mark: c.sh.Mark()})
				c.accept(t, request("u-0"), nil) // 5 s old: within budget
				c.e.clk.Advance(6 * time.Second) // 11 s old
			},
			reason: "age", retryAfter: "10", // no drain rate yet: the cap, MaxAge
		},
		{
			name: "depth limit, counting what was accepted since the sample",
			cfg:  shed.Config{LaneBlind: true, MaxDepth: 100, MaxRetryAfter: 3 * time.Second},
			prime: func(t *testing.T, c *testCell) {
				c.sh.Observe(shed.Sample{Depth: 99, At: c.e.clk.Now(), Mark: c.sh.Mark()})
				c.accept(t, request("u-0"), nil) // 99 queued: room for one
			},
			reason: "depth", retryAfter: "3", // MaxRetryAfter
		},
		{
			name: "backlog would take longer than the budget to drain",
			cfg:  shed.Config{LaneBlind: true, MaxAge: 10 * time.Second, MaxDepth: 100},
			prime: func(t *testing.T, c *testCell) {
				c.sh.Observe(shed.Sample{Depth: 45, At: c.e.clk.Now(), Mark: c.sh.Mark()})
				c.accept(t, request("u-0"), nil) // no drain rate known yet
				c.e.clk.Advance(time.Second)
				c.sh.Drained(5) // 5/s: 45 queued take 9 s > 80% of 10 s
				c.sh.Observe(shed.Sample{Depth: 45, At: c.e.clk.Now(), Mark: c.sh.Mark()})
			},
			reason: "wait", retryAfter: "9", // 45 ÷ 5/s
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.maps.Set(testMapOf(t, nil, "c1"))
			c := e.cell(cellOpts{shed: tc.cfg})
			tc.prime(t, c)
			c.wantStored(t, 1, 1, 0)
			if d := c.sh.Admit(inquiry.Normal); d.OK || d.Reason != tc.reason {
				t.Fatalf("shedder says %+v, want a refusal for %s", d, tc.reason)
			}

			key := map[string]string{api.HeaderIdemKey: "shed-me"}
			id := keyID("c1", "u-1", "shed-me")
			for _, r := range []response{
				c.post(t, request("u-1"), nil),
				c.post(t, request("u-1"), key),
				c.post(t, `{"user_id":`, nil), // answered before the body is read
			} {
				p := c.wantShed(t, r, "overloaded", tc.retryAfter)
				if !strings.Contains(p.Detail, "cell c1 is overloaded") {
					t.Errorf("detail %q", p.Detail)
				}
			}
			c.wantStored(t, 1, 1, 0)
			if _, _, found := c.record(t, id); found {
				t.Fatal("a shed keyed request left a record")
			}
			if got := testutil.ToFloat64(c.h.m.shed.WithLabelValues(string(tc.reason))); got != 3 {
				t.Errorf("shed_total{%s} = %v, want 3", tc.reason, got)
			}

			// The queue drained: the same key is taken, as a new inquiry.
			c.sh.Observe(shed.Sample{Depth: 0, At: e.clk.Now(), Mark: c.sh.Mark()})
			if a := c.accept(t, request("u-1"), key); a.ID != id {
				t.Fatalf("id %s, want %s", a.ID, id)
			}
			c.wantStored(t, 2, 2, 0)
		})
	}
}

func TestClosedIntake(t *testing.T) {
	e := newEnv(t)
	m := testMapOf(t, nil, "c1", "c2")
	e.maps.Set(m)
	c := e.cell(cellOpts{closed: true, intake: Config{ClosedRetryAfter: 7 * time.Second}})
	own, other := userOf(t, m, "c1", "u-", 0), userOf(t, m, "c2", "u-", 0)

	p := c.wantShed(t, c.post(t, request(own), nil), "intake-closed", "7")
	if !strings.Contains(p.Detail, "not taking new inquiries") {
		t.Errorf("detail %q", p.Detail)
	}
	c.wantStored(t, 0, 0, 0)

	c.h.Open()
	if !c.h.IsOpen() || testutil.ToFloat64(c.h.m.open) != 1 {
		t.Fatal("Open did not open the intake")
	}
	a := c.accept(t, request(own), nil)

	c.h.Close()
	if c.h.IsOpen() || testutil.ToFloat64(c.h.m.open) != 0 {
		t.Fatal("Close did not close the intake")
	}
	key := map[string]string{api.HeaderIdemKey: "closed"}
	c.wantShed(t, c.post(t, request(own), nil), "intake-closed", "7")
	c.wantShed(t, c.post(t, request(own), key), "intake-closed", "7")
	if _, _, found := c.record(t, keyID("c1", own, "closed")); found {
		t.Fatal("a keyed request to a closed intake left a record")
	}
	// A closed intake still reads the body first, and sends users it does
	// not own to their cell (a drain: the router retries there).
	c.wantProblem(t, c.post(t, `{"user_id":`, nil), http.StatusBadRequest, "invalid-json", "")
	r := c.post(t, request(other), nil)
	c.wantProblem(t, r, http.StatusMisdirectedRequest, "misdirected", api.HeaderMapVersion)
	if got := r.header.Get(api.HeaderMapVersion); got != strconv.FormatInt(m.Version(), 10) {
		t.Errorf("421 %s %q, want %d", api.HeaderMapVersion, got, m.Version())
	}
	c.wantStored(t, 1, 1, 0)
	if got := testutil.ToFloat64(c.h.m.shed.WithLabelValues("closed")); got != 3 {
		t.Errorf("shed_total{closed} = %v, want 3", got)
	}

	// Status reads still work.
	if v := c.view(t, a.ID); v.ID != a.ID || v.Status != inquiry.Pending {
		t.Fatalf("view with the intake closed: %+v", v)
	}
	c.wantProblem(t, c.get(t, inquiry.NewID("c1", 0)), http.StatusNotFound, "unknown-inquiry", "")

	c.h.Open()
	c.accept(t, request(own), key)
	c.wantStored(t, 2, 2, 0)
}

// TestFencing: a cell takes only the users it owns in its newest map,
// unless the caller knows a newer one. One piece: one cell's maps, in
// the order a move brings them.
func TestFencing(t *testing.T) {
	e := newEnv(t)
	m := testMapOf(t, nil, "c1", "c2")
	e.maps.Set(m)
	c := e.cell(cellOpts{})
	own, other := userOf(t, m, "c1", "f-", 0), userOf(t, m, "c2", "f-", 0)
	v := m.Version()
	ver := func(n int64) string { return strconv.FormatInt(n, 10) }
	slot := func(u string) string { return strconv.Itoa(m.SlotOf(u)) }

	accepted := 0
	for _, tc := range []struct {
		name    string
		user    string
		headers map[string]string
		status  int
		kind    string
		field   string
	}{
		{"own user, no headers", own, nil, 202, "", ""},
		{"own user, same map", own, map[string]string{api.HeaderMapVersion: ver(v), api.HeaderSlot: slot(own)}, 202, "", ""},
		{"own user, older router map", own, map[string]string{api.HeaderMapVersion: ver(v - 1)}, 202, "", ""},
		{"own user, newer router map", own, map[string]string{api.HeaderMapVersion: ver(v + 7)}, 202, "", ""},
		{"own user, last slot", own, map[string]string{api.HeaderSlot: "63"}, 202, "", ""},
		{"other user, no headers", other, nil, 421, "misdirected", api.HeaderMapVersion},
		{"other user, same map", other, map[string]string{api.HeaderMapVersion: ver(v), api.HeaderSlot: slot(other)}, 421, "misdirected", api.HeaderMapVersion},
		{"other user, older router map", other, map[string]string{api.HeaderMapVersion: ver(v - 1)}, 421, "misdirected", api.HeaderMapVersion},
		{"other user, newer router map", other, map[string]string{api.HeaderMapVersion: ver(v + 1)}, 202, "", ""},
		{"map version not a number", own, map[string]string{api.HeaderMapVersion: "x"}, 400, "invalid-header", api.HeaderMapVersion},
		{"map version zero", own, map[string]string{api.HeaderMapVersion: "0"}, 400, "invalid-header", api.HeaderMapVersion},
		{"map version negative", own, map[string]string{api.HeaderMapVersion: "-3"}, 400, "invalid-header", api.HeaderMapVersion},
		{"map version fraction", own, map[string]string{api.HeaderMapVersion: "1.5"}, 400, "invalid-header", api.HeaderMapVersion},
		{"slot negative", own, map[string]string{api.HeaderSlot: "-1"}, 400, "invalid-header", api.HeaderSlot},
		{"slot past the last", own, map[string]string{api.HeaderSlot: "64"}, 400, "invalid-header", api.HeaderSlot},
		{"slot not a number", own, map[string]string{api.HeaderSlot: "x"}, 400, "invalid-header", api.HeaderSlot},
		{"bad slot with a newer map", other, map[string]string{api.HeaderMapVersion: ver(v + 1), api.HeaderSlot: "99999"}, 400, "invalid-header", api.HeaderSlot},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := c.post(t, request(tc.user), tc.headers)
			if tc.status == 202 {
				c.wantAccepted(t, r, inquiry.Pending, false)
				accepted++
				c.wantStored(t, accepted, accepted, 0)
				return
			}
			c.wantProblem(t, r, tc.status, tc.kind, tc.field)
			if tc.status == 421 {
				if got := r.header.Get(api.HeaderMapVersion); got != ver(v) {
					t.Errorf("421 %s %q, want %d", api.HeaderMapVersion, got, v)
				}
			}
			c.wantStored(t, accepted, accepted, 0)
		})
	}
	if got := testutil.ToFloat64(c.h.m.misdirected); got != 3 {
		t.Errorf("misdirected_total = %v, want 3", got)
	}

	// A newer map in which this cell no longer owns the user: a router
	// that still has the old map is sent back to refresh it.
	p, err := m.Drain("c1")
	if err != nil {
		t.Fatal(err)
	}
	m2 := p.After
	e.maps.Set(m2)
	for _, h := range []map[string]string{nil, {api.HeaderMapVersion: ver(v)}, {api.HeaderMapVersion: ver(v + 1)}} {
		r := c.post(t, request(own), h)
		pb := c.wantProblem(t, r, http.StatusMisdirectedRequest, "misdirected", api.HeaderMapVersion)
		if got := r.header.Get(api.HeaderMapVersion); got != ver(v+1) {
			t.Errorf("421 %s %q, want the cell's %d", api.HeaderMapVersion, got, v+1)
		}
		want := fmt.Sprintf("cell c1 does not own slot %d in map version %d (owner: c2)", m2.SlotOf(own), v+1)
		if !strings.Contains(pb.Detail, want) {
			t.Errorf("detail %q, want it to say %q", pb.Detail, want)
		}
	}
	c.wantStored(t, accepted, accepted, 0)
	c.accept(t, request(own), map[string]string{api.HeaderMapVersion: ver(v + 2)}) // a router ahead of the cell
	accepted++
	c.wantStored(t, accepted, accepted, 0)

	// Ownership is by user: pins are honoured both ways.
	p, err = m.SetOverride(other, "c1")
	if err != nil {
		t.Fatal(err)
	}
	p, err = p.After.SetOverride(own, "c2")
	if err != nil {
		t.Fatal(err)
	}
	e.maps.Set(p.After)
	c.accept(t, request(other), nil)
	accepted++
	c.wantProblem(t, c.post(t, request(own), nil), http.StatusMisdirectedRequest, "misdirected", api.HeaderMapVersion)
	c.wantStored(t, accepted, accepted, 0)

	// A map with no active cell: 421 naming no owner.
	empty, err := slotmap.New(64, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.maps.Set(empty)
	pb := c.wantProblem(t, c.post(t, request(own), nil), http.StatusMisdirectedRequest, "misdirected", api.HeaderMapVersion)
	if !strings.Contains(pb.Detail, "owner: no active cell") {
		t.Errorf("detail %q", pb.Detail)
	}
	c.wantStored(t, accepted, accepted, 0)
}

func TestNoMapYet(t *testing.T) {
	e := newEnv(t)
	c := e.cell(cellOpts{}) // e.maps holds nothing
	for _, h := range []map[string]string{nil, {api.HeaderMapVersion: "5"}, {api.HeaderIdemKey: "k"}} {
		p := c.wantShed(t, c.post(t, request("u-1"), h), "intake-closed", "5")
		if !strings.Contains(p.Detail, "no cell map yet") {
			t.Errorf("detail %q", p.Detail)
		}
	}
	c.wantStored(t, 0, 0, 0)
	// Status reads need no map.
	c.wantProblem(t, c.get(t, inquiry.NewID("c1", 0)), http.StatusNotFound, "unknown-inquiry", "")
}

func TestQueueUnavailable(t *testing.T) {
	e := newEnv(t)
	e.maps.Set(testMapOf(t, nil, "c1"))
	c := e.cell(cellOpts{})
	a := c.accept(t, request("u-1"), nil)
	observer := e.cell(cellOpts{closed: true}) // another connection to the same streams

	c.nc.Close()
	// One accepted and no drain rate yet: Retry-After is the cap (60 s).
	c.wantShed(t, c.post(t, request("u-2"), nil), "queue-unavailable", "60")
	c.wantShed(t, c.post(t, request("u-2"), map[string]string{api.HeaderIdemKey: "k"}), "queue-unavailable", "60")
	c.wantShed(t, c.post(t, `{"user_id":`, nil), "queue-unavailable", "60") // at once, before the body is read
	r := c.get(t, a.ID)
	c.wantProblem(t, r, http.StatusServiceUnavailable, "store-unavailable", "")
	if got := r.header.Get("Retry-After"); got != "1" {
		t.Errorf("GET Retry-After %q, want 1", got)
	}
	observer.wantStored(t, 1, 1, 0)
	if got := testutil.ToFloat64(c.h.m.shed.WithLabelValues("nats")); got != 3 {
		t.Errorf("shed_total{nats} = %v, want 3", got)
	}
}

func TestQueueFull(t *testing.T) {
	e := newEnv(t)
	e.maps.Set(testMapOf(t, nil, "c1"))
	c := e.cell(cellOpts{queue: queue.Config{MaxMsgs: 1}})
	c.accept(t, request("u-1"), nil)
	c.wantStored(t, 1, 1, 0) // the queue's depth read, as the cell's sampler does
	key := map[string]string{api.HeaderIdemKey: "k"}
	id := keyID("c1", "u-2", "k")

	// One queued, the shedder given no sample: Retry-After is the cap (60 s default).
	p := c.wantShed(t, c.post(t, request("u-2"), key), "queue-full", "60")
	if !strings.Contains(p.Detail, "queue is full") {
		t.Errorf("detail %q", p.Detail)
	}
	if _, _, found := c.record(t, id); found {
		t.Fatal("the record of a refused inquiry was kept")
	}
	c.wantProblem(t, c.get(t, id), http.StatusNotFound, "unknown-inquiry", "")
	c.wantStored(t, 1, 1, 0)
	if got := testutil.ToFloat64(c.h.m.shed.WithLabelValues("full")); got != 1 {
		t.Errorf("shed_total{full} = %v, want 1", got)
	}

	// Once a worker took the message, the retry is accepted under its key.
	msg, _, ok := c.fetch(t, inquiry.High)
	if !ok {
		t.Fatal("no message")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := msg.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	c.wantStored(t, 1, 0, 0)
	if a := c.accept(t, request("u-2"), key); a.ID != id {
		t.Fatalf("retry id %s, want %s", a.ID, id)
	}
	c.wantStored(t, 2, 1, 0)
}

// moveSetup has cells c1 and c2 on one NATS, with user u owned by c2 in the
// first map and by c1 after c2 is drained (its data not moved: the
// intake's part alone).
func moveSetup(t *testing.T) (e *env, c1, c2 *testCell, u string, after *slotmap.Map) {
	e = newEnv(t)
	c1 = e.cell(cellOpts{id: "c1"})
	c2 = e.cell(cellOpts{id: "c2"})
	before := testMapOf(t, map[string]string{"c1": c1.url, "c2": c2.url}, "c1", "c2")
	e.maps.Set(before)
	u = userOf(t, before, "c2", "m-", 0)
	p, err := before.Drain("c2")
	if err != nil {
		t.Fatal(err)
	}
	after = p.After
	if after.Lookup(u).Cell != "c1" {
		t.Fatalf("user %s not moved to c1", u)
	}
	return e, c1, c2, u, after
}

// TestInquiryBelongsToItsClient: an inquiry is read only by the client
// that created it (Cellkit-Client, set by the router); another client's
// read is a 404 like an unknown id. It holds after the user's slot moved
// to another cell whose data stayed where it was made: read there through
// the user's new cell.
func TestInquiryBelongsToItsClient(t *testing.T) {
	e, c1, c2, u, after := moveSetup(t)
	alice := map[string]string{api.HeaderClient: "alice"}
	bob := map[string]string{api.HeaderClient: "bob"}
	a := c2.accept(t, request(u), map[string]string{api.HeaderClient: "alice", api.HeaderIdemKey: "k1"})
	plain := c2.accept(t, request(u), alice)
	if rec, _, _ := c2.record(t, plain.ID); rec.Client != "alice" {
		t.Fatalf("record client %q, want alice", rec.Client)
	}
	read := func(c *testCell, id string, hdr map[string]string) int {
		return c.do(t, http.MethodGet, prefixByID+id, nil, hdr).status
	}
	for _, id := range []string{a.ID, plain.ID} {
		if s := read(c2, id, alice); s != http.StatusOK {
			t.Errorf("alice reading her %s: %d", id, s)
		}
		r := c2.do(t, http.MethodGet, prefixByID+id, nil, bob)
		c2.wantProblem(t, r, http.StatusNotFound, "unknown-inquiry", "")
		if s := read(c2, id, nil); s != http.StatusOK {
			t.Errorf("a caller naming no client reading %s: %d", id, s)
		}
	}
	c2.wantProblem(t, c2.do(t, http.MethodGet, prefixByID+a.ID, nil, map[string]string{api.HeaderClient: "bad client"}),
		http.StatusBadRequest, "invalid-header", api.HeaderClient)

	// The user moves to c1, the records stay in c2: read through c1 by
	// alice only.
	e.maps.Set(after)
	e.clk.Advance(time.Minute)
	if s := read(c1, a.ID, alice); s != http.StatusOK {
		t.Errorf("alice reading after the move: %d", s)
	}
	if s := read(c1, a.ID, bob); s != http.StatusNotFound {
		t.Errorf("bob reading after the move: %d", s)
	}
	// Bob's retry with alice's key is not alice's inquiry: a new one, his.
	v := strconv.FormatInt(after.Version(), 10)
	nb := c1.accept(t, request(u), map[string]string{api.HeaderClient: "bob", api.HeaderIdemKey: "k1", api.HeaderMapVersion: v})
	if nb.ID == a.ID || nb.Cell != "c1" {
		t.Fatalf("bob's keyed retry got %+v; want a new inquiry at c1, not alice's %s", nb, a.ID)
	}
}

// TestLanes: the router's Cellkit-Priority decides the lane, before the
// body is read and over the body's priority; the normal lane is shed while
// the high lane still has room.
func TestLanes(t *testing.T) {
	e := newEnv(t)
	e.maps.Set(testMapOf(t, nil, "c1"))
	c := e.cell(cellOpts{shed: shed.Config{MaxAge: 10 * time.Second, MaxDepth: 100, HighReserve: 0.25}})
	high, normal := map[string]string{api.HeaderPriority: "high"}, map[string]string{api.HeaderPriority: "normal"}

	// The router's lane wins over the body's, both ways.
	a := c.accept(t, request("u-1"), normal) // the body says high
	if rec, _, _ := c.record(t, a.ID); rec.Priority != inquiry.Normal {
		t.Fatalf("body high, router normal: stored %q", rec.Priority)
	}
	body := request("u-2")
	delete(body, "priority")
	a = c.accept(t, body, high)
	if rec, _, _ := c.record(t, a.ID); rec.Priority != inquiry.High {
		t.Fatalf("no priority in the body, router high: stored %q", rec.Priority)
	}
	a = c.accept(t, request("u-3"), nil)
	if rec, _, _ := c.record(t, a.ID); rec.Priority != inquiry.High {
		t.Fatalf("no router lane: stored %q, want the body's high", rec.Priority)
	}
	for _, bad := range []string{"urgent", "HIGH", ""} {
		c.wantProblem(t, c.post(t, request("u-4"), map[string]string{api.HeaderPriority: bad}), http.StatusBadRequest, "invalid-header", api.HeaderPriority)
	}

	// 80 queued of 100: the normal lane may fill 75, high the rest.
	c.sh.Observe(shed.Sample{Depth: 80, At: e.clk.Now(), Mark: c.sh.Mark()})
	p := c.wantShed(t, c.post(t, `{"user_id":`, normal), "overloaded", "10") // shed before the body is read
	if !strings.Contains(p.Detail, "normal inquiry") {
		t.Errorf("detail %q, want the lane named", p.Detail)
	}
	c.wantShed(t, c.post(t, request("u-5"), nil), "overloaded", "10") // no router lane: shed as normal
	a = c.accept(t, request("u-6"), high)
	if rec, _, _ := c.record(t, a.ID); rec.Priority != inquiry.High {
		t.Fatalf("stored %q, want high", rec.Priority)
	}
	for lane, want := range map[string]float64{"normal": 2, "high": 0} {
		if got := testutil.ToFloat64(c.h.m.laneShed.WithLabelValues(lane)); got != want {
			t.Errorf("lane_shed_total{%s} = %v, want %v", lane, got, want)
		}
	}
	for lane, want := range map[string]float64{"normal": 1, "high": 3} {
		if got := testutil.ToFloat64(c.h.m.laneTaken.WithLabelValues(lane)); got != want {
			t.Errorf("lane_accepted_total{%s} = %v, want %v", lane, got, want)
		}
	}
}
