package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cellkit/cellkit/internal/atomicfile"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/release"
)

// RunAs makes a process run c's binary and arguments in place of its
// own, keeping the rest of it (name, ports, data, log, namespace,
// environment, supervisor).
func RunAs(c control.Command) func(Process) Process {
	return func(p Process) Process {
		p.PID, p.Bin, p.Args = 0, c.Bin, slices.Clone(c.Args)
		return p
	}
}

// AsRelease makes a process run as release s: its binary (or the
// process's own) with s's flags on top of its arguments.
func AsRelease(s release.Spec) func(Process) Process {
	return func(p Process) Process { return RunAs(s.Apply(CommandOf(p)))(p) }
}

// CommandOf is what p runs: its binary and arguments.
func CommandOf(p Process) control.Command {
	return control.Command{Bin: p.Bin, Args: slices.Clone(p.Args)}
}

// Deployer replaces the processes of a stack on this machine — the local
// stack (dev.json) or the network lab (net.json, whose processes run in
// their hosts' namespaces) — with another release, and back. It is the
// stacks' release.Deployer, which the rollout drives.
type Deployer struct {
	// Path is the stack's record.
	Path string
	// Grace is how long a process replaced has to stop on SIGTERM.
	Grace time.Duration
	// Handover bounds the replacement of a process that hands its
	// sockets over (HandsOver) [DefaultHandover].
	Handover time.Duration
}

var _ release.Deployer = Deployer{}

// Processes are the stack's processes as a release's deployer lists
// them, in the record's order (of start): each with its cell and
// instance, whether it is a router, its readiness URL and what it runs.
// A local stack's record written before processes named their cells
// (dev up of an earlier cellctl) has every process but the agency
// simulator, the console and the routers as the cell of its name, as
// that dev up started them.
func (d Deployer) Processes(ctx context.Context) ([]release.Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	_, procs, err := d.read()
	if err != nil {
		return nil, err
	}
	legacy := filepath.Base(d.Path) == StateFile && !slices.ContainsFunc(procs, func(p Process) bool { return p.Cell != "" })
	out := make([]release.Process, 0, len(procs))
	for _, p := range procs {
		rp := release.Process{Name: p.Name, Router: IsRouter(p.Name), Cell: p.Cell, Instance: p.Instance, Ready: p.Ready, Run: CommandOf(p)}
		if legacy && !rp.Router && p.Name != "agencysim" && p.Name != ConsoleName {
			rp.Cell = p.Name
		}
		out = append(out, rp)
	}
	return out, nil
}

// Replace runs run's binary and arguments in place of the process name's,
// keeping its ports, data, log, environment and supervisor (a router
// that hands its sockets over hands them to the new process), and
// returns what it ran before. The local stack runs binaries: a command
// with an image, or without a binary, is refused before anything stops.
func (d Deployer) Replace(ctx context.Context, name string, run control.Command) (control.Command, error) {
	switch {
	case run.Image != "":
		return control.Command{}, fmt.Errorf("%s: the local stack runs binaries, not images (%s)", name, run.Image)
	case run.Bin == "":
		return control.Command{}, fmt.Errorf("%s: a command without a binary to run", name)
	}
	before, _, err := d.ReplaceProcess(ctx, name, RunAs(run))
	if before.Name == "" {
		return control.Command{}, err
	}
	return CommandOf(before), err
}

// ReplaceProcess stops the process name and starts it as run says
// (AsRelease, RunAs, or the process as it was, to go back), with its
// ports, data, log and supervisor, and records it. It returns the process
// as it ran before and the new child; readiness is the caller's to wait
// for.
func (d Deployer) ReplaceProcess(ctx context.Context, name string, run func(Process) Process) (before Process, c *Child, err error) {
	rec, procs, err := d.read()
	if err != nil {
		return Process{}, nil, err
	}
	i := slices.IndexFunc(procs, func(p Process) bool { return p.Name == name })
	if i < 0 {
		return Process{}, nil, fmt.Errorf("no process %q in %s", name, d.Path)
	}
	before = procs[i]
	if HandsOver(before) && Alive(before.PID) {
		if c, err = d.handOver(ctx, before, run(before)); err != nil {
			return before, nil, err
		}
	} else {
		if _, err := Stop(ctx, before, d.Grace); err != nil && !errors.Is(err, ErrNotRunning) {
			return before, nil, err
		}
		if c, err = Start(run(before)); err != nil {
			return before, nil, err
		}
	}
	procs[i] = c.Process
	return before, c, d.write(rec, procs)
}

