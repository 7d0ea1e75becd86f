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
// is bounded in count and time: it stops by itself. The pacing is the
// Generator's, which scripts/bench-router uses too.
package loadtest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellkit/cellkit/internal/problem"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

// Config is one run. Zero values mean the defaults in brackets (see
// DefaultConfig).
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
	// timeout (status 0). It bounds the run too: no request is sent later
	// than Timeout after the last intended time.
	Timeout time.Duration
	// MaxInflight bounds the requests in flight [128]: it is the number of
	// the Generator's senders (goroutines; one thread paces them all). When
	// every one is busy the next request waits, and its latency, counted
	// from its intended time, shows it.
	MaxInflight int
	// HighShare is the share of requests that ask for the high lane
	// [0.25]; a negative share asks for none.
	HighShare float64
	// KeepSamples keeps every request's outcome in Result.Samples (the
	// drills need them).
	KeepSamples bool
	// ReadShare is the share of requests that read the status of an
	// inquiry accepted earlier in the run (GET /v1/inquiries/{id}, a
	// client polling its status_url) instead of asking a new one; a read
	// planned before any inquiry was accepted asks one. 0: none.
	ReadShare float64
	// CA is a PEM file of the CAs an https Target's certificate is
	// checked against ("": the system's); ServerName is the name asked
	// for ("": Target's host) — a router reached at an address its
	// certificate does not name, such as a Kubernetes Service's cluster
	// IP.
	CA, ServerName string
}

// clientTLS checks servers against the CAs of the PEM file ca (the
// system's when "") and asks for serverName (the URL's host when "").
func clientTLS(ca, serverName string) (*tls.Config, error) {
	tc := &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS12}
	if ca != "" {
		pool, err := tlsconf.LoadPool(ca)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = pool
	}
	return tc, nil
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Users: 1000, Seed: 1, Timeout: 5 * time.Second, MaxInflight: 128, HighShare: 0.25}
}

// withDefaults fills the zero fields of c from DefaultConfig, field by
// field.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Users <= 0 {
		c.Users = d.Users
	}
	if c.Seed == 0 {
		c.Seed = d.Seed
	}
	if c.Timeout <= 0 {
		c.Timeout = d.Timeout
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = d.MaxInflight
	}
	if c.HighShare == 0 {
		c.HighShare = d.HighShare
	}
	return c
}

// Options carry a run's collaborators. The zero value is usable.
type Options struct {
	// Progress, when set, gets a one-line progress report every second.
	Progress io.Writer
	// Client sends the requests. Nil means a pooled client sized for the
	// load.
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
	// Problem is the last part of an error answer's problem type
	// ("outcome-unknown", "shed", ...), or "" when it had none.
	Problem string `json:"problem,omitempty"`
	High    bool   `json:"high,omitempty"` // it asked for the high lane
	Read    bool   `json:"read,omitempty"` // a status read (ID is the inquiry read), not a new inquiry
}

// OK says whether s was answered as asked: 202 for a new inquiry, 200
// for a status read.
func (s Sample) OK() bool {
	if s.Read {
		return s.Status == http.StatusOK
	}
	return s.Status == http.StatusAccepted
}

// Fenced says whether s was answered by a move's fence: 503 user-moving,
// the user's inquiries being copied to its new cell.
func (s Sample) Fenced() bool {
	return s.Status == http.StatusServiceUnavailable && s.Problem == path.Base(problem.UserMoving)
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
	opts  Options
	start time.Time
	rec   *recorder
	runID string

	mu     sync.Mutex
	events []Event
	// accepted are ids accepted in the run, the latest readIDs, for the
	// status reads.
	accepted acceptedIDs
}

// readIDs is how many accepted ids the status reads draw from.
const readIDs = 4096

// acceptedIDs is a ring of the latest accepted inquiry ids.
type acceptedIDs struct {
	mu   sync.Mutex
	ids  []string
	next int
}

func (a *acceptedIDs) add(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.ids) < readIDs {
		a.ids = append(a.ids, id)
		return
	}
	a.ids[a.next] = id
	a.next = (a.next + 1) % readIDs
}

