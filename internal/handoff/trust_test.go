package handoff_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellkit/cellkit/internal/handoff"
	"github.com/cellkit/cellkit/internal/testkit"
)

// Who takes the sockets: only a process of this process's user, through
// a private directory, from the process the state names; whatever else
// comes is refused and every descriptor that came with it closed.

// helperArg makes the test binary a process of another user (helper).
const helperArg = "handoff-test-helper"

// strangerUID is the user the helper runs as: nobody.
const strangerUID = 65534

// helper is the test binary run as another user: "squat PATH" listens at
// PATH and hands its own listening socket and a ticket key it knows to
// whoever comes; "peer PATH" asks the host at PATH for its sockets and
// says on stdout what it got.
func helper(mode string, args []string) int {
	var err error
	switch mode {
	case "squat":
		err = squat(args[0])
	case "peer":
		err = askAsPeer(args[0])
	default:
		err = fmt.Errorf("no helper %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	return 0
}

func squat(path string) error {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return err
	}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	f, err := tcp.(*net.TCPListener).File()
	if err != nil {
		return err
	}
	data, _ := json.Marshal(map[string]any{"ticket_keys": []map[string]any{{"key": [32]byte{1, 2, 3}, "born": time.Now()}}})
	line, _ := json.Marshal(map[string]any{"state": handoff.State{PID: os.Getpid(), Generation: 1, Names: []string{"public"}, Data: data}})
	fmt.Println("listening")
	uc, err := ln.AcceptUnix()
	if err != nil {
		return err
	}
	if _, err := bufio.NewReader(uc).ReadString('\n'); err != nil {
		return nil // it left before its hello: refused
	}
	if _, _, err := uc.WriteMsgUnix(append(line, '\n'), syscall.UnixRights(int(f.Fd())), nil); err != nil {
		return nil // it left
	}
	_, _ = io.Copy(io.Discard, uc)
	return nil
}

// peerReport is what the helper as a successor got from a host.
type peerReport struct {
	Err     string `json:"err,omitempty"`
	Reply   string `json:"reply"`
	Sockets int    `json:"sockets"`
}

func askAsPeer(path string) error {
	var rep peerReport
	defer func() { _ = json.NewEncoder(os.Stdout).Encode(rep) }()
	nc, err := net.Dial("unix", path)
	if err != nil {
		rep.Err = err.Error()
		return nil
	}
	uc := nc.(*net.UnixConn)
	fmt.Fprintf(uc, `{"hello":{"pid":%d,"release":"stranger"}}`+"\n", os.Getpid())
	buf, oob := make([]byte, 64<<10), make([]byte, unix.CmsgSpace(16*4))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		rep.Err = err.Error()
	}
	rep.Reply = string(buf[:n])
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			fds, _ := unix.ParseUnixRights(&m)
			rep.Sockets += len(fds)
		}
	}
	return nil
}

// needRoot skips a test that runs a process as another user.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("runs a process as another user: needs root")
	}
}

// openDir is a directory every user may enter, removed when the test
// ends: the test binary is copied there for the stranger to run.
func openDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "handoff-stranger-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// stranger starts the helper as nobody, with the capability to pass any
// directory's permissions (CAP_DAC_OVERRIDE, as root may give a process
// of another user): what it is refused is refused for who it is, not
// for the files' modes. It returns the helper's stdout.
func stranger(t *testing.T, open string, mode, path string) *bufio.Reader {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(open, "handoff.test")
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, helperArg, mode, path)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential:  &syscall.Credential{Uid: strangerUID, Gid: strangerUID},
		AmbientCaps: []uintptr{unix.CAP_DAC_OVERRIDE},
	}
	var stderr testkit.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // our own child, if it is still there
		_ = cmd.Wait()
		if s := stderr.String(); s != "" {
			t.Logf("the stranger said: %s", s)
		}
	})
	return bufio.NewReader(out)
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	return len(ents)
}

// squatted starts a stranger listening at path and waits until it does.
func squatted(t *testing.T, open, path string) {
	t.Helper()
	out := stranger(t, open, "squat", path)
	line, err := out.ReadString('\n')
	if err != nil || line != "listening\n" {
		t.Fatalf("the squatter did not listen: %q %v", line, err)
	}
}

