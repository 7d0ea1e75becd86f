package netlab

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/atomicfile"
)

// State is a lab's record, STATEDIR/netlab-PREFIX.json, written before
// each thing is made so that a sweep after a crash knows the lab.
type State struct {
	Prefix    string       `json:"prefix"`
	Subnet    netip.Prefix `json:"subnet"`
	Gateway   netip.Addr   `json:"gateway"`
	Bridge    string       `json:"bridge"`
	Owner     Owner        `json:"owner"`
	Detached  bool         `json:"detached"`
	CreatedAt time.Time    `json:"created_at"`
	Hosts     []HostState  `json:"hosts"`
	Procs     []ProcState  `json:"procs"`
}

// HostState is a host of the record.
type HostState struct {
	Name  string     `json:"name"`
	Netns string     `json:"netns"`
	Link  string     `json:"link"` // the outer veth end, on the bridge
	Addr  netip.Addr `json:"addr"`
}

// ProcState is a process started by Host.Start.
type ProcState struct {
	Host string `json:"host"`
	Name string `json:"name"`
	PID  int    `json:"pid"`
	Bin  string `json:"bin"`
}

// Owner is the process that made a lab: its pid and its start time (in
// clock ticks after boot, /proc/PID/stat), which tells a live owner from a
// recycled pid.
type Owner struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// Alive reports whether the owner still runs.
func (o Owner) Alive() bool {
	start, err := startTime(o.PID)
	return err == nil && start == o.Start
}

// StatePath is the record of the lab with prefix in dir.
func StatePath(dir, prefix string) string {
	return filepath.Join(dir, "netlab-"+prefix+".json")
}

// ReadState reads a lab's record.
func ReadState(path string) (*State, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return &st, nil
}

// States reads every lab record in dir whose prefix starts with family
// (every record for "").
func States(dir, family string) ([]*State, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "netlab-"+family+"*.json"))
	if err != nil {
		return nil, err
	}
	var sts []*State
	for _, p := range paths {
		st, err := ReadState(p)
		if err != nil {
			if os.IsNotExist(err) { // swept meanwhile
				continue
			}
			return nil, err
		}
		sts = append(sts, st)
	}
	return sts, nil
}

func writeState(path string, st *State) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("netlab: write the state: %w", err)
	}
	return nil
}

// self is this process as a lab's owner.
func self() (Owner, error) {
	pid := os.Getpid()
	start, err := startTime(pid)
	if err != nil {
		return Owner{}, fmt.Errorf("netlab: own start time: %w", err)
	}
	return Owner{PID: pid, Start: start}, nil
}

// startTime is field 22 of /proc/PID/stat.
func startTime(pid int) (uint64, error) {
	if pid <= 0 {
		return 0, fmt.Errorf("no pid %d", pid)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid ...: the fields after the last ')' start at 3.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	return strconv.ParseUint(f[19], 10, 64)
}