// HandsOver says whether p hands its listening sockets to a successor
// (a router with --handoff-socket): it is replaced by starting the new
// process first, not by stopping it.
func HandsOver(p Process) bool {
	return slices.ContainsFunc(p.Args, func(a string) bool {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		return strings.HasPrefix(a, "-") && name == "handoff-socket"
	})
}

// DefaultHandover bounds a handoff: the successor's start (its map, its
// takeover) and the old process's drain (a router's --shutdown-timeout).
const DefaultHandover = time.Minute

// handOver replaces old, which hands its sockets to its successor, drains
// and ends, by next: the port never refuses a connection. A supervised old
// has its supervisor start next beside it (handOverSupervised); otherwise
// next starts as a process of its own. Next has taken over once its
// readiness answers with its own pid, or once old has ended; old then has
// Grace to end by itself (its drain is bounded by its own flag) before it
// is killed. A successor that ends, or that has not taken over within
// d.Handover, is stopped, and old (which serves on, the handoff having
// failed) stays.
func (d Deployer) handOver(ctx context.Context, old, next Process) (*Child, error) {
	if old.Supervisor != nil {
		return d.handOverSupervised(ctx, old, next)
	}
	c, err := Start(next)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: time.Second}
	t0 := time.Now()
	for Alive(old.PID) && !answersAs(ctx, hc, c.Ready, c.PID) {
		why, ended := c.Ended()
		if !ended {
			if why = d.overdue(ctx, t0); why == "" {
				time.Sleep(stopPoll)
				continue
			}
		}
		if _, err := Stop(context.WithoutCancel(ctx), c.Process, d.Grace); err != nil && !errors.Is(err, ErrNotRunning) {
			why += "; stopping it: " + err.Error()
		}
		return nil, notTakenOver(old, why, c.Log)
	}
	return c, d.retire(ctx, old.Name, old.PID, func() error {
		_, err := Stop(context.WithoutCancel(ctx), old, 0)
		return err
	})
}

// handOverSupervised asks old's supervisor to start next's program beside
// old's (SuccessorRequest, SIGWINCH): one process more, not a supervisor
// and its program, and the supervisor carries on with the successor once
// old's program has ended. The process keeps its supervisor, its pid (the
// supervisor's) and its record.
func (d Deployer) handOverSupervised(ctx context.Context, old, next Process) (*Child, error) {
	state := old.Supervisor.State
	before, err := ReadSupervision(state)
	if err != nil || before.PID == 0 {
		return nil, fmt.Errorf("%s: no program running under its supervisor to hand over (%v)", old.Name, err)
	}
	id := strconv.FormatInt(time.Now().UnixNano(), 36)
	b, err := json.Marshal(SuccessorRequest{ID: id, Bin: next.Bin, Args: next.Args})
	if err != nil {
		return nil, err
	}
	if err := atomicfile.WriteFile(SuccessorFile(state), b, 0o644); err != nil {
		return nil, err
	}
	if err := syscall.Kill(old.PID, successorSignal); err != nil {
		return nil, fmt.Errorf("%s: asking its supervisor for a successor: %w", old.Name, err)
	}
	next.PID, next.Supervisor, next.Log = old.PID, old.Supervisor, old.Log
	hc := &http.Client{Timeout: time.Second}
	t0 := time.Now()
	succ := 0
	for {
		rec, err := ReadSupervision(state)
		why := ""
		switch {
		case err != nil:
			why = err.Error()
		case rec.SuccessorID != id:
			if time.Since(t0) > superviseAnswer {
				why = fmt.Sprintf("its supervisor started no successor within %s (a supervisor older than successors?)", superviseAnswer)
			}
		case rec.PID != before.PID && rec.PID != 0:
			succ = rec.PID // the old program ended: the successor is the program
			if answersAs(ctx, hc, next.Ready, succ) || !Alive(before.PID) {
				return Attach(next), d.settle(ctx, old, state, before.PID, succ)
			}
		case rec.Successor == 0:
			why = "it ended: " + rec.SuccessorExit
		default:
			succ = rec.Successor
			if answersAs(ctx, hc, next.Ready, succ) {
				return Attach(next), d.settle(ctx, old, state, before.PID, succ)
			}
		}
		if why == "" {
			why = d.overdue(ctx, t0)
		}
		if why == "" {
			time.Sleep(stopPoll)
			continue
		}
		if succ != 0 && Alive(succ) {
			if _, err := Stop(context.WithoutCancel(ctx), Process{Name: old.Name, PID: succ, Bin: next.Bin}, d.Grace); err != nil && !errors.Is(err, ErrNotRunning) {
				why += "; stopping it: " + err.Error()
			}
		}
		return nil, notTakenOver(old, why, old.Log)
	}
}

