package devstack

import (
	"context"
	"flag"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/program"
)

// superviseEnv makes the test binary a supervisor (its TestMain runs
// superviseMain), so that Start can run a supervised process.
const superviseEnv = "DEVSTACK_TEST_SUPERVISOR"

// superviseMain is what a supervisor program does with its command line:
// the flags of SuperviseConfig, "--", the program and its arguments.
func superviseMain(args []string) int {
	cfg := testSuperviseConfig()
	fs := flag.NewFlagSet("supervise", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil || fs.NArg() == 0 || cfg.Validate() != nil {
		return 2
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	return Supervise(ctx, cfg, fs.Arg(0), fs.Args()[1:], testLog())
}

// testSuperviseConfig restarts soon.
func testSuperviseConfig() SuperviseConfig {
	return SuperviseConfig{Backoff: 100 * time.Millisecond, MaxBackoff: 150 * time.Millisecond, Steady: time.Hour}
}

// supervise runs Supervise in the background; stop ends it (as SIGTERM
// would) and returns its exit status, which it also returns once Supervise
// has returned by itself (done is closed then).
func supervise(t *testing.T, cfg SuperviseConfig, script string) (stop func() int, done <-chan struct{}) {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan struct{})
	var code int
	go func() {
		defer close(ended)
		code = Supervise(ctx, cfg, sh, []string{"-c", script}, testLog())
	}()
	stop = func() int {
		cancel()
		select {
		case <-ended:
			return code
		case <-time.After(10 * time.Second):
			t.Fatal("Supervise did not return within 10s of its stop")
			return -1
		}
	}
	t.Cleanup(func() { cancel(); <-ended })
	return stop, ended
}

func TestSuperviseRestartsAProgramThatEndsWithBackoff(t *testing.T) {
	dir := t.TempDir()
	cfg := testSuperviseConfig()
	cfg.State = filepath.Join(dir, "state.json")
	// Runs 1 and 2 end with status 3 after 200 ms; run 3 stays.
	script := `n=$(cat ` + dir + `/count 2>/dev/null || echo 0); n=$((n+1)); echo $n > ` + dir + `/count
date +%s%N >> ` + dir + `/starts
if [ $n -le 2 ]; then sleep 0.2; exit 3; fi
echo $$ > ` + dir + `/pid.tmp; mv ` + dir + `/pid.tmp ` + dir + `/pid; exec sleep 60`
	stop, _ := supervise(t, cfg, script)
	pid, _ := strconv.Atoi(waitFile(t, filepath.Join(dir, "pid")))
	var rec Supervision
	waitFor(t, 5*time.Second, "the record of the third start", func() bool {
		rec, _ = ReadSupervision(cfg.State)
		return rec.PID == pid
	})
	if rec.Restarts != 2 || rec.LastExit != "exit status 3" || !rec.NextStart.IsZero() {
		t.Errorf("record = %+v; want 2 restarts after exit status 3, no next start", rec)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "starts"))
	var starts []int64
	for _, f := range strings.Fields(string(b)) {
		n, _ := strconv.ParseInt(f, 10, 64)
		starts = append(starts, n)
	}
	if len(starts) != 3 {
		t.Fatalf("%d starts, want 3", len(starts))
	}
	// A run of 200 ms, then the backoff: 100 ms, then 150 ms (doubled, capped).
	if gap := time.Duration(starts[1] - starts[0]); gap < 300*time.Millisecond {
		t.Errorf("second start %v after the first, want ≥ 300ms (run + backoff)", gap)
	}
	if gap := time.Duration(starts[2] - starts[1]); gap < 350*time.Millisecond {
		t.Errorf("third start %v after the second, want ≥ 350ms (run + doubled backoff, capped)", gap)
	}
	if code := stop(); code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit status %d after the stop, want %d (the program's, ended by SIGTERM)", code, 128+int(syscall.SIGTERM))
	}
	if Alive(pid) {
		t.Error("the program runs after the supervisor's stop")
	}
	if rec, _ := ReadSupervision(cfg.State); rec.PID != 0 || rec.LastExit != "signal: terminated" {
		t.Errorf("record after the stop = %+v; want no pid, ended by SIGTERM", rec)
	}
}

