package devstack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// StopGrace is how long Stop waits after SIGTERM before SIGKILL, for the
// stack's processes: a cell drains its work in flight for up to 20 s.
const StopGrace = 30 * time.Second

// ErrNotRunning is returned by Stop for a process that is not running, or
// whose pid now runs another program.
var ErrNotRunning = errors.New("not running")

const (
	stopPoll  = 20 * time.Millisecond // how often Stop looks whether the process is gone
	killWait  = 5 * time.Second       // how long Stop waits for the process to go after SIGKILL
	readyPoll = 50 * time.Millisecond // how often WaitReady probes
)

// Child is a process of the stack under watch: one that Start started, whose
// exit status is known, or one started by another program (Attach), known
// only by its pid.
type Child struct {
	Process
	exited chan struct{} // closed when Start's process ends; nil after Attach
	err    error         // how it ended, once exited is closed
}

// ChildEnv is the environment of the stack's processes: this one without
// CELLKIT_* variables, so that the flags they are given are the whole
// configuration.
func ChildEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CELLKIT_") {
			env = append(env, kv)
		}
	}
	return env
}

// Start starts p.Bin with p.Args in a session of its own (so it leads its
// own process group), with its output appended to p.Log and the environment
// of ChildEnv plus p.Env. With p.Netns it runs in that network namespace:
// `ip netns exec` enters it and then executes p.Bin in its own place, so the
// pid is p.Bin's, and Start returns once the process is in the namespace
// (or has ended): whoever looks for the namespace's processes right after
// finds it. The returned child carries the new pid; its end is reaped and
// reported by Exited.
func Start(p Process) (*Child, error) {
	logf, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", p.Name, err)
	}
	defer logf.Close()
	argv := append([]string{p.Bin}, p.Args...)
	if s := p.Supervisor; s != nil {
		if len(s.Command) == 0 || s.State == "" {
			return nil, fmt.Errorf("start %s: a supervisor needs a command and a state file", p.Name)
		}
		// The record is the new supervisor's from its first start on.
		if err := os.Remove(s.State); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("start %s: %w", p.Name, err)
		}
		argv = append(append(slices.Clone(s.Command), "--state", s.State, "--"), argv...)
	}
	if p.Netns != "" {
		ip, err := exec.LookPath("ip")
		if err != nil {
			return nil, fmt.Errorf("start %s in network namespace %s: %w", p.Name, p.Netns, err)
		}
		argv = append([]string{ip, "netns", "exec", p.Netns}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr, cmd.Env = logf, logf, append(ChildEnv(), p.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", p.Name, err)
	}
	p.PID = cmd.Process.Pid
	c := &Child{Process: p, exited: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	if p.Netns != "" {
		if err := c.enter(p.Netns); err != nil {
			_ = syscall.Kill(-p.PID, syscall.SIGKILL)
			<-c.exited
			return nil, fmt.Errorf("start %s: %w", p.Name, err)
		}
	}
	return c, nil
}

// enterWait bounds the wait for a process to enter its network namespace.
const enterWait = 5 * time.Second

// enter waits until the child runs in network namespace ns (`ip netns
// exec` has entered it), or has ended.
func (c *Child) enter(ns string) error {
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join("/run/netns", ns), &st); err != nil {
		return fmt.Errorf("network namespace %s: %w", ns, err)
	}
	want := fmt.Sprintf("net:[%d]", st.Ino)
	link := fmt.Sprintf("/proc/%d/ns/net", c.PID)
	for deadline := time.Now().Add(enterWait); ; {
		if got, err := os.Readlink(link); err == nil && got == want {
			return nil
		}
		select {
		case <-c.exited:
			return nil // its end is the caller's to see
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not in network namespace %s after %v", ns, enterWait)
		}
	}
}

// Attach watches a process that another program started (one recorded in
// dev.json).
func Attach(p Process) *Child { return &Child{Process: p} }

// Exited is closed when a process Start started has ended (then Err says
// how); it is nil, and never ready, for an attached one.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// Err is how the process ended, once Exited is closed: nil for status 0.
func (c *Child) Err() error { return c.err }

// Ended reports whether the process has ended and, if so, how, in words.
// For a supervised process an end of its program counts too, though its
// supervisor starts it again: WaitReady fails a start that crashes at once
// instead of waiting out its restarts.
func (c *Child) Ended() (string, bool) {
	if c.Supervisor != nil {
		if s, err := ReadSupervision(c.Supervisor.State); err == nil && s.LastExit != "" {
			return s.LastExit + " (its supervisor restarts it)", true
		}
	}
	if c.exited == nil {
		if Alive(c.PID) {
			return "", false
		}
		return "no longer running", true
	}
	select {
	case <-c.exited:
		return ExitText(c.err), true
	default:
		return "", false
	}
}

// ExitText says how a process ended from its Wait error.
func ExitText(err error) string {
	if err == nil {
		return "status 0"
	}
	return err.Error()
}

// Alive reports whether pid runs; a zombie does not.
func Alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		// A process that ends meanwhile fails the read with ESRCH.
		return !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ESRCH)
	}
	// pid (comm) S ...: the state follows the last ')'.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] != 'Z' && b[i+2] != 'X'
	}
	return true
}

