package router

import (
	"time"

	"golang.org/x/time/rate"
)

// limits is the per-client token bucket: one golang.org/x/time/rate limiter
// per client of the keys file, so the set is bounded by the file (MaxClients)
// and never grows with traffic.
type limits struct {
	now     func() time.Time
	buckets []*rate.Limiter // by Client.index
}

func newLimits(keys *Keys, now func() time.Time) *limits {
	return carryLimits(nil, keys, now)
}

// carryLimits returns the buckets for the clients of keys: a client of old
// keeps its bucket, tokens and all (its limits changed to the new ones if
// they differ); a new client gets a full one; the buckets of clients keys
// no longer has are dropped with old.
func carryLimits(old *keyring, keys *Keys, now func() time.Time) *limits {
	l := &limits{now: now, buckets: make([]*rate.Limiter, len(keys.clients))}
	var prev map[string]*rate.Limiter
	if old != nil {
		prev = make(map[string]*rate.Limiter, len(old.keys.clients))
		for i, c := range old.keys.clients {
			prev[c.ID] = old.limits.buckets[i]
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
		l.buckets[i] = b
	}
	return l
}

// verdict is the outcome of take.
type verdict struct {
	ok         bool
	remaining  int           // whole tokens left after this request
	retryAfter time.Duration // when refused: until the next token
}

// take spends one of c's tokens if it has one. c is a client of the keys
// the buckets were made for.
func (l *limits) take(c *Client) verdict {
	b := l.buckets[c.index]
	now := l.now()
	if b.AllowN(now, 1) {
		return verdict{ok: true, remaining: max(int(b.TokensAt(now)), 0)}
	}
	missing := 1 - b.TokensAt(now)
	wait := time.Duration(missing / c.Rate * float64(time.Second))
	return verdict{retryAfter: max(wait, time.Millisecond)}
}
