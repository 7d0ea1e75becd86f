package router

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/apikey"
	"github.com/cellkit/cellkit/internal/testkit"
)

// keysFile parses a keys file of entries given as client, key, rate, burst.
func keysFile(t *testing.T, entries ...any) *apikey.Keys {
	t.Helper()
	var parts []string
	for i := 0; i+4 <= len(entries); i += 4 {
		parts = append(parts, fmt.Sprintf(`{"client":%q,"key_sha256":%q,"rate":%v,"burst":%v}`,
			entries[i], apikey.Hash(entries[i+1].(string)), entries[i+2], entries[i+3]))
	}
	k, err := apikey.Parse([]byte("[" + strings.Join(parts, ",") + "]"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestSetKeysRevokesOnAKeptAliveConnection: a key SetKeys drops is refused
// from the next request on, on the connection its last good request used.
func TestSetKeysRevokesOnAKeptAliveConnection(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}})
	if a := w.create("u1"); a.status != 202 {
		t.Fatalf("before: %v", a)
	}
	if err := w.router.SetKeys(keysFile(t, "platform-a", "ck_new", 1e6, 1_000_000)); err != nil {
		t.Fatal(err)
	}
	// The same client, the same idle connection: it must be reused for the
	// test to mean anything.
	req, _ := http.NewRequest("POST", w.url+"/v1/inquiries", strings.NewReader(inquiryBody("u1")))
	req.Header.Set("X-API-Key", w.key)
	reused := false
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused },
	}))
	resp, err := w.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if !reused {
		t.Error("the request after SetKeys went on a new connection")
	}
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("revoked key: %d, want 403", resp.StatusCode)
	}
	if a := w.create("u1", "X-API-Key", "ck_new"); a.status != 202 {
		t.Errorf("new key: %v", a)
	}
	if got := len(w.router.Keys().Clients()); got != 1 {
		t.Errorf("Keys() has %d clients", got)
	}
}

// TestSetKeysKeepsRateLimits: a client in the old and the new keys keeps
// its bucket (a reload is no way to refill it), its limits follow the file,
// a new client starts full and a removed one's bucket and series go away.
func TestSetKeysKeepsRateLimits(t *testing.T) {
	clk := testkit.NewClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	w := newWorld(t, worldOptions{cells: []string{"c1"}, rate: 1, burst: 2, opts: Options{Now: clk.Now}})
	// One key more for platform-a, and a client to remove later.
	if err := w.router.SetKeys(keysFile(t, "platform-a", w.key, 1, 2, "platform-a", "ck_a2", 1, 2, "gone", "ck_gone", 1, 1)); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{202, 202, 429} {
		if a := w.create("u1"); a.status != want {
			t.Fatalf("request %d: %v, want %d", i, a, want)
		}
	}
	if a := w.create("u1", "X-API-Key", "ck_gone"); a.status != 202 {
		t.Fatalf("the other client: %v", a)
	}
	if a := w.create("u1", "X-API-Key", "ck_gone"); a.status != 429 {
		t.Fatalf("the other client over its limit: %v", a)
	}
	assertMetric(t, w, `cellkit_router_limited_total{client="gone"} 1`)

	// The same file again, with the second key: the bucket is still empty,
	// for either key of the client.
	if err := w.router.SetKeys(keysFile(t, "platform-a", w.key, 1, 2, "platform-a", "ck_a2", 1, 2, "gone", "ck_gone", 1, 1)); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{w.key, "ck_a2"} {
		if a := w.create("u1", "X-API-Key", key); a.status != 429 {
			t.Errorf("after a reload, key %s: %v, want 429 (the bucket kept)", key, a)
		}
	}
	// New limits for platform-a (5/s, burst 10): still empty now, 5 tokens
	// a second later; "gone" removed, "fresh" added with a full bucket.
	if err := w.router.SetKeys(keysFile(t, "platform-a", w.key, 5, 10, "fresh", "ck_fresh", 1, 3)); err != nil {
		t.Fatal(err)
	}
	if a := w.create("u1"); a.status != 429 || a.header.Get("X-RateLimit-Limit") != "10" {
		t.Errorf("new limits, no time passed: %v %v, want 429 with limit 10 (the new burst)", a, a.header)
	}
	clk.Advance(time.Second)
	for i := range 5 {
		if a := w.create("u1"); a.status != 202 {
			t.Fatalf("new limits, a second later, request %d: %v", i, a)
		}
	}
	if a := w.create("u1"); a.status != 429 {
		t.Errorf("the sixth request in that second: %v", a)
	}
	for i := range 3 {
		if a := w.create("u1", "X-API-Key", "ck_fresh"); a.status != 202 {
			t.Errorf("new client, request %d: %v", i, a)
		}
	}
	if a := w.create("u1", "X-API-Key", "ck_gone"); a.status != 403 {
		t.Errorf("removed client: %v", a)
	}
	if a := w.create("u1", "X-API-Key", "ck_a2"); a.status != 403 {
		t.Errorf("removed key: %v", a)
	}
	mfs, err := w.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range exposition(mfs) {
		if strings.Contains(line, `client="gone"`) {
			t.Errorf("a removed client's series is still exported: %s", line)
		}
	}
}

