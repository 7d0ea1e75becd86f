package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cellkit/cellkit/internal/atomicfile"
	"github.com/cellkit/cellkit/internal/program"
)

// Supervisor says how Start runs a process under supervision: as the child
// of a supervisor that restarts it when it ends on its own, with backoff,
// as the kubelet restarts a container. The stack records the supervisor's
// pid, which leads the process group that both are in: Stop and Signal
// reach both (a drill's SIGKILL ends the supervisor too, so the process
// stays down; a SIGSTOP freezes the program). Only an end that no signal
// to the group caused — the program's own exit, a crash, the OOM killer —
// is restarted.
type Supervisor struct {
	// Command is the supervisor program and its first arguments, such
	// as [/abs/bin/cellctl dev supervise]; Start appends --state State,
	// "--", the process's binary and its arguments.
	Command []string `json:"command"`
	// State is the file where the supervisor records the program's pid
	// and its restarts (Supervision).
	State string `json:"state"`
}

// CellctlSupervisor is `cellctl dev supervise` (cellctl the binary's path)
// as p's supervisor, its record in DIR/run/NAME.json: how the local stack
// and the network lab run their processes.
func CellctlSupervisor(cellctl, dir string, p Process) *Supervisor {
	return &Supervisor{Command: []string{cellctl, "dev", "supervise"}, State: filepath.Join(dir, "run", p.Name+".json")}
}

// Supervision is a supervisor's record of its program (Supervisor.State),
// replaced atomically at each start and end.
type Supervision struct {
	PID        int       `json:"pid"`      // the program's; 0 while it waits to restart
	Restarts   int       `json:"restarts"` // starts after the first
	LastExit   string    `json:"last_exit,omitempty"`
	LastExitAt time.Time `json:"last_exit_at,omitzero"`
	// NextStart is when the program starts again, while it waits.
	NextStart time.Time `json:"next_start,omitzero"`
	// Successor is the pid of the successor started at a handoff
	// (SuccessorRequest) while the program still runs; SuccessorExit says
	// how the last one ended if it ended before the program did.
	Successor     int    `json:"successor,omitempty"`
	SuccessorExit string `json:"successor_exit,omitempty"`
	// SuccessorID is the ID of the request the successor fields answer.
	SuccessorID string `json:"successor_id,omitempty"`
}

// SuccessorRequest is what a supervisor starts beside its program at
// SIGWINCH, read from the file SuccessorFile(state): the program's
// successor at a handoff, which takes its sockets over. When the program
// ends (status 98, handed over), the successor is the program, and the
// one started again if it ends on its own. One supervisor, one more
// process: a handoff under supervision starts the successor alone, as a
// service manager does.
type SuccessorRequest struct {
	ID   string   `json:"id"` // echoed in the record's SuccessorID
	Bin  string   `json:"bin"`
	Args []string `json:"args"`
}

// SuccessorFile is where a supervisor whose record is state reads its
// SuccessorRequest.
func SuccessorFile(state string) string { return state + ".successor" }

// successorSignal asks a supervisor to start its program's successor.
const successorSignal = syscall.SIGWINCH

// ReadSupervision reads a supervisor's record.
func ReadSupervision(path string) (Supervision, error) {
	var s Supervision
	b, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("read %s: %w", path, err)
	}
	return s, nil
}

// Program is the pid of the program p runs: the supervised child's, as its
// supervisor recorded it, for a supervised process (0 while it waits to
// restart); p.PID otherwise.
func Program(p Process) int {
	if p.Supervisor == nil {
		return p.PID
	}
	s, err := ReadSupervision(p.Supervisor.State)
	if err != nil {
		return 0
	}
	return s.PID
}

// SuperviseConfig is how Supervise restarts its program.
type SuperviseConfig struct {
	// State is the file of the supervisor's record (Supervision); none if
	// empty.
	State string
	// Backoff is the wait before the first restart, doubled after each
	// restart up to MaxBackoff.
	Backoff    time.Duration
	MaxBackoff time.Duration
	// Steady is how long a run lasts for the backoff to start again from
	// Backoff.
	Steady time.Duration
}

// DefaultSuperviseConfig restarts after 1 s, 2 s, 4 s... up to 30 s; a run
// of a minute starts the backoff again from 1 s.
func DefaultSuperviseConfig() SuperviseConfig {
	return SuperviseConfig{Backoff: time.Second, MaxBackoff: 30 * time.Second, Steady: time.Minute}
}

