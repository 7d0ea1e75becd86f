package loadtest

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Defaults of a Generator.
const (
	DefaultSenders = 64
	DefaultTimeout = 5 * time.Second
)

// sleepChunk bounds one nanosleep, so that a sender waiting for a request
// far ahead sees a cancelled context within that time.
const sleepChunk = 100 * time.Millisecond

// Generator is an open-loop load generator. Every request has an intended
// send time fixed in advance by Schedule; a request is sent at that time
// whatever the answers to earlier ones do, and its latency is measured from
// that time, not from when it was actually sent, so a stall is charged to
// every request it delays (no coordinated omission). The count of requests
// is bounded by the schedule and the time by Cutoff and Timeout: a run
// stops by itself.
//
// Each of the Senders runs on its own locked OS thread: it takes the next
// request of the schedule, sleeps in nanosleep on its thread until the
// request's intended time, sends it with Send, and takes the next. A
// blocking nanosleep wakes within about a tenth of a millisecond; a Go
// timer wakes up to a millisecond late on a mostly idle process (the
// runtime's epoll wait has millisecond resolution), which added ~0.4 ms of
// schedule lag to every request. (With 64 senders at 2000/s, Go timers for
// the bulk of the wait and nanosleep for its end gave a p99 lag of tens of
// milliseconds; one pacing sender handing over to the next added ~60 µs to
// the median latency.) A request that finds every sender busy is sent as
// soon as one is free, late, and its latency shows the wait. Senders
// waiting for requests far ahead wake every sleepChunk to look at ctx.
type Generator[T any] struct {
	// Start is the schedule's zero [when Run is called].
	Start time.Time
	// Schedule holds each request's intended send time as an offset from
	// Start, in non-decreasing order. Its length is the number of requests.
	Schedule []time.Duration
	// Senders bounds the requests in flight [DefaultSenders]; each sender
	// has its own OS thread while the run lasts.
	Senders int
	// Timeout bounds one request: Send's context ends that long after the
	// request is sent [DefaultTimeout].
	Timeout time.Duration
	// Cutoff is the latest time from Start at which a request may still be
	// sent; those not sent by then are skipped [the last intended time +
	// Timeout].
	Cutoff time.Duration
	// Send performs request r and returns its outcome. It is called on r's
	// sender, one request at a time per sender, so per-sender state (a
	// connection) indexed by r.Sender needs no lock. Required.
	Send func(ctx context.Context, r Request) T
	// Done, when set, gets each sent request's outcome with r.Latency, on
	// the same sender, as soon as Send returns.
	Done func(r Request, out T)
	// OnePacer paces every request on one locked thread, which hands each
	// one at its intended time to the first free sender, and the senders
	// are ordinary goroutines. Use it when Send blocks on goroutines of its
	// own, as net/http's client does: a sender locked to its thread pays a
	// hand-off between threads for every wake-up, which on a busy machine
	// put the drills' p99 at 27 ms against 6 ms. Without it each sender
	// paces itself on its own thread (a raw connection per sender, as
	// bench-router has: no hand-off at all).
	OnePacer bool
}

// Request is one request of a Generator's schedule.
type Request struct {
	Seq      int           // index in the schedule
	Sender   int           // the sender sending it, 0 ≤ Sender < Senders
	Intended time.Time     // when it was meant to be sent
	Sent     time.Time     // when it was sent
	Latency  time.Duration // from Intended until Send returned (set for Done)
}

// Lag is how late the request was sent.
func (r Request) Lag() time.Duration { return r.Sent.Sub(r.Intended) }

// Summary counts what a run did.
type Summary struct {
	Planned int           // requests in the schedule
	Sent    int           // requests sent
	Skipped int           // not sent: the context ended or Cutoff passed first
	MaxLag  time.Duration // the latest a request was sent after its intended time
}

// Run sends the schedule and returns once every request has been sent or
// skipped and every Send has returned: by Start + Cutoff + Timeout when Send
// honours its context. Cancelling ctx stops sending; requests in flight
// complete (their context ends only with their Timeout).
func (g *Generator[T]) Run(ctx context.Context) Summary {
	n := len(g.Schedule)
	senders := g.Senders
	if senders <= 0 {
		senders = DefaultSenders
	}
	senders = max(min(senders, n), 1)
	timeout := g.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	start := g.Start
	if start.IsZero() {
		start = time.Now()
	}
	cutoff := g.Cutoff
	if cutoff <= 0 && n > 0 {
		cutoff = g.Schedule[n-1] + timeout
	}
	var next, sent, skipped, maxLag atomic.Int64
	// take returns the next request to send, once its intended time has
	// come, or false when there is none left.
	take := func(w int) (Request, bool) {
		for {
			i := int(next.Add(1) - 1)
			if i >= n {
				return Request{}, false
			}
			at := g.Schedule[i]
			intended := start.Add(at)
			if at > cutoff || !sleepUntil(ctx, intended) || time.Since(start) > cutoff {
				skipped.Add(1)
				continue
			}
			return Request{Seq: i, Sender: w, Intended: intended}, true
		}
	}
	send := func(r Request) {
		r.Sent = time.Now()
		for lag := int64(r.Lag()); ; {
			cur := maxLag.Load()
			if lag <= cur || maxLag.CompareAndSwap(cur, lag) {
				break
			}
		}
		sent.Add(1)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		out := g.Send(rctx, r)
		r.Latency = time.Since(r.Intended)
		cancel()
		if g.Done != nil {
			g.Done(r, out)
		}
	}
	var wg sync.WaitGroup
	if g.OnePacer {
		due := make(chan Request)
		for w := range senders {
			wg.Go(func() {
				for r := range due {
					r.Sender = w
					send(r)
				}
			})
		}
		runtime.LockOSThread()
		for {
			r, ok := take(0)
			if !ok {
				break
			}
			due <- r // waits for a free sender: the lag counts
		}
		runtime.UnlockOSThread()
		close(due)
		wg.Wait()
		return Summary{Planned: n, Sent: int(sent.Load()), Skipped: int(skipped.Load()), MaxLag: time.Duration(maxLag.Load())}
	}
	for w := range senders {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for {
				r, ok := take(w)
				if !ok {
					return
				}
				send(r)
			}
		})
	}
	wg.Wait()
	return Summary{Planned: n, Sent: int(sent.Load()), Skipped: int(skipped.Load()), MaxLag: time.Duration(maxLag.Load())}
}

// sleepUntil blocks this thread in nanosleep until t; it returns false
// if ctx ends first (seen within sleepChunk).
func sleepUntil(ctx context.Context, t time.Time) bool {
	for {
		if ctx.Err() != nil {
			return false
		}
		d := time.Until(t)
		if d <= 0 {
			return true
		}
		ts := unix.NsecToTimespec(int64(min(d, sleepChunk)))
		for unix.Nanosleep(&ts, &ts) == unix.EINTR {
		}
	}
}
