package console

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"
)

// maxSessions bounds the sessions kept; beyond it the one nearest its
// end is ended.
const maxSessions = 1024

// sessions are the browsers signed in: each holds a random id in its
// cookie, kept here (as its hash) until the session expires (its TTL
// after sign-in) or is ended (POST /logout). The ids die with the
// process.
type sessions struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[[sha256.Size]byte]*session
}

// session is one browser's sign-in.
type session struct {
	key     [sha256.Size]byte
	expires time.Time
	ended   chan struct{} // closed when it is ended or found expired
}

func newSessions(ttl time.Duration) *sessions {
	return &sessions{ttl: ttl, m: map[[sha256.Size]byte]*session{}}
}

// start makes a session at now and returns its id, for the cookie.
func (s *sessions) start(now time.Time) (string, *session, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", nil, err
	}
	id := hex.EncodeToString(b)
	ss := &session{key: sha256.Sum256([]byte(id)), expires: now.Add(s.ttl), ended: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= maxSessions {
		s.sweep(now)
	}
	if len(s.m) >= maxSessions {
		var first *session
		for _, o := range s.m {
			if first == nil || o.expires.Before(first.expires) {
				first = o
			}
		}
		s.endLocked(first)
	}
	s.m[ss.key] = ss
	return id, ss, nil
}

// lookup is the live session of id at now: nil when there is none, or
// it expired (then ended).
func (s *sessions) lookup(id string, now time.Time) *session {
	key := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.m[key]
	if ss == nil {
		return nil
	}
	if !now.Before(ss.expires) {
		s.endLocked(ss)
		return nil
	}
	return ss
}

// live says whether ss is still on at now (an event stream asks).
func (s *sessions) live(ss *session, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[ss.key] != ss {
		return false
	}
	if !now.Before(ss.expires) {
		s.endLocked(ss)
		return false
	}
	return true
}

// end ends the session of id, if there is one.
func (s *sessions) end(id string) {
	key := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.m[key]; ss != nil {
		s.endLocked(ss)
	}
}

// sweep ends the sessions expired at now.
func (s *sessions) sweep(now time.Time) {
	for _, ss := range s.m {
		if !now.Before(ss.expires) {
			s.endLocked(ss)
		}
	}
}

func (s *sessions) endLocked(ss *session) {
	delete(s.m, ss.key)
	close(ss.ended)
}
