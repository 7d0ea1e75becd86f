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
	l := &limits{now: now, buckets: make([]*rate.Limiter, len(keys.clients))}
	for i, c := range keys.clients {
		l.buckets[i] = rate.NewLimiter(rate.Limit(c.Rate), c.Burst)
	}
	return l
}

// verdict is the outcome of take.
type verdict struct {
	ok         bool
	remaining  int           // whole tokens left after this request
	retryAfter time.Duration // when refused: until the next token
}

// take spends one of c's tokens if it has one.
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
