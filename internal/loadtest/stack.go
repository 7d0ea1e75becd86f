package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cellkit/cellkit/internal/devstack"
)

// Stack is a running local stack, as recorded in its dev.json.
type Stack struct {
	devstack.Stack

	path    string // dev.json
	cellctl string // the cellctl binary
	owned   bool   // started by StartStack: Stop takes it down
}

// Process is one process of the stack.
type Process = devstack.Process

// LoadStack reads a running stack's dev.json; cellctl is the cellctl binary
// the drills call (drain, undrain).
func LoadStack(path, cellctl string) (*Stack, error) {
	rec, err := devstack.Read(path)
	if err != nil {
		return nil, fmt.Errorf("read the stack: %w (start one with 'cellctl dev up')", err)
	}
	return &Stack{Stack: *rec, path: path, cellctl: cellctl}, nil
}

// StartStack runs `cellctl dev up` detached in a fresh temporary directory
// on free ports, with the binaries in binDir and any extra dev up flags, and
// returns the stack.
func StartStack(ctx context.Context, binDir string, devUpArgs ...string) (*Stack, error) {
	cellctl, err := filepath.Abs(filepath.Join(binDir, "cellctl"))
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "cellkit-drill-")
	if err != nil {
		return nil, err
	}
	args := append([]string{"dev", "up", "--dir", dir, "--router-port", "0", "--port-base", "0", "--agency-port", "0"}, devUpArgs...)
	out, err := exec.CommandContext(ctx, cellctl, args...).CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("cellctl dev up: %v: %s", err, bytes.TrimSpace(out))
	}
	st, err := LoadStack(filepath.Join(dir, "dev.json"), cellctl)
	if err != nil {
		return nil, err
	}
	st.owned = true
	return st, nil
}

// Stop takes down a stack that StartStack started and removes its
// directory; a stack that was running before is left alone.
func (st *Stack) Stop(ctx context.Context) error {
	if !st.owned {
		return nil
	}
	out, err := exec.CommandContext(ctx, st.cellctl, "dev", "down", "--dir", st.Dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("cellctl dev down: %v: %s", err, bytes.TrimSpace(out))
	}
	return os.RemoveAll(st.Dir)
}

// Proc returns the process named name.
func (st *Stack) Proc(name string) (*Process, error) {
	for i := range st.Processes {
		if st.Processes[i].Name == name {
			return &st.Processes[i], nil
		}
	}
	return nil, fmt.Errorf("no process %q in %s", name, st.path)
}

// Cells are the cell processes, c1 first.
func (st *Stack) Cells() []string {
	var cells []string
	for _, p := range st.Processes {
		if p.Name != "agencysim" && p.Name != "router" {
			cells = append(cells, p.Name)
		}
	}
	return cells
}

// Kill sends SIGKILL to the process and waits until it is gone.
func (st *Stack) Kill(ctx context.Context, name string) error {
	p, err := st.Proc(name)
	if err != nil {
		return err
	}
	if !devstack.Alive(p.PID) {
		return fmt.Errorf("%s (pid %d) is not running", name, p.PID)
	}
	if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s: %w", name, err)
	}
	return pollUntil(ctx, 10*time.Second, func() bool { return !devstack.Alive(p.PID) })
}

// Restart starts the process again with the binary and arguments recorded
// in dev.json, appending to its log, and records the new pid there.
func (st *Stack) Restart(name string) error {
	p, err := st.Proc(name)
	if err != nil {
		return err
	}
	if _, p.PID, err = devstack.Start(*p); err != nil { // its exit is reaped by Start
		return fmt.Errorf("restart %s: %w", name, err)
	}
	return devstack.Write(st.path, &st.Stack)
}

// WaitReady polls the process's readiness URL until it answers 200.
func (st *Stack) WaitReady(ctx context.Context, name string, within time.Duration) error {
	p, err := st.Proc(name)
	if err != nil {
		return err
	}
	if err := pollUntil(ctx, within, func() bool { return getOK(ctx, p.Ready) }); err != nil {
		return fmt.Errorf("%s not ready: %w", name, err)
	}
	return nil
}

// Cellctl runs the cellctl binary against the stack's registry.
func (st *Stack) Cellctl(ctx context.Context, args ...string) (string, error) {
	full := append([]string{"--registry", st.Registry}, args...)
	out, err := exec.CommandContext(ctx, st.cellctl, full...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("cellctl %s: %v: %s", strings.Join(args, " "), err, lastLines(string(out), 3))
	}
	return string(out), nil
}

// CellStatus is the part of a cell's GET /v1/admin/status the drills read.
type CellStatus struct {
	Cell   string `json:"cell"`
	Intake string `json:"intake"`
	Queue  struct {
		Messages         int     `json:"messages"`
		OldestAgeSeconds float64 `json:"oldest_age_seconds"`
		AgeBudgetSeconds float64 `json:"age_budget_seconds"`
	} `json:"queue"`
	Inflight int `json:"inflight"`
}

// Status reads a cell's admin status.
func (st *Stack) Status(ctx context.Context, cell string) (CellStatus, error) {
	var cs CellStatus
	p, err := st.Proc(cell)
	if err != nil {
		return cs, err
	}
	err = getJSON(ctx, "http://"+p.Addrs["admin"]+"/v1/admin/status", &cs)
	return cs, err
}

// pollUntil calls ok every 50 ms until it holds, ctx ends or within passes.
func pollUntil(ctx context.Context, within time.Duration, ok func() bool) error {
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

var adminClient = &http.Client{Timeout: 2 * time.Second}

func getOK(ctx context.Context, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := adminClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func getJSON(ctx context.Context, url string, v any) error {
	return doJSON(ctx, http.MethodGet, url, nil, v)
}

func doJSON(ctx context.Context, method, url string, body, v any) error {
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := adminClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s", method, url, resp.Status)
	}
	if v == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
