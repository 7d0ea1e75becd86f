package apikey

import (
	"math"
	"time"

	"golang.org/x/time/rate"
)

// Limits is the per-client token bucket: one golang.org/x/time/rate
// limiter per client of the keys file, so the set is bounded by the file
// (MaxClients) and never grows with traffic.
type Limits struct {
	keys    *Keys
	now     func() time.Time
	buckets []*rate.Limiter // by Client.index
}

// NewLimits makes a full bucket for every client of keys.
func NewLimits(keys *Keys, now func() time.Time) *Limits {
	return (*Limits)(nil).For(keys, now)
}

// For returns the buckets for the clients of keys: a client of l's keys
// keeps its bucket, tokens and all (its limits changed to the new ones if
// they differ); a new client gets a full one; the buckets of clients keys
// no longer has are dropped with l. l may be nil.
func (l *Limits) For(keys *Keys, now func() time.Time) *Limits {
	n := &Limits{keys: keys, now: now, buckets: make([]*rate.Limiter, len(keys.clients))}
	var prev map[string]*rate.Limiter
	if l != nil {
		prev = make(map[string]*rate.Limiter, len(l.keys.clients))
		for i, c := range l.keys.clients {
			prev[c.ID] = l.buckets[i]
		}
	}
	at := now()
	for i, c := range keys.clients {
		b := prev[c.ID]
		switch {
		case b == nil:
			b = rate.NewLimiter(rate.Limit(c.Rate), c.Burst)
		case b.Limit() != rate.Limit(c.Rate) || b.Burst() != c.Burst:
			// The bucket is shared with requests still using the old
			// keys; the limiter is safe for that, and both see the new
			// limits at once.
			b.SetLimitAt(at, rate.Limit(c.Rate))
			b.SetBurstAt(at, c.Burst)
		}
		n.buckets[i] = b
	}
	return n
}

// Verdict is the outcome of Take, and what the answer's rate-limit fields
// say of the client's bucket, whose capacity (its Burst) is the limit.
type Verdict struct {
	OK bool
	// Remaining is the whole tokens left after this request: 0 to Burst.
	Remaining int
	// Reset is how long until the bucket is full again; when no whole
	// token remains, until the next one (when refused, RetryAfter): the
	// moment a client that waits for it gets a request through, which is
	// not all of its burst back.
	Reset time.Duration
	// RetryAfter is, when refused, how long until the next token.
	RetryAfter time.Duration
}

// Take spends one of c's tokens if it has one. c is a client of the keys
// the buckets were made for.
func (l *Limits) Take(c *Client) Verdict {
	b := l.buckets[c.index]
	now := l.now()
	ok := b.AllowN(now, 1)
	tokens := min(b.TokensAt(now), float64(c.Burst))
	if !ok || tokens < 1 {
		wait := max(c.wait(1-tokens), time.Millisecond)
		v := Verdict{OK: ok, Reset: wait}
		if !ok {
			v.RetryAfter = wait
		}
		return v
	}
	return Verdict{OK: true, Remaining: int(tokens), Reset: c.wait(float64(c.Burst) - tokens)}
}

// wait is how long c's bucket takes to gain n tokens.
func (c *Client) wait(n float64) time.Duration {
	ns := n / c.Rate * float64(time.Second)
	if ns >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(ns)
}
