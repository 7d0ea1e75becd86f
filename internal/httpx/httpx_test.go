package httpx

import (
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func TestJSON(t *testing.T) {
	for _, tc := range []struct {
		name   string
		write  func(http.ResponseWriter, int, any)
		v      any
		status int
		body   string
	}{
		{"compact", JSON, map[string]any{"a": 1, "b": "<x>"}, 202, `{"a":1,"b":"\u003cx\u003e"}` + "\n"},
		{"indented", Indent, map[string]int{"a": 1}, 200, "{\n  \"a\": 1\n}\n"},
		{"not encodable", JSON, math.Inf(1), 200, ""},
	} {
		rec := httptest.NewRecorder()
		tc.write(rec, tc.status, tc.v)
		res := rec.Result()
		body, _ := io.ReadAll(res.Body)
		if tc.body == "" {
			if res.StatusCode != 500 || res.Header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("%s: %d %q, want a 500 problem", tc.name, res.StatusCode, res.Header.Get("Content-Type"))
			}
			continue
		}
		if res.StatusCode != tc.status || string(body) != tc.body || res.Header.Get("Content-Type") != "application/json" ||
			res.Header.Get("Content-Length") != strconv.Itoa(len(tc.body)) {
			t.Errorf("%s: %d %q %v, want %d %q", tc.name, res.StatusCode, body, res.Header, tc.status, tc.body)
		}
	}
}

func TestStatusWriter(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler func(w http.ResponseWriter)
		want    int
		started bool
	}{
		{"nothing written", func(w http.ResponseWriter) {}, 200, false},
		{"a body only", func(w http.ResponseWriter) { _, _ = w.Write([]byte("x")) }, 200, true},
		{"a status", func(w http.ResponseWriter) { w.WriteHeader(418) }, 418, true},
		{"the first status counts", func(w http.ResponseWriter) { w.WriteHeader(503); w.WriteHeader(200) }, 503, true},
	} {
		sw := &StatusWriter{ResponseWriter: httptest.NewRecorder()}
		tc.handler(sw)
		if sw.Status() != tc.want || sw.Started() != tc.started {
			t.Errorf("%s: status %d started %v, want %d %v", tc.name, sw.Status(), sw.Started(), tc.want, tc.started)
		}
	}
}

// A panic before the answer began is a 500 problem; after, the answer is
// cut off (the client sees no complete answer); ErrAbortHandler passes
// through untold; every other panic is told once.
func TestContain(t *testing.T) {
	var mu sync.Mutex
	var told []string
	h := Contain(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/before":
			panic("boom")
		case "/after":
			w.WriteHeader(200)
			_, _ = w.Write([]byte("partial"))
			panic(errors.New("late"))
		case "/abort":
			panic(http.ErrAbortHandler)
		}
		_, _ = io.WriteString(w, "ok")
	}), func(v any, r *http.Request) { mu.Lock(); told = append(told, r.URL.Path); mu.Unlock() })
	srv := httptest.NewServer(h)
	defer srv.Close()
	srv.Config.ErrorLog = nil
	// A new connection for each request: the client retries a GET whose
	// reused connection closed without an answer.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path string) (int, string, error) {
		res, err := hc.Get(srv.URL + path)
		if err != nil {
			return 0, "", err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return res.StatusCode, string(b), err
	}
	if code, body, err := get("/"); err != nil || code != 200 || body != "ok" {
		t.Fatalf("plain: %d %q %v", code, body, err)
	}
	if code, body, err := get("/before"); err != nil || code != 500 || !strings.Contains(body, "problems/internal") {
		t.Fatalf("panic before the answer: %d %q %v, want a 500 problem", code, body, err)
	}
	if code, _, err := get("/after"); err == nil && code == 200 {
		// The status line went out; the body must be cut (an error reading it).
		t.Fatalf("panic after the answer began: the answer completed")
	}
	if _, _, err := get("/abort"); err == nil {
		t.Fatalf("ErrAbortHandler: the answer completed")
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(told, " ") != "/before /after" {
		t.Fatalf("told %v, want /before /after", told)
	}
}

// TestEchoCall: the router's call number comes back on every answer, the
// handler's own and a recovered panic's; anything but a short decimal
// does not.
func TestEchoCall(t *testing.T) {
	h := EchoCall(Contain(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			panic("a bug")
		}
		w.WriteHeader(http.StatusAccepted)
	}), func(any, *http.Request) {}))
	for _, tc := range []struct {
		path string
		sent []string
		want string
	}{
		{"/", []string{"42"}, "42"},
		{"/", []string{"18446744073709551615"}, "18446744073709551615"},
		{"/panic", []string{"7"}, "7"},
		{"/", nil, ""},
		{"/", []string{"123456789012345678901"}, ""},
		{"/", []string{"4 2"}, ""},
		{"/", []string{"-1"}, ""},
		{"/", []string{""}, ""},
		{"/", []string{"1", "2"}, ""},
	} {
		req := httptest.NewRequest("GET", tc.path, nil)
		req.Header["Cellkit-Call"] = tc.sent
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if got := rec.Result().Header.Values("Cellkit-Call"); strings.Join(got, ",") != tc.want || len(got) > 1 {
			t.Errorf("%s with %q: echoed %q, want %q", tc.path, tc.sent, got, tc.want)
		}
	}
}
