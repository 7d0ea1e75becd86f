// Package agencysim is a credit agency over real TCP, for tests, `make run`
// and chaos drills. It speaks the agencies' telegrams (internal/telegram) on
// long-lived sessions: one request (0200) at a time, each answered with a
// 0210 carrying a deterministic score (Score), heartbeats (0800) answered at
// once with 0810.
//
// It misbehaves on demand, the ways the real agencies do: a global session
// limit (the session over it is refused with an error frame), latency drawn
// from a fixed, uniform or log-normal distribution, error answers, garbage
// frames, connection resets, a firewall that silently cuts idle sessions, and
// a line of limited bandwidth. Every knob (Config) can be turned while the
// server runs, from code (SetConfig) or over HTTP (AdminHandler).
//
// Guarantees: the number of admitted sessions never exceeds
// Config.MaxSessions; a client's malformed frame closes its session and is
// counted; Close and Shutdown return only after every goroutine the server
// started has ended.
package agencysim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/metric"
	"github.com/cellkit/cellkit/internal/telegram"
)

// Response codes the simulator answers besides telegram.CodeOK.
const (
	// CodeSessionLimit refuses a session over Config.MaxSessions.
	CodeSessionLimit = "9001"
	// CodeAgencyError is the answer to a request drawn by Config.ErrorRate.
	CodeAgencyError = "5001"
)

// Texts of the answers.
const (
	TextOK           = "정상 처리"
	TextSessionLimit = "session limit"
	TextAgencyError  = "agency error"
)

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("agencysim: server closed")

// closeWriter is a connection that can half-close: a refused session gets
// its error frame and a FIN before the socket is closed.
type closeWriter interface{ CloseWrite() error }

var _ closeWriter = (*net.TCPConn)(nil)

// refuseLinger bounds how long a refused connection is kept to let the
// client read the error frame before the socket is closed.
const refuseLinger = time.Second

// Options are the server's collaborators.
type Options struct {
	// Profile is the agency the server plays: its name, framing and
	// telegram layout (telegram.NICE(), telegram.KCB()). Required.
	Profile telegram.Profile
	// Logger receives one line per start, config change, malformed client
	// frame and shutdown (per-session events at debug level). Nil means
	// none.
	Logger *slog.Logger
	// Registerer receives the server's metrics, cellkit_agencysim_*, with
	// the label agency=<profile name>. Several servers of different
	// profiles can share one registerer. Nil means none are registered.
	Registerer prometheus.Registerer
}

// withDefaults fills the nil collaborators that have a default: Logger
// (none).
func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Stats are the server's counters since it was created.
type Stats struct {
	ActiveSessions int64 `json:"active_sessions"` // admitted sessions now open
	PeakSessions   int64 `json:"peak_sessions"`   // most admitted sessions open at once
	Accepted       int64 `json:"accepted"`        // sessions admitted
	Refused        int64 `json:"refused"`         // connections refused over MaxSessions
	Calls          int64 `json:"calls"`           // requests received, whatever their outcome
	Errors         int64 `json:"errors"`          // requests answered with CodeAgencyError
	Garbage        int64 `json:"garbage"`         // requests answered with a garbage frame
	Resets         int64 `json:"resets"`          // requests answered by a connection reset
	IdleCuts       int64 `json:"idle_cuts"`       // sessions cut by the idle firewall
	Heartbeats     int64 `json:"heartbeats"`      // heartbeats answered
	Malformed      int64 `json:"malformed"`       // sessions closed for a malformed client frame
	BytesOut       int64 `json:"bytes_out"`       // bytes written to clients
}

// Server is one simulated agency. Create it with New.
type Server struct {
	profile telegram.Profile
	log     *slog.Logger

	cfgMu sync.Mutex // serialises SetConfig
	cfg   atomic.Pointer[Config]
	line  atomic.Pointer[rate.Limiter] // nil: unlimited bandwidth

	rngMu sync.Mutex
	rng   *rand.Rand

	mu       sync.Mutex
	ln       net.Listener
	sessions map[*session]struct{}
	refusing map[net.Conn]struct{}
	active   int64
	peak     int64
	closing  bool           // Shutdown or Close was called
	wg       sync.WaitGroup // Serve, sessions and refusals

	draining atomic.Bool   // sessions end after their current request
	stop     chan struct{} // closed by Close: abandon waits at once
	stopOnce sync.Once

	accepted, refused, calls, errs, garbage, resets atomic.Int64
	idleCuts, heartbeats, malformed, bytesOut       atomic.Int64
	delay                                           prometheus.Histogram
	slack                                           slack
}

