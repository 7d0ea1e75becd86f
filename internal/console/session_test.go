package console_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/console"
	"github.com/cellkit/cellkit/internal/testkit"
)

// clockConsole serves a console on a map of one cell, on clock.
func clockConsole(t *testing.T, clock *testkit.Clock, cfg console.Config) (*console.Console, *httptest.Server) {
	t.Helper()
	reg := celltest.NewRegistry(t, map[string]int{"nice": 80}, celltest.TestCell("c1"))
	cfg.Token, cfg.TrustedAdmin = token, adminURLs(reg.Map())
	con, err := console.New(cfg, console.Options{Registry: reg.Reg, Admin: adminclient.Client{HTTP: &http.Client{}}, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	con.Collect(testkit.Context(t, 10*time.Second))
	srv := httptest.NewServer(con.Handler())
	t.Cleanup(srv.Close)
	return con, srv
}

// from is a client whose connections come from ip (any of 127/8 on
// loopback), following no redirect.
func from(t *testing.T, ip string) *http.Client {
	t.Helper()
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, CheckRedirect: noRedirect.CheckRedirect, Timeout: 10 * time.Second}
}

// call sends method path to srv from hc with the headers given as name,
// value; it returns the status, Retry-After and body.
func call(t *testing.T, hc *http.Client, srv *httptest.Server, method, path, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// signIn opens a session with ?token= and returns its cookie header.
func signIn(t *testing.T, hc *http.Client, srv *httptest.Server) string {
	t.Helper()
	resp, body := call(t, hc, srv, http.MethodGet, "/?token="+url.QueryEscape(token), "")
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Fatalf("sign in: %d %s", resp.StatusCode, body)
	}
	ck := resp.Cookies()[0]
	return ck.Name + "=" + ck.Value
}

// stream opens /api/events with cookie and reads its first view; the
// channel is closed when the stream ends.
func stream(t *testing.T, srv *httptest.Server, cookie string) <-chan struct{} {
	t.Helper()
	req, _ := http.NewRequestWithContext(testkit.Context(t, 20*time.Second), http.MethodGet, srv.URL+"/api/events", nil)
	req.Header.Set("Cookie", cookie)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the event stream: %v %v", resp, err)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	viewed := false
	for !viewed && sc.Scan() {
		viewed = strings.HasPrefix(sc.Text(), "data: ")
	}
	if !viewed {
		t.Fatalf("the event stream ended before its first view: %v", sc.Err())
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body) // until the console ends the stream
	}()
	return ended
}

func endsWithin(t *testing.T, ended <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Errorf("%s: the event stream is still open after 5 s", what)
	}
}

// TestSessionsExpireAndEnd: a session lasts SessionTTL from sign-in, then
// the cookie gets 401 and its event stream ends; Sign out (POST /logout)
// ends a session and its stream at once, takes the cookie back, and
// leaves the other sessions alone.
func TestSessionsExpireAndEnd(t *testing.T) {
	clock := testkit.NewClock(time.Now())
	con, srv := clockConsole(t, clock, console.Config{SessionTTL: time.Hour})
	hc := from(t, "127.0.0.1")

	a := signIn(t, hc, srv)
	clock.Advance(59 * time.Minute)
	if resp, body := call(t, hc, srv, http.MethodGet, "/api/view", "", "Cookie", a); resp.StatusCode != http.StatusOK {
		t.Fatalf("a session 59 min old: %d %.200s", resp.StatusCode, body)
	}
	streamA := stream(t, srv, a)
	clock.Advance(time.Minute)
	if resp, body := call(t, hc, srv, http.MethodGet, "/api/view", "", "Cookie", a); resp.StatusCode != http.StatusUnauthorized ||
		!strings.Contains(body, "ended or expired") {
		t.Errorf("a session 1 h old (its TTL): %d %.200s", resp.StatusCode, body)
	}
	if resp, body := call(t, hc, srv, http.MethodGet, "/", "", "Cookie", a); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "needs its token") {
		t.Errorf("the page with an expired session: %d", resp.StatusCode)
	}
	con.Collect(testkit.Context(t, 10*time.Second)) // a new view: the expired stream must not get it
	endsWithin(t, streamA, "an expired session")

	b, c := signIn(t, hc, srv), signIn(t, hc, srv)
	streamB := stream(t, srv, b)
	resp, _ := call(t, hc, srv, http.MethodPost, "/logout", "", "Cookie", b)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" || len(resp.Cookies()) != 1 || resp.Cookies()[0].MaxAge >= 0 {
		t.Errorf("POST /logout: %d to %q, cookies %+v", resp.StatusCode, resp.Header.Get("Location"), resp.Cookies())
	}
	endsWithin(t, streamB, "a session signed out")
	if resp, _ := call(t, hc, srv, http.MethodGet, "/api/view", "", "Cookie", b); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a session signed out: %d, want 401", resp.StatusCode)
	}
	if resp, _ := call(t, hc, srv, http.MethodGet, "/api/view", "", "Cookie", c); resp.StatusCode != http.StatusOK {
		t.Errorf("another session after one signed out: %d, want 200", resp.StatusCode)
	}
}

