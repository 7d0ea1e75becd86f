package devctl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/cellctl"
	"github.com/cellkit/cellkit/internal/console"
	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/testkit"
)

// TestDevStack runs the real stack as 'make run' does: cellctl, agencysim,
// cell and router built into one bin dir. First detached (dev up, an inquiry
// through the router, dev status, dev down), then in the foreground on the
// same data (the inquiry and the key are still there) until SIGINT.
func TestDevStack(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole local stack")
	}
	root := t.TempDir()
	bin := filepath.Join(root, "bin")
	// Built: four programs, found by name in one bin dir, whose mains are
	// in packages main that this test cannot import to run as them.
	for _, name := range []string{"cellctl", "agencysim", "cell", "router"} {
		out, err := exec.Command("go", "build", "-o", filepath.Join(bin, name), "github.com/cellkit/cellkit/"+name).CombinedOutput()
		if err != nil {
			t.Fatalf("go build ./%s: %v\n%s", name, err, out)
		}
	}
	cellctl := func(args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(bin, "cellctl"), args...)
		cmd.Dir = root
		return cmd
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := cellctl(args...).CombinedOutput()
		if err != nil {
			t.Fatalf("cellctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	ports := []string{"--router-port", "0", "--port-base", "0", "--agency-port", "0", "--cells", "4"}
	var st *DevStack
	t.Cleanup(func() {
		// Whatever happened, leave no process behind.
		if s, err := readDevStack(filepath.Join(root, "var")); err == nil {
			devstack.StopAll(context.Background(), s.Processes, 0, nil) // SIGKILL
		}
		if t.Failed() {
			for _, name := range []string{"setup", "agencysim", "c1", "router"} {
				b, _ := os.ReadFile(filepath.Join(root, "var", "logs", name+".log"))
				t.Logf("%s.log:\n%s", name, b)
			}
		}
	})

	// Detached.
	out := run(append([]string{"dev", "up"}, ports...)...)
	st, err := readDevStack(filepath.Join(root, "var"))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Processes) != 7 {
		t.Fatalf("dev.json lists %d processes, want 7 (agencysim, c1..c4, router, console)", len(st.Processes))
	}
	assertDevConsole(t, st, out, 4)
	for _, want := range []string{st.APIKey, "curl -s -H 'X-API-Key: " + st.APIKey + "'", st.Router + "/v1/inquiries", st.RouterAdmin + "/metrics", "status",
		"var/prometheus/targets.json"} {
		if !strings.Contains(out, want) {
			t.Errorf("dev up output lacks %q:\n%s", want, out)
		}
	}
	assertScrapeTargets(t, st)
	id := devInquiry(t, st, "u-42")
	assertCellsEcho(t, st, id)
	// The router counted it: a plan made with --routers projects it onto
	// the cell that took it.
	if !strings.Contains(out, "rebalance --by traffic --dry-run") {
		t.Errorf("dev up does not say how to project traffic:\n%s", out)
	}
	var plan struct {
		Plan struct {
			Cells []struct {
				ID   string   `json:"id"`
				Rate *float64 `json:"rate_before"`
			} `json:"cells"`
		} `json:"plan"`
	}
	// The router is found in the registry, where it announced itself.
	if err := json.Unmarshal([]byte(run("--registry", st.Registry, "weight", "c1", "2", "--dry-run", "--json")), &plan); err != nil {
		t.Fatal(err)
	}
	took, _, _ := strings.Cut(id, "-")
	for _, c := range plan.Plan.Cells {
		if c.Rate == nil || (c.ID == took) != (*c.Rate > 0) {
			t.Errorf("%s projected at %v req/s; the one inquiry went to %s", c.ID, c.Rate, took)
		}
	}

	// A cell that ends on its own (here its program killed alone, as
	// the OOM killer would) is restarted by its supervisor and serves
	// again; dev status counts the restart.
	c1, _ := st.Process("c1")
	first := devstack.Program(*c1)
	programs := map[string]int{}
	for _, p := range st.Processes {
		if programs[p.Name] = devstack.Program(p); programs[p.Name] <= 0 || programs[p.Name] == p.PID {
			t.Fatalf("%s: program pid %d under supervisor pid %d", p.Name, programs[p.Name], p.PID)
		}
	}
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var status struct {
		Processes []struct {
			Name        string                `json:"name"`
			Ready       bool                  `json:"ready"`
			Supervision *devstack.Supervision `json:"supervision"`
		} `json:"processes"`
	}
	testkit.WaitFor(t, 30*time.Second, "c1 restarted and ready", func() bool {
		out, err := cellctl("dev", "status", "--json").Output()
		if err != nil && len(out) == 0 {
			return false
		}
		if json.Unmarshal(out, &status) != nil {
			return false
		}
		for _, p := range status.Processes {
			if p.Name == "c1" {
				return p.Ready && p.Supervision != nil && p.Supervision.Restarts == 1 && p.Supervision.PID != first
			}
		}
		return false
	})
	devInquiry(t, st, "u-43")
	programs["c1"] = devstack.Program(*c1)

	// The router is restarted, upgraded (another flag: another release)
	// and given a successor that fails to start, under load on new and
	// kept-alive connections: no connection refused, no request failed.
	load := devLoad(st)
	time.Sleep(200 * time.Millisecond)
	for _, args := range [][]string{{"router"}, {"router", "--set", "cell-timeout=4s"}} {
		if out := run(append([]string{"dev", "replace"}, args...)...); !strings.Contains(out, "router handed over its sockets: pid") {
			t.Fatalf("dev replace %v:\n%s", args, out)
		}
	}
	failed, err := cellctl("dev", "replace", "router", "--set", "keys=/nonexistent").CombinedOutput()
	if err == nil || !strings.Contains(string(failed), "the new process did not take over") || !strings.Contains(string(failed), "the old one serves on") {
		t.Fatalf("a successor that cannot start: %v\n%s", err, failed)
	}
	time.Sleep(200 * time.Millisecond)
	if sent, bad := load.stop(); len(bad) > 0 || sent < 50 {
		t.Fatalf("across the router's replacements: %d sent, %d failed: %q", sent, len(bad), bad[:min(len(bad), 5)])
	}
	if st, err = readDevStack(filepath.Join(root, "var")); err != nil {
		t.Fatal(err)
	}
	router, _ := st.Process("router")
	if !slices.Contains(router.Args, "--cell-timeout=4s") || !strings.HasSuffix(router.Supervisor.State, "router.json") {
		t.Fatalf("the router's record after two handoffs: %+v", router)
	}
	programs["router"] = devstack.Program(*router)

	out = run("dev", "status")
	if !strings.Contains(out, "1 (last: signal: killed") {
		t.Errorf("dev status does not show c1's restart:\n%s", out)
	}
	for _, p := range st.Processes {
		if !strings.Contains(out, p.Name) {
			t.Errorf("dev status lacks %s:\n%s", p.Name, out)
		}
	}
	if strings.Contains(out, " no ") {
		t.Errorf("dev status shows a process down:\n%s", out)
	}
	out = run("dev", "down")
	if !strings.Contains(out, "Stopped 7 processes") {
		t.Errorf("dev down output:\n%s", out)
	}
	assertGone(t, st.Processes)
	for name, pid := range programs {
		if devstack.Alive(pid) {
			t.Errorf("%s's program (pid %d) outlived dev down", name, pid)
		}
	}
	if err := cellctl("dev", "status").Run(); err == nil {
		t.Error("dev status after dev down exits 0, want 1")
	}

	// Foreground, on the same data: Ctrl-C stops it with exit 0.
	key := st.APIKey
	fg := cellctl(append([]string{"dev", "up", "--foreground"}, ports...)...)
	stdout, err := fg.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	fg.Stderr = &stderr
	if err := fg.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	var rest bytes.Buffer
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	waitLine := func(prefix string, d time.Duration) {
		t.Helper()
		timeout := time.After(d)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("dev up --foreground ended before %q; stderr:\n%s", prefix, stderr.String())
				}
				fmt.Fprintln(&rest, l)
				if strings.HasPrefix(l, prefix) {
					return
				}
			case <-timeout:
				fg.Process.Kill()
				t.Fatalf("no %q from dev up --foreground within %v; output:\n%s\nstderr:\n%s", prefix, d, rest.String(), stderr.String())
			}
		}
	}
	waitLine("cellkit local stack is ready", 60*time.Second)
	if st, err = readDevStack(filepath.Join(root, "var")); err != nil {
		t.Fatal(err)
	}
	if st.APIKey != key {
		t.Errorf("second dev up made a new key %q, want the first one %q", st.APIKey, key)
	}
	if got := devGet(t, st, "/v1/inquiries/"+id); got["status"] != "done" {
		t.Errorf("after a restart, inquiry %s = %v, want it done (the store is reused)", id, got)
	}
	assertScrapeTargets(t, st) // rewritten: the ports are new
	devInquiry(t, st, "u-7")
	// A process a deployer replaced (a rollout, dev replace) is the
	// stack's: the foreground stack stops it too.
	if out, err := cellctl("dev", "replace", "c1", "--set", "workers=5").CombinedOutput(); err != nil {
		t.Fatalf("dev replace c1: %v\n%s", err, out)
	}
	replaced, err := readDevStack(filepath.Join(root, "var"))
	if err != nil {
		t.Fatal(err)
	}
	if err := fg.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitLine("Stopped;", 60*time.Second)
	if err := fg.Wait(); err != nil {
		t.Fatalf("dev up --foreground after SIGINT: %v; stderr:\n%s", err, stderr.String())
	}
	assertGone(t, st.Processes)
	assertGone(t, replaced.Processes)
	if _, err := os.Stat(devstack.StatePath(filepath.Join(root, "var"))); !os.IsNotExist(err) {
		t.Errorf("dev.json left after the foreground stack stopped: %v", err)
	}
}

