package cellctl

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cellkit/cellkit/internal/atomicfile"
	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/registry"
)

// The local stack of `cellctl dev up`: the agency simulator, N cells and the
// router as child processes on loopback ports, with everything they keep
// under one directory (./var):
//
//	var/registry/map.json   the file registry
//	var/cells/<id>/         each cell's store (embedded NATS, map cache, lock)
//	var/router/keys.json    the router's keys file; var/router/dev-key the dev key
//	var/logs/<name>.log     each process's output
//	var/dev.json            PIDs, ports, URLs and the key, for dev status/down and drills
//
// A second dev up reuses all of it.

const (
	devStateFile   = "dev.json"
	devKeyClient   = "dev"
	devStopTimeout = 30 * time.Second // SIGTERM → SIGKILL; a cell drains for up to 20 s
)

// DevStack is var/dev.json (see internal/devstack).
type DevStack = devstack.Stack

// DevProcess is one process of the stack.
type DevProcess = devstack.Process

// devOptions are dev up's flags.
type devOptions struct {
	dir        string
	cells      int
	foreground bool
	routerPort int           // public; admin is +1
	portBase   int           // cell N: intake base+N, admin base+100+N
	agencyPort int           // simulator admin; NICE +1, KCB +2
	ageBudget  time.Duration // the cells' oldest-pending budget; 0: the cell's default
	binDir     string
	readyWait  time.Duration
}

func devUpCommand() *command {
	o := devOptions{dir: "var", cells: 4, routerPort: 8080, portBase: 9100, agencyPort: 7000, readyWait: 60 * time.Second}
	c := &command{
		name:    "dev up",
		section: secDev,
		summary: "start the local stack: agency simulator, cells, router (make run)",
		help: `Starts the local stack on loopback: the agency simulator (NICE 80 sessions,
KCB 40, p50 50 ms), a file registry under --dir with a map of --cells cells
(created with 'init' and 'provision' the first time), one 'cell' process per
cell (own store dir and embedded NATS) and the router with a dev API key.
Waits until every process is ready, then prints the key, a curl line to try
and where the metrics are. The cells may post callbacks to loopback
(--callback-allow 127.0.0.0/8,::1/128), so that a receiver on this machine
works; a cell refuses internal callback addresses by default.

The binaries (agencysim, cell, router) are taken from the directory of this
cellctl, else ./bin ('make build' puts them there). Everything is kept under
--dir: a second run reuses the map, the cells' stores and the key. PIDs,
ports and the key are recorded in DIR/dev.json for 'dev status', 'dev down'
and the drills; logs go to DIR/logs/NAME.log.

Ports: the router on --router-port (admin on the next port), cell N's intake
on --port-base+N and its admin on --port-base+100+N, the simulator's admin on
--agency-port (NICE +1, KCB +2). 0 picks free ports.

Without --foreground the processes keep running after dev up returns (stop
them with 'cellctl dev down'). With --foreground it stays attached and
Ctrl-C (SIGINT or SIGTERM) stops everything: SIGTERM to each process, SIGKILL
after 30 s.`,
		examples: `cellctl dev up                             # detached; stop with: cellctl dev down
cellctl dev up --foreground                # what 'make run' does after building ./bin
cellctl dev up --cells 3 --dir /tmp/stack --router-port 0 --port-base 0 --agency-port 0`,
		maxArgs:   0,
		unbounded: func() bool { return true },
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&o.dir, "dir", o.dir, "`DIR` keeping the registry, stores, keys, logs and dev.json")
			fs.IntVar(&o.cells, "cells", o.cells, "`N` cells, c1..cN (1..99)")
			fs.BoolVar(&o.foreground, "foreground", false, "stay attached; Ctrl-C stops the stack")
			fs.IntVar(&o.routerPort, "router-port", o.routerPort, "router's public `PORT` (admin: PORT+1; 0: free ports)")
			fs.IntVar(&o.portBase, "port-base", o.portBase, "cell N listens on `BASE`+N (intake) and BASE+100+N (admin); 0: free ports")
			fs.IntVar(&o.agencyPort, "agency-port", o.agencyPort, "simulator admin `PORT` (NICE +1, KCB +2; 0: free ports)")
			fs.StringVar(&o.binDir, "bin", "", "`DIR` holding agencysim, cell and router (default: next to cellctl, else ./bin)")
			fs.DurationVar(&o.ageBudget, "age-budget", 0, "the cells' shedding budget for the oldest pending inquiry (`D`; 0: the cell's default)")
			fs.DurationVar(&o.readyWait, "ready-timeout", o.readyWait, "give up if the stack is not ready within `D`")
		},
	}
	c.run = func(ctx context.Context, x *inv, _ []string) error {
		if o.cells < 1 || o.cells > 99 {
			return usagef("--cells %d must be in 1..99", o.cells)
		}
		return x.devUp(ctx, o)
	}
	return c
}

