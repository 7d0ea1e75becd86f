package agency

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/cellkit/cellkit/internal/sessionpool"
	"github.com/cellkit/cellkit/internal/telegram"
	"github.com/cellkit/cellkit/internal/wire"
)

// ErrProtocol means the agency answered out of step (a wrong message type or
// trace number): the session cannot be trusted any more.
var ErrProtocol = errors.New("agency protocol error")

// CodeError is an answer with a response code other than 0000: the call
// failed, the session is fine.
type CodeError struct {
	Agency string
	Code   string
	Text   string
}

func (e *CodeError) Error() string {
	if e.Text == "" {
		return fmt.Sprintf("%s answered %s", e.Agency, e.Code)
	}
	return fmt.Sprintf("%s answered %s (%s)", e.Agency, e.Code, e.Text)
}

// Conn is one TCP session to an agency, used by one caller at a time (the
// session pool guarantees it). Any transport or framing error leaves it
// broken; the caller returns it to the pool as such.
type Conn struct {
	nc      net.Conn
	profile telegram.Profile
	r       *wire.Reader
	wbuf    []byte
	trace   uint64
	probe   [1]byte
}

// A Conn is a pool session that can tell it is dead without a round trip.
var (
	_ sessionpool.Conn    = (*Conn)(nil)
	_ sessionpool.Checker = (*Conn)(nil)
)

// Dial opens a session and proves it with a heartbeat, so that a session the
// agency refuses (over its global limit, it answers with an error frame and
// hangs up) never enters the pool.
func Dial(ctx context.Context, addr string, profile telegram.Profile) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s at %s: %w", profile.Name, addr, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
		tc.SetKeepAlive(true)
	}
	c := &Conn{nc: nc, profile: profile, r: profile.NewReader(nc)}
	if err := c.Heartbeat(ctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("open %s session at %s: %w", profile.Name, addr, err)
	}
	return c, nil
}

// Inquire asks for a user's score. A *CodeError means the agency refused the
// request; any other error means the session is broken.
func (c *Conn) Inquire(ctx context.Context, userKey string) (telegram.Message, error) {
	resp, err := c.roundTrip(ctx, telegram.Message{Type: telegram.Request, UserKey: userKey}, telegram.Response)
	if err != nil {
		return resp, err
	}
	if resp.RespCode != telegram.CodeOK {
		return resp, &CodeError{Agency: c.profile.Name, Code: resp.RespCode, Text: resp.Text}
	}
	return resp, nil
}

// Heartbeat sends 0800 and expects 0810.
func (c *Conn) Heartbeat(ctx context.Context) error {
	resp, err := c.roundTrip(ctx, telegram.Message{Type: telegram.Heartbeat}, telegram.HeartbeatAck)
	if err == nil && resp.RespCode != "" && resp.RespCode != telegram.CodeOK {
		err = &CodeError{Agency: c.profile.Name, Code: resp.RespCode, Text: resp.Text}
	}
	return err
}

func (c *Conn) roundTrip(ctx context.Context, req telegram.Message, want telegram.Type) (telegram.Message, error) {
	var resp telegram.Message
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Minute) // never an unbounded wait
	}
	if err := c.nc.SetDeadline(deadline); err != nil {
		return resp, err
	}
	c.trace = c.trace%999_999_999_999 + 1
	req.TraceNo = c.trace
	req.RespCode = telegram.CodeOK
	var err error
	if c.wbuf, err = c.profile.AppendFrame(c.wbuf[:0], &req); err != nil {
		return resp, fmt.Errorf("encode %s %s: %w", c.profile.Name, req.Type, err)
	}
	if _, err := c.nc.Write(c.wbuf); err != nil {
		return resp, c.ioError(ctx, err)
	}
	body, err := c.r.ReadFrame()
	if err != nil {
		return resp, c.ioError(ctx, err)
	}
	if err := c.profile.Decode(body, &resp); err != nil {
		return resp, fmt.Errorf("%w: %s sent an undecodable frame: %v", ErrProtocol, c.profile.Name, err)
	}
	if resp.Type != want || resp.TraceNo != req.TraceNo {
		if resp.Type == telegram.Response && resp.RespCode != telegram.CodeOK {
			// An unsolicited error frame: the agency is refusing the session.
			return resp, fmt.Errorf("%w: %w", ErrProtocol, &CodeError{Agency: c.profile.Name, Code: resp.RespCode, Text: resp.Text})
		}
		return resp, fmt.Errorf("%w: sent %s #%d, %s answered %s #%d", ErrProtocol, req.Type, req.TraceNo, c.profile.Name, resp.Type, resp.TraceNo)
	}
	return resp, nil
}

// ioError names a socket timeout as the context's deadline: the socket
// deadline is the context's, and its timer may fire first.
func (c *Conn) ioError(ctx context.Context, err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("%s session: %w", c.profile.Name, cerr)
		}
		if _, ok := ctx.Deadline(); ok {
			return fmt.Errorf("%s session: %w", c.profile.Name, context.DeadlineExceeded)
		}
	}
	return fmt.Errorf("%s session: %w", c.profile.Name, err)
}

// Alive reports, without a round trip, whether the session still looks
// usable: the agency has not closed or reset it and has sent nothing unasked.
// It is called between calls, when the stream must be silent. It peeks at
// the socket without blocking (a read with a past deadline would not even
// reach the kernel).
func (c *Conn) Alive() bool {
	sc, ok := c.nc.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	err = raw.Read(func(fd uintptr) bool {
		n, _, rerr := syscall.Recvfrom(int(fd), c.probe[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// EAGAIN: nothing to read, the healthy case. n == 0: orderly close.
		// n > 0: bytes nobody asked for. Anything else: reset or worse.
		alive = n <= 0 && errors.Is(rerr, syscall.EAGAIN)
		return true // never wait for readiness
	})
	return err == nil && alive
}

// closeWait bounds how long Close waits for the agency to acknowledge.
const closeWait = 500 * time.Millisecond

// Close ends the session and waits (up to closeWait) until the agency has
// closed its side too, so that a replacement dialled right after is not
// counted against the agency's session limit together with this one.
func (c *Conn) Close() error {
	if tc, ok := c.nc.(*net.TCPConn); ok {
		if tc.CloseWrite() == nil && tc.SetReadDeadline(time.Now().Add(closeWait)) == nil {
			var buf [512]byte
			for {
				if _, err := tc.Read(buf[:]); err != nil {
					break // EOF: the agency closed its side; or the wait ran out
				}
			}
		}
	}
	return c.nc.Close()
}

// LocalAddr is the session's local address (tests use it to prove reuse).
func (c *Conn) LocalAddr() net.Addr { return c.nc.LocalAddr() }