// devLoaded is load on the stack's router: inquiries from four workers,
// two on kept-alive connections, two on a new connection each.
type devLoaded struct {
	halt chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	sent int
	bad  []string
}

func devLoad(st *DevStack) *devLoaded {
	l := &devLoaded{halt: make(chan struct{})}
	for i := range 4 {
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: i%2 == 1}}
		l.wg.Go(func() {
			for n := 0; n < 20000; n++ {
				select {
				case <-l.halt:
					return
				case <-time.After(10 * time.Millisecond):
				}
				body := fmt.Sprintf(`{"user_id":"u-%d","product":"credit_loan","amount":5000000}`, n%50)
				req, _ := http.NewRequest(http.MethodPost, st.Router+"/v1/inquiries", strings.NewReader(body))
				req.Header.Set("X-API-Key", st.APIKey)
				req.Header.Set("Idempotency-Key", fmt.Sprintf("load-%d-%d", i, n))
				req.Header.Set("Content-Type", "application/json")
				resp, err := hc.Do(req)
				var why string
				if err != nil {
					why = err.Error()
				} else {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusAccepted {
						why = resp.Status
					}
				}
				l.mu.Lock()
				l.sent++
				if why != "" {
					l.bad = append(l.bad, why)
				}
				l.mu.Unlock()
			}
		})
	}
	return l
}