func TestSetKeysRefusesNoKeys(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}})
	for _, k := range []*apikey.Keys{nil, {}} {
		if err := w.router.SetKeys(k); err == nil {
			t.Errorf("SetKeys(%v) succeeded", k)
		}
	}
	if a := w.create("u1"); a.status != 202 {
		t.Errorf("after refused SetKeys: %v", a)
	}
}

// TestSetKeysWhileServing swaps keys under load: every answer is 202 or,
// for the key being rotated out, 403; nothing else, and no race.
func TestSetKeysWhileServing(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}})
	both := keysFile(t, "platform-a", w.key, 1e6, 1_000_000, "platform-a", "ck_b", 1e6, 1_000_000)
	one := keysFile(t, "platform-a", "ck_b", 1e6, 1_000_000)
	// ck_b is in every version from here on, before the swaps start.
	if err := w.router.SetKeys(both); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			k := both
			if i%2 == 1 {
				k = one
			}
			if err := w.router.SetKeys(k); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for n := 0; ; n++ {
		select {
		case <-done:
			if err := w.router.SetKeys(both); err != nil {
				t.Fatal(err)
			}
			if a := w.create("u1"); a.status != 202 {
				t.Errorf("after the swaps: %v", a)
			}
			return
		default:
		}
		if a := w.create("u1", "X-API-Key", "ck_b"); a.status != 202 {
			t.Fatalf("the key in every version: %v", a)
		}
		if a := w.create("u1"); a.status != 202 && a.status != 403 {
			t.Fatalf("the key being rotated: %v", a)
		}
	}
}

func TestKeyringIsAllocationFree(t *testing.T) {
	key := "ck_alloc"
	k := keysFile(t, "a", key, 1e9, 1_000_000_000)
	r := &Router{}
	r.keyring.Store(newKeyring(nil, k, time.Now))
	kb := []byte(key)
	if n := testing.AllocsPerRun(100, func() {
		kr := r.ring()
		c, _ := kr.keys.Authenticate(kb)
		kr.limits.Take(c)
	}); n != 0 {
		t.Errorf("authenticate and take allocate %.1f times", n)
	}
}

func BenchmarkAuthenticateAndTake(b *testing.B) {
	key, sum, _ := apikey.Generate()
	k, err := apikey.Parse([]byte(fmt.Sprintf(`[{"client":"a","key_sha256":%q,"rate":1e9,"burst":1000000000}]`, sum)))
	if err != nil {
		b.Fatal(err)
	}
	r := &Router{}
	r.keyring.Store(newKeyring(nil, k, time.Now))
	kb := []byte(key)
	b.ReportAllocs()
	for b.Loop() {
		kr := r.ring()
		c, _ := kr.keys.Authenticate(kb)
		kr.limits.Take(c)
	}
}

// TestLanesArePolicy: the lane a cell gets is the router's decision from
// the client's lanes, never the client's word: a priority the key may not
// use is refused before any cell sees it, and one it names none of gets
// the client's default.
func TestLanesArePolicy(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}})
	k, err := apikey.Parse([]byte(`[
		{"client":"platform-a","key_sha256":"` + apikey.Hash(w.key) + `","rate":1e6,"burst":1000000},
		{"client":"vip","key_sha256":"` + apikey.Hash("ck_vip") + `","rate":1e6,"burst":1000000,"lanes":["high","normal"],"default_lane":"high"}]`))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.router.SetKeys(k); err != nil {
		t.Fatal(err)
	}
	body := func(priority string) string {
		if priority == "" {
			return `{"user_id":"u1","product":"credit-line","amount":5000000}`
		}
		return `{"user_id":"u1","product":"credit-line","amount":5000000,"priority":` + priority + `}`
	}
	for _, tc := range []struct {
		name, key, body string
		status          int
		lane            string
	}{
		{"normal asks normal", w.key, body(`"normal"`), 202, "normal"},
		{"normal asks none", w.key, body(""), 202, "normal"},
		{"normal asks null", w.key, body("null"), 202, "normal"},
		{"normal asks high", w.key, body(`"high"`), 403, ""},
		{"normal asks high, folded", w.key, `{"user_id":"u1","PRIORITY":"high"}`, 403, ""},
		{"vip asks none", "ck_vip", body(""), 202, "high"},
		{"vip asks normal", "ck_vip", body(`"normal"`), 202, "normal"},
		{"vip asks high", "ck_vip", body(`"high"`), 202, "high"},
		{"not a lane: the default, for the cell to refuse", "ck_vip", body(`"urgent"`), 202, "high"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := w.backends["c1"].lastRequest()
			a := w.do("POST", "/v1/inquiries", tc.body, "X-API-Key", tc.key, "Cellkit-Priority", "high")
			if a.status != tc.status {
				t.Fatalf("status %d %s, want %d", a.status, a.body, tc.status)
			}
			req, _ := w.backends["c1"].lastRequest()
			if tc.status == 403 {
				if p := problemOf(t, a); p["type"] != "https://cellkit.dev/problems/lane-forbidden" || p["field"] != "priority" {
					t.Errorf("problem %v", p)
				}
				if req != before {
					t.Error("a refused request reached the cell")
				}
				return
			}
			if got := req.Header.Values("Cellkit-Priority"); len(got) != 1 || got[0] != tc.lane {
				t.Errorf("the cell got Cellkit-Priority %q, want %q", got, tc.lane)
			}
		})
	}
}
