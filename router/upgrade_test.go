package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/program"
	"github.com/cellkit/cellkit/internal/testkit"
)

// TestSIGUSR2StartsASuccessor: the router process (this test binary run
// as the router), run as a service manager runs it (NOTIFY_SOCKET), starts
// its own successor at SIGUSR2: the successor takes the sockets over under
// load with nothing refused or failed, tells the manager it is the main
// process now, and the old process ends with the handed-over status.
func TestSIGUSR2StartsASuccessor(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the router as a process through an upgrade under load")
	}
	dir := t.TempDir()
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "notify"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { notify.Close() })

	s := newHandoffSetup(t, okCell(t).URL)
	public, admin := testkit.FreeAddr(t), testkit.FreeAddr(t)
	// A file, not a pipe: the successor inherits the router's output, and
	// Wait would wait for every writer of a pipe to close it.
	logs, err := os.Create(filepath.Join(dir, "router.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	cmd := testkit.Program(t, "router", s.at(public, admin)...)
	cmd.Env = append(cmd.Env, "NOTIFY_SOCKET="+notify.LocalAddr().String())
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var successor int
	t.Cleanup(func() {
		for _, pid := range []int{cmd.Process.Pid, successor} {
			if pid != 0 {
				_ = syscall.Kill(pid, syscall.SIGTERM)
			}
		}
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
		if successor != 0 {
			testkit.WaitFor(t, 10*time.Second, "the successor to end", func() bool {
				return syscall.Kill(successor, 0) != nil
			})
		}
	})

	if pid := readNotify(t, notify, logs.Name()); pid != cmd.Process.Pid {
		t.Fatalf("the first router told the manager MAINPID=%d, its pid is %d", pid, cmd.Process.Pid)
	}
	if pid := readyPID(t, admin); pid != cmd.Process.Pid {
		t.Fatalf("/readyz says pid %d, the router's is %d", pid, cmd.Process.Pid)
	}
	l := startLoad(t, "http://"+public, s.key, 6, nil)
	time.Sleep(300 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	successor = readNotify(t, notify, logs.Name())
	if successor == cmd.Process.Pid {
		t.Fatalf("after SIGUSR2 the manager was told MAINPID=%d, the old router's pid", successor)
	}
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != program.ExitHandedOver {
			t.Fatalf("the old router ended with %v, want exit status %d\n%s", err, program.ExitHandedOver, readLog(logs.Name()))
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("the old router did not end after its successor took over\n%s", readLog(logs.Name()))
	}
	exited <- nil // for the cleanup
	if pid := readyPID(t, admin); pid != successor {
		t.Fatalf("/readyz says pid %d after the upgrade, the successor's is %d", pid, successor)
	}
	time.Sleep(300 * time.Millisecond) // the successor serves under load too
	l.check(t, "an upgrade at SIGUSR2")
}

// readNotify reads one sd_notify message and returns its MAINPID.
func readNotify(t *testing.T, c *net.UnixConn, logs string) int {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no notification from the router: %v\n%s", err, readLog(logs))
	}
	msg := string(buf[:n])
	if !strings.Contains(msg, "READY=1\n") {
		t.Fatalf("notification %q without READY=1", msg)
	}
	var pid int
	for _, line := range strings.Split(msg, "\n") {
		if v, ok := strings.CutPrefix(line, "MAINPID="); ok {
			if _, err := fmt.Sscan(v, &pid); err != nil {
				t.Fatalf("notification %q: MAINPID: %v", msg, err)
			}
		}
	}
	if pid == 0 {
		t.Fatalf("notification %q without MAINPID", msg)
	}
	return pid
}

// readyPID is the pid the router's /readyz reports.
func readyPID(t *testing.T, admin string) int {
	t.Helper()
	var r api.RouterReadiness
	testkit.WaitFor(t, 10*time.Second, "the router ready", func() bool {
		resp, err := testkit.Send(http.DefaultClient, "GET", "http://"+admin+"/readyz", nil, nil)
		if err != nil || resp.Status != http.StatusOK {
			return false
		}
		resp.JSON(t, &r)
		return true
	})
	return r.PID
}

// readLog is a log file's text, or why it cannot be read.
func readLog(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