// TestSignInAttemptsAreLimited: wrong tokens — bearer, ?token=, the
// sign-in form alike — spend the client's budget; then even the right
// token gets 429 with Retry-After and is not compared, until the budget
// refills; a session already open, and another client, are not held up;
// many clients together spend everyone's budget; and wrong tokens sent in
// parallel get no more compared than the budget.
func TestSignInAttemptsAreLimited(t *testing.T) {
	clock := testkit.NewClock(time.Now())
	_, srv := clockConsole(t, clock, console.Config{SignInBurst: 3, SignInEvery: 10 * time.Second})
	one := from(t, "127.0.0.1")
	session := signIn(t, one, srv)
	form := "application/x-www-form-urlencoded"
	for _, try := range []func() *http.Response{
		func() *http.Response {
			r, _ := call(t, one, srv, http.MethodGet, "/api/view", "", "Authorization", "Bearer wrong-1")
			return r
		},
		func() *http.Response { r, _ := call(t, one, srv, http.MethodGet, "/?token=wrong-2", ""); return r },
		func() *http.Response {
			r, _ := call(t, one, srv, http.MethodPost, "/login", "token=wrong-3", "Content-Type", form)
			return r
		},
	} {
		if resp := try(); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a wrong token within the budget: %d, want 401", resp.StatusCode)
		}
	}
	for name, try := range map[string]func() (*http.Response, string){
		"bearer": func() (*http.Response, string) {
			return call(t, one, srv, http.MethodGet, "/api/view", "", "Authorization", "Bearer "+token)
		},
		"?token=": func() (*http.Response, string) { return call(t, one, srv, http.MethodGet, "/?token="+token, "") },
		"form": func() (*http.Response, string) {
			return call(t, one, srv, http.MethodPost, "/login", "token="+url.QueryEscape(token), "Content-Type", form)
		},
	} {
		resp, body := try()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "10" ||
			!strings.Contains(body, "rate-limited") || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
			t.Errorf("the right token by %s with the budget spent: %d Retry-After %q %.200s, want a 429 problem", name, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}
	if resp, _ := call(t, one, srv, http.MethodGet, "/api/view", "", "Cookie", session); resp.StatusCode != http.StatusOK {
		t.Errorf("a session with its client's budget spent: %d, want 200", resp.StatusCode)
	}
	if resp, _ := call(t, from(t, "127.0.0.2"), srv, http.MethodGet, "/api/view", "", "Authorization", "Bearer "+token); resp.StatusCode != http.StatusOK {
		t.Errorf("another client: %d, want 200", resp.StatusCode)
	}
	clock.Advance(10 * time.Second)
	if resp, _ := call(t, one, srv, http.MethodGet, "/api/view", "", "Authorization", "Bearer "+token); resp.StatusCode != http.StatusOK {
		t.Errorf("the right token once the budget refilled: %d, want 200", resp.StatusCode)
	}

	// Everyone's budget (ten times a client's): clients of 3 wrong
	// tokens each, until a client that tried nothing yet is refused.
	var spent int
	for i := 10; i < 40 && spent < 40; i++ {
		hc := from(t, "127.0.0."+strconv.Itoa(i))
		for range 3 {
			if resp, _ := call(t, hc, srv, http.MethodGet, "/api/view", "", "Authorization", "Bearer wrong"); resp.StatusCode == http.StatusUnauthorized {
				spent++
			}
		}
	}
	if spent > 30 {
		t.Errorf("%d wrong tokens compared from many clients, everyone's budget is 30", spent)
	}
	if resp, _ := call(t, from(t, "127.0.0.99"), srv, http.MethodGet, "/api/view", "", "Authorization", "Bearer "+token); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a new client with everyone's budget spent: %d, want 429", resp.StatusCode)
	}

	// In parallel, from a client of a fresh console: the budget, no more.
	_, fresh := clockConsole(t, clock, console.Config{SignInBurst: 3, SignInEvery: 10 * time.Second})
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, fresh.URL+"/api/view", nil)
			req.Header.Set("Authorization", "Bearer wrong")
			code := 0
			if resp, err := one.Do(req); err == nil {
				code = resp.StatusCode
				resp.Body.Close()
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if codes[http.StatusUnauthorized] != 3 || codes[http.StatusTooManyRequests] != 37 {
		t.Errorf("40 wrong tokens at once: %v, want 3 compared (401), 37 refused (429)", codes)
	}
}