func devDownCommand() *command {
	dir := "var"
	c := &command{
		name:    "dev down",
		section: secDev,
		summary: "stop the local stack started by dev up",
		help: `Stops the processes recorded in DIR/dev.json: the router first, then the
cells, then the agency simulator. Each gets SIGTERM (a cell drains its work in
flight) and SIGKILL after 30 s. The data under DIR stays for the next 'dev up'
('make clean' removes it).`,
		examples: `cellctl dev down
cellctl dev down --dir /tmp/stack`,
		maxArgs:   0,
		unbounded: func() bool { return true },
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&dir, "dir", dir, "`DIR` given to dev up")
		},
	}
	c.run = func(ctx context.Context, x *inv, _ []string) error {
		st, err := readDevStack(dir)
		if err != nil {
			return err
		}
		stopped := stopProcesses(ctx, st.Processes, func(p DevProcess, how string) {
			fmt.Fprintf(x.out, "%-10s pid %-7d %s\n", p.Name, p.PID, how)
		})
		if err := os.Remove(filepath.Join(dir, devStateFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		fmt.Fprintf(x.out, "Stopped %d process%s; data kept in %s.\n", stopped, pluralEs(stopped), dir)
		return nil
	}
	return c
}

func devStatusCommand() *command {
	dir := "var"
	c := &command{
		name:    "dev status",
		section: secDev,
		summary: "show whether each process of the local stack is alive and ready",
		help: `Shows each process recorded in DIR/dev.json: PID, alive, ready (its /readyz
answers 200), its addresses and log. Exit 1 unless every process is alive and
ready. For the cells' queues and sessions, use 'cellctl status'.`,
		examples: `cellctl dev status
cellctl dev status --json | jq '.processes[] | select(.ready == false)'`,
		maxArgs: 0,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&dir, "dir", dir, "`DIR` given to dev up")
		},
	}
	c.run = func(ctx context.Context, x *inv, _ []string) error {
		st, err := readDevStack(dir)
		if err != nil {
			return err
		}
		type row struct {
			DevProcess
			Alive bool `json:"alive"`
			Ready bool `json:"ready"`
		}
		var rows []row
		bad := 0
		for _, p := range st.Processes {
			r := row{DevProcess: p, Alive: devstack.Alive(p.PID)}
			r.Ready = r.Alive && probeReady(ctx, x.cli.httpClient(), p.Ready)
			if !r.Ready {
				bad++
			}
			rows = append(rows, r)
		}
		if x.g.json {
			if err := writeJSON(x.out, map[string]any{"stack": st, "processes": rows}); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(x.out, "Stack in %s, started %s; router %s, registry %s\n\n",
				st.Dir, st.StartedAt.UTC().Format(time.RFC3339), st.Router, st.Registry)
			t := newTable(x.out, "NAME", "PID", "ALIVE", "READY", "ADDRESSES", "LOG")
			for _, r := range rows {
				t.row(r.Name, itoa(r.PID), yesNo(r.Alive), yesNo(r.Ready), addrList(r.Addrs), r.Log)
			}
			t.flush()
		}
		if bad > 0 {
			return fmt.Errorf("%d of %d processes not ready (logs in %s)", bad, len(rows), filepath.Join(st.Dir, "logs"))
		}
		return nil
	}
	return c
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func pluralEs(n int) string {
	if n == 1 {
		return ""
	}
	return "es"
}

