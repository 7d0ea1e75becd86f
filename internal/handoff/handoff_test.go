package handoff_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellkit/cellkit/internal/handoff"
	"github.com/cellkit/cellkit/internal/testkit"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == helperArg {
		os.Exit(helper(os.Args[2], os.Args[3:]))
	}
	testkit.VerifyTestMain(m)
}

// sockPath is a socket's path in a directory that does not exist yet,
// which Listen creates.
func sockPath(t *testing.T) string {
	return filepath.Join(t.TempDir(), "handoff", "h.sock")
}

// host offers ln at a fresh path until the test ends; it returns the path
// and a channel of the successors that took over.
func host(t *testing.T, ln net.Listener, wait time.Duration, failed func(handoff.Hello, error)) (string, <-chan handoff.Hello) {
	t.Helper()
	path := sockPath(t)
	if err := os.Mkdir(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	h, err := handoff.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	took := make(chan handoff.Hello, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		hello, err := h.Serve(ctx, wait, func() (handoff.Offer, error) {
			files, err := handoff.Files(ln)
			return handoff.Offer{State: handoff.State{PID: os.Getpid(), Generation: 3, Names: []string{"public"}, Data: json.RawMessage(`{"k":1}`)}, Files: files}, err
		}, failed)
		if err == nil {
			took <- hello
		}
	}()
	t.Cleanup(func() { cancel(); <-done; h.Remove() })
	return path, took
}

// dialer dials addr in a loop until stopped, counting the connections
// that did not get an answer byte.
type dialer struct {
	ok, failed atomic.Int64
	stop       chan struct{}
	wg         sync.WaitGroup
}

func dialLoop(addr string) *dialer {
	d := &dialer{stop: make(chan struct{})}
	d.wg.Go(func() {
		for {
			select {
			case <-d.stop:
				return
			default:
			}
			c, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err != nil {
				d.failed.Add(1)
				continue
			}
			c.SetDeadline(time.Now().Add(2 * time.Second))
			var b [1]byte
			if _, err := c.Read(b[:]); err != nil {
				d.failed.Add(1)
			} else {
				d.ok.Add(1)
			}
			c.Close()
		}
	})
	return d
}

func (d *dialer) halt() { close(d.stop); d.wg.Wait() }

// serveByte answers each connection on ln with the byte b, until ln closes.
func serveByte(ln net.Listener, b byte) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte{b})
			c.Close()
		}
	})
	return &wg
}