// Stop ends p and waits until it is gone: SIGTERM, then SIGKILL once grace
// has passed or ctx has ended; a grace of 0 sends SIGKILL at once. The
// signals go to p's process group when p leads one (as Start makes it), so
// that anything it started goes too. It says how it went, for a report:
// "stopped (SIGTERM) in 40ms", "killed (SIGKILL) after 30s". A process that
// is not running, or whose pid runs another program than p.Bin, is left
// alone: ErrNotRunning.
func Stop(ctx context.Context, p Process, grace time.Duration) (string, error) {
	if !Alive(p.PID) || !sameProgram(p) {
		return "", ErrNotRunning
	}
	start := time.Now()
	if grace > 0 {
		if err := signalGroup(p.PID, syscall.SIGTERM); err != nil && Alive(p.PID) {
			return "", fmt.Errorf("stop %s: %w", p.Name, err)
		}
		for Alive(p.PID) {
			if time.Since(start) > grace || ctx.Err() != nil {
				break
			}
			time.Sleep(stopPoll)
		}
		if !Alive(p.PID) {
			return fmt.Sprintf("stopped (SIGTERM) in %v", time.Since(start).Round(10*time.Millisecond)), nil
		}
	}
	how := "killed (SIGKILL)"
	if grace > 0 {
		how += " after " + min(grace, time.Since(start)).Round(10*time.Millisecond).String()
	}
	if err := signalGroup(p.PID, syscall.SIGKILL); err != nil && Alive(p.PID) {
		return "", fmt.Errorf("kill %s: %w", p.Name, err)
	}
	for deadline := time.Now().Add(killWait); Alive(p.PID); time.Sleep(stopPoll) {
		if time.Now().After(deadline) {
			return how, fmt.Errorf("%s (pid %d) still runs %v after SIGKILL", p.Name, p.PID, killWait)
		}
	}
	return how, nil
}

// StopAll stops procs in reverse order of start (see Stop) and reports each
// one's outcome; it returns how many it stopped.
func StopAll(ctx context.Context, procs []Process, grace time.Duration, report func(p Process, how string)) int {
	n := 0
	for i := len(procs) - 1; i >= 0; i-- {
		p := procs[i]
		how, err := Stop(ctx, p, grace)
		switch {
		case errors.Is(err, ErrNotRunning):
			how = "not running"
		case err != nil:
			n++
			how = strings.TrimSpace(how + " " + err.Error())
		default:
			n++
		}
		if report != nil {
			report(p, how)
		}
	}
	return n
}

// signalGroup sends sig to the process group pid leads, else to pid alone.
func signalGroup(pid int, sig syscall.Signal) error {
	if pgid, err := syscall.Getpgid(pid); err == nil && pgid == pid {
		return syscall.Kill(-pid, sig)
	}
	return syscall.Kill(pid, sig)
}

// sameProgram guards against a recycled pid: where /proc tells, the process
// must run p's binary, or be a supervisor running it (COMMAND... -- BIN)
// or keeping p's record (--state FILE: since a handoff its command line
// names the binary it started with, not its successor's), or, in a network
// namespace, still be the `ip netns exec NETNS ...` that is about to
// become either.
func sameProgram(p Process) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/cmdline")
	if err != nil || len(b) == 0 {
		// An empty command line is a process in the middle of exec (its
		// arguments are not yet in place: Start has returned, but the
		// kernel is still loading the binary) or a kernel thread, which
		// signals do not stop: both are taken as p, so that a process
		// stopped just after its start is stopped, not left running.
		return true
	}
	argv := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	if p.Netns != "" && len(argv) > 4 && argv[1] == "netns" && argv[2] == "exec" && argv[3] == p.Netns {
		argv = argv[4:]
	}
	if argv[0] == p.Bin {
		return true
	}
	if p.Supervisor != nil {
		if i := slices.Index(argv, "--state"); i >= 0 && i+1 < len(argv) && argv[i+1] == p.Supervisor.State {
			return true
		}
	}
	i := slices.Index(argv, "--")
	return i >= 0 && i+1 < len(argv) && argv[i+1] == p.Bin
}