// RegisterFlags binds cfg's fields to flags of fs (--state, --backoff,
// --max-backoff, --steady), with cfg's values as defaults:
// the supervisor programs' flags, which Start's command line uses.
func (cfg *SuperviseConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&cfg.State, "state", cfg.State, "record the program's pid and restarts in `FILE` (JSON)")
	fs.DurationVar(&cfg.Backoff, "backoff", cfg.Backoff, "wait `D` before the first restart, doubled after each one")
	fs.DurationVar(&cfg.MaxBackoff, "max-backoff", cfg.MaxBackoff, "wait at most `D` before a restart")
	fs.DurationVar(&cfg.Steady, "steady", cfg.Steady, "a run of `D` starts the backoff again from --backoff")
}

// Validate reports a configuration Supervise cannot follow.
func (cfg SuperviseConfig) Validate() error {
	switch {
	case cfg.Backoff <= 0:
		return fmt.Errorf("--backoff %v must be positive", cfg.Backoff)
	case cfg.MaxBackoff < cfg.Backoff:
		return fmt.Errorf("--max-backoff %v must be at least --backoff %v", cfg.MaxBackoff, cfg.Backoff)
	case cfg.Steady <= 0:
		return fmt.Errorf("--steady %v must be positive", cfg.Steady)
	}
	return nil
}

// forwarded are the signals the supervisor passes on to its program. A
// signal sent to the group reaches the program twice (the stack's
// programs take a second SIGTERM as the first); SIGHUP and the user
// signals would otherwise end the supervisor.
var forwarded = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2}

// Supervise runs bin with args as its child, with this process's output
// and environment, and starts it again when it ends while no SIGTERM or
// SIGINT has come (nor ctx ended), after the backoff of cfg. It returns the
// exit status to end with: the program's last (128+N for signal N), or 0
// when stopped while the program waited to restart.
// One piece: one select loop whose every case changes the same state (the program, its successor, stopping).
func Supervise(ctx context.Context, cfg SuperviseConfig, bin string, args []string, log *slog.Logger) int {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, successorSignal)
	defer signal.Stop(winch)
	var rec Supervision
	record := func() {
		if cfg.State == "" {
			return
		}
		b, _ := json.Marshal(rec)
		if err := atomicfile.WriteFile(cfg.State, append(b, '\n'), 0o644); err != nil {
			log.Warn("supervisor: cannot record the program's state", "err", err)
		}
	}
	start := func(bin string, args []string) (*exec.Cmd, <-chan error, error) {
		cmd := exec.Command(bin, args...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			return nil, nil, err
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		return cmd, done, nil
	}
	stopping := false
	backoff := cfg.Backoff
	for {
		started := time.Now()
		cmd, done, err := start(bin, args)
		if err != nil {
			log.Error("supervisor: cannot start the program", "bin", bin, "err", err)
			return 127
		}
		rec.PID, rec.NextStart = cmd.Process.Pid, time.Time{}
		record()
		log.Info("supervisor: program started", "bin", bin, "pid", rec.PID, "restarts", rec.Restarts)
		var (
			next     *exec.Cmd // the successor, while the program runs
			nextDone <-chan error
			nextBin  string
			nextArgs []string
		)
	wait:
		for {
			select {
			case err = <-done:
				if next == nil || stopping {
					break wait
				}
				// The program ended with its successor running: handed
				// over (98), or gone on its own meanwhile; either way the
				// successor is the program now.
				log.Info("supervisor: program ended; its successor is the program now", "pid", cmd.Process.Pid,
					"status", ExitText(err), "successor_pid", next.Process.Pid)
				cmd, done, bin, args, started = next, nextDone, nextBin, nextArgs, time.Now()
				next, nextDone = nil, nil
				rec.PID, rec.Successor, rec.LastExit, rec.LastExitAt = cmd.Process.Pid, 0, "", time.Time{}
				record()
			case nerr := <-nextDone:
				log.Warn("supervisor: the successor ended before the program did; the program serves on",
					"successor_pid", next.Process.Pid, "status", ExitText(nerr))
				next, nextDone = nil, nil
				rec.Successor, rec.SuccessorExit = 0, ExitText(nerr)
				record()
			case <-winch:
				if next != nil || stopping || cfg.State == "" {
					log.Warn("supervisor: successor asked for while one runs or while stopping; ignored")
					continue
				}
				req, rerr := readSuccessor(SuccessorFile(cfg.State))
				if rerr == nil {
					next, nextDone, rerr = start(req.Bin, req.Args)
				}
				rec.SuccessorID = req.ID
				if rerr != nil {
					log.Error("supervisor: cannot start the successor", "err", rerr)
					rec.SuccessorExit = "not started: " + rerr.Error()
					record()
					continue
				}
				nextBin, nextArgs = req.Bin, req.Args
				rec.Successor, rec.SuccessorExit = next.Process.Pid, ""
				record()
				log.Info("supervisor: successor started", "bin", req.Bin, "pid", next.Process.Pid)
			case sig := <-sigs:
				stopping = stopping || sig == syscall.SIGTERM || sig == syscall.SIGINT
				_ = cmd.Process.Signal(sig) // fails only once the child has exited: done reports it
				if next != nil {
					_ = next.Process.Signal(sig) // as above
				}
			case <-ctx.Done():
				if !stopping {
					stopping = true
					_ = cmd.Process.Signal(syscall.SIGTERM) // as above
					if next != nil {
						_ = next.Process.Signal(syscall.SIGTERM)
					}
				}
			}
		}
		if next != nil { // stopping: the successor goes too
			_ = next.Process.Signal(syscall.SIGTERM) // as above
			nerr := <-nextDone
			log.Info("supervisor: successor stopped", "pid", next.Process.Pid, "status", ExitText(nerr))
		}
		ran := time.Since(started)
		code := exitCode(err)
		rec.PID, rec.Successor, rec.LastExit, rec.LastExitAt = 0, 0, ExitText(err), time.Now().UTC()
		record()
		if stopping {
			log.Info("supervisor: program stopped", "pid", cmd.Process.Pid, "status", ExitText(err))
			return code
		}
		if code == program.ExitHandedOver {
			// A successor elsewhere (another supervisor, or none) took
			// the program's sockets: starting it again would take them
			// back.
			log.Info("supervisor: program handed over to a successor; not restarted", "pid", cmd.Process.Pid)
			return 0
		}
		if ran >= cfg.Steady {
			backoff = cfg.Backoff
		}
		rec.Restarts++
		rec.NextStart = time.Now().Add(backoff).UTC()
		record()
		log.Warn("supervisor: program ended on its own; restarting it", "pid", cmd.Process.Pid,
			"status", ExitText(err), "ran", ran.Round(time.Millisecond), "restart", rec.Restarts, "in", backoff)
		t := time.NewTimer(backoff)
		backoff = min(2*backoff, cfg.MaxBackoff)
	pause:
		for {
			select {
			case <-t.C:
				break pause
			case sig := <-sigs:
				if sig == syscall.SIGTERM || sig == syscall.SIGINT {
					t.Stop()
					log.Info("supervisor: stopped while the program waited to restart")
					return 0
				}
			case <-ctx.Done():
				t.Stop()
				log.Info("supervisor: stopped while the program waited to restart")
				return 0
			}
		}
	}
}