func TestTheSuccessorServesFromTheSameSocketWithNoConnectionRefused(t *testing.T) {
	old := testkit.Listen(t)
	oldDone := serveByte(old, 'o')
	path, took := host(t, old, 5*time.Second, func(h handoff.Hello, err error) { t.Errorf("handoff failed: %v", err) })

	d := dialLoop(old.Addr().String())
	time.Sleep(50 * time.Millisecond)
	s, err := handoff.Take(testkit.Context(t, 5*time.Second), path, handoff.Hello{PID: os.Getpid(), Release: "v2"})
	if err != nil {
		t.Fatal(err)
	}
	if s.State.Generation != 3 || string(s.State.Data) != `{"k":1}` {
		t.Fatalf("state %+v", s.State)
	}
	ln, err := s.Listener("public")
	if err != nil || ln == nil {
		t.Fatalf("listener: %v %v", ln, err)
	}
	if other, _ := s.Listener("admin"); other != nil {
		t.Fatal("a socket not handed over")
	}
	if ln.Addr().String() != old.Addr().String() {
		t.Fatalf("handed %s, had %s", ln.Addr(), old.Addr())
	}
	newDone := serveByte(ln, 'n')
	if err := s.Ready(testkit.Context(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	hello := <-took
	if hello.PID != os.Getpid() || hello.Release != "v2" {
		t.Fatalf("hello %+v", hello)
	}
	// The old process stops accepting: its listener closes, the socket
	// stays open in the successor.
	time.Sleep(50 * time.Millisecond)
	old.Close()
	oldDone.Wait()
	time.Sleep(100 * time.Millisecond)
	d.halt()
	if d.failed.Load() != 0 || d.ok.Load() < 10 {
		t.Fatalf("%d connections answered, %d failed across the handoff", d.ok.Load(), d.failed.Load())
	}
	// The successor takes the path for the next handoff.
	h2, err := handoff.Listen(path)
	if err != nil {
		t.Fatalf("the successor cannot take the path: %v", err)
	}
	h2.Remove()
	ln.Close()
	newDone.Wait()
}

func TestASuccessorThatEndsBeforeReadyChangesNothing(t *testing.T) {
	old := testkit.Listen(t)
	failures := make(chan error, 4)
	path, took := host(t, old, 5*time.Second, func(h handoff.Hello, err error) { failures <- err })
	s, err := handoff.Take(testkit.Context(t, 5*time.Second), path, handoff.Hello{PID: 1})
	if err != nil {
		t.Fatal(err)
	}
	s.Close() // it failed to start
	select {
	case err := <-failures:
		if !strings.Contains(err.Error(), "ended before it was ready") {
			t.Fatalf("failure %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the host did not notice")
	}
	// The old listener still works, and the next successor gets it.
	c, err := net.Dial("tcp", old.Addr().String())
	if err != nil {
		t.Fatalf("the old socket after a failed successor: %v", err)
	}
	c.Close()
	s, err = handoff.Take(testkit.Context(t, 5*time.Second), path, handoff.Hello{PID: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(testkit.Context(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	<-took
}

// nonblocking says whether ln's socket is in non-blocking mode, as Go's
// poller needs it: a socket left blocking makes each accept hold a thread
// and Close wait for a connection.
func nonblocking(t *testing.T, ln net.Listener) bool {
	t.Helper()
	rc, err := ln.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var flags int
	rc.Control(func(fd uintptr) { flags, err = unix.FcntlInt(fd, unix.F_GETFL, 0) })
	if err != nil {
		t.Fatal(err)
	}
	return flags&unix.O_NONBLOCK != 0
}

// An offer, even to a successor that never takes the sockets, leaves the
// host's listeners as they were.
func TestAnOfferLeavesTheListenerNonBlocking(t *testing.T) {
	old := testkit.Listen(t)
	failures := make(chan error, 4)
	path, _ := host(t, old, 5*time.Second, func(h handoff.Hello, err error) { failures <- err })
	s, err := handoff.Take(testkit.Context(t, 5*time.Second), path, handoff.Hello{PID: 1})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	<-failures
	if !nonblocking(t, old) {
		t.Fatal("the host's listener is in blocking mode after its offer")
	}
}

func TestASuccessorNotReadyWithinTheWaitIsRefused(t *testing.T) {
	old := testkit.Listen(t)
	failures := make(chan error, 4)
	path, _ := host(t, old, 200*time.Millisecond, func(h handoff.Hello, err error) { failures <- err })
	s, err := handoff.Take(testkit.Context(t, 5*time.Second), path, handoff.Hello{PID: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-failures; !strings.Contains(err.Error(), "not ready within 200ms") {
		t.Fatalf("failure %v", err)
	}
	err = s.Ready(testkit.Context(t, 5*time.Second))
	if err == nil || errors.Is(err, handoff.ErrGone) || !strings.Contains(err.Error(), "refused: not ready within") {
		t.Fatalf("ready after the wait: %v, want refused", err)
	}
}

func TestAHostThatEndedLeavesTheSocketsToTheSuccessor(t *testing.T) {
	old := testkit.Listen(t)
	path := sockPath(t)
	h, err := handoff.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.Serve(ctx, time.Minute, func() (handoff.Offer, error) {
			files, err := handoff.Files(old)
			return handoff.Offer{State: handoff.State{PID: os.Getpid(), Generation: 1, Names: []string{"public"}}, Files: files}, err
		}, func(handoff.Hello, error) {})
	}()
	s, err := handoff.Take(testkit.Context(t, 5*time.Second), path, handoff.Hello{})
	if err != nil {
		t.Fatal(err)
	}
	cancel() // the old process ends
	<-done
	h.Close()
	if err := s.Ready(testkit.Context(t, 5*time.Second)); !errors.Is(err, handoff.ErrGone) {
		t.Fatalf("ready with the host gone: %v", err)
	}
}

func TestTakeWithNoHost(t *testing.T) {
	if _, err := handoff.Take(testkit.Context(t, time.Second), sockPath(t), handoff.Hello{}); !errors.Is(err, handoff.ErrNone) {
		t.Fatalf("no directory: %v", err)
	}
	dir := filepath.Dir(sockPath(t))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := handoff.Take(testkit.Context(t, time.Second), filepath.Join(dir, "none"), handoff.Hello{}); !errors.Is(err, handoff.ErrNone) {
		t.Fatalf("no file: %v", err)
	}
	// A socket file left by a process that ended.
	stale := filepath.Join(dir, "stale")
	h, err := handoff.Listen(stale)
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	if _, err := handoff.Take(testkit.Context(t, time.Second), stale, handoff.Hello{}); !errors.Is(err, handoff.ErrNone) {
		t.Fatalf("stale file: %v", err)
	}
	h, err = handoff.Listen(stale)
	if err != nil {
		t.Fatalf("listen over a stale file: %v", err)
	}
	// A second host at a live path is an error.
	if _, err := handoff.Listen(stale); err == nil || !strings.Contains(err.Error(), "already offers") {
		t.Fatalf("second host: %v", err)
	}
	h.Remove()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("Remove left %s: %v", stale, err)
	}
	// Not a socket: refused, not removed.
	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, []byte("x"), 0o600)
	if _, err := handoff.Listen(plain); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("plain file: %v", err)
	}
}
