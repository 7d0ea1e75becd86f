package router

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The standing adversarial suite: what a hostile client can send on a raw
// socket, by class. Each case checks what the client got and what the
// cell received (nothing, for a refused request).

// refusedAtHead checks that rc got status, that the connection then
// closes, and that the cell was not called.
func refusedAtHead(t *testing.T, w *world, rc *rawConn, method string, status int) {
	t.Helper()
	resp, body := rc.read(method)
	if resp.StatusCode != status {
		t.Fatalf("status %d %s; want %d", resp.StatusCode, body, status)
	}
	if !resp.Close {
		t.Errorf("the answer does not say Connection: close")
	}
	if !rc.endsWithin(3 * time.Second) {
		t.Errorf("the connection stayed open after a %d", status)
	}
	for id, b := range w.backends {
		if n := b.calls.Load(); n != 0 {
			t.Errorf("cell %s was called %d times", id, n)
		}
	}
}

// endsWithin says whether the router ends the connection within d, by a
// close or a reset (a client that kept sending may see the latter).
func (rc *rawConn) endsWithin(d time.Duration) bool {
	rc.c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, rc.br)
	var ne net.Error
	return !errors.As(err, &ne) || !ne.Timeout()
}

// TestAuthIsDecidedFromTheHead: a request without a valid key is answered
// and its connection closed from the head alone, before any of its body
// arrives, whatever the body's framing says.
func TestAuthIsDecidedFromTheHead(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}})
	for _, tc := range []struct {
		name, key, framing string
		status             int
	}{
		{"no key, a length", "", "Content-Length: 60000\r\n", 401},
		{"unknown key, a length", "ck_nope", "Content-Length: 60000\r\n", 403},
		{"no key, chunked", "", "Transfer-Encoding: chunked\r\n", 401},
		{"no key, a length over the limit", "", "Content-Length: 99999999\r\n", 401},
		{"no key, waiting for 100 Continue", "", "Expect: 100-continue\r\nContent-Length: 100\r\n", 401},
		{"no key, no body", "", "", 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := w.dial()
			head := "POST /v1/inquiries HTTP/1.1\r\nHost: router.test\r\nContent-Type: application/json\r\n" + tc.framing
			if tc.key != "" {
				head += "X-API-Key: " + tc.key + "\r\n"
			}
			rc.send(head + "\r\n") // and not a byte of the body
			start := time.Now()
			refusedAtHead(t, w, rc, "POST", tc.status)
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("answered after %v", d)
			}
		})
	}
}

// TestChunkExtensionAmplification: 1-byte chunks with 4000-byte
// extensions. Without a key the body is never read; with one, the framing
// is refused once it outweighs the data, and the router has read a
// bounded number of bytes.
func TestChunkExtensionAmplification(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}})
	chunk := "1;" + strings.Repeat("e", 4000) + "\r\nx\r\n"
	body := strings.Repeat(chunk, 200) // 800 KB for 200 bytes of data

	t.Run("without a key", func(t *testing.T) {
		rc := w.dial()
		rc.send("POST /v1/inquiries HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
		go rc.c.Write([]byte(body)) // the router reads away at most a bounded amount, then closes
		refusedAtHead(t, w, rc, "POST", 401)
	})
	t.Run("with a key", func(t *testing.T) {
		rc := w.dial()
		rc.send(postHead(w.key, "Transfer-Encoding: chunked\r\n\r\n"))
		go rc.c.Write([]byte(body))
		start := time.Now()
		resp, text := rc.read("POST")
		if resp.StatusCode != 400 {
			t.Fatalf("status %d %s; want 400", resp.StatusCode, text)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("refused after %v", d)
		}
		if n := w.backends["c1"].calls.Load(); n != 0 {
			t.Errorf("the cell was called %d times", n)
		}
	})
}

