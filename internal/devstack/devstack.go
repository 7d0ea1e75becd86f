// Package devstack is the local stack's process supervision and its record,
// shared by `cellctl dev` (devctl) and the drills so that both start, watch
// and stop the stack's processes the same way. It is the lab's: the product
// never imports it. Its Deployer is the stacks' release.Deployer, through
// which the rollout replaces their processes.
//
// A process is started in its own session (a terminal's Ctrl-C reaches only
// the supervisor, which stops the processes in order) with its output
// appended to its log file; readiness is its Ready URL answering 200; it is
// stopped with SIGTERM to its process group and SIGKILL once a grace period
// has passed. What was started is recorded in DIR/dev.json (Stack), replaced
// atomically, so that another program can find, watch and stop it.
package devstack

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/atomicfile"
)

// StateFile is the name of the stack's record in its directory.
const StateFile = "dev.json"

// Stack is DIR/dev.json: what dev up started, for dev status, dev down and
// the drills.
type Stack struct {
	Dir         string `json:"dir"`
	Registry    string `json:"registry"`
	Router      string `json:"router"`       // public base URL
	RouterAdmin string `json:"router_admin"` // admin base URL (metrics, readyz)
	AgencyAdmin string `json:"agency_admin"` // the simulator's admin API
	// Console is the web console's base URL (`cellctl console`), its
	// token in ConsoleToken's file; empty for a stack without one.
	Console      string    `json:"console,omitempty"`
	ConsoleToken string    `json:"console_token,omitempty"`
	APIKey       string    `json:"api_key"`
	Foreground   bool      `json:"foreground"`
	StartedAt    time.Time `json:"started_at"`
	Processes    []Process `json:"processes"` // in order of start
	// TLS, if set, says the stack runs on TLS (dev up --tls) and names its
	// certificate files: readiness URLs and the cells' admin APIs are https
	// and need them (TLS.Client).
	TLS *TLS `json:"tls,omitempty"`
}

// Process is one process of the stack.
type Process struct {
	Name string `json:"name"` // agencysim, c1..cN, router
	// Cell and Instance are a cell's process's cell id and instance id
	// ("" for a cell of one process); both "" for a process of no cell.
	Cell     string   `json:"cell,omitempty"`
	Instance string   `json:"instance,omitempty"`
	PID      int      `json:"pid"`
	Bin      string   `json:"bin"`
	Args     []string `json:"args"` // to restart it as it was (drills)
	Log      string   `json:"log"`
	Ready    string   `json:"ready"` // URL answering 200 when ready
	// Addrs are its listen addresses by role (intake, admin, nice, kcb...).
	Addrs map[string]string `json:"addrs"`
	// Netns, if set, is the network namespace it runs in (a host of
	// internal/netlab): Start runs it through `ip netns exec NETNS`.
	Netns string `json:"netns,omitempty"`
	// Supervisor, if set, runs it under a supervisor that restarts it
	// when it ends on its own; PID is then the supervisor's (Program
	// tells the program's).
	Supervisor *Supervisor `json:"supervisor,omitempty"`
	// Env are KEY=VALUE variables it gets on top of ChildEnv's, such as
	// CONSUL_HTTP_TOKEN.
	Env []string `json:"env,omitempty"`
}

// Agencies are the agencies a stack's map is made with, and their session
// limits: those the stack's agency simulator is started with.
var Agencies = map[string]int{"nice": 80, "kcb": 40}

// InstanceName is the stack's process name of a cell's instance: CELL-ID
// ("c1-i1"), or the cell's own id for a cell of one process.
func InstanceName(cell, instance string) string {
	if instance == "" {
		return cell
	}
	return cell + "-" + instance
}

// ConsoleName is the process name of a stack's web console.
const ConsoleName = "console"

// IsRouter says whether a stack's process is a router: "router" (the
// local stack's), or "router" and a number (the lab's router1, router2).
func IsRouter(name string) bool {
	rest, ok := strings.CutPrefix(name, "router")
	return ok && strings.Trim(rest, "0123456789") == ""
}

// StatePath is the record's path in the stack's directory.
func StatePath(dir string) string { return filepath.Join(dir, StateFile) }

// Process returns the process named name.
func (st *Stack) Process(name string) (*Process, bool) {
	for i := range st.Processes {
		if st.Processes[i].Name == name {
			return &st.Processes[i], true
		}
	}
	return nil, false
}

// Cells are the cell processes (all but the agency simulator, the
// routers and the console), c1 first.
func (st *Stack) Cells() []Process {
	var cells []Process
	for _, p := range st.Processes {
		if p.Name != "agencysim" && p.Name != ConsoleName && !IsRouter(p.Name) {
			cells = append(cells, p)
		}
	}
	return cells
}

// Scraped are the processes Prometheus scrapes: all but the console,
// whose /metrics needs its token.
func (st *Stack) Scraped() []Process {
	var out []Process
	for _, p := range st.Processes {
		if p.Name != ConsoleName {
			out = append(out, p)
		}
	}
	return out
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

// Write replaces the stack record at path atomically. It holds the API
// key, so only its owner may read it.
func Write(path string, st *Stack) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(b, '\n'), 0o600)
}
