// Package handoff passes a running process's listening sockets to its
// successor on the same host, over a Unix socket, so that a restart or an
// upgrade never has a moment in which the port refuses a connection: the
// successor accepts from the very sockets (and accept queues) the old
// process had, and the old one stops accepting only once the successor
// says it serves.
//
// The old process (the host) listens on a Unix socket at a path both know.
// A successor connects, says who it is, and gets the sockets (SCM_RIGHTS)
// with the host's state: its generation and data of the program's own
// (the router's TLS session ticket keys). The successor starts on them;
// once it serves it says ready, and the host closes its Unix socket,
// answers released, and drains. A successor that ends or fails before it
// is ready changes nothing: the host goes on serving and offers the
// sockets to the next one. See docs/decisions/router-handoff.md.
//
//	successor                      host (the old process)
//	   hello {pid, release}  ──▶
//	                         ◀──  state {generation, names, data} + sockets
//	   (starts on the sockets)
//	   ready                 ──▶
//	                              closes its Unix socket, stops accepting
//	                         ◀──  released
//	   listens at the path: the host of the next handoff
package handoff

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Hello is what a successor says of itself.
type Hello struct {
	PID     int    `json:"pid"`
	Release string `json:"release,omitempty"`
}

// State is what the host hands over besides its sockets.
type State struct {
	PID        int    `json:"pid"`
	Generation int    `json:"generation"` // the host's: 1 for a process that took over from none
	Release    string `json:"release,omitempty"`
	// Names name the sockets, in the order they are passed.
	Names []string `json:"names"`
	// Data is the program's own: what else the successor must carry on.
	Data json.RawMessage `json:"data,omitempty"`
}

// message is one line of the conversation.
type message struct {
	Hello    *Hello `json:"hello,omitempty"`
	State    *State `json:"state,omitempty"`
	Ready    bool   `json:"ready,omitempty"`
	Released bool   `json:"released,omitempty"`
	Refused  string `json:"refused,omitempty"`
}

// maxLine bounds one message: the state's data is small.
const maxLine = 64 << 10

// ErrNone is Take's answer when no process offers its sockets at the path:
// a first start.
var ErrNone = errors.New("handoff: no process offers its sockets")

// ErrGone is Ready's answer when the host ended before it could answer:
// the successor holds the sockets alone.
var ErrGone = errors.New("handoff: the old process ended before it released the sockets")

// conn is one end of a conversation.
type conn struct {
	uc *net.UnixConn
	r  *bufio.Reader
}

func newConn(uc *net.UnixConn) *conn { return &conn{uc: uc, r: bufio.NewReaderSize(uc, 4096)} }

func (c *conn) send(m message, files ...*os.File) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = syscall.UnixRights(fds...)
	}
	n, _, err := c.uc.WriteMsgUnix(b, oob, nil)
	if err == nil && n < len(b) {
		_, err = c.uc.Write(b[n:])
	}
	return err
}

// receive reads one message; files are the sockets that came with it
// (only the state carries any, in its first bytes).
func (c *conn) receive() (message, []*os.File, error) {
	var files []*os.File
	if c.r.Buffered() == 0 {
		// Read the first bytes with their control message: the sockets
		// travel with the state's first byte.
		buf := make([]byte, 4096)
		oob := make([]byte, syscall.CmsgSpace(16*4))
		n, oobn, _, _, err := c.uc.ReadMsgUnix(buf, oob)
		if oobn > 0 {
			files = parseRights(oob[:oobn])
		}
		if err != nil {
			closeAll(files)
			return message{}, nil, err
		}
		if n == 0 {
			closeAll(files)
			return message{}, nil, errors.New("handoff: the other side closed")
		}
		c.r = bufio.NewReaderSize(&prefixed{head: buf[:n], rest: c.uc}, 4096)
	}
	line, err := readLine(c.r)
	if err != nil {
		closeAll(files)
		return message{}, nil, err
	}
	var m message
	if err := json.Unmarshal(line, &m); err != nil {
		closeAll(files)
		return message{}, nil, fmt.Errorf("handoff: a message that is not one: %w", err)
	}
	return m, files, nil
}

// prefixed reads head, then rest.
type prefixed struct {
	head []byte
	rest *net.UnixConn
}

func (p *prefixed) Read(b []byte) (int, error) {
	if len(p.head) > 0 {
		n := copy(b, p.head)
		p.head = p.head[n:]
		return n, nil
	}
	return p.rest.Read(b)
}