func addrList(m map[string]string) string {
	var parts []string
	for _, k := range []string{"listen", "intake", "admin", "nice", "kcb"} {
		if v, ok := m[k]; ok {
			parts = append(parts, k+"="+v)
		}
	}
	return strings.Join(parts, " ")
}

// devUp starts the stack; see devUpCommand.
func (x *inv) devUp(ctx context.Context, o devOptions) error {
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return err
	}
	if old, err := readDevStack(dir); err == nil {
		for _, p := range old.Processes {
			if devstack.Alive(p.PID) {
				return fmt.Errorf("a stack from %s is already running (%s pid %d): see 'cellctl dev status --dir %s', stop it with 'cellctl dev down --dir %s'",
					filepath.Join(dir, devStateFile), p.Name, p.PID, o.dir, o.dir)
			}
		}
	}
	bins, err := findBinaries(o.binDir, "agencysim", "cell", "router")
	if err != nil {
		return err
	}
	for _, sub := range []string{"registry", "cells", "router", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return err
		}
	}
	ports, err := allocPorts(o)
	if err != nil {
		return err
	}
	regURL := "file:" + filepath.Join(dir, "registry", "map.json")
	if err := x.devMap(ctx, regURL, o.cells, ports); err != nil {
		return err
	}
	key, err := devKey(ctx, bins["router"], dir)
	if err != nil {
		return err
	}

	procs := []DevProcess{{
		Name: "agencysim", Bin: bins["agencysim"],
		Args: []string{"-admin-listen", ports.agencyAdmin, "-nice-listen", ports.nice, "-kcb-listen", ports.kcb,
			"-nice-sessions", "80", "-kcb-sessions", "40", "-latency-p50", "50ms", "-latency-p99", "150ms"},
		Ready: "http://" + ports.agencyAdmin + "/readyz",
		Addrs: map[string]string{"admin": ports.agencyAdmin, "nice": ports.nice, "kcb": ports.kcb},
	}}
	for i := 1; i <= o.cells; i++ {
		id := cellName(i)
		args := []string{"--cell", id, "--registry", regURL, "--store", filepath.Join(dir, "cells", id),
			"--intake", ports.intake[i-1], "--admin", ports.admin[i-1],
			"--agency", "nice=" + ports.nice, "--agency", "kcb=" + ports.kcb,
			"--callback-allow", "127.0.0.0/8,::1/128"} // a callback receiver on this machine
		if o.ageBudget > 0 {
			args = append(args, "--age-budget", o.ageBudget.String())
		}
		procs = append(procs, DevProcess{
			Name: id, Bin: bins["cell"],
			Args:  args,
			Ready: "http://" + ports.admin[i-1] + "/readyz",
			Addrs: map[string]string{"intake": ports.intake[i-1], "admin": ports.admin[i-1]},
		})
	}
	procs = append(procs, DevProcess{
		Name: "router", Bin: bins["router"],
		Args: []string{"-listen", ports.router, "-admin-listen", ports.routerAdmin, "-registry", regURL,
			"-keys", filepath.Join(dir, "router", "keys.json"), "-map-cache", filepath.Join(dir, "router", "map-cache.json")},
		Ready: "http://" + ports.routerAdmin + "/readyz",
		Addrs: map[string]string{"listen": ports.router, "admin": ports.routerAdmin},
	})

	st := &DevStack{
		Dir: dir, Registry: regURL, Router: "http://" + ports.router, RouterAdmin: "http://" + ports.routerAdmin,
		AgencyAdmin: "http://" + ports.agencyAdmin, APIKey: key, Foreground: o.foreground,
		StartedAt: x.cli.now(),
	}
	// exited is closed when a process ends (while dev up runs).
	exited := make([]chan error, len(procs))
	var started []DevProcess
	fail := func(err error) error {
		// Stop what was started, newest first; keep the logs.
		stopProcesses(context.WithoutCancel(ctx), started, func(DevProcess, string) {})
		os.Remove(filepath.Join(dir, devStateFile))
		return err
	}
	for i := range procs {
		p := &procs[i]
		p.Log = filepath.Join(dir, "logs", p.Name+".log")
		done, pid, err := devstack.Start(*p)
		if err != nil {
			return fail(err)
		}
		p.PID, exited[i] = pid, done
		started = append(started, *p)
	}
	st.Processes = procs
	if err := writeDevStack(dir, st); err != nil {
		return fail(err)
	}
	x.notef("Started %d processes (logs in %s); waiting until they are ready...", len(procs), filepath.Join(dir, "logs"))
	if err := waitReady(ctx, x.cli.httpClient(), procs, exited, o.readyWait); err != nil {
		return fail(err)
	}
	writeDevBanner(x, st, o)
	if !o.foreground {
		return nil
	}

	// Foreground: report processes that end, stop everything on a signal.
	ended := make(chan string, len(procs))
	for i, p := range procs {
		go func() {
			err := <-exited[i]
			ended <- fmt.Sprintf("%s (pid %d) exited: %v; see %s", p.Name, p.PID, exitText(err), p.Log)
		}()
	}
	for {
		select {
		case msg := <-ended:
			x.warnf("%s", msg)
			continue
		case <-ctx.Done():
		}
		break
	}
	fmt.Fprintln(x.out, "\nStopping the stack...")
	stopProcesses(context.WithoutCancel(ctx), procs, func(p DevProcess, how string) {
		fmt.Fprintf(x.out, "%-10s pid %-7d %s\n", p.Name, p.PID, how)
	})
	if err := os.Remove(filepath.Join(dir, devStateFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	fmt.Fprintf(x.out, "Stopped; data kept in %s for the next run.\n", o.dir)
	return nil
}

func exitText(err error) string {
	if err == nil {
		return "status 0"
	}
	return err.Error()
}

func cellName(i int) string { return "c" + strconv.Itoa(i) }

// devPorts are the stack's listen addresses.
type devPorts struct {
	router, routerAdmin    string
	agencyAdmin, nice, kcb string
	intake, admin          []string // per cell, c1 first
}

// allocPorts derives the addresses from the base ports; a base of 0 takes
// free ports from the kernel (they are free now, not reserved).
func allocPorts(o devOptions) (devPorts, error) {
	var p devPorts
	var err error
	addr := func(base, off int) string {
		if err != nil {
			return ""
		}
		if base == 0 {
			var a string
			a, err = freeAddr()
			return a
		}
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(base+off))
	}
	p.router, p.routerAdmin = addr(o.routerPort, 0), addr(o.routerPort, 1)
	p.agencyAdmin, p.nice, p.kcb = addr(o.agencyPort, 0), addr(o.agencyPort, 1), addr(o.agencyPort, 2)
	for i := 1; i <= o.cells; i++ {
		p.intake = append(p.intake, addr(o.portBase, i))
		p.admin = append(p.admin, addr(o.portBase, 100+i))
	}
	return p, err
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// findBinaries looks for the programs in dir, else next to this executable,
// else in ./bin.
func findBinaries(dir string, names ...string) (map[string]string, error) {
	var dirs []string
	if dir != "" {
		dirs = []string{dir}
	} else {
		if exe, err := os.Executable(); err == nil {
			dirs = append(dirs, filepath.Dir(exe))
		}
		dirs = append(dirs, "bin")
	}
	for _, d := range dirs {
		found := map[string]string{}
		for _, n := range names {
			p, err := filepath.Abs(filepath.Join(d, n))
			if err != nil {
				continue
			}
			if info, err := os.Stat(p); err == nil && info.Mode().IsRegular() && info.Mode()&0o111 != 0 {
				found[n] = p
			}
		}
		if len(found) == len(names) {
			return found, nil
		}
	}
	return nil, fmt.Errorf("cannot find %s in %s: run 'make build' first (or pass --bin DIR)", strings.Join(names, ", "), strings.Join(dirs, " or "))
}

// devMap makes sure the registry holds a map with cells c1..cN at the given
// addresses, through the ordinary init, provision and endpoints commands.
// Their plans go to DIR/logs/setup.log.
func (x *inv) devMap(ctx context.Context, regURL string, cells int, ports devPorts) error {
	dir := filepath.Dir(filepath.Dir(strings.TrimPrefix(regURL, "file:")))
	logf, err := os.OpenFile(filepath.Join(dir, "logs", "setup.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	run := func(args ...string) error {
		var errb bytes.Buffer
		full := append([]string{"--registry", regURL}, args...)
		fmt.Fprintf(logf, "$ cellctl %s\n", strings.Join(args, " "))
		if code := x.cli.Run(ctx, full, logf, &errb); code != ExitOK {
			logf.Write(errb.Bytes())
			return fmt.Errorf("cellctl %s: %s", strings.Join(args, " "), strings.TrimSpace(errb.String()))
		}
		return nil
	}
	reg, err := registry.Open(regURL, registry.Options{})
	if err != nil {
		return err
	}
	m, err := reg.Load(ctx)
	reg.Close()
	switch {
	case errors.Is(err, registry.ErrNoMap):
		if err := run("init", "--agency", "nice=80", "--agency", "kcb=40"); err != nil {
			return err
		}
		x.notef("Created the map in %s (plans in %s).", regURL, logf.Name())
	case err != nil:
		return registryError(reg, err)
	}
	for i := 1; i <= cells; i++ {
		id := cellName(i)
		intake, admin := "http://"+ports.intake[i-1], "http://"+ports.admin[i-1]
		var cur struct{ Intake, Admin string }
		found := false
		if m != nil {
			if c, ok := m.Cell(id); ok {
				cur.Intake, cur.Admin, found = c.Intake, c.Admin, true
			}
		}
		switch {
		case !found:
			if err := run("provision", id, "--intake", intake, "--admin", admin); err != nil {
				return err
			}
			x.notef("Provisioned cell %s (intake %s, admin %s).", id, intake, admin)
		case cur.Intake != intake || cur.Admin != admin:
			if err := run("endpoints", id, "--intake", intake, "--admin", admin); err != nil {
				return err
			}
			x.notef("Moved cell %s to intake %s, admin %s.", id, intake, admin)
		}
	}
	return nil
}

// devKey returns the dev API key, made once with 'router keygen' and kept in
// DIR/router/dev-key.
func devKey(ctx context.Context, routerBin, dir string) (string, error) {
	keyFile := filepath.Join(dir, "router", "dev-key")
	keysFile := filepath.Join(dir, "router", "keys.json")
	if b, err := os.ReadFile(keyFile); err == nil {
		if _, err := os.Stat(keysFile); err == nil && len(bytes.TrimSpace(b)) > 0 {
			return string(bytes.TrimSpace(b)), nil
		}
	}
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, routerBin, "keygen", "-client", devKeyClient, "-rate", "1000", "-burst", "2000", "-keys", keysFile)
	cmd.Stdout, cmd.Stderr, cmd.Env = &out, &errb, devstack.ChildEnv()
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("router keygen: %v: %s", err, strings.TrimSpace(errb.String()))
	}
	key := strings.TrimSpace(out.String())
	if key == "" {
		return "", errors.New("router keygen printed no key")
	}
	if err := atomicfile.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		return "", err
	}
	return key, nil
}