// settle ends a supervised handoff that succeeded: the old program has
// Grace to end (then it is killed), and the supervisor's record names the
// successor as its program before the caller reads it.
func (d Deployer) settle(ctx context.Context, old Process, state string, oldPID, succ int) error {
	if err := d.retire(ctx, old.Name, oldPID, func() error { return syscall.Kill(oldPID, syscall.SIGKILL) }); err != nil {
		return err
	}
	for t0 := time.Now(); time.Since(t0) < superviseAnswer; time.Sleep(stopPoll) {
		if rec, err := ReadSupervision(state); err == nil && rec.PID == succ {
			return nil
		}
	}
	return fmt.Errorf("%s: its supervisor does not record the successor %d as its program", old.Name, succ)
}

// superviseAnswer bounds the wait for a supervisor to start a successor.
const superviseAnswer = 5 * time.Second

// overdue says why a handoff under way since t0 is given up: ctx ended, or
// d.Handover passed; "" while it may go on.
func (d Deployer) overdue(ctx context.Context, t0 time.Time) string {
	within := d.Handover
	if within <= 0 {
		within = DefaultHandover
	}
	switch {
	case ctx.Err() != nil:
		return ctx.Err().Error()
	case time.Since(t0) > within:
		return fmt.Sprintf("not serving after %s", within)
	}
	return ""
}

// notTakenOver is the error of a handoff that failed.
func notTakenOver(old Process, why, log string) error {
	return fmt.Errorf("%s: the new process did not take over (%s; last lines of %s: %s); the old one serves on", old.Name, why, log, LogTail(log, 5))
}

// retire gives the program pid, which handed over, Grace to end by itself
// after its drain, then kills it.
func (d Deployer) retire(ctx context.Context, name string, pid int, kill func() error) error {
	for t1 := time.Now(); Alive(pid) && time.Since(t1) < d.Grace && ctx.Err() == nil; {
		time.Sleep(stopPoll)
	}
	if !Alive(pid) {
		return nil
	}
	if err := kill(); err != nil && !errors.Is(err, ErrNotRunning) && Alive(pid) {
		return fmt.Errorf("%s: the old process, which handed over, outlived its drain and could not be killed: %w", name, err)
	}
	return nil
}

// answersAs says whether the readiness URL ready answers ready from the
// program pid, not from the process it takes over from.
func answersAs(ctx context.Context, hc *http.Client, ready string, pid int) bool {
	if ready == "" || pid == 0 {
		return false
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ready, nil)
	if err != nil {
		return false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var rd struct {
		PID int `json:"pid"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&rd) != nil || rd.PID == 0 {
		return false
	}
	return rd.PID == pid
}

// Recorded are the stack's processes as its record has them.
func (d Deployer) Recorded() ([]Process, error) {
	_, procs, err := d.read()
	return procs, err
}

// read reads the record, keeping what it holds besides the processes (a
// lab's record has more).
func (d Deployer) read() (map[string]json.RawMessage, []Process, error) {
	b, err := os.ReadFile(d.Path)
	if err != nil {
		return nil, nil, err
	}
	var rec map[string]json.RawMessage
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", d.Path, err)
	}
	var procs []Process
	if err := json.Unmarshal(rec["processes"], &procs); err != nil {
		return nil, nil, fmt.Errorf("read %s: processes: %w", d.Path, err)
	}
	return rec, procs, nil
}

func (d Deployer) write(rec map[string]json.RawMessage, procs []Process) error {
	p, err := json.Marshal(procs)
	if err != nil {
		return err
	}
	rec["processes"] = p
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(d.Path, append(b, '\n'), 0o600)
}
