package devstack

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestAlive(t *testing.T) {
	if !Alive(os.Getpid()) {
		t.Fatal("Alive(self) = false")
	}
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if !Alive(pid) {
		t.Fatal("Alive(running child) = false")
	}
	cmd.Process.Kill()
	// Killed but not yet reaped: a zombie, which is not alive.
	for i := 0; i < 1000 && Alive(pid); i++ {
		exec.Command("true").Run() // let the kernel deliver the signal
	}
	if Alive(pid) {
		t.Fatal("Alive(zombie) = true")
	}
	cmd.Wait()
	if Alive(pid) || Alive(0) || Alive(-1) {
		t.Fatal("Alive of a reaped or invalid pid = true")
	}
}

func TestChildEnvDropsCellkitVariables(t *testing.T) {
	t.Setenv("CELLKIT_REGISTRY", "file:/x")
	t.Setenv("KEEP_ME", "1")
	env := ChildEnv()
	var kept bool
	for _, kv := range env {
		if kv == "CELLKIT_REGISTRY=file:/x" {
			t.Fatal("CELLKIT_REGISTRY passed to children")
		}
		kept = kept || kv == "KEEP_ME=1"
	}
	if !kept {
		t.Fatal("other variables dropped")
	}
}

// shell is a Process running script with /bin/sh, logging to dir/name.log.
func shell(t *testing.T, name, script string) Process {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	return Process{Name: name, Bin: sh, Args: []string{"-c", script}, Log: filepath.Join(t.TempDir(), name+".log")}
}

// sleeper is a Process sleeping a minute, logging to dir/name.log. Its
// binary is the program itself (no shell that would exec it), as the
// stack's processes are.
func sleeper(t *testing.T, name string) Process {
	t.Helper()
	bin, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep")
	}
	return Process{Name: name, Bin: bin, Args: []string{"60"}, Log: filepath.Join(t.TempDir(), name+".log")}
}

// start starts p and makes sure it is gone at the end of the test.
func start(t *testing.T, p Process) *Child {
	t.Helper()
	c, err := Start(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		Stop(context.Background(), c.Process, 0)
		<-c.Exited()
	})
	return c
}

// waitFile polls until path holds a line and returns it.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(b), "\n") {
			return strings.TrimSpace(string(b))
		}
	}
	t.Fatalf("nothing in %s within 10s", path)
	return ""
}

func TestStartLogsAndReportsTheExit(t *testing.T) {
	t.Setenv("CELLKIT_SECRET", "leak")
	p := shell(t, "job", `echo "out ${CELLKIT_SECRET:-none}"; echo err >&2; exit 3`)
	os.WriteFile(p.Log, []byte("earlier run\n"), 0o644)
	c := start(t, p)
	if c.PID <= 0 || c.Name != "job" {
		t.Fatalf("child = %+v", c.Process)
	}
	select {
	case <-c.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("no exit within 10s")
	}
	if how, ended := c.Ended(); !ended || how != "exit status 3" {
		t.Errorf("Ended() = %q, %v; want exit status 3", how, ended)
	}
	if got := LogTail(p.Log, 5); got != "earlier run | out none | err" {
		t.Errorf("log = %q, want the earlier run kept, stdout and stderr appended, no CELLKIT_ variable", got)
	}
	if _, err := Stop(context.Background(), c.Process, time.Second); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Stop(ended) = %v, want ErrNotRunning", err)
	}
}

func TestStartAddsEnv(t *testing.T) {
	p := shell(t, "env", `echo "token ${CONSUL_HTTP_TOKEN:-none}"`)
	p.Env = []string{"CONSUL_HTTP_TOKEN=s3cret"}
	c := start(t, p)
	<-c.Exited()
	if got := LogTail(p.Log, 1); got != "token s3cret" {
		t.Errorf("log = %q, want the variable of Process.Env", got)
	}
}