// waitReady polls every process's readiness URL until all answer 200. A
// process that exits meanwhile fails the wait with the end of its log.
func waitReady(ctx context.Context, hc *http.Client, procs []DevProcess, exited []chan error, within time.Duration) error {
	deadline := time.Now().Add(within)
	ready := make([]bool, len(procs))
	for {
		left := 0
		for i, p := range procs {
			if ready[i] {
				continue
			}
			select {
			case err := <-exited[i]:
				exited[i] <- err // for whoever waits next
				return fmt.Errorf("%s exited while starting (%s); last lines of %s: %s", p.Name, exitText(err), p.Log, logTail(p.Log, 5))
			default:
			}
			if ready[i] = probeReady(ctx, hc, p.Ready); !ready[i] {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var names []string
			for i, p := range procs {
				if !ready[i] {
					names = append(names, p.Name)
				}
			}
			return fmt.Errorf("not ready within %v: %s (see their logs in %s)", within, strings.Join(names, ", "), filepath.Dir(procs[0].Log))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("interrupted while waiting for the stack: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func probeReady(ctx context.Context, hc *http.Client, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// stopProcesses stops procs in reverse order of start: SIGTERM, then
// SIGKILL after devStopTimeout. It returns how many it stopped.
func stopProcesses(ctx context.Context, procs []DevProcess, report func(p DevProcess, how string)) int {
	n := 0
	for i := len(procs) - 1; i >= 0; i-- {
		p := procs[i]
		if !devstack.Alive(p.PID) || !sameProgram(p) {
			report(p, "not running")
			continue
		}
		n++
		start := time.Now()
		syscall.Kill(p.PID, syscall.SIGTERM)
		how := ""
		for devstack.Alive(p.PID) {
			if time.Since(start) > devStopTimeout || ctx.Err() != nil {
				syscall.Kill(p.PID, syscall.SIGKILL)
				how = "killed (SIGKILL) after " + devStopTimeout.String()
				for deadline := time.Now().Add(5 * time.Second); devstack.Alive(p.PID) && time.Now().Before(deadline); {
					time.Sleep(20 * time.Millisecond)
				}
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if how == "" {
			how = fmt.Sprintf("stopped (SIGTERM) in %v", time.Since(start).Round(10*time.Millisecond))
		}
		report(p, how)
	}
	return n
}

// sameProgram guards against a recycled pid: where /proc tells, the process
// must run p's binary.
func sameProgram(p DevProcess) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/cmdline")
	if err != nil {
		return true
	}
	argv0, _, _ := bytes.Cut(b, []byte{0})
	return string(argv0) == p.Bin
}

func readDevStack(dir string) (*DevStack, error) {
	path := filepath.Join(dir, devStateFile)
	st, err := devstack.Read(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no local stack recorded in %s: start one with 'cellctl dev up' (or 'make run')", path)
	}
	return st, err
}

func writeDevStack(dir string, st *DevStack) error {
	return devstack.Write(filepath.Join(dir, devStateFile), st)
}

// writeDevBanner prints what to do with a ready stack.
func writeDevBanner(x *inv, st *DevStack, o devOptions) {
	rel := o.dir
	var cells []string
	for _, p := range st.Processes {
		if p.Name != "agencysim" && p.Name != "router" {
			cells = append(cells, fmt.Sprintf("%s %s", p.Name, p.Addrs["intake"]))
		}
	}
	fmt.Fprintf(x.out, `
cellkit local stack is ready: agency simulator, %d cells, router.

  router      %s   (admin %s)
  cells       %s
  registry    %s
  dev API key %s   (kept in %s)

Try it:
  curl -s -H 'X-API-Key: %s' -H 'Content-Type: application/json' -d '{"user_id":"u-42","product":"credit_loan","amount":5000000,"priority":"high"}' %s/v1/inquiries
  curl -s -H 'X-API-Key: %s' %s/v1/inquiries/ID        # the status_url it answered

Metrics:  %s/metrics (router), http://ADMIN/metrics per cell (see 'cellctl dev status --dir %s'), %s/metrics (agencies)
Status:   ./bin/cellctl --registry %s status
`, len(cells), st.Router, st.RouterAdmin, strings.Join(cells, ", "), st.Registry,
		st.APIKey, filepath.Join(rel, "router", "dev-key"),
		st.APIKey, st.Router, st.APIKey, st.Router,
		st.RouterAdmin, rel, st.AgencyAdmin, relRegistry(st.Registry))
	if o.foreground {
		fmt.Fprintln(x.out, "\nCtrl-C stops everything.")
	} else {
		fmt.Fprintf(x.out, "\nStop it with: cellctl dev down --dir %s\n", rel)
	}
}

// relRegistry shortens a file registry URL to a path relative to the
// working directory when it is below it.
func relRegistry(u string) string {
	p, ok := strings.CutPrefix(u, "file:")
	if !ok {
		return u
	}
	if wd, err := os.Getwd(); err == nil {
		if r, err := filepath.Rel(wd, p); err == nil && !strings.HasPrefix(r, "..") {
			return "file:" + r
		}
	}
	return u
}
