package agencysim

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"time"

	"github.com/cellkit/cellkit/internal/telegram"
	"github.com/cellkit/cellkit/internal/wire"
)

// session is one admitted client connection.
type session struct {
	conn net.Conn

	mu    sync.Mutex
	last  time.Time // last frame in or out, for the idle firewall
	busy  bool      // a request is being answered
	reset bool      // end with a reset (RST) rather than a close
}

// closeIfIdle closes the session if it is waiting for a request; a busy
// session ends by itself once it has answered.
func (sess *session) closeIfIdle() {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if !sess.busy {
		sess.conn.Close()
	}
}

// rearm sets the firewall's deadline of an idle session from its last
// activity and the IdleTimeout in force. Callers hold neither sess.mu nor
// any lock that awaitNext takes.
func (s *Server) rearm(sess *session) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if !sess.busy {
		s.armFirewall(sess)
	}
}

// armFirewall sets the read deadline; sess.mu is held. The IdleTimeout is
// read under the lock, so a concurrent SetConfig always leaves the newest
// one in force.
func (s *Server) armFirewall(sess *session) {
	if idle := s.Config().IdleTimeout; idle > 0 {
		_ = sess.conn.SetReadDeadline(sess.last.Add(idle))
	} else {
		_ = sess.conn.SetReadDeadline(time.Time{})
	}
}

// awaitNext marks the session idle after a frame went out and arms the
// firewall. False means the server is shutting down and the session ends.
func (s *Server) awaitNext(sess *session) bool {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	sess.busy = false
	sess.last = time.Now()
	if s.draining.Load() {
		return false
	}
	s.armFirewall(sess)
	return true
}

func (sess *session) begin() {
	sess.mu.Lock()
	sess.busy = true
	sess.mu.Unlock()
}

// serve runs one session until the client leaves, a fault ends it, or the
// server stops.
func (s *Server) serve(sess *session) {
	defer s.end(sess)
	r := s.profile.NewReader(sess.conn)
	var out []byte
	for s.awaitNext(sess) {
		body, err := r.ReadFrame()
		arrived := time.Now()
		if err != nil {
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
				// Counted once cut: a client told of the cut finds the
				// session closed, not a FIN still on its way.
				sess.conn.Close()
				s.idleCuts.Add(1)
				s.log.Debug("idle session cut", "remote", sess.conn.RemoteAddr().String())
			case errors.Is(err, wire.ErrMalformedFrame):
				s.malformedFrame(sess, err)
			}
			return
		}
		sess.begin()
		var m telegram.Message
		if err := s.profile.Decode(body, &m); err != nil {
			s.malformedFrame(sess, err)
			return
		}
		var ok bool
		switch m.Type {
		case telegram.Heartbeat:
			s.heartbeats.Add(1)
			out, ok = s.answer(sess, out, &telegram.Message{
				Type: telegram.HeartbeatAck, TraceNo: m.TraceNo, UserKey: m.UserKey, RespCode: telegram.CodeOK,
			})
		case telegram.Request:
			out, ok = s.request(sess, out, &m, arrived)
		default:
			s.malformedFrame(sess, errors.New("unexpected message type "+string(m.Type)))
			return
		}
		if !ok {
			return
		}
	}
}

// end closes the session. The slot is freed before the socket is closed, so
// a client that sees the close can reconnect at once.
func (s *Server) end(sess *session) {
	s.mu.Lock()
	delete(s.sessions, sess)
	s.active--
	s.mu.Unlock()
	sess.mu.Lock()
	reset := sess.reset
	sess.mu.Unlock()
	if tc, ok := sess.conn.(*net.TCPConn); ok && reset {
		_ = tc.SetLinger(0)
	}
	sess.conn.Close()
	s.wg.Done()
}

func (s *Server) malformedFrame(sess *session, err error) {
	sess.conn.Close() // closed before it is counted, as an idle cut is
	s.malformed.Add(1)
	s.log.Warn("malformed frame from client; closing the session",
		"remote", sess.conn.RemoteAddr().String(), "err", err)
}

// answer encodes m into buf and writes it; false ends the session.
func (s *Server) answer(sess *session, buf []byte, m *telegram.Message) ([]byte, bool) {
	buf, err := s.profile.AppendFrame(buf[:0], m)
	if err != nil {
		s.log.Error("encode answer", "err", err)
		return buf, false
	}
	return buf, s.write(sess.conn, buf) == nil
}

// request answers one request its latency after it arrived, with the
// outcome the configured rates draw.
func (s *Server) request(sess *session, buf []byte, m *telegram.Message, arrived time.Time) ([]byte, bool) {
	s.calls.Add(1)
	cfg := s.Config()
	s.rngMu.Lock()
	delay := cfg.Latency.Sample(s.rng)
	u := s.rng.Float64()
	garbage := u >= cfg.ResetRate && u < cfg.ResetRate+cfg.GarbageRate
	if garbage {
		buf = s.garbageFrame(buf[:0], s.rng)
	}
	s.rngMu.Unlock()

	s.delay.Observe(delay.Seconds())
	if delay > 0 && !s.sleepUntil(arrived.Add(delay)) {
		return buf, false
	}
	switch {
	case u < cfg.ResetRate:
		s.resets.Add(1)
		sess.mu.Lock()
		sess.reset = true
		sess.mu.Unlock()
		return buf, false
	case garbage:
		s.garbage.Add(1)
		return buf, s.write(sess.conn, buf) == nil
	case u < cfg.ResetRate+cfg.GarbageRate+cfg.ErrorRate:
		s.errs.Add(1)
		return s.answer(sess, buf, &telegram.Message{
			Type: telegram.Response, TraceNo: m.TraceNo, UserKey: m.UserKey,
			RespCode: CodeAgencyError, Text: TextAgencyError,
		})
	default:
		return s.answer(sess, buf, &telegram.Message{
			Type: telegram.Response, TraceNo: m.TraceNo, UserKey: m.UserKey,
			RespCode: telegram.CodeOK, Score: Score(m.UserKey), Text: TextOK,
		})
	}
}

// garbageFrame appends a frame no client can read: for length-prefixed
// framing a header of non-digits then random bytes, for fixed frames a full
// frame of random bytes (starting with non-digits, and with no space filler
// where KCB wants one).
func (s *Server) garbageFrame(dst []byte, r *rand.Rand) []byte {
	const nonDigits = "ABCDEFGHIJKLMNOPQRSTUVWXYZ#?!*"
	f := s.profile.Framing
	head, size := f.HeaderWidth, 32
	if f.Kind == wire.Fixed {
		head, size = 4, f.MaxBody
	} else if head <= 0 {
		head = 4
	}
	for i := 0; i < head; i++ {
		dst = append(dst, nonDigits[r.IntN(len(nonDigits))])
	}
	for i := head; i < size; i++ {
		dst = append(dst, byte(r.UintN(256)))
	}
	return dst
}
