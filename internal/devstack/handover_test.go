package devstack

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellkit/cellkit/internal/atomicfile"
	"github.com/cellkit/cellkit/internal/program"
	"github.com/cellkit/cellkit/internal/release"
	"github.com/cellkit/cellkit/internal/testkit"
)

// handoffProgramArg makes the test binary handoffProgram.
const handoffProgramArg = "handoff-program"

// handoffProgram stands for a router that hands over: it serves /readyz
// with its pid on ADDR (SO_REUSEPORT: the successor binds beside it), and
// says it serves by writing its pid to DIR/serving; a program that sees
// another pid there stops serving and ends with the handed-over status.
// With --fail=1 among its arguments it ends at once, status 1.
func handoffProgram(args []string) int {
	if len(args) < 2 {
		return 2
	}
	addr, dir := args[0], args[1]
	if slices.Contains(args, "--fail=1") {
		fmt.Println("handoff-program: failing as asked")
		return 1
	}
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) })
		if err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		fmt.Println("handoff-program:", err)
		return 1
	}
	pid := strconv.Itoa(os.Getpid())
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `{"ready":true,"pid":%s}`, pid)
	})}
	// Said before it answers: a test that sees it answer finds the line.
	fmt.Println("handoff-program: serving", strings.Join(args[2:], " "))
	go srv.Serve(ln)
	marker := filepath.Join(dir, "serving")
	if err := atomicfile.WriteFile(marker, []byte(pid), 0o644); err != nil {
		return 1
	}
	for {
		time.Sleep(10 * time.Millisecond)
		if b, err := os.ReadFile(marker); err == nil && string(b) != pid {
			srv.Close()
			return program.ExitHandedOver
		}
	}
}

// TestSupervisedHandoverStartsOnlyTheSuccessor: a supervised process that
// hands over is replaced by its supervisor starting the successor beside
// it — one process more, no second supervisor — and the supervisor
// carries on with the successor (the record keeps its pid and state); a
// successor that fails leaves the old program serving, and the error
// says so.
func TestSupervisedHandoverStartsOnlyTheSuccessor(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	addr := testkit.FreeAddr(t)
	p := Process{Name: "router", Bin: self, Args: []string{handoffProgramArg, addr, dir, "--handoff-socket=unused"},
		Log: filepath.Join(dir, "router.log"), Ready: "http://" + addr + "/readyz", Env: []string{superviseEnv + "=1"},
		Supervisor: &Supervisor{Command: []string{self}, State: filepath.Join(dir, "state.json")}}
	c := start(t, p)
	first := 0
	hc := &http.Client{Timeout: time.Second}
	waitFor(t, 10*time.Second, "the first program serving", func() bool {
		first = Program(c.Process)
		return first > 0 && answersAs(context.Background(), hc, p.Ready, first)
	})
	record := filepath.Join(dir, "dev.json")
	data, _ := json.Marshal(map[string]any{"dir": dir, "processes": []Process{c.Process}})
	if err := os.WriteFile(record, data, 0o600); err != nil {
		t.Fatal(err)
	}
	d := Deployer{Path: record, Grace: 5 * time.Second, Handover: 20 * time.Second}
	ctx := context.Background()

	_, c2, err := d.ReplaceProcess(ctx, "router", AsRelease(release.Spec{Set: []string{"gen=2"}}))
	if err != nil {
		t.Fatal(err)
	}
	second := Program(c2.Process)
	if c2.PID != c.PID || second == first || second == 0 || Alive(first) {
		t.Fatalf("after the handover: supervisor %d (was %d), program %d (was %d, alive %v)", c2.PID, c.PID, second, first, Alive(first))
	}
	if !answersAs(ctx, hc, p.Ready, second) {
		t.Fatal("the successor does not answer the readiness checks")
	}
	if n := groupSize(t, c.PID); n != 2 {
		t.Fatalf("%d processes in the supervisor's group after the handover; want the supervisor and its program", n)
	}
	waitLine(t, p.Log, "serving --handoff-socket=unused --gen=2")

	// A successor that fails: the old program serves on.
	_, _, err = d.ReplaceProcess(ctx, "router", AsRelease(release.Spec{Set: []string{"fail=1"}}))
	if err == nil || !strings.Contains(err.Error(), "did not take over") || !strings.Contains(err.Error(), "the old one serves on") {
		t.Fatalf("a successor that fails: %v", err)
	}
	if got := Program(c2.Process); got != second || !answersAs(ctx, hc, p.Ready, second) {
		t.Fatalf("after a failed successor the program is %d, want %d serving", got, second)
	}
	// And the supervisor restarts the successor's program, with its
	// arguments, when it ends on its own.
	if err := syscall.Kill(second, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the restart", func() bool {
		third := Program(c2.Process)
		return third > 0 && third != second && answersAs(ctx, hc, p.Ready, third)
	})
	if b, _ := os.ReadFile(p.Log); strings.Count(string(b), "serving --handoff-socket=unused --gen=2") != 2 {
		t.Fatalf("the restarted program's arguments: %s", b)
	}
}

// groupSize counts the processes of process group pgid.
func groupSize(t *testing.T, pgid int) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !Alive(pid) {
			continue
		}
		if g, err := syscall.Getpgid(pid); err == nil && g == pgid {
			n++
		}
	}
	return n
}