// takeRefused takes at path, which must fail with an error saying want,
// and leaves as many descriptors open as there were once the host in
// this process, if any, is done (nil: the host is another process).
func takeRefused(t *testing.T, path, want string, hostDone <-chan struct{}) {
	t.Helper()
	before := openFDs(t)
	s, err := handoff.Take(testkit.Context(t, 5*time.Second), path, handoff.Hello{PID: os.Getpid()})
	if err == nil {
		s.Close()
	}
	if hostDone != nil {
		<-hostDone
	}
	if err == nil {
		t.Fatalf("took the sockets at %s, state %+v", path, s.State)
	}
	if errors.Is(err, handoff.ErrNone) || !strings.Contains(err.Error(), want) {
		t.Fatalf("take at %s: %v, want an error saying %q", path, err, want)
	}
	if after := openFDs(t); after != before {
		t.Fatalf("%d descriptors open after a refused take, %d before", after, before)
	}
}

// The socket's directory: created private, and refused by both sides
// when it is not (another user could bind or connect there).
func TestTheSocketsDirectoryIsPrivate(t *testing.T) {
	path := sockPath(t)
	h, err := handoff.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Dir(path))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the directory Listen made: %v %v, want 0700", fi.Mode(), err)
	}
	h.Remove()

	base := t.TempDir()
	private := filepath.Join(base, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	bad := map[string]func(dir string) error{
		"mode 0755": func(dir string) error { return os.Mkdir(dir, 0o755) },
		"mode 0770": func(dir string) error {
			if err := os.Mkdir(dir, 0o700); err != nil {
				return err
			}
			return os.Chmod(dir, 0o770)
		},
		"mode 1777 (as /tmp)": func(dir string) error {
			if err := os.Mkdir(dir, 0o700); err != nil {
				return err
			}
			return os.Chmod(dir, 0o1777)
		},
		"a symbolic link to a private directory": func(dir string) error { return os.Symlink(private, dir) },
		"a file":                                 func(dir string) error { return os.WriteFile(dir, nil, 0o600) },
	}
	if os.Geteuid() == 0 {
		bad["another user's"] = func(dir string) error {
			if err := os.Mkdir(dir, 0o700); err != nil {
				return err
			}
			return os.Chown(dir, strangerUID, strangerUID)
		}
	}
	for name, mk := range bad {
		dir := filepath.Join(base, strings.NewReplacer(" ", "-", "(", "", ")", "", "/", "").Replace(name))
		if err := mk(dir); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "h.sock")
		if h, err := handoff.Listen(path); err == nil {
			h.Remove()
			t.Errorf("%s: Listen took it", name)
		} else if !strings.Contains(err.Error(), "private") {
			t.Errorf("%s: Listen: %v, want a refusal naming a private directory", name, err)
		}
		if _, err := os.Lstat(filepath.Join(private, "h.sock")); err == nil {
			t.Fatalf("%s: a socket was made through it", name)
		}
		if _, err := handoff.Take(testkit.Context(t, time.Second), path, handoff.Hello{}); err == nil || errors.Is(err, handoff.ErrNone) || !strings.Contains(err.Error(), "private") {
			t.Errorf("%s: Take: %v, want a refusal naming a private directory", name, err)
		}
	}
}

// A process of another user listening at the path, with sockets and a
// ticket key of its own to hand over, gets no successor: not where
// another user can write (the directory is refused), nor in this user's
// private directory (the peer is).
func TestASquatterOfAnotherUserIsRefused(t *testing.T) {
	needRoot(t)
	open := openDir(t)
	cases := []struct {
		name, want string
		dir        func() string
	}{
		{"a directory everyone may write", "private", func() string {
			dir := filepath.Join(open, "tmp")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o1777); err != nil {
				t.Fatal(err)
			}
			return dir
		}},
		{"its own private directory", "owned by uid 65534", func() string {
			dir := filepath.Join(open, "its")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(dir, strangerUID, strangerUID); err != nil {
				t.Fatal(err)
			}
			return dir
		}},
		{"this user's private directory", "runs as uid 65534", func() string {
			dir := filepath.Join(open, "ours")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			return dir
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(tc.dir(), "h.sock")
			squatted(t, open, path)
			takeRefused(t, path, tc.want, nil)
		})
	}
}