// stop ends the load; it returns how many were sent and the failures.
func (l *devLoaded) stop() (int, []string) {
	close(l.halt)
	l.wg.Wait()
	return l.sent, l.bad
}

// devInquiry posts an inquiry through the router and polls its status_url
// until it is done; it returns the id.
// assertCellsEcho: the stack's cells echo the router's call numbers, so
// the router asks the kernel for unasked bytes once per connection to a
// cell, not once per call (cellkit_router_cell_peeks_total).
func assertCellsEcho(t *testing.T, st *DevStack, id string) {
	t.Helper()
	for range 20 {
		if v := devGet(t, st, "/v1/inquiries/"+id); v["id"] != id {
			t.Fatalf("GET inquiry %s through the router: %v", id, v)
		}
	}
	mfs, err := (adminclient.Client{HTTP: http.DefaultClient}).Metrics(context.Background(), st.RouterAdmin)
	if err != nil {
		t.Fatal(err)
	}
	sum := func(name string) float64 {
		var v float64
		if mf := mfs[name]; mf != nil {
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue()
			}
		}
		return v
	}
	peeks, calls := sum("cellkit_router_cell_peeks_total"), sum("cellkit_router_requests_total")
	t.Logf("the router peeked %v times for %v requests", peeks, calls)
	if calls < 20 || peeks > calls/2 {
		t.Errorf("the router peeked %v times for %v requests: the cells do not echo the calls' numbers", peeks, calls)
	}
}

func devInquiry(t *testing.T, st *DevStack, user string) string {
	t.Helper()
	body := fmt.Sprintf(`{"user_id":%q,"product":"credit_loan","amount":5000000,"priority":"high"}`, user)
	req, _ := http.NewRequest(http.MethodPost, st.Router+"/v1/inquiries", strings.NewReader(body))
	req.Header.Set("X-API-Key", st.APIKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /v1/inquiries through the router = %d %s, want 202", resp.StatusCode, b)
	}
	var acc struct {
		ID        string `json:"id"`
		StatusURL string `json:"status_url"`
	}
	if err := json.Unmarshal(b, &acc); err != nil || acc.ID == "" || acc.StatusURL == "" {
		t.Fatalf("202 body %s: %v", b, err)
	}
	var last map[string]any
	testkit.WaitFor(t, 30*time.Second, "inquiry "+acc.ID+" to be done", func() bool {
		last = devGet(t, st, acc.StatusURL)
		if last["status"] == "failed" {
			t.Fatalf("inquiry %s failed: %v", acc.ID, last)
		}
		return last["status"] == "done"
	})
	return acc.ID
}

func devGet(t *testing.T, st *DevStack, path string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, st.Router+path, nil)
	req.Header.Set("X-API-Key", st.APIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return m
}

