package handoff

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Host offers a process's sockets at a path.
type Host struct {
	path string
	ln   *net.UnixListener
}

// Listen takes path for the Unix socket. Its directory is created (0700)
// if it does not exist, and refused unless it is private: this process's
// user's, with no access for group or others, not a symbolic link (its
// parent must exist). A socket file left there by a process that ended
// is replaced; one a process still listens on is an error (two hosts for
// one set of sockets).
func Listen(path string) (*Host, error) {
	dir, name, err := splitSocket(path)
	if err != nil {
		return nil, err
	}
	dirfd, err := privateDir(dir, true)
	if err != nil {
		return nil, err
	}
	defer func() { _ = unix.Close(dirfd) }() // an O_PATH descriptor, used only to bind through
	at := inDir(dirfd, name)
	if nc, err := net.DialTimeout("unix", at, time.Second); err == nil {
		_ = nc.Close() // only asked whether someone listens
		return nil, fmt.Errorf("handoff: a process already offers its sockets at %s", path)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
			return nil, fmt.Errorf("handoff: %s exists and is not a socket", path)
		}
		if err := unix.Unlinkat(dirfd, name, 0); err != nil {
			return nil, fmt.Errorf("handoff: remove the socket left at %s: %w", path, err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: at, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("handoff: listen at %s: %w", path, err)
	}
	// The successor takes the path once this socket closes: closing must
	// not remove the successor's.
	ln.SetUnlinkOnClose(false)
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
// refuses the sockets, is not ready within wait, or is not this
// process's user) is reported to failed and the next is served. offer is
// asked anew for each successor. Serve returns ctx's error when ctx ends
// first.
func (h *Host) Serve(ctx context.Context, wait time.Duration, offer func() (Offer, error), failed func(Hello, error)) (Hello, error) {
	stop := context.AfterFunc(ctx, func() { _ = h.ln.SetDeadline(time.Now()) }) // wakes the accept; a closed listener needs no waking
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
			time.Sleep(10 * time.Millisecond) // a failed accept (EMFILE): not a condition to wait for, a pause before the next
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
	stop := context.AfterFunc(ctx, func() { _ = uc.SetDeadline(time.Now()) })
	defer stop()
	c := newConn(uc)
	_ = uc.SetDeadline(time.Now().Add(5 * time.Second)) // a Unix socket takes deadlines
	cred, err := samePeer(uc)
	if err != nil {
		hello := Hello{}
		if cred != nil {
			hello.PID = int(cred.Pid)
		}
		_ = c.send(message{Refused: "not this process's user"}) // told why, if it listens
		return hello, err
	}
	m, files, err := c.receive()
	closeAll(files) // a hello carries no sockets
	if err != nil || m.Hello == nil {
		return Hello{PID: int(cred.Pid)}, fmt.Errorf("no hello from the successor: %v", err)
	}
	hello := *m.Hello
	hello.PID = int(cred.Pid) // the kernel's word over the successor's
	if len(hello.Release) > maxRelease {
		hello.Release = hello.Release[:maxRelease]
		_ = c.send(message{Refused: "a release over the bound"})
		return hello, fmt.Errorf("a release over %d bytes", maxRelease)
	}
	o, err := offer()
	if err != nil {
		closeAll(o.Files)
		_ = c.send(message{Refused: err.Error()})
		return hello, fmt.Errorf("nothing to offer: %w", err)
	}
	err = c.send(message{State: &o.State}, o.Files...)
	closeAll(o.Files)
	if err != nil {
		return hello, fmt.Errorf("sending the sockets: %w", err)
	}
	_ = uc.SetDeadline(time.Now().Add(wait))
	m, files, err = c.receive()
	closeAll(files)
	switch {
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() == nil:
		_ = uc.SetDeadline(time.Now().Add(time.Second))
		_ = c.send(message{Refused: fmt.Sprintf("not ready within %s", wait)})
		return hello, fmt.Errorf("not ready within %s", wait)
	case err != nil:
		return hello, fmt.Errorf("ended before it was ready (%v)", err)
	case !m.Ready:
		return hello, errors.New("said something other than ready")
	}
	// The successor serves: free the path for it, then release. A
	// successor that asked and went before the answer holds the same
	// sockets as this process and may serve on: nothing to undo.
	_ = h.ln.Close()
	_ = uc.SetDeadline(time.Now().Add(5 * time.Second))
	_ = c.send(message{Released: true})
	return hello, nil
}

// Close stops offering; the socket file stays (a successor finds nothing
// listening there and starts fresh). Remove removes it too.
func (h *Host) Close() error { return h.ln.Close() }

// Remove stops offering and removes the socket file: at a stop that
// hands over to no one.
func (h *Host) Remove() error {
	_ = h.ln.Close() // closed already when Serve handed over
	if err := os.Remove(h.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