// pick is the id at position n (mod the ring), "" when none.
func (a *acceptedIDs) pick(n int) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.ids) == 0 {
		return ""
	}
	return a.ids[n%len(a.ids)]
}

// NewRunner checks cfg and fixes the start of the run at now.
func NewRunner(cfg Config, opts Options) (*Runner, error) {
	if cfg.Target == "" || cfg.Key == "" {
		return nil, errors.New("target and key are required")
	}
	if len(cfg.Steps) == 0 {
		return nil, errors.New("no rate: give a rate and duration, or steps")
	}
	if cfg.HighShare > 1 {
		return nil, fmt.Errorf("high share %g: want at most 1", cfg.HighShare)
	}
	if cfg.ReadShare < 0 || cfg.ReadShare >= 1 {
		return nil, fmt.Errorf("read share %g: want at least 0 and below 1", cfg.ReadShare)
	}
	cfg = cfg.withDefaults()
	if opts.Client == nil {
		tr := &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
			MaxIdleConns:        2048,
			MaxIdleConnsPerHost: 2048,
			IdleConnTimeout:     30 * time.Second,
		}
		if cfg.CA != "" || cfg.ServerName != "" {
			tc, err := clientTLS(cfg.CA, cfg.ServerName)
			if err != nil {
				return nil, err
			}
			tr.TLSClientConfig = tc
		}
		opts.Client = &http.Client{Transport: tr}
	}
	now := time.Now()
	return &Runner{cfg: cfg, opts: opts, start: now, rec: newRecorder(cfg.KeepSamples),
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

// SamplesSoFar is a copy of the samples of the requests that have an
// outcome by now (KeepSamples; nil without): a drill reads what the
// load got while the load goes on.
func (r *Runner) SamplesSoFar() []Sample {
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	return append([]Sample(nil), r.rec.samples...)
}

// Run sends the load and returns its result once every request has an
// outcome. Cancelling ctx stops sending; the result covers what was sent.
func (r *Runner) Run(ctx context.Context) (*Result, error) {
	users, err := NewUsers(r.cfg.Users, r.cfg.Zipf, r.cfg.Seed)
	if err != nil {
		return nil, err
	}
	sched := Schedule(r.cfg.Steps)
	// The users are drawn up front: request i has the i-th user whichever
	// sender takes it.
	user := make([]int, len(sched))
	for i := range user {
		user[i] = users.Next()
	}
	var inflight atomic.Int64
	gen := Generator[Sample]{
		Start: r.start, Schedule: sched, Senders: r.cfg.MaxInflight, Timeout: r.cfg.Timeout, OnePacer: true,
		Send: func(ctx context.Context, q Request) Sample {
			inflight.Add(1)
			defer inflight.Add(-1)
			s := Sample{Seq: q.Seq, At: sched[q.Seq], User: user[q.Seq], Key: "lt-" + r.runID + "-" + strconv.Itoa(q.Seq), High: highOf(q.Seq, r.cfg.HighShare)}
			if readOf(q.Seq, r.cfg.ReadShare) {
				if id := r.accepted.pick(user[q.Seq] + q.Seq); id != "" {
					s.Read, s.ID, s.Key, s.High = true, id, "", false
					r.read(ctx, &s)
					return s
				}
			}
			r.send(ctx, &s)
			if s.ID != "" && r.cfg.ReadShare > 0 {
				r.accepted.add(s.ID)
			}
			return s
		},
		Done: func(q Request, s Sample) {
			s.Latency = q.Latency
			r.rec.record(s)
		},
	}

	progressDone := make(chan struct{})
	stopProgress := make(chan struct{})
	go func() {
		defer close(progressDone)
		if r.opts.Progress == nil {
			return
		}
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				fmt.Fprintln(r.opts.Progress, r.rec.progress(r.Elapsed(), inflight.Load()))
			}
		}
	}()
	sum := gen.Run(ctx)
	close(stopProgress)
	<-progressDone

	r.mu.Lock()
	events := append([]Event(nil), r.events...)
	r.mu.Unlock()
	res := r.rec.result(r.cfg, Total(r.cfg.Steps), events)
	res.Planned, res.Sent, res.MaxLag = sum.Planned, sum.Sent, float64(sum.MaxLag)/float64(time.Millisecond)
	return res, nil
}
