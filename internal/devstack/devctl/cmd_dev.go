package devctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/cellctl"
	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/pki"
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
//	var/prometheus/targets.json  every admin listener for Prometheus (file_sd), rewritten by each dev up
//	var/certs/              the dev CA and role certificates (dev certs, dev up --tls)
//
// A second dev up reuses all of it.

// KeyClient is the client of the stack's API key.
const KeyClient = "dev"

// DevStack is var/dev.json (see internal/devstack).
type DevStack = devstack.Stack

// DevProcess is one process of the stack.
type DevProcess = devstack.Process

// devOptions are dev up's flags.
type devOptions struct {
	dir         string
	cells       int
	foreground  bool
	routerPort  int           // public; admin is +1
	portBase    int           // cell N: intake base+N, admin base+100+N
	agencyPort  int           // simulator admin; NICE +1, KCB +2
	consolePort int           // the web console; -1: routerPort+2
	ageBudget   time.Duration // the cells' oldest-pending budget; 0: the cell's default
	laneBlind   string        // cells (comma-separated) that shed lane-blind, for comparison
	binDir      string
	cellBin     string // the cells' binary instead of binDir's cell (bin/faults/cell: the poison drill)
	readyWait   time.Duration
	tls         bool // cells' listeners on mutual TLS, the router's public one on TLS
}

func devUpCommand() *cellctl.Command {
	o := devOptions{dir: "var", cells: 4, routerPort: 8080, portBase: 9100, agencyPort: 7000, consolePort: -1, readyWait: 60 * time.Second}
	c := &cellctl.Command{
		Name:    "dev up",
		Section: secDev,
		Summary: "start the local stack: agency simulator, cells, router (make run)",
		Help: `Starts the local stack on loopback: the agency simulator (NICE 80 sessions,
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
and the drills; logs go to DIR/logs/NAME.log. Each process runs under
'cellctl dev supervise', which restarts it when it ends on its own (1 s, 2 s,
4 s... up to 30 s; its record in DIR/run/NAME.json, its restarts in 'dev
status'), as the kubelet would; one ended by a signal to its process group
('dev down', a drill's kill) stays down. Every process's admin listener
(where it serves /metrics) is listed for Prometheus in
DIR/prometheus/targets.json, a file_sd file rewritten by every dev up: job
cellkit-agencysim, cellkit-cell (with cell="c1"...) and cellkit-router;
deploy/observability/prometheus/prometheus.yml reads var's.

The web console ('cellctl console') runs beside them on --console-port; its
token is kept in DIR/console/token and the URL printed carries it.

Ports: the router on --router-port (admin on the next port, the console on
the one after), cell N's intake on --port-base+N and its admin on
--port-base+100+N, the simulator's admin on --agency-port (NICE +1, KCB +2).
0 picks free ports.

With --tls the stack runs on TLS with the certificates of DIR/certs (made as
'cellctl dev certs' does unless they are there): each cell's intake takes
only the router's certificate and its admin API only the operator's (mutual
TLS), the router's public listener is https, and the map names the cells
with https URLs. dev up and dev status use the operator certificate; the
banner says how to point cellctl and curl at the stack.

Without --foreground the processes keep running after dev up returns (stop
them with 'cellctl dev down'). With --foreground it stays attached and
Ctrl-C (SIGINT or SIGTERM) stops everything: SIGTERM to each process, SIGKILL
after 30 s.`,
		Examples: `cellctl dev up                             # detached; stop with: cellctl dev down
cellctl dev up --foreground                # what 'make run' does after building ./bin
cellctl dev up --foreground --tls          # 'make run-tls': mutual TLS between the processes
cellctl dev up --cells 3 --dir /tmp/stack --router-port 0 --port-base 0 --agency-port 0`,
		MaxArgs:   0,
		Unbounded: true,
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&o.dir, "dir", o.dir, "`DIR` keeping the registry, stores, keys, logs and dev.json")
			fs.IntVar(&o.cells, "cells", o.cells, "`N` cells, c1..cN (1..99)")
			fs.BoolVar(&o.foreground, "foreground", false, "stay attached; Ctrl-C stops the stack")
			fs.IntVar(&o.routerPort, "router-port", o.routerPort, "router's public `PORT` (admin: PORT+1; 0: free ports)")
			fs.IntVar(&o.portBase, "port-base", o.portBase, "cell N listens on `BASE`+N (intake) and BASE+100+N (admin); 0: free ports")
			fs.IntVar(&o.agencyPort, "agency-port", o.agencyPort, "simulator admin `PORT` (NICE +1, KCB +2; 0: free ports)")
			fs.IntVar(&o.consolePort, "console-port", o.consolePort, "the web console's `PORT` ('cellctl console'; default: --router-port+2; 0: a free port)")
			fs.StringVar(&o.binDir, "bin", "", "`DIR` holding agencysim, cell, router and cellctl, their supervisor (default: next to cellctl, else ./bin)")
			fs.DurationVar(&o.ageBudget, "age-budget", 0, "the cells' shedding budget for the oldest pending inquiry (`D`; 0: the cell's default)")
			fs.StringVar(&o.laneBlind, "lane-blind", "", "`CELLS` (comma-separated) that shed both lanes alike, as cells did before lanes, to compare with the others")
			fs.StringVar(&o.cellBin, "cell-bin", "", "the cells' `BINARY` instead of the cell of --bin (bin/faults/cell, built with the fault hooks, for the poison drill)")
			fs.DurationVar(&o.readyWait, "ready-timeout", o.readyWait, "give up if the stack is not ready within `D`")
			fs.BoolVar(&o.tls, "tls", false, "run on TLS with the certificates of DIR/certs (made if missing): mutual TLS to the cells, https to the router")
		},
	}
	c.Run = func(ctx context.Context, in *cellctl.Invocation, _ []string) error {
		if o.cells < 1 || o.cells > 99 {
			return cellctl.Usagef("--cells %d must be in 1..99", o.cells)
		}
		if o.laneBlind != "" {
			for _, id := range strings.Split(o.laneBlind, ",") {
				if n, err := strconv.Atoi(strings.TrimPrefix(id, "c")); err != nil || cellName(n) != id || n < 1 || n > o.cells {
					return cellctl.Usagef("--lane-blind %q: %q is not one of the stack's cells c1..c%d", o.laneBlind, id, o.cells)
				}
			}
		}
		return devUp(ctx, in, o)
	}
	return c
}

