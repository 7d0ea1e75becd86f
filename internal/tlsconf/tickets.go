package tlsconf

import (
	"crypto/rand"
	"crypto/tls"
	"errors"
	"sync"
	"time"
)

// Session ticket keys. A listener's session tickets are encrypted with
// keys this package holds, not with crypto/tls's own (which live and die
// with the process): the router hands them to its successor (see
// internal/handoff), so a client that resumes a session after a restart
// or an upgrade is resumed, not made to do a full handshake. The rotation
// is crypto/tls's: a new key each day, a key kept for a week, the newest
// encrypting.

// TicketKey is a session ticket key and when it was made.
type TicketKey struct {
	Key  [32]byte  `json:"key"`
	Born time.Time `json:"born"`
}

const (
	ticketRotation = 24 * time.Hour
	ticketLifetime = 7 * 24 * time.Hour
	maxTicketKeys  = 16
)

// tickets is a listener's ring of keys.
type tickets struct {
	mu   sync.Mutex
	keys []TicketKey // newest first
	next time.Time   // when the newest is due for rotation
}

// fresh makes a key born now.
func freshKey(now time.Time) (TicketKey, error) {
	k := TicketKey{Born: now.UTC()}
	if _, err := rand.Read(k.Key[:]); err != nil {
		return k, err
	}
	return k, nil
}

// rotate adds a new key if the newest is a day old and drops those over a
// week; it reports whether the ring changed.
func (t *tickets) rotate(now time.Time) (bool, error) {
	if len(t.keys) > 0 && now.Before(t.next) {
		return false, nil
	}
	if len(t.keys) == 0 || now.Sub(t.keys[0].Born) >= ticketRotation {
		k, err := freshKey(now)
		if err != nil {
			return false, err
		}
		t.keys = append([]TicketKey{k}, t.keys...)
	}
	kept := t.keys[:1]
	for _, k := range t.keys[1:] {
		if now.Sub(k.Born) < ticketLifetime && len(kept) < maxTicketKeys {
			kept = append(kept, k)
		}
	}
	t.keys = kept
	t.next = t.keys[0].Born.Add(ticketRotation)
	return true, nil
}

func (t *tickets) raw() [][32]byte {
	out := make([][32]byte, len(t.keys))
	for i, k := range t.keys {
		out[i] = k.Key
	}
	return out
}

// TicketKeys are the listener's session ticket keys, newest first: what a
// successor must carry on for sessions to resume across a restart.
func (s *Server) TicketKeys() []TicketKey {
	s.tickets.mu.Lock()
	defer s.tickets.mu.Unlock()
	return append([]TicketKey(nil), s.tickets.keys...)
}

// SetTicketKeys takes keys (a predecessor's, newest first) as the
// listener's: sessions its tickets hold resume here.
func (s *Server) SetTicketKeys(keys []TicketKey) error {
	if len(keys) == 0 {
		return errors.New("tls: no session ticket keys")
	}
	s.tickets.mu.Lock()
	s.tickets.keys = append([]TicketKey(nil), keys...)
	s.tickets.next = time.Time{}
	_, err := s.tickets.rotate(s.opts.Now())
	s.tickets.mu.Unlock()
	if err != nil {
		return err
	}
	s.applyTickets(s.cur.Load())
	return nil
}

// applyTickets sets the ring's keys on cfg and the base configuration.
func (s *Server) applyTickets(cfg *tls.Config) {
	s.tickets.mu.Lock()
	keys := s.tickets.raw()
	s.tickets.mu.Unlock()
	s.base.SetSessionTicketKeys(keys)
	if cfg != nil {
		cfg.SetSessionTicketKeys(keys)
	}
}

// rotateTickets rotates the ring when due; the configurations follow.
func (s *Server) rotateTickets() {
	s.tickets.mu.Lock()
	changed, err := s.tickets.rotate(s.opts.Now())
	s.tickets.mu.Unlock()
	if err != nil && s.opts.Logger != nil {
		s.opts.Logger.Warn("tls: cannot make a session ticket key; the old ones go on", "what", s.opts.What, "err", err)
	}
	if changed {
		s.applyTickets(s.cur.Load())
	}
}
