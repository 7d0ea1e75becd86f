// Package loadtest drives open-loop load at a cellkit router, records and
// reports its outcomes, and provides the checks the drills (internal/drill)
// make of them: windows of samples, assertions, and the verification that
// every accepted inquiry reached a final state exactly once.
//
// Open loop: every request has an intended send time fixed in advance by the
// rate (or steps); it is sent at that time whatever the answers to earlier
// requests, and its latency is measured from the intended time, not from when
// it was actually sent — a stalled server makes later requests' latency grow
// instead of silently sending fewer requests (no coordinated omission). A run
// is bounded in count and time: it stops by itself.
package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellkit/cellkit/internal/inquiry"
)

// Config is one run. Zero values mean the defaults in brackets.
type Config struct {
	// Target is the router's base URL, such as http://127.0.0.1:8080. Required.
	Target string
	// Key is the API key sent as X-API-Key. Required.
	Key string
	// Steps are the rates over time. Required.
	Steps []Step
	// Users is K, the number of distinct users [1000].
	Users int
	// Zipf is the Zipf exponent over the users; 0 means uniform.
	Zipf float64
	// Seed makes the user sequence reproducible [1].
	Seed uint64
	// Timeout bounds one request [5s]; a request past it counts as a
	// timeout (status 0).
	Timeout time.Duration
	// MaxInflight bounds the requests in flight [10000]; when reached, the
	// next request waits (and its latency, counted from its intended time,
	// shows it).
	MaxInflight int
	// KeepSamples keeps every request's outcome in Result.Samples (the
	// drills need them).
	KeepSamples bool
	// Progress, when set, gets a one-line progress report every second.
	Progress io.Writer
	// Client sends the requests [a pooled client sized for the load].
	Client *http.Client
}

// Sample is the outcome of one request.
type Sample struct {
	Seq        int           `json:"seq"`
	At         time.Duration `json:"at"` // intended send time from the start
	User       int           `json:"user"`
	Key        string        `json:"key"`            // Idempotency-Key
	Cell       string        `json:"cell,omitempty"` // Cellkit-Cell of the answer
	Status     int           `json:"status"`         // 0: no answer (see Err)
	Err        string        `json:"err,omitempty"`  // timeout or the transport error
	Latency    time.Duration `json:"latency"`        // from the intended send time
	ID         string        `json:"id,omitempty"`   // the 202's inquiry id
	RetryAfter bool          `json:"retry_after,omitempty"`
}

// Event is something that happened during a run, marked on the chart.
type Event struct {
	At   time.Duration `json:"at"`
	Name string        `json:"name"`
}

// Runner runs one load. Its clock starts at NewRunner, so events can be
// marked (Mark) by whoever acts during the run.
type Runner struct {
	cfg   Config
	start time.Time
	rec   *recorder
	runID string

	mu     sync.Mutex
	events []Event
}

// NewRunner checks cfg and fixes the start of the run at now.
func NewRunner(cfg Config) (*Runner, error) {
	if cfg.Target == "" || cfg.Key == "" {
		return nil, errors.New("target and key are required")
	}
	if len(cfg.Steps) == 0 {
		return nil, errors.New("no rate: give a rate and duration, or steps")
	}
	if cfg.Users <= 0 {
		cfg.Users = 1000
	}
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = 10000
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
			MaxIdleConns:        2048,
			MaxIdleConnsPerHost: 2048,
			IdleConnTimeout:     30 * time.Second,
		}}
	}
	now := time.Now()
	return &Runner{cfg: cfg, start: now, rec: newRecorder(cfg.KeepSamples),
		runID: strconv.FormatInt(now.UnixNano(), 36)}, nil
}

// Elapsed is the time since the start of the run.
func (r *Runner) Elapsed() time.Duration { return time.Since(r.start) }

// Mark records an event now.
func (r *Runner) Mark(name string) {
	r.mu.Lock()
	r.events = append(r.events, Event{At: r.Elapsed(), Name: name})
	r.mu.Unlock()
}

// Run sends the load and returns its result once every request has an
// outcome. Cancelling ctx stops sending; the result covers what was sent.
func (r *Runner) Run(ctx context.Context) (*Result, error) {
	users, err := NewUsers(r.cfg.Users, r.cfg.Zipf, r.cfg.Seed)
	if err != nil {
		return nil, err
	}
	sched := Schedule(r.cfg.Steps)
	sem := make(chan struct{}, r.cfg.MaxInflight)
	var wg sync.WaitGroup
	var inflight atomic.Int64

	progressDone := make(chan struct{})
	stopProgress := make(chan struct{})
	go func() {
		defer close(progressDone)
		if r.cfg.Progress == nil {
			return
		}
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				fmt.Fprintln(r.cfg.Progress, r.rec.progress(r.Elapsed(), inflight.Load()))
			}
		}
	}()

	timer := time.NewTimer(0)
	<-timer.C
	sent := 0
loop:
	for seq, at := range sched {
		if d := time.Until(r.start.Add(at)); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				timer.Stop()
				break loop
			case <-timer.C:
			}
		} else if ctx.Err() != nil {
			break
		}
		s := Sample{Seq: seq, At: at, User: users.Next(), Key: "lt-" + r.runID + "-" + strconv.Itoa(seq)}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			break loop
		}
		sent++
		wg.Add(1)
		inflight.Add(1)
		go func() {
			defer func() { <-sem; inflight.Add(-1); wg.Done() }()
			r.send(context.WithoutCancel(ctx), &s)
			r.rec.record(s)
		}()
	}
	wg.Wait()
	close(stopProgress)
	<-progressDone
	r.mu.Lock()
	events := append([]Event(nil), r.events...)
	r.mu.Unlock()
	res := r.rec.result(r.cfg, Total(r.cfg.Steps), events)
	res.Planned = len(sched)
	res.Sent = sent
	return res, nil
}

// Body is the request body of user u's request number seq: the same seq
// always gives the same body, so a retry with the same Idempotency-Key is
// the same request.
func Body(u, seq int) []byte {
	b, _ := json.Marshal(inquiry.Request{
		UserID: UserID(u), Product: "credit_loan", Amount: 1_000_000 + int64(seq%1000)*1000,
		Priority: []inquiry.Priority{inquiry.Normal, inquiry.High}[seq%4/3],
	})
	return b
}

// send posts s's inquiry and fills in its outcome.
func (r *Runner) send(ctx context.Context, s *Sample) {
	intended := r.start.Add(s.At)
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	st, hdr, body, err := post(ctx, r.cfg.Client, r.cfg.Target, r.cfg.Key, s.Key, Body(s.User, s.Seq))
	s.Latency = time.Since(intended)
	if err != nil {
		s.Err = errKind(err)
		return
	}
	s.Status = st
	s.Cell = hdr.Get("Cellkit-Cell")
	s.RetryAfter = hdr.Get("Retry-After") != ""
	if st == http.StatusAccepted {
		var a struct {
			ID   string `json:"id"`
			Cell string `json:"cell"`
		}
		if json.Unmarshal(body, &a) == nil {
			s.ID = a.ID
			if s.Cell == "" {
				s.Cell = a.Cell
			}
		}
	}
}

// post sends one POST /v1/inquiries.
func post(ctx context.Context, hc *http.Client, target, key, idemKey string, body []byte) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target+"/v1/inquiries", bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", key)
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, nil, err
	}
	return resp.StatusCode, resp.Header, b, nil
}

func errKind(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return err.Error()
}
