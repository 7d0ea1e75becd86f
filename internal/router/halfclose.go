package router

import (
	"crypto/tls"
	"net"
	"os"
	"time"
)

// conn is what the loop needs of a client connection: gnet's, or a
// halfClosed one.
type conn interface {
	Peek(n int) ([]byte, error)
	Discard(n int) (int, error)
	InboundBuffered() int
	OutboundBuffered() int
	Write(b []byte) (int, error)
}

// halfClosed is a client connection whose client ended its side (a FIN
// after its request) while the request was being answered. net/http still
// sends the answer then, and so does the router; but gnet closes its socket
// on the FIN, so the loop keeps a duplicate of the socket, collects the
// answer, and finish writes it there off the loop and closes it.
type halfClosed struct {
	fd      int
	timeout time.Duration
	out     []byte
	tls     *tls.Conn // a TLS connection's: what the loop writes is encrypted into out
}

var _ conn = (*halfClosed)(nil)

func (h *halfClosed) Peek(int) ([]byte, error) { return nil, nil }

func (h *halfClosed) Discard(int) (int, error) { return 0, nil }

func (h *halfClosed) InboundBuffered() int { return 0 }

func (h *halfClosed) OutboundBuffered() int { return 0 }

func (h *halfClosed) Write(b []byte) (int, error) {
	if h.tls != nil {
		return h.tls.Write(b)
	}
	h.out = append(h.out, b...)
	return len(b), nil
}

// finish writes what the loop wrote to the client, within timeout, and
// closes the socket, from a goroutine of its own.
func (h *halfClosed) finish() {
	out, fd, timeout := h.out, h.fd, h.timeout
	h.out = nil
	go func() {
		f := os.NewFile(uintptr(fd), "client")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetWriteDeadline(time.Now().Add(timeout))
		_, _ = c.Write(out) // the last answer to a client that is leaving: best effort
	}()
}