// readSuccessor reads a SuccessorRequest.
func readSuccessor(path string) (SuccessorRequest, error) {
	var r SuccessorRequest
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("read %s: %w", path, err)
	}
	if r.Bin == "" {
		return r, fmt.Errorf("read %s: no binary", path)
	}
	return r, nil
}

// exitCode is the status a shell gives for a Wait error: the program's
// exit status, 128+N for signal N.
func exitCode(err error) int {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		if err == nil {
			return 0
		}
		return 1
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}

// Signal sends sig to p's process group (the supervisor and its program,
// for a supervised process), else to p.PID alone.
func Signal(p Process, sig syscall.Signal) error { return signalGroup(p.PID, sig) }

// Launcher starts a stack's processes in turn, as both stacks do: each
// with its log in DIR/logs/NAME.log, under a supervisor (cellctl dev
// supervise) that restarts it when it ends on its own, as the kubelet
// would, and recorded in the stack's record once it runs.
type Launcher struct {
	Dir     string
	Cellctl string // the supervisor's program
	Record  *Stack // a process started is appended to its Processes
	// Save, if set, writes the record after each start, so that a
	// crashed launch can be found and swept.
	Save func() error
}

// Start starts p with run (Start, or a lab host's).
func (l *Launcher) Start(p Process, run func(Process) (*Child, error)) (*Child, error) {
	p.Log = filepath.Join(l.Dir, "logs", p.Name+".log")
	p.Supervisor = CellctlSupervisor(l.Cellctl, l.Dir, p)
	c, err := run(p)
	if err != nil {
		return nil, err
	}
	l.Record.Processes = append(l.Record.Processes, c.Process)
	if l.Save != nil {
		return c, l.Save()
	}
	return c, nil
}