func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		part, more, err := r.ReadLine()
		if err != nil {
			return nil, err
		}
		line = append(line, part...)
		if len(line) > maxLine {
			return nil, errors.New("handoff: a message over 64 KiB")
		}
		if !more {
			return line, nil
		}
	}
}

func parseRights(oob []byte) []*os.File {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := syscall.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			syscall.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "handed-over"))
		}
	}
	return files
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// Succession is a successor's side of a handoff under way.
type Succession struct {
	State State
	c     *conn
	files map[string]*os.File
}

// Take asks the process offering its sockets at path for them, within
// ctx. ErrNone: no process listens there (none, or one that ended and
// left its socket file).
func Take(ctx context.Context, path string, hello Hello) (*Succession, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, ErrNone
		}
		return nil, fmt.Errorf("handoff: %w", err)
	}
	uc := nc.(*net.UnixConn)
	stop := context.AfterFunc(ctx, func() { uc.SetDeadline(time.Now()) })
	defer stop()
	c := newConn(uc)
	fail := func(err error) (*Succession, error) {
		uc.Close()
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return nil, fmt.Errorf("handoff: %w", err)
	}
	if err := c.send(message{Hello: &hello}); err != nil {
		return fail(err)
	}
	m, files, err := c.receive()
	switch {
	case err != nil:
		return fail(err)
	case m.Refused != "":
		closeAll(files)
		return fail(fmt.Errorf("the old process refused: %s", m.Refused))
	case m.State == nil:
		closeAll(files)
		return fail(errors.New("no state from the old process"))
	case len(files) != len(m.State.Names):
		closeAll(files)
		return fail(fmt.Errorf("%d sockets for %d names", len(files), len(m.State.Names)))
	}
	s := &Succession{State: *m.State, c: c, files: map[string]*os.File{}}
	for i, name := range m.State.Names {
		s.files[name] = files[i]
	}
	return s, nil
}

// Listener is the handed-over listening socket called name, nil if none
// has that name. It may be taken once.
func (s *Succession) Listener(name string) (net.Listener, error) {
	f := s.files[name]
	if f == nil {
		return nil, nil
	}
	delete(s.files, name)
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("handoff: socket %s: %w", name, err)
	}
	return ln, nil
}

// Ready tells the host that this process serves: it stops accepting and
// drains. nil: released, the host's Unix socket is closed (Listen may
// take the path). ErrGone: the host ended first; this process holds the
// sockets alone. Any other error: the host refused (its wait ran out)
// and still serves.
func (s *Succession) Ready(ctx context.Context) error {
	defer s.Close()
	stop := context.AfterFunc(ctx, func() { s.c.uc.SetDeadline(time.Now()) })
	defer stop()
	// A host that refused has said so before it closed: read its word
	// even when the ready cannot be sent.
	serr := s.c.send(message{Ready: true})
	m, files, err := s.c.receive()
	if err != nil && serr != nil {
		err = serr
	}
	closeAll(files)
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("handoff: no answer from the old process: %w", ctx.Err())
	case err != nil:
		return ErrGone
	case m.Refused != "":
		return fmt.Errorf("handoff: the old process refused: %s", m.Refused)
	case !m.Released:
		return errors.New("handoff: the old process answered ready with neither released nor refused")
	}
	return nil
}

// Close ends the succession; the files not taken are closed. A host
// whose successor closes before ready goes on serving.
func (s *Succession) Close() {
	s.c.uc.Close()
	for name, f := range s.files {
		f.Close()
		delete(s.files, name)
	}
}

// Host offers a process's sockets at a path.
type Host struct {
	path string
	ln   *net.UnixListener
}

// Listen takes path for the Unix socket: a socket file left there by a
// process that ended is replaced; one a process still listens on is an
// error (two hosts for one set of sockets).
func Listen(path string) (*Host, error) {
	if nc, err := net.DialTimeout("unix", path, time.Second); err == nil {
		nc.Close()
		return nil, fmt.Errorf("handoff: a process already offers its sockets at %s", path)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("handoff: %s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("handoff: %w", err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("handoff: %w", err)
	}
	// The successor takes the path once this socket closes: closing must
	// not remove the successor's.
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("handoff: %w", err)
	}
	return &Host{path: path, ln: ln}, nil
}

// Path is where the host listens.
func (h *Host) Path() string { return h.path }

// Offer is what a host hands over: its state and the sockets, named in
// State.Names in the same order. The files are the offer's to close.
type Offer struct {
	State State
	Files []*os.File
}