// assertScrapeTargets checks DIR/prometheus/targets.json against the
// stack: every process's admin listener with its job (and cell) label, and
// each of them serving /metrics.
func assertScrapeTargets(t *testing.T, st *DevStack) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(st.Dir, "prometheus", "targets.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got []scrapeGroup
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("targets.json: %v\n%s", err, b)
	}
	sim, _ := st.Process("agencysim")
	want := []scrapeGroup{{Targets: []string{sim.Addrs["admin"]}, Labels: map[string]string{"job": "cellkit-agencysim"}}}
	for _, p := range st.Cells() {
		want = append(want, scrapeGroup{Targets: []string{p.Addrs["admin"]}, Labels: map[string]string{"job": "cellkit-cell", "cell": p.Name}})
	}
	router, _ := st.Process("router")
	want = append(want, scrapeGroup{Targets: []string{router.Addrs["admin"]}, Labels: map[string]string{"job": "cellkit-router"}})
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("targets.json = %+v, want %+v", got, want)
	}
	for _, g := range got {
		resp, err := http.Get("http://" + g.Targets[0] + "/metrics")
		if err != nil {
			t.Fatalf("target %s %v: %v", g.Targets[0], g.Labels, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET http://%s/metrics (%v) = %s, want 200", g.Targets[0], g.Labels, resp.Status)
		}
	}
}

func assertGone(t *testing.T, procs []DevProcess) {
	t.Helper()
	for _, p := range procs {
		if devstack.Alive(p.PID) {
			t.Errorf("%s (pid %d) still runs", p.Name, p.PID)
		}
	}
}

// dev supervise ends with its program's status (here SIGTERM's, as its
// stop passes it on) and refuses a command line without a program or with
// a backoff it cannot follow.
func TestDevSupervise(t *testing.T) {
	if r := run("dev", "supervise"); r.code != cellctl.ExitUsage {
		t.Errorf("no program: %v", r)
	}
	if r := run("dev", "supervise", "--backoff", "0s", "--", "true"); r.code != cellctl.ExitUsage || !strings.Contains(r.stderr, "--backoff 0s must be positive") {
		t.Errorf("--backoff 0: %v", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r := cellctlRun(ctx, "dev", "supervise", "--", "sleep", "30")
	if r.code != 128+int(syscall.SIGTERM) || !strings.Contains(r.stderr, "supervisor: program stopped") {
		t.Errorf("stopped: %v; want exit %d", r, 128+int(syscall.SIGTERM))
	}
}

// assertDevConsole: dev up printed the console's URL and where its token
// is, the token itself neither there nor in the console's log; the
// console shows the stack to that token only, having asked every one of
// the stack's admin APIs (trusted by the configuration dev up passes).
func assertDevConsole(t *testing.T, st *DevStack, out string, cells int) {
	t.Helper()
	b, err := os.ReadFile(st.ConsoleToken)
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(string(b))
	if info, err := os.Stat(st.ConsoleToken); err != nil || info.Mode().Perm() != 0o600 || len(tok) < 32 {
		t.Errorf("the console's token file %s: %v, %v", st.ConsoleToken, info, err)
	}
	if want := "console     " + st.Console + "   (sign in with the token in "; !strings.Contains(out, want) ||
		!strings.Contains(out, filepath.Join("console", "token")+")") {
		t.Errorf("dev up output lacks %q and the token's file:\n%s", want, out)
	}
	if strings.Contains(out, tok) {
		t.Errorf("dev up printed the console's token:\n%s", out)
	}
	testkit.WaitFor(t, 10*time.Second, "the console's start-up line in its log", func() bool {
		log, _ := os.ReadFile(filepath.Join(st.Dir, "logs", devstack.ConsoleName+".log"))
		return strings.Contains(string(log), "Console: "+st.Console)
	})
	if log, _ := os.ReadFile(filepath.Join(st.Dir, "logs", devstack.ConsoleName+".log")); strings.Contains(string(log), tok) {
		t.Errorf("the console's log holds its token:\n%s", log)
	}
	get := func(auth string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, st.Console+"api/view", nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	// Every cell's card green: the console reads their admin APIs as an
	// operator (with the operator's certificate on a stack on TLS).
	var last string
	if !testkit.Poll(15*time.Second, func() bool {
		code, body := get(tok)
		last = fmt.Sprintf("%d %.600s", code, body)
		var v console.View
		if code != http.StatusOK || json.Unmarshal([]byte(body), &v) != nil || len(v.Cells) != cells {
			return false
		}
		for _, c := range v.Cells {
			if c.Health != console.HealthOK {
				return false
			}
		}
		return len(v.Refused) == 0 && len(v.Routers) == 1 && v.Routers[0].Reachable && !v.Routers[0].Untrusted
	}) {
		t.Errorf("the console's cells are not all green after 15 s: %s", last)
	}
	if code, body := get(""); code != http.StatusUnauthorized || strings.Contains(body, `"c1"`) {
		t.Errorf("the console without its token: %d %.300s", code, body)
	}
}