func devDownCommand() *cellctl.Command {
	dir := "var"
	c := &cellctl.Command{
		Name:    "dev down",
		Section: secDev,
		Summary: "stop the local stack started by dev up",
		Help: `Stops the processes recorded in DIR/dev.json: the router first, then the
cells, then the agency simulator. Each gets SIGTERM (a cell drains its work in
flight) and SIGKILL after 30 s. The data under DIR stays for the next 'dev up'
('make clean' removes it).`,
		Examples: `cellctl dev down
cellctl dev down --dir /tmp/stack`,
		MaxArgs:   0,
		Unbounded: true,
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&dir, "dir", dir, "`DIR` given to dev up")
		},
	}
	c.Run = func(ctx context.Context, in *cellctl.Invocation, _ []string) error {
		st, err := readDevStack(dir)
		if err != nil {
			return err
		}
		stopped := devstack.StopAll(ctx, st.Processes, devstack.StopGrace, reportStop(in))
		if err := os.Remove(devstack.StatePath(dir)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		fmt.Fprintf(in.Stdout(), "Stopped %d process%s; data kept in %s.\n", stopped, pluralEs(stopped), dir)
		return nil
	}
	return c
}

func devStatusCommand() *cellctl.Command {
	dir := "var"
	c := &cellctl.Command{
		Name:    "dev status",
		Section: secDev,
		Summary: "show whether each process of the local stack is alive and ready",
		Help: `Shows each process recorded in DIR/dev.json: PID (its supervisor's), alive,
ready (its /readyz answers 200), how often its supervisor restarted it (and
how it last ended), its addresses and log. Exit 1 unless every process is alive and
ready. For the cells' queues and sessions, use 'cellctl status'.`,
		Examples: `cellctl dev status
cellctl dev status --json | jq '.processes[] | select(.ready == false)'`,
		MaxArgs: 0,
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&dir, "dir", dir, "`DIR` given to dev up")
		},
	}
	c.Run = func(ctx context.Context, in *cellctl.Invocation, _ []string) error {
		st, err := readDevStack(dir)
		if err != nil {
			return err
		}
		type row struct {
			DevProcess
			Alive bool `json:"alive"`
			Ready bool `json:"ready"`
			// Supervision is its supervisor's record: the program's
			// pid, its restarts, its last exit.
			Supervision *devstack.Supervision `json:"supervision,omitempty"`
		}
		var rows []row
		bad := 0
		hc, err := stackClient(in, st)
		if err != nil {
			return err
		}
		defer hc.CloseIdleConnections()
		for _, p := range st.Processes {
			r := row{DevProcess: p, Alive: devstack.Alive(p.PID)}
			if p.Supervisor != nil {
				if sv, err := devstack.ReadSupervision(p.Supervisor.State); err == nil {
					r.Supervision = &sv
				}
			}
			r.Ready = r.Alive && devstack.Probe(ctx, hc, p.Ready)
			if !r.Ready {
				bad++
			}
			rows = append(rows, r)
		}
		if in.JSON() {
			if err := cellctl.WriteJSON(in.Stdout(), map[string]any{"stack": st, "processes": rows}); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(in.Stdout(), "Stack in %s, started %s; router %s, registry %s\n\n",
				st.Dir, st.StartedAt.UTC().Format(time.RFC3339), st.Router, st.Registry)
			t := cellctl.NewTable(in.Stdout(), "NAME", "PID", "ALIVE", "READY", "RESTARTS", "ADDRESSES", "LOG")
			for _, r := range rows {
				restarts := "-"
				if sv := r.Supervision; sv != nil {
					restarts = strconv.Itoa(sv.Restarts)
					if sv.Restarts > 0 {
						restarts += " (last: " + sv.LastExit + ", " + sv.LastExitAt.Format(time.TimeOnly) + ")"
					}
				}
				t.Row(r.Name, strconv.Itoa(r.PID), yesNo(r.Alive), yesNo(r.Ready), restarts, addrList(r.Addrs), r.Log)
			}
			t.Flush()
		}
		if bad > 0 {
			return fmt.Errorf("%d of %d processes not ready (logs in %s)", bad, len(rows), filepath.Join(st.Dir, "logs"))
		}
		return nil
	}
	return c
}