// TestHostIsRequired: HTTP/1.1 needs one valid Host (RFC 9112 §3.2).
func TestHostIsRequired(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}})
	get := func(minor int, host string) string {
		return fmt.Sprintf("GET /v1/inquiries/c1-abc HTTP/1.%d\r\n%sX-API-Key: %s\r\n\r\n", minor, host, w.key)
	}
	for _, tc := range []struct {
		name, req string
		status    int
	}{
		{"none", get(1, ""), 400},
		{"a path", get(1, "Host: a/b\r\n"), 400},
		{"userinfo", get(1, "Host: u@a\r\n"), 400},
		{"two ports", get(1, "Host: a:1:2\r\n"), 400},
		{"a port not a number", get(1, "Host: a:x\r\n"), 400},
		{"an open bracket", get(1, "Host: [::1\r\n"), 400},
		{"two", get(1, "Host: a\r\nHost: b\r\n"), 400},
		{"a name", get(1, "Host: router.example:8080\r\n"), 200},
		{"an IPv6 literal", get(1, "Host: [::1]:8080\r\n"), 200},
		{"empty", get(1, "Host: \r\n"), 200},
		{"none in HTTP/1.0", get(0, ""), 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := w.backends["c1"].calls.Load()
			rc := w.dial()
			rc.send(tc.req)
			resp, body := rc.read("GET")
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d %s; want %d", resp.StatusCode, body, tc.status)
			}
			called := w.backends["c1"].calls.Load() - before
			if (tc.status == 200) != (called == 1) {
				t.Errorf("the cell was called %d times", called)
			}
		})
	}
}

// TestExpectations: an expectation other than 100-continue is 417 before
// the body; an HTTP/1.0 client never gets a 100 Continue.
func TestExpectations(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}})
	body := inquiryBody("u1")
	length := "Content-Length: " + strconv.Itoa(len(body)) + "\r\n"

	rc := w.dial()
	rc.send(postHead(w.key, "Expect: 200-ok\r\n"+length+"\r\n"))
	refusedAtHead(t, w, rc, "POST", 417)

	rc = w.dial()
	rc.send(strings.Replace(postHead(w.key, "Expect: 100-continue\r\n"+length+"\r\n"), "HTTP/1.1", "HTTP/1.0", 1))
	time.Sleep(100 * time.Millisecond) // room for a wrong 100 Continue to arrive first
	rc.send(body)
	resp, text := rc.read("POST")
	if resp.StatusCode != 202 {
		t.Fatalf("HTTP/1.0 with Expect: 100-continue: status %d %s; want 202 and no 100 first", resp.StatusCode, text)
	}
}

// TestInternalHeadersAreStripped: whatever a client claims in the
// router's and the cells' own fields, or in the fields other proxies use
// for the client's address, never reaches the cell.
func TestInternalHeadersAreStripped(t *testing.T) {
	w := newWorld(t, worldOptions{cells: []string{"c1"}})
	claims := []string{
		"Cellkit-Fingerprint", "Cellkit-Client", "Cellkit-Map-Version", "Cellkit-Slot", "Cellkit-Lane", "CELLKIT-ANYTHING",
		"X-Real-IP", "True-Client-IP", "X-Client-IP", "X-Forwarded-Port", "X-Forwarded-Server", "Forwarded",
	}
	var extra strings.Builder
	for _, c := range claims {
		extra.WriteString(c + ": 6.6.6.6\r\n")
	}
	extra.WriteString("X-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: https\r\nX-Custom: kept\r\n")
	body := inquiryBody("u1")
	rc := w.dial()
	rc.send(postHead(w.key, extra.String()+"Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n") + body)
	if resp, text := rc.read("POST"); resp.StatusCode != 202 {
		t.Fatalf("status %d %s", resp.StatusCode, text)
	}
	req, _ := w.backends["c1"].lastRequest()
	for name, vs := range req.Header {
		for _, v := range vs {
			if strings.Contains(v, "6.6.6.6") {
				t.Errorf("the cell got %s: %s", name, v)
			}
		}
	}
	if got := req.Header.Get("X-Forwarded-Proto"); got != "http" {
		t.Errorf("X-Forwarded-Proto %q, want the router's http", got)
	}
	if got := req.Header.Get("Cellkit-Client"); got != "platform-a" {
		t.Errorf("Cellkit-Client %q, want the router's platform-a", got)
	}
	if req.Header.Get("X-Custom") != "kept" {
		t.Errorf("an ordinary field was dropped: %v", req.Header)
	}
	if _, ok := req.Header[http.CanonicalHeaderKey("Cellkit-Fingerprint")]; ok {
		t.Errorf("Cellkit-Fingerprint reached the cell")
	}
}
