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
// sockets to the next one. Only a process of the same user takes part,
// on either side: the socket's directory is private and each end checks
// the other's credentials (private.go); what the host sends is bounded
// before it is used. See docs/decisions/router-handoff.md.
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

// Bounds of what the other side may send: a state beyond them is
// refused, its sockets closed.
const (
	// maxLine bounds one message: the state's data is small, but for a
	// router's quota shares (a hundred bytes for each of up to 10,000
	// clients).
	maxLine = 2 << 20
	// maxSockets bounds the sockets of a state (the router passes two).
	maxSockets = 8
	// maxName bounds a socket's name, maxRelease a release.
	maxName    = 64
	maxRelease = 256
	// maxGeneration bounds a host's generation: a successor's, one more,
	// is still an int on any platform.
	maxGeneration = 1 << 30
)

// ErrNone is Take's answer when no process offers its sockets at the path:
// a first start.
var ErrNone = errors.New("handoff: no process offers its sockets")

// ErrGone is Ready's answer when the host ended before it could answer:
// the successor holds the sockets alone.
var ErrGone = errors.New("handoff: the old process ended before it released the sockets")

// Succession is a successor's side of a handoff under way.
type Succession struct {
	State State
	c     *conn
	files map[string]*os.File
}

// Take asks the process offering its sockets at path for them, within
// ctx. ErrNone: no process listens there (no directory, no socket, or
// one that a process that ended left). The directory must be private
// (see Listen), the host a process of this process's user and the one
// its state names; a state beyond the package's bounds is refused. On
// every error, every socket that came is closed.
func Take(ctx context.Context, path string, hello Hello) (*Succession, error) {
	dir, name, err := splitSocket(path)
	if err != nil {
		return nil, err
	}
	dirfd, err := privateDir(dir, false)
	if errors.Is(err, unix.ENOENT) {
		return nil, ErrNone
	}
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", inDir(dirfd, name))
	_ = unix.Close(dirfd) // an O_PATH descriptor, used only to dial through
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, ErrNone
		}
		return nil, fmt.Errorf("handoff: %s: %w", path, err)
	}
	uc := nc.(*net.UnixConn)
	stop := context.AfterFunc(ctx, func() { _ = uc.SetDeadline(time.Now()) })
	defer stop()
	fail := func(err error) (*Succession, error) {
		_ = uc.Close() // the conversation ends with the error
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return nil, fmt.Errorf("handoff: %s: %w", path, err)
	}
	cred, err := samePeer(uc)
	if err != nil {
		return fail(err)
	}
	c := newConn(uc)
	if err := c.send(message{Hello: &hello}); err != nil {
		return fail(err)
	}
	m, files, err := c.receive()
	if err != nil {
		return fail(err) // receive closed what came
	}
	if err := m.offered(int(cred.Pid), files); err != nil {
		closeAll(files)
		return fail(err)
	}
	s := &Succession{State: *m.State, c: c, files: map[string]*os.File{}}
	for i, name := range m.State.Names {
		s.files[name] = files[i]
	}
	return s, nil
}

// offered says why m, with files, is not a state the host at pid may
// hand over (nil: it is).
func (m message) offered(pid int, files []*os.File) error {
	st := m.State
	switch {
	case m.Refused != "":
		return fmt.Errorf("the old process refused: %.200s", m.Refused)
	case st == nil:
		return errors.New("no state from the old process")
	case st.PID != pid:
		return fmt.Errorf("the state names pid %d, the process offering it is %d", st.PID, pid)
	case st.Generation < 1 || st.Generation > maxGeneration:
		return fmt.Errorf("generation %d, want 1 to %d", st.Generation, maxGeneration)
	case len(st.Release) > maxRelease:
		return fmt.Errorf("a release of %d bytes, over %d", len(st.Release), maxRelease)
	case len(st.Names) > maxSockets:
		return fmt.Errorf("%d sockets, over %d", len(st.Names), maxSockets)
	case len(files) != len(st.Names):
		return fmt.Errorf("%d sockets for %d names", len(files), len(st.Names))
	}
	seen := map[string]bool{}
	for i, name := range st.Names {
		if name == "" || len(name) > maxName || seen[name] {
			return fmt.Errorf("socket %d: the name %.80q is empty, over %d bytes or given twice", i, name, maxName)
		}
		seen[name] = true
		if err := listeningStream(files[i]); err != nil {
			return fmt.Errorf("socket %s: %w", name, err)
		}
	}
	return nil
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