// New returns a server of opts.Profile. An invalid cfg is reported by
// Serve. Call Serve or ListenAndServe to start it.
func New(cfg Config, opts Options) (*Server, error) {
	profile := opts.Profile
	if profile.Name == "" {
		return nil, errors.New("agencysim: no profile")
	}
	opts = opts.withDefaults()
	s := &Server{
		profile:  profile,
		log:      opts.Logger.With("agency", profile.Name),
		sessions: make(map[*session]struct{}),
		refusing: make(map[net.Conn]struct{}),
		stop:     make(chan struct{}),
	}
	s.delay = metric.Histogram(nil, api.MetricAgencysimDelaySeconds,
		[]float64{.005, .01, .025, .05, .1, .25, .5, 1, 1.5, 2, 3, 5, 10, 30}, prometheus.Labels{api.LabelAgency: profile.Name})
	s.install(Config{}, cfg, true)
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(collector{s}); err != nil {
			return nil, fmt.Errorf("agencysim %s: register metrics: %w", profile.Name, err)
		}
	}
	return s, nil
}

// Profile returns the server's telegram profile.
func (s *Server) Profile() telegram.Profile { return s.profile }

// Config returns the configuration in force.
func (s *Server) Config() Config { return *s.cfg.Load() }

// SetConfig replaces the configuration while the server runs. It applies to
// the next request of every session (a request already waiting out its
// latency keeps it), and a new IdleTimeout applies at once to idle sessions.
// An invalid cfg is an error and changes nothing.
func (s *Server) SetConfig(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	s.cfgMu.Lock()
	defer s.cfgMu.Unlock()
	old := s.Config()
	s.install(old, cfg, false)
	s.log.Info("agency config changed",
		"max_sessions", cfg.MaxSessions, "latency", cfg.Latency.String(),
		"error_rate", cfg.ErrorRate, "garbage_rate", cfg.GarbageRate, "reset_rate", cfg.ResetRate,
		"idle_timeout", cfg.IdleTimeout, "bandwidth_bytes_per_sec", cfg.BandwidthBytesPerSec)
	return nil
}

// install makes cfg current and updates what depends on it.
func (s *Server) install(old, cfg Config, first bool) {
	s.cfg.Store(&cfg)
	if first || cfg.Seed != old.Seed {
		s.rngMu.Lock()
		s.rng = rand.New(rand.NewPCG(uint64(cfg.Seed), 0x9e3779b97f4a7c15))
		s.rngMu.Unlock()
	}
	if first || cfg.BandwidthBytesPerSec != old.BandwidthBytesPerSec {
		if bw := cfg.BandwidthBytesPerSec; bw > 0 {
			s.line.Store(rate.NewLimiter(rate.Limit(bw), LineBurst(bw)))
		} else {
			s.line.Store(nil)
		}
	}
	if !first && cfg.IdleTimeout != old.IdleTimeout {
		s.mu.Lock()
		for sess := range s.sessions {
			s.rearm(sess)
		}
		s.mu.Unlock()
	}
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	active, peak := s.active, s.peak
	s.mu.Unlock()
	return Stats{
		ActiveSessions: active,
		PeakSessions:   peak,
		Accepted:       s.accepted.Load(),
		Refused:        s.refused.Load(),
		Calls:          s.calls.Load(),
		Errors:         s.errs.Load(),
		Garbage:        s.garbage.Load(),
		Resets:         s.resets.Load(),
		IdleCuts:       s.idleCuts.Load(),
		Heartbeats:     s.heartbeats.Load(),
		Malformed:      s.malformed.Load(),
		BytesOut:       s.bytesOut.Load(),
	}
}

// Addr returns the address the server listens on, nil before Serve.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// ListenAndServe listens on the TCP address addr and serves.
func (s *Server) ListenAndServe(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("agencysim: listen: %w", err)
	}
	return s.Serve(ln)
}

