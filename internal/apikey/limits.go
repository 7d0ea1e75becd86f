package apikey

import (
	"math"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Limits is the per-client token bucket: one golang.org/x/time/rate
// limiter per client of the keys file, so the set is bounded by the file
// (MaxClients) and never grows with traffic.
//
// A client's quota (Client.Rate and Client.Burst) may be shared with other
// routers: this router's bucket then holds a share of it, set by SetShares
// (internal/quota), and the fields of a Verdict tell of the whole quota as
// this router knows it (its own tokens and what the other routers last
// said theirs hold). Alone, a router holds the whole quota.
type Limits struct {
	keys    *Keys
	now     func() time.Time
	buckets []*bucket // by Client.index
	empty   bool      // a new client's bucket starts empty, without a share
}

// bucket is one client's bucket and what the sharing knows of it.
type bucket struct {
	lim   atomic.Pointer[rate.Limiter] // swapped whole only by SetTokens
	asked atomic.Uint64                // requests that asked for a token, taken or not
	share atomic.Pointer[share]
}

// share is this router's part of a client's quota, swapped whole.
type share struct {
	rate, burst float64 // the fractions of the client's rate and burst held
	capacity    int     // the bucket's: burst × the client's Burst
	others      float64 // the other routers' tokens, a fraction of the client's burst
}

// shareOf is a share of c's quota. A bucket with any burst holds at
// least one token: a share of a burst below one would refuse every
// request.
func shareOf(c *Client, rate, burst, others float64) *share {
	n := 0
	if burst > 0 {
		n = min(max(1, int(math.Round(burst*float64(c.Burst)))), c.Burst)
	}
	return &share{rate: rate, burst: burst, capacity: n, others: others}
}

// NewLimits makes a full bucket holding the whole quota for every client
// of keys.
func NewLimits(keys *Keys, now func() time.Time) *Limits {
	return (*Limits)(nil).For(keys, now)
}

// NewEmptyLimits makes an empty bucket without a share for every client
// of keys, and so does For for a client added later: a router that
// shares quotas starts so, until its lease gives it a share.
func NewEmptyLimits(keys *Keys, now func() time.Time) *Limits {
	return (&Limits{keys: &Keys{}, empty: true}).For(keys, now)
}

// For returns the buckets for the clients of keys: a client of l's keys
// keeps its bucket, tokens, share and all (its limits changed to the new
// ones if they differ); a new client gets a full one holding the whole
// quota (an empty one without a share after NewEmptyLimits); the buckets
// of clients keys no longer has are dropped with l. l may be nil.
func (l *Limits) For(keys *Keys, now func() time.Time) *Limits {
	n := &Limits{keys: keys, now: now, buckets: make([]*bucket, len(keys.clients)), empty: l != nil && l.empty}
	var prev map[string]*bucket
	if l != nil {
		prev = make(map[string]*bucket, len(l.keys.clients))
		for i, c := range l.keys.clients {
			prev[c.ID] = l.buckets[i]
		}
	}
	at := now()
	for i, c := range keys.clients {
		b := prev[c.ID]
		switch {
		case b == nil && n.empty:
			b = &bucket{}
			b.lim.Store(rate.NewLimiter(0, 0))
			b.share.Store(shareOf(c, 0, 0, 0))
		case b == nil:
			b = &bucket{}
			b.lim.Store(rate.NewLimiter(rate.Limit(c.Rate), c.Burst))
			b.share.Store(shareOf(c, 1, 1, 0))
		default:
			// The bucket is shared with requests still using the old
			// keys; the limiter is safe for that, and both see the new
			// limits at once. Its share of the quota is kept.
			s := b.share.Load()
			b.set(at, c, shareOf(c, s.rate, s.burst, s.others))
		}
		n.buckets[i] = b
	}
	return n
}

// set gives b share s of c's quota at at.
func (b *bucket) set(at time.Time, c *Client, s *share) {
	lim := b.lim.Load()
	if r := rate.Limit(s.rate * c.Rate); lim.Limit() != r {
		lim.SetLimitAt(at, r)
	}
	if lim.Burst() != s.capacity {
		lim.SetBurstAt(at, s.capacity)
	}
	b.share.Store(s)
}

// Verdict is the outcome of Take, and what the answer's rate-limit fields
// say of the client's quota, whose capacity (its Burst) is the limit.
type Verdict struct {
	OK bool
	// Remaining is the whole tokens left after this request in the
	// client's quota as this router knows it (its bucket's and what the
	// other routers said theirs hold): 0 to Burst.
	Remaining int
	// Reset is how long until the quota is full again; when this router's
	// bucket has no whole token left, until its next one (when refused,
	// RetryAfter): the moment a client that waits for it gets a request
	// through here, which is not all of its burst back.
	Reset time.Duration
	// RetryAfter is, when refused, how long until the next token.
	RetryAfter time.Duration
}

// noShareWait is the advice while this router's bucket has no share of
// the quota: a share comes with a lease round, about a second.
const noShareWait = time.Second

// Take spends one of c's tokens if it has one. c is a client of the keys
// the buckets were made for.
func (l *Limits) Take(c *Client) Verdict {
	b := l.buckets[c.index]
	b.asked.Add(1)
	s := b.share.Load()
	now := l.now()
	lim := b.lim.Load()
	ok := lim.AllowN(now, 1)
	tokens := min(lim.TokensAt(now), float64(s.capacity))
	if !ok || tokens < 1 {
		wait := noShareWait
		if s.rate > 0 {
			wait = max(wait1(1-tokens, s.rate*c.Rate), time.Millisecond)
		}
		v := Verdict{OK: ok, Reset: wait}
		if !ok {
			v.RetryAfter = wait
		}
		return v
	}
	all := min(tokens+s.others*float64(c.Burst), float64(c.Burst))
	return Verdict{OK: true, Remaining: int(all), Reset: wait1(float64(c.Burst)-all, c.Rate)}
}

// wait1 is how long a bucket refilling at r per second takes to gain n
// tokens.
func wait1(n, r float64) time.Duration {
	ns := n / r * float64(time.Second)
	if ns >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// Usage is what a client's bucket saw since the last call of Usage.
type Usage struct {
	Client *Client
	// Asked counts the requests that asked for a token, taken or not.
	Asked uint64
	// Tokens is what the bucket holds now, a fraction of the client's
	// burst.
	Tokens float64
}

// Usage reports every client's bucket, in the keys' order, and starts
// counting its requests afresh.
func (l *Limits) Usage() []Usage {
	now := l.now()
	out := make([]Usage, len(l.buckets))
	for i, b := range l.buckets {
		c := l.keys.clients[i]
		out[i] = Usage{Client: c, Asked: b.asked.Swap(0), Tokens: clamp01(b.lim.Load().TokensAt(now) / float64(c.Burst))}
	}
	return out
}

// Share is a client's share of its quota, for SetShares.
type Share struct {
	Client string
	// Rate and Burst are the fractions of the client's rate and burst
	// this router holds (0 to 1).
	Rate, Burst float64
	// Others is what the other routers' buckets hold, a fraction of the
	// client's burst (what X-RateLimit-Remaining adds to this bucket's).
	Others float64
}

// SetShares gives the clients named their shares, from now on: a bucket
// whose share grows gains no tokens at once, it refills faster; one whose
// share shrinks loses the tokens over its new capacity. A client the keys
// lack is skipped.
func (l *Limits) SetShares(shares []Share) {
	at := l.now()
	for _, s := range shares {
		c := l.keys.byID[s.Client]
		if c == nil {
			continue
		}
		l.buckets[c.index].set(at, c, shareOf(c, clamp01(s.Rate), clamp01(s.Burst), max(s.Others, 0)))
	}
}

// SetTokens sets the client's bucket to hold fraction of its burst (at
// most its capacity): a successor taking over its predecessor's buckets.
// Requests taken from the bucket meanwhile may be forgotten: it is meant
// for before the buckets serve.
func (l *Limits) SetTokens(client string, fraction float64) {
	c := l.keys.byID[client]
	if c == nil {
		return
	}
	b, now := l.buckets[c.index], l.now()
	old := b.lim.Load()
	// A full bucket of the same limits, less what it must not hold.
	lim := rate.NewLimiter(old.Limit(), old.Burst())
	lim.SetBurstAt(now, old.Burst()) // its clock starts now
	if spend := old.Burst() - int(math.Floor(clamp01(fraction)*float64(c.Burst))); spend > 0 {
		lim.AllowN(now, min(spend, old.Burst()))
	}
	b.lim.Store(lim)
}

func clamp01(f float64) float64 {
	if !(f > 0) {
		return 0
	}
	return min(f, 1)
}
