package console

import (
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxSignInClients bounds the clients whose wrong tokens are counted one
// by one; beyond it only the bound on all of them holds for a new one.
const maxSignInClients = 4096

// signIns bounds the tokens tried: each wrong token (a bearer token, a
// ?token=, the sign-in form) spends one of its client's budget
// (SignInBurst, one back every SignInEvery) and one of everyone's (ten
// times as much), and while either is spent a token is not even
// compared: the answer is 429 with when to try again. A right token
// spends nothing, and a session or a client certificate is never
// limited. Tokens are compared one at a time (a hash and a constant-time
// compare: microseconds), so that guessing in parallel gets no more
// compared than the budget.
type signIns struct {
	every time.Duration
	burst int
	mu    sync.Mutex
	all   *rate.Limiter
	by    map[string]*rate.Limiter
}

func newSignIns(every time.Duration, burst int) *signIns {
	return &signIns{every: every, burst: burst, by: map[string]*rate.Limiter{},
		all: rate.NewLimiter(rate.Every(every/10), 10*burst)}
}

// try compares a token of r's client at now with right, unless the
// client (or everyone) has spent its budget: then wait says how long
// until the next is compared. A wrong one is charged.
func (s *signIns) try(r *http.Request, now time.Time, right func() bool) (ok bool, wait time.Duration) {
	k := clientOf(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	wait = waitFor(s.all, now)
	if l := s.by[k]; l != nil {
		wait = max(wait, waitFor(l, now))
	}
	if wait > 0 {
		return false, wait
	}
	if right() {
		return true, 0
	}
	s.wrong(k, now)
	return false, 0
}

// waitFor is how long until l holds a whole token at now.
func waitFor(l *rate.Limiter, now time.Time) time.Duration {
	t := l.TokensAt(now)
	if t >= 1 {
		return 0
	}
	return time.Duration((1 - t) / float64(l.Limit()) * float64(time.Second))
}

// wrong charges a wrong token of client k at now (s.mu held; both
// budgets hold one: try looked).
func (s *signIns) wrong(k string, now time.Time) {
	s.all.AllowN(now, 1)
	l := s.by[k]
	if l == nil {
		if len(s.by) >= maxSignInClients {
			s.sweep(now)
		}
		if len(s.by) >= maxSignInClients {
			return
		}
		l = rate.NewLimiter(rate.Every(s.every), s.burst)
		s.by[k] = l
	}
	l.AllowN(now, 1)
}

// sweep forgets the clients whose budget is whole again.
func (s *signIns) sweep(now time.Time) {
	for k, l := range s.by {
		if l.TokensAt(now) >= float64(s.burst) {
			delete(s.by, k)
		}
	}
}

// clientOf is who r comes from: its IP address, an IPv6 one's /64 (a
// host holds a whole one).
func clientOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if ip.To4() == nil {
		return ip.Mask(net.CIDRMask(64, 128)).String()
	}
	return ip.String()
}