// A successor of another user that reaches the socket gets nothing (no
// state, no socket); the host serves on and hands over to its own.
func TestASuccessorOfAnotherUserGetsNothing(t *testing.T) {
	needRoot(t)
	old := testkit.Listen(t)
	failures := make(chan error, 4)
	path, took := host(t, old, 5*time.Second, func(h handoff.Hello, err error) { failures <- err })
	out := stranger(t, openDir(t), "peer", path)
	var rep peerReport
	if err := json.NewDecoder(out).Decode(&rep); err != nil {
		t.Fatal(err)
	}
	if rep.Sockets != 0 || strings.Contains(rep.Reply, `"state"`) || !strings.Contains(rep.Reply, "refused") {
		t.Fatalf("the stranger got %d sockets, reply %q (%s)", rep.Sockets, rep.Reply, rep.Err)
	}
	if err := <-failures; !strings.Contains(err.Error(), "runs as uid 65534") {
		t.Fatalf("the host's failure: %v", err)
	}
	s, err := handoff.Take(testkit.Context(t, 5*time.Second), path, handoff.Hello{PID: os.Getpid()})
	if err != nil {
		t.Fatalf("this user's successor after the stranger: %v", err)
	}
	if err := s.Ready(testkit.Context(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	<-took
}

// fakeHost answers the first successor at a fresh path with line and the
// descriptors fds, as a process of this user that breaks the protocol
// would; done closes once the successor left.
func fakeHost(t *testing.T, line []byte, fds []int) (string, <-chan struct{}) {
	t.Helper()
	path := sockPath(t)
	if err := os.Mkdir(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	done := make(chan struct{})
	go func() {
		defer close(done)
		uc, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		defer uc.Close()
		if _, err := bufio.NewReader(uc).ReadString('\n'); err != nil {
			return
		}
		var oob []byte
		if len(fds) > 0 {
			oob = syscall.UnixRights(fds...)
		}
		msg := append(line, '\n')
		n, _, err := uc.WriteMsgUnix(msg, oob, nil)
		if err != nil {
			return
		}
		if n < len(msg) { // a message over the socket's buffer goes in parts
			if _, err := uc.Write(msg[n:]); err != nil {
				return
			}
		}
		_, _ = io.Copy(io.Discard, uc)
	}()
	return path, done
}

// fdsOf are descriptors of files, which the test closes when it ends.
func fdsOf(t *testing.T, files ...*os.File) []int {
	t.Helper()
	var fds []int
	for _, f := range files {
		t.Cleanup(func() { f.Close() })
		fds = append(fds, int(f.Fd()))
	}
	return fds
}

// A state that is not one a host of this user may hand over is refused,
// and every descriptor that came with it closed.
func TestAStateBeyondTheBoundsIsRefusedWithItsSocketsClosed(t *testing.T) {
	a, b := testkit.Listen(t), testkit.Listen(t)
	listeners := func(n int) []int {
		var fds []int
		for i := range n {
			files, err := handoff.Files([]net.Listener{a, b}[i%2])
			if err != nil {
				t.Fatal(err)
			}
			fds = append(fds, fdsOf(t, files...)...)
		}
		return fds
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	pipe := fdsOf(t, r, w)[:1]
	conn, err := net.Dial("tcp", a.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	cf, err := conn.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	connected := fdsOf(t, cf)
	pid := os.Getpid()
	state := func(st handoff.State) []byte {
		b, err := json.Marshal(map[string]any{"state": st})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	names := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("s%d", i))
		}
		return out
	}
	public := []string{"public"}
	for _, tc := range []struct {
		name, want string
		line       []byte
		fds        []int
	}{
		{"two sockets for one name", "2 sockets for 1 names", state(handoff.State{PID: pid, Generation: 1, Names: public}), listeners(2)},
		{"a name given twice", "given twice", state(handoff.State{PID: pid, Generation: 1, Names: []string{"public", "public"}}), listeners(2)},
		{"an empty name", "empty", state(handoff.State{PID: pid, Generation: 1, Names: []string{""}}), listeners(1)},
		{"a name over the bound", "over 64 bytes", state(handoff.State{PID: pid, Generation: 1, Names: []string{strings.Repeat("n", 65)}}), listeners(1)},
		{"more sockets than the bound", "more than 8 sockets", state(handoff.State{PID: pid, Generation: 1, Names: names(9)}), listeners(9)},
		{"far more sockets than the bound", "more than 8 sockets", state(handoff.State{PID: pid, Generation: 1, Names: names(40)}), listeners(40)},
		{"a pipe for a socket", "not a socket", state(handoff.State{PID: pid, Generation: 1, Names: public}), pipe},
		{"a connected socket for a listening one", "not a listening stream socket", state(handoff.State{PID: pid, Generation: 1, Names: public}), connected},
		{"another process's pid", fmt.Sprintf("names pid %d", pid+1), state(handoff.State{PID: pid + 1, Generation: 1, Names: public}), listeners(1)},
		{"generation 0", "generation 0", state(handoff.State{PID: pid, Names: public}), listeners(1)},
		{"a generation over the bound", "generation 1073741825", state(handoff.State{PID: pid, Generation: 1<<30 + 1, Names: public}), listeners(1)},
		{"a release over the bound", "release of 257 bytes", state(handoff.State{PID: pid, Generation: 1, Release: strings.Repeat("r", 257), Names: public}), listeners(1)},
		{"a refusal with sockets", "refused", []byte(`{"refused":"no"}`), listeners(1)},
		{"not a message, with sockets", "not one", []byte(`{"state":`), listeners(1)},
		{"a message over 2 MiB, with sockets", "over 2048 KiB", state(handoff.State{PID: pid, Generation: 1, Names: public, Data: json.RawMessage(`"` + strings.Repeat("d", 2<<20+1) + `"`)}), listeners(1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, done := fakeHost(t, tc.line, tc.fds)
			takeRefused(t, path, tc.want, done)
		})
	}
	// The same host with a state it may hand over: taken, and closed
	// with nothing left open.
	path, done := fakeHost(t, state(handoff.State{PID: pid, Generation: 1, Names: public}), listeners(1))
	before := openFDs(t)
	s, err := handoff.Take(testkit.Context(t, 5*time.Second), path, handoff.Hello{PID: pid})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	<-done
	if after := openFDs(t); after != before {
		t.Fatalf("%d descriptors open after a closed succession, %d before", after, before)
	}
}

// A host closes the sockets it does not send: an offer that fails with
// files made, and any a successor sends with its hello.
func TestAHostClosesWhatItDoesNotSend(t *testing.T) {
	old := testkit.Listen(t)
	path := sockPath(t)
	if err := os.Mkdir(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	h, err := handoff.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	failures := make(chan error, 4)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		h.Serve(ctx, 5*time.Second, func() (handoff.Offer, error) {
			files, err := handoff.Files(old, old)
			return handoff.Offer{Files: files}, errors.Join(err, errors.New("the data cannot be made"))
		}, func(_ handoff.Hello, err error) { failures <- err })
	}()
	t.Cleanup(func() { cancel(); <-served; h.Remove() })

	before := openFDs(t)
	if _, err := handoff.Take(testkit.Context(t, 5*time.Second), path, handoff.Hello{}); err == nil || !strings.Contains(err.Error(), "cannot be made") {
		t.Fatalf("take from a host whose offer failed: %v", err)
	}
	if err := <-failures; !strings.Contains(err.Error(), "nothing to offer") {
		t.Fatalf("the host's failure: %v", err)
	}
	if after := openFDs(t); after != before {
		t.Fatalf("%d descriptors open after an offer that failed, %d before", after, before)
	}

	// A successor that sends sockets with its hello.
	files, err := handoff.Files(old, old, old)
	if err != nil {
		t.Fatal(err)
	}
	fds := fdsOf(t, files...)
	before = openFDs(t)
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := nc.(*net.UnixConn).WriteMsgUnix([]byte(`{"hello":{"pid":1}}`+"\n"), syscall.UnixRights(fds...), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(nc); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	<-failures
	if after := openFDs(t); after != before {
		t.Fatalf("%d descriptors open after a hello with sockets, %d before", after, before)
	}
}