// stackClient is the client for the stack's readiness URLs: cellctl's
// own unless the stack runs on TLS.
func stackClient(in *cellctl.Invocation, st *DevStack) (*http.Client, error) {
	if st.TLS == nil {
		return in.HTTP(), nil
	}
	hc, err := st.TLS.Client(0)
	if err != nil {
		return nil, fmt.Errorf("the stack's certificates: %w", err)
	}
	return hc, nil
}

func devSuperviseCommand() *cellctl.Command {
	cfg := devstack.DefaultSuperviseConfig()
	c := &cellctl.Command{
		Name:      "dev supervise",
		ArgsUsage: "-- PROGRAM...",
		Section:   secDev,
		Summary:   "run a program, restarting it with backoff when it ends on its own",
		Help: `Runs PROGRAM with its arguments as a child, with this process's output and
environment, and starts it again whenever it ends while no SIGTERM or SIGINT
came: after --backoff, doubled after each restart up to --max-backoff, and from
--backoff again after a run of --steady. (dev up fails a start whose
program ends before it is ready: it reads the supervisor's record.)

'dev up' and the network lab run each of their processes so, as the kubelet
restarts a container: a cell that ends by itself (its stall watchdog, a store
it cannot reopen) comes back. SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGUSR2
are passed on to the program. The supervisor leads the process group that
both are in, so a signal to the group reaches both: 'dev down' stops both,
and a drill's SIGKILL to the group ends both, so nothing restarts it.

With --state, the program's pid, its restarts and its last exit are written
to FILE (JSON) at each start and end; 'dev status' shows the restarts.
SIGWINCH to the supervisor starts the program's successor beside it, as
FILE.successor says (JSON: bin, args): a handoff ('dev replace' of a router
with --handoff-socket). When the program ends, the successor is the program
(restarted with its own arguments); one that ends first is recorded and
the program serves on. A program that ends with status 98 (handed over)
with no successor here is not restarted: the supervisor ends.
The exit status is the program's last (128+N for signal N), or 0 when it is
stopped while the program waits to restart.`,
		Examples: `cellctl dev supervise --state /tmp/c1.json -- bin/cell --cell c1 --store /tmp/c1
cellctl dev supervise --backoff 100ms -- sh -c 'sleep 1; exit 1'`,
		MinArgs:   1,
		MaxArgs:   -1,
		Unbounded: true,
		Flags:     cfg.RegisterFlags,
	}
	c.Run = func(ctx context.Context, in *cellctl.Invocation, args []string) error {
		if err := cfg.Validate(); err != nil {
			return cellctl.Usagef("%s", err)
		}
		log := slog.New(slog.NewTextHandler(in.Stderr(), nil))
		if code := devstack.Supervise(ctx, cfg, args[0], args[1:], log); code != 0 {
			return cellctl.ExitCode(code, fmt.Sprintf("%s ended with status %d", args[0], code))
		}
		return nil
	}
	return c
}