// Serve offers the sockets to successors, one at a time, until one is
// ready: it returns that one's hello once the Unix socket is closed and
// the successor told it is released. A successor that fails (ends,
// refuses the sockets, or is not ready within wait) is reported to
// failed and the next is served. offer is asked anew for each
// successor. Serve returns ctx's error when ctx ends first.
func (h *Host) Serve(ctx context.Context, wait time.Duration, offer func() (Offer, error), failed func(Hello, error)) (Hello, error) {
	stop := context.AfterFunc(ctx, func() { h.ln.SetDeadline(time.Now()) })
	defer stop()
	for {
		uc, err := h.ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return Hello{}, ctx.Err()
			}
			if errors.Is(err, net.ErrClosed) {
				return Hello{}, err
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		hello, err := h.serveOne(ctx, uc, wait, offer)
		if err == nil {
			return hello, nil
		}
		failed(hello, err)
	}
}

// serveOne holds one conversation; nil: the successor is ready and
// released.
func (h *Host) serveOne(ctx context.Context, uc *net.UnixConn, wait time.Duration, offer func() (Offer, error)) (Hello, error) {
	defer uc.Close()
	stop := context.AfterFunc(ctx, func() { uc.SetDeadline(time.Now()) })
	defer stop()
	c := newConn(uc)
	uc.SetDeadline(time.Now().Add(5 * time.Second))
	m, files, err := c.receive()
	closeAll(files)
	if err != nil || m.Hello == nil {
		return Hello{}, fmt.Errorf("no hello from the successor: %v", err)
	}
	hello := *m.Hello
	if cred, err := peerPID(uc); err == nil && cred != hello.PID {
		hello.PID = cred // the kernel's word over the successor's
	}
	o, err := offer()
	if err != nil {
		_ = c.send(message{Refused: err.Error()})
		return hello, fmt.Errorf("nothing to offer: %w", err)
	}
	err = c.send(message{State: &o.State}, o.Files...)
	closeAll(o.Files)
	if err != nil {
		return hello, fmt.Errorf("sending the sockets: %w", err)
	}
	uc.SetDeadline(time.Now().Add(wait))
	m, files, err = c.receive()
	closeAll(files)
	switch {
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() == nil:
		uc.SetDeadline(time.Now().Add(time.Second))
		_ = c.send(message{Refused: fmt.Sprintf("not ready within %s", wait)})
		return hello, fmt.Errorf("not ready within %s", wait)
	case err != nil:
		return hello, fmt.Errorf("ended before it was ready (%v)", err)
	case !m.Ready:
		return hello, errors.New("said something other than ready")
	}
	// The successor serves: free the path for it, then release.
	h.ln.Close()
	uc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := c.send(message{Released: true}); err != nil {
		// It asked and went: its sockets are the same as ours, and it
		// may serve on; nothing to undo here.
		return hello, nil
	}
	return hello, nil
}

// Close stops offering; the socket file stays (a successor finds nothing
// listening there and starts fresh). Remove removes it too.
func (h *Host) Close() error { return h.ln.Close() }

// Remove stops offering and removes the socket file: at a stop that
// hands over to no one.
func (h *Host) Remove() error {
	h.ln.Close()
	if err := os.Remove(h.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// peerPID is the pid of the process at the other end of uc.
func peerPID(uc *net.UnixConn) (int, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	return int(cred.Pid), nil
}

// Files are the files of listeners, to offer: duplicates the offer
// closes once sent. They are made from the sockets' descriptors without
// net's File, whose descriptor (Fd, needed to send it) is switched to
// blocking mode: a mode the duplicate shares with the listener, whose
// accepts would then block a thread each, and whose Close would wait for
// a connection to come.
func Files(lns ...net.Listener) ([]*os.File, error) {
	var files []*os.File
	for _, ln := range lns {
		sc, ok := ln.(syscall.Conn)
		if !ok {
			closeAll(files)
			return nil, fmt.Errorf("handoff: a %T has no descriptor", ln)
		}
		rc, err := sc.SyscallConn()
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("handoff: %w", err)
		}
		var dup int
		var derr error
		if err := rc.Control(func(fd uintptr) {
			dup, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
		}); err != nil || derr != nil {
			closeAll(files)
			return nil, fmt.Errorf("handoff: duplicate a socket: %w", errors.Join(err, derr))
		}
		files = append(files, os.NewFile(uintptr(dup), ln.Addr().String()))
	}
	return files, nil
}
