package agencysim

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/telegram"
	"github.com/cellkit/cellkit/internal/testkit"
	"github.com/cellkit/cellkit/internal/wire"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// ioTimeout bounds every client read and write, so a broken server fails a
// test instead of hanging it.
const ioTimeout = 5 * time.Second

// startServer serves a new simulator on a loopback port and closes it at
// cleanup, checking that Serve ended with ErrServerClosed.
func startServer(t *testing.T, p telegram.Profile, cfg Config) *Server {
	t.Helper()
	return startServerWith(t, p, cfg, Options{Logger: testkit.Logger(), Registerer: prometheus.NewRegistry()})
}

func startServerWith(t *testing.T, p telegram.Profile, cfg Config, opts Options) *Server {
	t.Helper()
	opts.Profile = p
	srv, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ln := testkit.Listen(t)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve() = %v, want ErrServerClosed", err)
		}
	})
	testkit.WaitFor(t, ioTimeout, "server listening", func() bool { return srv.Addr() != nil })
	return srv
}

// waitStats polls the server's stats until cond holds.
func waitStats(t *testing.T, srv *Server, what string, cond func(Stats) bool) Stats {
	t.Helper()
	var st Stats
	testkit.WaitFor(t, ioTimeout, what, func() bool { st = srv.Stats(); return cond(st) })
	return st
}

// client is a minimal agency client: one connection, one frame at a time.
type client struct {
	t    *testing.T
	p    telegram.Profile
	conn net.Conn
	r    *wire.Reader
	buf  []byte
}

func dial(t *testing.T, srv *Server) *client {
	t.Helper()
	conn, err := net.DialTimeout("tcp", srv.Addr().String(), ioTimeout)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return &client{t: t, p: srv.Profile(), conn: conn, r: srv.Profile().NewReader(conn)}
}

func (c *client) send(m *telegram.Message) error {
	var err error
	if c.buf, err = c.p.AppendFrame(c.buf[:0], m); err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	return c.sendRaw(c.buf)
}

func (c *client) sendRaw(b []byte) error {
	_ = c.conn.SetWriteDeadline(time.Now().Add(ioTimeout))
	_, err := c.conn.Write(b)
	return err
}

func (c *client) recv() (telegram.Message, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(ioTimeout))
	body, err := c.r.ReadFrame()
	if err != nil {
		return telegram.Message{}, err
	}
	var m telegram.Message
	if err := c.p.Decode(body, &m); err != nil {
		return telegram.Message{}, fmt.Errorf("decode: %w", err)
	}
	return m, nil
}

func (c *client) call(m *telegram.Message) (telegram.Message, error) {
	if err := c.send(m); err != nil {
		return telegram.Message{}, err
	}
	return c.recv()
}

// mustCall makes a request for userKey and fails the test unless it is
// answered.
func (c *client) mustCall(trace uint64, userKey string) telegram.Message {
	c.t.Helper()
	resp, err := c.call(&telegram.Message{Type: telegram.Request, TraceNo: trace, UserKey: userKey})
	if err != nil {
		c.t.Fatalf("call(%d, %q): %v", trace, userKey, err)
	}
	return resp
}

func (c *client) heartbeat(trace uint64) (telegram.Message, error) {
	return c.call(&telegram.Message{Type: telegram.Heartbeat, TraceNo: trace})
}

// closedByServer reports whether err says the server ended the connection
// (close or reset), as opposed to a client-side timeout.
func closedByServer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// expectClosed fails unless the server has closed the client's connection.
func (c *client) expectClosed() {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(ioTimeout))
	var b [256]byte
	for {
		_, err := c.conn.Read(b[:])
		if err == nil {
			continue
		}
		if !closedByServer(err) {
			c.t.Fatalf("read after the server should have closed: %v, want EOF or reset", err)
		}
		return
	}
}