func devCertsCommand() *cellctl.Command {
	dir, hosts := "var", strings.Join(devstack.DevHosts, ",")
	c := &cellctl.Command{
		Name:    "dev certs",
		Section: secDev,
		Summary: "make a local CA and certificates for the router, the cells and operators",
		Help: `Writes a local certificate authority and, signed by it, a certificate and key
per role into DIR/certs: router.pem (the router's public listener, and its
client certificate to the cells), cell.pem (the cells' intake and admin
listeners) and operator.pem (cellctl and Prometheus to the admin APIs). The
role is the certificate's Subject OU, which the listeners check.

The certificates are valid for --hosts (names and addresses) for a year. A
CA already in DIR/certs is kept, so that certificates issued by it before
still verify; the role certificates are made again. 'dev up --tls' uses these
files. Keys are written with mode 0600. This is a CA for a local stack and
tests: production brings certificates from its own CA, with the same roles.`,
		Examples: `cellctl dev certs
cellctl dev certs --dir /tmp/stack --hosts localhost,127.0.0.1,cell1.internal`,
		MaxArgs: 0,
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&dir, "dir", dir, "`DIR` of the local stack; the files go to DIR/certs")
			fs.StringVar(&hosts, "hosts", hosts, "`NAMES` and addresses the certificates are valid for, comma-separated")
		},
	}
	c.Run = func(ctx context.Context, in *cellctl.Invocation, _ []string) error {
		var hs []string
		for _, h := range strings.Split(hosts, ",") {
			if h = strings.TrimSpace(h); h != "" {
				hs = append(hs, h)
			}
		}
		if len(hs) == 0 {
			return cellctl.Usagef("--hosts names no host")
		}
		certs := filepath.Join(dir, "certs")
		if err := pki.WriteDev(certs, hs); err != nil {
			return err
		}
		files := devstack.DevFiles(certs)
		if in.JSON() {
			return cellctl.WriteJSON(in.Stdout(), map[string]any{"dir": certs, "hosts": hs, "files": files})
		}
		fmt.Fprintf(in.Stdout(), "Certificates for %s in %s:\n", strings.Join(hs, ", "), certs)
		for _, f := range files {
			fmt.Fprintf(in.Stdout(), "  %s\n", f)
		}
		abs, err := filepath.Abs(certs)
		if err != nil {
			return err
		}
		fmt.Fprintf(in.Stdout(), "\ncellctl to the cells' admin APIs (operator certificate):\n  %s\n", cellctlTLSEnv(devstack.DevTLS(abs)))
		return nil
	}
	return c
}

// cellctlTLSEnv is the line that points cellctl at a stack's cells with
// the operator certificate. It sets cellctl's own variables: the shared
// CELLKIT_TLS_CERT and CELLKIT_TLS_KEY would also reach a cell's or a
// router's --tls-cert and --tls-key started from the same shell.
func cellctlTLSEnv(t *devstack.TLS) string {
	return fmt.Sprintf("export CELLKIT_CELLCTL_TLS_CA=%s CELLKIT_CELLCTL_TLS_CERT=%s CELLKIT_CELLCTL_TLS_KEY=%s", t.CA, t.Cert, t.Key)
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

// reportStop prints one line per process dev down or a foreground dev up
// stops.
func reportStop(in *cellctl.Invocation) func(p DevProcess, how string) {
	return func(p DevProcess, how string) {
		fmt.Fprintf(in.Stdout(), "%-10s pid %-7d %s\n", p.Name, p.PID, how)
	}
}

func readDevStack(dir string) (*DevStack, error) {
	path := devstack.StatePath(dir)
	st, err := devstack.Read(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no local stack recorded in %s: start one with 'cellctl dev up' (or 'make run')", path)
	}
	return st, err
}

func writeDevStack(dir string, st *DevStack) error {
	return devstack.Write(devstack.StatePath(dir), st)
}