// Serve accepts sessions on ln until Shutdown or Close, then returns
// ErrServerClosed. It closes ln. A server serves one listener.
func (s *Server) Serve(ln net.Listener) error {
	if err := s.Config().Validate(); err != nil {
		ln.Close()
		return fmt.Errorf("agencysim: %w", err)
	}
	s.mu.Lock()
	switch {
	case s.closing:
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	case s.ln != nil:
		s.mu.Unlock()
		ln.Close()
		return errors.New("agencysim: already serving")
	}
	s.ln = ln
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()

	s.log.Info("agency simulator listening", "addr", ln.Addr().String())
	var backoff time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			if s.isClosing() {
				return ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("agencysim: accept: %w", err)
			}
			// Out of file descriptors and the like: wait and retry, as
			// net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("accept failed; retrying", "err", err, "backoff", backoff)
			if !s.sleep(backoff) {
				return ErrServerClosed
			}
			continue
		}
		backoff = 0
		s.admit(conn)
	}
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// admit starts a session for conn, or refuses it over the session limit.
func (s *Server) admit(conn net.Conn) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		conn.Close()
		return
	}
	if limit := int64(s.Config().MaxSessions); limit > 0 && s.active >= limit {
		s.refusing[conn] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		s.refused.Add(1)
		go s.refuse(conn)
		return
	}
	s.active++
	s.peak = max(s.peak, s.active)
	sess := &session{conn: conn, last: time.Now()}
	s.sessions[sess] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	s.accepted.Add(1)
	go s.serve(sess)
}

// refuse sends conn the session-limit frame and closes it. It half-closes
// first and drains what the client sent, briefly, so that closing does not
// reset the connection before the client has read the frame.
func (s *Server) refuse(conn net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.refusing, conn)
		s.mu.Unlock()
		conn.Close()
	}()
	s.log.Debug("session refused over the limit", "remote", conn.RemoteAddr().String())
	_ = conn.SetDeadline(time.Now().Add(refuseLinger))
	frame, err := s.profile.AppendFrame(nil, &telegram.Message{
		Type: telegram.Response, RespCode: CodeSessionLimit, Text: TextSessionLimit,
	})
	if err != nil {
		s.log.Error("encode session-limit frame", "err", err)
		return
	}
	n, err := conn.Write(frame)
	s.bytesOut.Add(int64(n))
	if err != nil {
		return
	}
	if cw, ok := conn.(closeWriter); ok {
		_ = cw.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, conn)
}

// Shutdown stops accepting, closes idle sessions at once and the others as
// soon as their current request is answered, and waits for every goroutine.
// If ctx ends first it closes everything as Close does and returns
// ctx.Err().
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	s.draining.Store(true)
	ln := s.ln
	sessions := make([]*session, 0, len(s.sessions))
	for sess := range s.sessions {
		sessions = append(sessions, sess)
	}
	s.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for _, sess := range sessions {
		sess.closeIfIdle()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		s.log.Info("agency simulator stopped")
		return nil
	case <-ctx.Done():
		if err := s.Close(); err != nil {
			s.log.Warn("agency simulator close", "err", err)
		}
		<-done
		return ctx.Err()
	}
}

// Close stops accepting, closes every session at once (requests waiting out
// their latency are dropped) and waits for every goroutine. It returns nil;
// the error is there for io.Closer.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closing = true
	s.draining.Store(true)
	ln := s.ln
	conns := make([]net.Conn, 0, len(s.sessions)+len(s.refusing))
	for sess := range s.sessions {
		conns = append(conns, sess.conn)
	}
	for c := range s.refusing {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	s.stopOnce.Do(func() { close(s.stop) })
	if ln != nil {
		ln.Close()
	}
	for _, c := range conns {
		c.Close()
	}
	s.wg.Wait()
	return nil
}

// LineBurst is the most bytes a line of bw bytes/s sends at once: 1/100 s
// of the line, and at least 256 bytes so a telegram goes in one piece. A
// frame waits for the line as a whole, so its last byte arrives when it
// would on a real line; the first ones arrive a little late.
func LineBurst(bw int) int { return max(256, bw/100) }

// sleep waits d, or less if the server is closed; false means closed.
func (s *Server) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.stop:
		return false
	}
}

// write writes b to conn at the pace of the line.
func (s *Server) write(conn net.Conn, b []byte) error {
	for len(b) > 0 {
		n := len(b)
		if line := s.line.Load(); line != nil {
			n = min(n, line.Burst())
			if r := line.ReserveN(time.Now(), n); r.OK() {
				if d := r.Delay(); d > 0 && !s.sleep(d) {
					r.Cancel()
					return ErrServerClosed
				}
			}
		}
		w, err := conn.Write(b[:n])
		s.bytesOut.Add(int64(w))
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}
