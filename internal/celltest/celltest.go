// Package celltest starts the real things a cell test needs — agency
// simulators over TCP and a file registry holding a cell map — and talks to
// a cell's HTTP APIs. It predicts every inquiry's result, and checks a load
// run like a queue checker: every accepted inquiry settled (lost = 0), none
// with two results (duplicated = 0).
package celltest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellkit/cellkit/internal/agencysim"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/natsembed"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/telegram"
)

// WaitFor polls cond every 5 ms until it holds, failing the test after d.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// StartSim serves a simulated agency on a free loopback port until the
// test ends.
func StartSim(t testing.TB, profile telegram.Profile, cfg agencysim.Config) *agencysim.Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := agencysim.New(cfg, agencysim.Options{Profile: profile, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	WaitFor(t, 5*time.Second, "the simulator to listen", func() bool { return srv.Addr() != nil })
	return srv
}

// SetSim changes a running simulator's configuration.
func SetSim(t testing.TB, sim *agencysim.Server, change func(*agencysim.Config)) {
	t.Helper()
	cfg := sim.Config()
	change(&cfg)
	if err := sim.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
}

// Registry is a file registry in a test's temporary directory.
type Registry struct {
	t    testing.TB
	Path string
	Reg  registry.Registry
}

// NewRegistry writes the first map: the given agency limits and cells.
func NewRegistry(t testing.TB, agencies map[string]int, cells ...slotmap.Cell) *Registry {
	t.Helper()
	r := &Registry{t: t, Path: filepath.Join(t.TempDir(), "map.json")}
	var err error
	if r.Reg, err = registry.Open(registry.Config{URL: "file:" + r.Path}, registry.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Reg.Close() })
	m, err := slotmap.New(0, agencies)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Reg.CompareAndSwap(context.Background(), 0, m); err != nil {
		t.Fatal(err)
	}
	for _, c := range cells {
		r.Change(func(m *slotmap.Map) (*slotmap.Plan, error) { return m.AddCell(c) })
	}
	return r
}

// URL is the registry URL to give a cell.
func (r *Registry) URL() string { return "file:" + r.Path }

// Map loads the current map.
func (r *Registry) Map() *slotmap.Map {
	r.t.Helper()
	m, err := r.Reg.Load(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	return m
}

// Change plans and commits one change.
func (r *Registry) Change(plan func(*slotmap.Map) (*slotmap.Plan, error)) *slotmap.Map {
	r.t.Helper()
	m := r.Map()
	p, err := plan(m)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.Reg.CompareAndSwap(context.Background(), m.Version(), p.After); err != nil {
		r.t.Fatal(err)
	}
	return p.After
}

// TestCell is a cell entry for a map.
func TestCell(id string) slotmap.Cell {
	return slotmap.Cell{ID: id, Weight: 1, Intake: "http://127.0.0.1:1", Admin: "http://127.0.0.1:2"}
}

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

// Do sends one request. body may be nil, []byte, string or a value to
// encode as JSON (then Content-Type is application/json unless headers set
// one).
func Do(t testing.TB, client *http.Client, method, url string, body any, headers map[string]string) Response {
	t.Helper()
	resp, err := Send(client, method, url, body, headers)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp
}

// Send is Do without a test, for load generators.
func Send(client *http.Client, method, url string, body any, headers map[string]string) (Response, error) {
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

// Expected is the result a cell must compute for a request, with agencies
// answering agencysim.Score and the in-process CSS and core banking.
func Expected(id string, req inquiry.Request, agencies ...string) inquiry.Result {
	scores := map[string]int{"css": inquiry.CSSScore(req.UserID)}
	for _, a := range agencies {
		scores[a] = agencysim.Score(inquiry.AgencyKey(req.UserID))
	}
	rate, limit := inquiry.Decide(scores, req.Amount)
	return inquiry.Result{Scores: scores, RateBps: rate, Limit: limit, CoreRef: inquiry.CoreRef(id)}
}

// SameResult compares two results.
func SameResult(a, b *inquiry.Result) bool {
	if a == nil || b == nil {
		return a == b
	}
	return maps.Equal(a.Scores, b.Scores) && a.RateBps == b.RateBps && a.Limit == b.Limit && a.CoreRef == b.CoreRef
}

// Checker records what a load run was told and checks it afterwards.
type Checker struct {
	Requests map[string]inquiry.Request // idempotency key → request
	IDs      map[string][]string        // idempotency key → distinct ids answered with 202
}

// NewChecker returns an empty checker.
func NewChecker() *Checker {
	return &Checker{Requests: map[string]inquiry.Request{}, IDs: map[string][]string{}}
}

// Accepted records a 202 for key.
func (c *Checker) Accepted(key string, req inquiry.Request, id string) {
	c.Requests[key] = req
	for _, x := range c.IDs[key] {
		if x == id {
			return
		}
	}
	c.IDs[key] = append(c.IDs[key], id)
}

// Report is a checker's verdict.
type Report struct {
	Accepted   int // distinct inquiries answered 202
	Done       int
	Failed     int
	Lost       int // accepted but unknown or still pending
	Duplicated int // one request with two ids, or a result that is not the expected one
	Problems   []string
}

// ErrPending is returned by a Lookup for an inquiry not settled yet.
var ErrPending = errors.New("pending")

// Check looks every accepted inquiry up once.
func (c *Checker) Check(lookup func(id string) (inquiry.View, error), agencies ...string) Report {
	var r Report
	for key, ids := range c.IDs {
		if len(ids) > 1 {
			r.Duplicated++
			r.Problems = append(r.Problems, "key "+key+" has several ids")
		}
		for _, id := range ids {
			r.Accepted++
			v, err := lookup(id)
			switch {
			case err != nil:
				r.Lost++
				r.Problems = append(r.Problems, id+": "+err.Error())
			case v.Status == inquiry.Done:
				r.Done++
				want := Expected(id, c.Requests[key], agencies...)
				if !SameResult(v.Result, &want) {
					r.Duplicated++
					r.Problems = append(r.Problems, id+": unexpected result")
				}
			case v.Status == inquiry.Failed:
				r.Failed++
			default:
				r.Lost++
				r.Problems = append(r.Problems, id+": still "+string(v.Status))
			}
		}
	}
	return r
}

// NATS starts an embedded NATS server with its store in a temporary
// directory, without a listener, and connects to it; both end with the test.
func NATS(t testing.TB) (*natsembed.Server, jetstream.JetStream) {
	t.Helper()
	srv, err := natsembed.Start(natsembed.Config{Name: "test", StoreDir: t.TempDir(), Port: -1}, natsembed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return srv, js
}
