package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/agencysim"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/telegram"
	"github.com/cellkit/cellkit/internal/testkit"
)

// The test binary is also the cell, for the tests that run it as a
// process (testkit.Program).
func TestMain(m *testing.M) {
	testkit.RunAsProgram("cell", main)
	testkit.VerifyTestMain(m)
}

func TestFlagsAndEnvironment(t *testing.T) {
	env := map[string]string{
		"CELLKIT_CELL":       "c7",
		"CELLKIT_AGENCY":     "nice=10.0.0.1:7001,kcb=10.0.0.1:7002",
		"CELLKIT_AGE_BUDGET": "30s",
		"CELLKIT_WORKERS":    "9",
	}
	cfg, _, err := parseFlags([]string{"--workers", "12", "--nats-url", "nats://n:4222"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ID != "c7" || len(cfg.Agencies) != 2 || cfg.Agencies[1].Addr != "10.0.0.1:7002" || cfg.Shed.MaxAge != 30*time.Second ||
		cfg.Pipeline.Workers != 12 || cfg.NATSURL != "nats://n:4222" {
		t.Fatalf("config %+v", cfg)
	}
	for _, bad := range [][]string{{}, {"--cell", "C1"}, {"--cell", "c1", "--agency", "nice"}, {"--cell", "c1", "extra"}} {
		if _, _, err := parseFlags(bad, func(string) string { return "" }, io.Discard); err == nil && len(bad) != 2 {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
	if err := run(context.Background(), []string{"--cell", "C1", "--agency", "nice=x:1"}, func(string) string { return "" }, io.Discard); err == nil {
		t.Error("run accepted an invalid cell id")
	}
	// Callbacks: allowed internal prefixes (masked), attempts; a bad CIDR
	// is an error.
	cfg, _, err = parseFlags([]string{"--cell", "c1", "--agency", "nice=x:1", "--callback-allow", "127.0.0.1/8, ::1/128", "--callback-attempts", "2"},
		func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(cfg.Pipeline.CallbackAllow); got != "[127.0.0.0/8 ::1/128]" || cfg.Pipeline.CallbackAttempts != 2 {
		t.Fatalf("callback allow %s, attempts %d", got, cfg.Pipeline.CallbackAttempts)
	}
	// The agencies' breaker: defaults, flags, environment, and nonsense
	// refused.
	if b := cfg.Breaker; b.Window != 100 || b.MinCalls != 20 || b.FailureRate != 0.2 || b.SlowRate != 0.5 || b.SlowCall != 5*time.Second || b.OpenFor != 30*time.Second {
		t.Fatalf("default breaker %+v", b)
	}
	cfg, _, err = parseFlags([]string{"--cell", "c1", "--agency", "nice=x:1", "--breaker-failure-rate", "0.3", "--breaker-open-for", "10s"},
		func(k string) string { return map[string]string{"CELLKIT_BREAKER_WINDOW": "40"}[k] }, io.Discard)
	if err != nil || cfg.Breaker.FailureRate != 0.3 || cfg.Breaker.OpenFor != 10*time.Second || cfg.Breaker.Window != 40 {
		t.Fatalf("breaker flags: %+v, %v", cfg.Breaker, err)
	}
	for _, bad := range [][]string{
		{"--breaker-failure-rate", "0"}, {"--breaker-failure-rate", "1.5"}, {"--breaker-slow-rate", "-1"},
		{"--breaker-min-calls", "200"}, {"--breaker-window", "0"}, {"--breaker-open-for", "0s"},
	} {
		if _, _, err := parseFlags(append([]string{"--cell", "c1", "--agency", "nice=x:1"}, bad...), func(string) string { return "" }, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
	if _, _, err := parseFlags([]string{"--cell", "c1", "--agency", "nice=x:1", "--callback-allow", "10.0.0.0/8,bogus"},
		func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), `"bogus"`) {
		t.Fatalf("a bad CIDR: %v, want an error naming it", err)
	}
}

// A binary makes the command that runs a cell with the arguments given.
type binary func(args []string) *exec.Cmd

// thisBinary runs this test binary as the cell (TestMain).
func thisBinary(t *testing.T) binary {
	return func(args []string) *exec.Cmd { return testkit.Program(t, "cell", args...) }
}

// buildBinary builds the cell into the test's temporary directory, with
// the build tags given: a cell with the tags is what the test needs, and
// this test binary is built without them.
func buildBinary(t *testing.T, tags ...string) binary {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "cell")
	if out, err := exec.Command("go", "build", "-tags", strings.Join(tags, ","), "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return func(args []string) *exec.Cmd { return exec.Command(bin, args...) }
}

// proc is one run of a cell process.
type proc struct {
	cmd    *exec.Cmd
	intake string
	admin  string
	exited chan error
}

func startBinary(t *testing.T, bin binary, args []string) *proc {
	t.Helper()
	cmd := bin(args)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, exited: make(chan error, 1)}
	addrs := make(chan [2]string, 1)
	logs := make(chan struct{})
	go func() {
		defer close(logs)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var line struct{ Msg, Intake, Admin string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "cell started" {
				addrs <- [2]string{line.Intake, line.Admin}
			}
			if testing.Verbose() && os.Getenv(testkit.EnvLog) != "" {
				t.Log(sc.Text())
			}
		}
	}()
	go func() { <-logs; p.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-p.exited
		}
	})
	select {
	case a := <-addrs:
		p.intake, p.admin = a[0], a[1] // base URLs
	case err := <-p.exited:
		t.Fatalf("cell exited at start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("cell did not start")
	}
	return p
}

func (p *proc) waitReady(t *testing.T, client *http.Client) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, "the cell to be ready", func() bool {
		r, err := testkit.Send(client, "GET", p.admin+"/readyz", nil, nil)
		return err == nil && r.Status == 200
	})
}

// TestCrashLosesNothing runs the cell as a process, kills it with SIGKILL in the
// middle of a load, restarts it on the same store and checks like a queue
// checker: every inquiry answered 202 settles (lost = 0) and none has two
// ids or an unexpected result (duplicated = 0). It ends with a SIGTERM that
// must exit 0.
func TestCrashLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the cell as a process under load: skipped with -short")
	}
	dir := t.TempDir()
	bin := thisBinary(t)
	// 8 sessions at 40 ms: the pipeline drains 200/s, less than the load
	// offers, so work is queued and in flight when the cell is killed.
	sim := agencysim.Config{MaxSessions: 32, Latency: agencysim.FixedLatency(40 * time.Millisecond)}
	nice := celltest.StartSim(t, telegram.NICE(), sim)
	kcb := celltest.StartSim(t, telegram.KCB(), sim)
	reg := celltest.NewRegistry(t, map[string]int{"nice": 8, "kcb": 8}, celltest.TestCell("c1"))
	args := []string{
		"--cell", "c1", "--registry", reg.URL(), "--store", filepath.Join(dir, "store"),
		"--agency", "nice=" + nice.Addr().String(), "--agency", "kcb=" + kcb.Addr().String(),
		"--intake", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--nats-port", "-1",
		"--ack-wait", "2s", "--css-latency", "1ms", "--core-latency", "2ms", "--log-level", "info",
	}
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()

	p := startBinary(t, bin, args)
	p.waitReady(t, client)
	var base atomic.Pointer[string]
	base.Store(&p.intake)

	const total, loaders = 600, 8
	checker := celltest.NewChecker()
	var mu sync.Mutex
	var next, accepted atomic.Int64
	var refused atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range loaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := next.Add(1)
				if n > total {
					return
				}
				key := fmt.Sprintf("crash-%d", n)
				req := inquiry.Request{UserID: fmt.Sprintf("u%d", n), Product: "loan", Amount: n * 1000, Priority: inquiry.Normal}
				if n%5 == 0 {
					req.Priority = inquiry.High
				}
				for ctx.Err() == nil {
					r, err := testkit.Send(client, "POST", *base.Load()+"/v1/inquiries", req, map[string]string{"Idempotency-Key": key})
					if err == nil && r.Status == http.StatusAccepted {
						var a struct{ ID string }
						if json.Unmarshal(r.Body, &a) == nil {
							mu.Lock()
							checker.Accepted(key, req, a.ID)
							mu.Unlock()
							accepted.Add(1)
						}
						break
					}
					refused.Add(1)
					time.Sleep(20 * time.Millisecond) // back off, then retry the same key
				}
			}
		}()
	}

	testkit.WaitFor(t, 60*time.Second, "a third of the load", func() bool { return accepted.Load() >= total/3 })
	var st struct {
		Queue    struct{ Messages int }
		Inflight int
	}
	if r, err := testkit.Send(client, "GET", p.admin+"/v1/admin/status", nil, nil); err == nil {
		json.Unmarshal(r.Body, &st)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	killedAt := accepted.Load()
	p = startBinary(t, bin, args)
	base.Store(&p.intake)
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("load did not finish: %d of %d accepted", accepted.Load(), total)
	}

	lookup := func(id string) (inquiry.View, error) {
		var v inquiry.View
		r, err := testkit.Send(client, "GET", p.intake+"/v1/inquiries/"+id, nil, nil)
		if err != nil {
			return v, err
		}
		if r.Status != http.StatusOK {
			return v, fmt.Errorf("GET = %d %s", r.Status, r.Body)
		}
		return v, json.Unmarshal(r.Body, &v)
	}
	var rep celltest.Report
	testkit.Poll(60*time.Second, func() bool { rep = checker.Check(lookup, "nice", "kcb"); return rep.Lost == 0 })
	t.Logf("killed after %d accepted with %d queued, %d in flight; %d keys, %d accepted, %d done, %d failed, %d refused attempts, lost %d, duplicated %d",
		killedAt, st.Queue.Messages, st.Inflight, len(checker.IDs), rep.Accepted, rep.Done, rep.Failed, refused.Load(), rep.Lost, rep.Duplicated)
	if len(checker.IDs) != total || rep.Lost != 0 || rep.Duplicated != 0 || rep.Failed != 0 {
		t.Fatalf("lost %d, duplicated %d, failed %d of %d keys; problems: %v", rep.Lost, rep.Duplicated, rep.Failed, len(checker.IDs), first(rep.Problems, 10))
	}

	// A graceful stop exits 0.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		var ee *exec.ExitError
		if errors.As(err, &ee) || err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit within 30s of SIGTERM")
	}
}

func first(s []string, n int) string { return strings.Join(s[:min(n, len(s))], "; ") }
