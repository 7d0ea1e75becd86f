// Package devstack is the record of a local stack started by `cellctl dev
// up` (var/dev.json) and the process helpers that `cellctl dev` and the
// load-test drills share: both start, watch and stop the same processes.
package devstack

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
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