// A start that fails at once fails WaitReady at once: the program's end
// is in the supervisor's record, though it restarts it.
func TestWaitReadyFailsAStartThatEndsUnderItsSupervisor(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := shell(t, "crash", `echo "bad flag" >&2; exit 2`)
	p.Ready = "http://127.0.0.1:1/readyz"
	p.Supervisor = &Supervisor{Command: []string{self}, State: filepath.Join(t.TempDir(), "state.json")}
	p.Env = []string{superviseEnv + "=1"}
	c := start(t, p)
	t0 := time.Now()
	err = WaitReady(context.Background(), &http.Client{Timeout: time.Second}, time.Minute, c)
	if err == nil || !strings.Contains(err.Error(), "exit status 2 (its supervisor restarts it)") || !strings.Contains(err.Error(), "bad flag") {
		t.Fatalf("WaitReady = %v; want the program's end and its log", err)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("WaitReady failed after %v, want at once", d)
	}
}

// A program that handed its sockets to a successor ends for good: its
// supervisor ends with it, status 0, and does not start it again.
func TestSuperviseDoesNotRestartAProgramThatHandedOver(t *testing.T) {
	dir := t.TempDir()
	cfg := testSuperviseConfig()
	cfg.State = filepath.Join(dir, "state.json")
	_, done := supervise(t, cfg, `echo x >> `+dir+`/starts; exit `+strconv.Itoa(program.ExitHandedOver))
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the supervisor goes on after its program handed over")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "starts")); strings.Count(string(b), "x") != 1 {
		t.Fatalf("started %d times, want once", strings.Count(string(b), "x"))
	}
}

func TestSuperviseStopsWhileTheProgramWaitsToRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := testSuperviseConfig()
	cfg.State, cfg.Backoff, cfg.MaxBackoff = filepath.Join(dir, "state.json"), time.Hour, time.Hour
	stop, _ := supervise(t, cfg, `exit 1`)
	waitFor(t, 5*time.Second, "the wait to restart", func() bool {
		rec, _ := ReadSupervision(cfg.State)
		return !rec.NextStart.IsZero()
	})
	t0 := time.Now()
	if code := stop(); code != 0 || time.Since(t0) > time.Second {
		t.Errorf("stopped with status %d after %v; want 0 at once", code, time.Since(t0))
	}
}

func TestSuperviseForwardsSignals(t *testing.T) {
	dir := t.TempDir()
	_, _ = supervise(t, testSuperviseConfig(), `trap 'echo hup > `+dir+`/hup' HUP; echo up > `+dir+`/up; while :; do sleep 0.05; done`)
	waitFile(t, filepath.Join(dir, "up"))
	// The supervisor takes SIGHUP (which would otherwise end it) and
	// passes it on.
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if got := waitFile(t, filepath.Join(dir, "hup")); got != "hup" {
		t.Errorf("the program's trap wrote %q", got)
	}
}

// TestStartSupervised runs a process under a supervisor through Start (the
// test binary as the supervisor program): the program's own end is
// restarted, Program tells its pid, Signal freezes it, Stop ends both.
func TestStartSupervised(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := sleeper(t, "job")
	p.Supervisor = &Supervisor{Command: []string{self}, State: filepath.Join(dir, "state.json")}
	p.Env = []string{superviseEnv + "=1"}
	c := start(t, p)
	var first int
	waitFor(t, 10*time.Second, "the program's start", func() bool {
		first = Program(c.Process)
		return first > 0 && first != c.PID
	})
	// The program's own end (here SIGKILL to it alone, as the OOM killer
	// would) is restarted; the supervisor stays.
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var second int
	waitFor(t, 10*time.Second, "the restart", func() bool {
		second = Program(c.Process)
		return second > 0 && second != first
	})
	if rec, _ := ReadSupervision(p.Supervisor.State); rec.Restarts != 1 || rec.LastExit != "signal: killed" {
		t.Errorf("record = %+v; want one restart after signal: killed", rec)
	}
	// Signal reaches the program through the group.
	if err := Signal(c.Process, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the program stopped", func() bool { return procState(second) == 'T' })
	if err := Signal(c.Process, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the program continued", func() bool { return procState(second) == 'S' || procState(second) == 'R' })
	// Stop through the group ends both, and nothing restarts.
	if how, err := Stop(context.Background(), c.Process, 10*time.Second); err != nil || !strings.HasPrefix(how, "stopped (SIGTERM)") {
		t.Fatalf("Stop = %q, %v", how, err)
	}
	<-c.Exited()
	if Alive(second) {
		t.Error("the program outlived its supervisor's Stop")
	}
}

// procState is the state letter of /proc/PID/stat (R, S, T...), 0 if gone.
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2]
	}
	return 0
}

// testLog logs to the test binary's stderr (the supervised process's log,
// for TestStartSupervised).
func testLog() *slog.Logger { return slog.New(slog.NewTextHandler(os.Stderr, nil)) }

// waitFor polls cond until it holds or within has passed (testkit.WaitFor,
// which imports this package).
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, within)
		}
	}
}
