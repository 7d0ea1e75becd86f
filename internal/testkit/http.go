package testkit

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"
)

// clientTimeout bounds a request sent with a nil client, so that a server
// that never answers fails the test instead of hanging it.
const clientTimeout = 10 * time.Second

// Response is an HTTP answer, read whole.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v.
func (r Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %q: %v", r.Body, err)
	}
}

// Problem is an RFC 9457 answer.
type Problem struct {
	Type, Title, Detail, Field string
	Status                     int
}

// Problem decodes a problem body, checking its content type.
func (r Response) Problem(t testing.TB) Problem {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("status %d with content type %q, want application/problem+json (body %q)", r.Status, ct, r.Body)
	}
	var p Problem
	r.JSON(t, &p)
	return p
}

// Do sends one request and reads the answer whole, failing the test if it
// cannot. body may be nil, []byte, string or a value to encode as JSON
// (then Content-Type is application/json unless headers set one). A nil
// client is http.DefaultTransport with a 10 s timeout.
func Do(t testing.TB, client *http.Client, method, url string, body any, headers map[string]string) Response {
	t.Helper()
	resp, err := Send(client, method, url, body, headers)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp
}

// DoJSON is Do without headers that decodes the answer's JSON body into out
// unless out is nil.
func DoJSON(t testing.TB, client *http.Client, method, url string, body, out any) Response {
	t.Helper()
	resp := Do(t, client, method, url, body, nil)
	if out != nil {
		if err := json.Unmarshal(resp.Body, out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, url, resp.Body, err)
		}
	}
	return resp
}

// Send is Do without a test, for load generators.
func Send(client *http.Client, method, url string, body any, headers map[string]string) (Response, error) {
	if client == nil {
		client = &http.Client{Timeout: clientTimeout}
	}
	var rd io.Reader
	jsonBody := false
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return Response{}, err
		}
		rd, jsonBody = bytes.NewReader(data), true
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return Response{}, err
	}
	if jsonBody {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return Response{}, err
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: data}, nil
}