func TestStop(t *testing.T) {
	t.Run("SIGTERM", func(t *testing.T) {
		c := start(t, sleeper(t, "term"))
		how, err := Stop(context.Background(), c.Process, 10*time.Second)
		if err != nil || !strings.HasPrefix(how, "stopped (SIGTERM) in ") {
			t.Fatalf("Stop = %q, %v; want stopped (SIGTERM)", how, err)
		}
		<-c.Exited()
		if how, _ := c.Ended(); how != "signal: terminated" {
			t.Errorf("ended %q, want signal: terminated", how)
		}
	})
	t.Run("SIGKILL after the grace", func(t *testing.T) {
		p := shell(t, "stubborn", `trap "" TERM; echo up; sleep 60 & wait`)
		c := start(t, p)
		waitFile(t, p.Log) // the trap is set
		t0 := time.Now()
		how, err := Stop(context.Background(), c.Process, 300*time.Millisecond)
		if err != nil || how != "killed (SIGKILL) after 300ms" {
			t.Fatalf("Stop = %q, %v; want killed (SIGKILL) after 300ms", how, err)
		}
		if d := time.Since(t0); d < 300*time.Millisecond {
			t.Errorf("killed after %v, before the grace", d)
		}
	})
	t.Run("SIGKILL at once", func(t *testing.T) {
		c := start(t, sleeper(t, "kill"))
		how, err := Stop(context.Background(), c.Process, 0)
		if err != nil || how != "killed (SIGKILL)" {
			t.Fatalf("Stop = %q, %v; want killed (SIGKILL)", how, err)
		}
	})
	t.Run("SIGKILL when the context ends", func(t *testing.T) {
		p := shell(t, "stubborn", `trap "" TERM; echo up; sleep 60 & wait`)
		c := start(t, p)
		waitFile(t, p.Log)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		how, err := Stop(ctx, c.Process, time.Minute)
		if err != nil || !strings.HasPrefix(how, "killed (SIGKILL) after ") {
			t.Fatalf("Stop = %q, %v; want killed (SIGKILL)", how, err)
		}
	})
	t.Run("the process group goes too", func(t *testing.T) {
		pidFile := filepath.Join(t.TempDir(), "grandchild")
		c := start(t, shell(t, "parent", "sleep 60 & echo $! > "+pidFile+"; wait"))
		grandchild, err := strconv.Atoi(waitFile(t, pidFile))
		if err != nil || !Alive(grandchild) {
			t.Fatalf("grandchild pid %d: %v", grandchild, err)
		}
		if _, err := Stop(context.Background(), c.Process, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(5 * time.Second); Alive(grandchild); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				syscallKill(grandchild)
				t.Fatal("the child's own child survived Stop")
			}
		}
	})
	t.Run("a recycled pid is left alone", func(t *testing.T) {
		self := Process{Name: "other", PID: os.Getpid(), Bin: "/nonexistent/cell"}
		if _, err := Stop(context.Background(), self, time.Second); !errors.Is(err, ErrNotRunning) {
			t.Fatalf("Stop(pid running another program) = %v, want ErrNotRunning", err)
		}
	})
}

func syscallKill(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		p.Kill()
	}
}

func TestStopAllStopsNewestFirst(t *testing.T) {
	var procs []Process
	var children []*Child
	for _, name := range []string{"a", "b", "c"} {
		c := start(t, sleeper(t, name))
		procs, children = append(procs, c.Process), append(children, c)
	}
	gone := Process{Name: "gone", PID: children[0].PID, Bin: "/nonexistent"}
	procs = append([]Process{gone}, procs...)
	var order []string
	n := StopAll(context.Background(), procs, 10*time.Second, func(p Process, how string) {
		order = append(order, p.Name+": "+strings.Fields(how)[0])
	})
	if n != 3 || strings.Join(order, ", ") != "c: stopped, b: stopped, a: stopped, gone: not" {
		t.Fatalf("StopAll = %d, %v; want 3 stopped newest first, gone not running", n, order)
	}
	for _, c := range children {
		<-c.Exited()
	}
}
