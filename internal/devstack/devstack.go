// Package devstack is the record of a local stack started by `cellctl dev
// up` (var/dev.json) and the process helpers that `cellctl dev` and the
// load-test drills share: both start, watch and stop the same processes.
package devstack

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cellkit/cellkit/internal/atomicfile"
)

// Stack is var/dev.json: what dev up started, for dev status, dev down and
// the drills.
type Stack struct {
	Dir         string    `json:"dir"`
	Registry    string    `json:"registry"`
	Router      string    `json:"router"`       // public base URL
	RouterAdmin string    `json:"router_admin"` // admin base URL (metrics, readyz)
	AgencyAdmin string    `json:"agency_admin"` // the simulator's admin API
	APIKey      string    `json:"api_key"`
	Foreground  bool      `json:"foreground"`
	StartedAt   time.Time `json:"started_at"`
	Processes   []Process `json:"processes"`
}

// Process is one process of the stack.
type Process struct {
	Name  string   `json:"name"` // agencysim, c1..cN, router
	PID   int      `json:"pid"`
	Bin   string   `json:"bin"`
	Args  []string `json:"args"` // to restart it as it was (drills)
	Log   string   `json:"log"`
	Ready string   `json:"ready"` // URL answering 200 when ready
	// Addrs are its listen addresses by role (intake, admin, nice, kcb...).
	Addrs map[string]string `json:"addrs"`
}

// ChildEnv is the environment of the stack's processes: this one without
// CELLKIT_* variables, so that the flags dev up passes are the whole
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

// Alive reports whether pid runs; a zombie does not.
func Alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	// pid (comm) S ...: the state follows the last ')'.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] != 'Z' && b[i+2] != 'X'
	}
	return true
}

// Read reads a stack record (dev.json).
func Read(path string) (*Stack, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var st Stack
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return &st, nil
}

// Write replaces the stack record at path atomically.
func Write(path string, st *Stack) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(b, '\n'), 0o600)
}

// Start starts p in its own session (a terminal's Ctrl-C reaches only the
// caller, which stops the processes in order) with its output appended to
// its log, and without CELLKIT_* variables. The channel gets its exit.
func Start(p Process) (done chan error, pid int, err error) {
	logf, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, 0, err
	}
	defer logf.Close()
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Stdout, cmd.Stderr, cmd.Env = logf, logf, ChildEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, 0, fmt.Errorf("start %s: %w", p.Name, err)
	}
	done = make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return done, cmd.Process.Pid, nil
}
