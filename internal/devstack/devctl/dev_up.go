package devctl

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cellkit/cellkit/internal/atomicfile"
	"github.com/cellkit/cellkit/internal/cellctl"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/freeport"
	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// devUp starts the stack; see devUpCommand. One piece: each process is
// started after those it needs, and one deferred cleanup takes down what
// was started when a later step fails.
func devUp(ctx context.Context, in *cellctl.Invocation, o devOptions) error {
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return err
	}
	if old, err := readDevStack(dir); err == nil {
		for _, p := range old.Processes {
			if devstack.Alive(p.PID) {
				return fmt.Errorf("a stack from %s is already running (%s pid %d): see 'cellctl dev status --dir %s', stop it with 'cellctl dev down --dir %s'",
					devstack.StatePath(dir), p.Name, p.PID, o.dir, o.dir)
			}
		}
	}
	bins, err := devstack.FindBinaries(binDirs(o.binDir), "agencysim", "cell", "router", "cellctl")
	if err != nil {
		return err
	}
	if o.cellBin != "" {
		if bins["cell"], err = filepath.Abs(o.cellBin); err != nil {
			return err
		}
		if info, err := os.Stat(bins["cell"]); err != nil || info.IsDir() {
			return cellctl.Usagef("--cell-bin %s: no such binary", o.cellBin)
		}
	}
	for _, sub := range []string{"registry", "cells", "router", "logs", "run"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return err
		}
	}
	ports, err := allocPorts(o)
	if err != nil {
		return err
	}
	regURL := "file:" + filepath.Join(dir, "registry", "map.json")
	var certs *devstack.TLS
	scheme := "http"
	if o.tls {
		certs, scheme = devstack.DevTLS(filepath.Join(dir, "certs")), "https"
		made, err := devstack.EnsureDevCerts(certs.Dir, devstack.DevHosts)
		if err != nil {
			return err
		}
		if made {
			in.Notef("Made the dev CA and certificates in %s.", certs.Dir)
		}
	}
	if err := devMap(ctx, in, regURL, o.cells, ports, scheme); err != nil {
		return err
	}
	key, err := devstack.APIKey(ctx, bins["router"], dir, KeyClient, true)
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
	procs = append(procs, devCellsAndRouter(o, dir, regURL, bins, ports, certs)...)
	tokenFile, err := devConsoleToken(dir)
	if err != nil {
		return err
	}
	procs = append(procs, devConsole(regURL, bins["cellctl"], ports.console, tokenFile, certs, devAdminURLs(ports, scheme)))

	st := &DevStack{
		Dir: dir, Registry: regURL, Router: scheme + "://" + ports.router, RouterAdmin: "http://" + ports.routerAdmin,
		AgencyAdmin: "http://" + ports.agencyAdmin, APIKey: key, Foreground: o.foreground,
		Console: "http://" + ports.console + "/", ConsoleToken: tokenFile,
		StartedAt: in.Now(), TLS: certs,
	}
	var children []*devstack.Child
	fail := func(err error) error {
		// Stop what was started, newest first; keep the logs.
		devstack.StopAll(context.WithoutCancel(ctx), st.Processes, devstack.StopGrace, nil)
		_ = os.Remove(devstack.StatePath(dir)) // a stale state file; the new one is written below
		return err
	}
	launch := devstack.Launcher{Dir: dir, Cellctl: bins["cellctl"], Record: st}
	for _, p := range procs {
		c, err := launch.Start(p, devstack.Start)
		if err != nil {
			return fail(err)
		}
		children = append(children, c)
	}
	if err := writeDevStack(dir, st); err != nil {
		return fail(err)
	}
	if err := writeScrapeTargets(dir, st); err != nil {
		return fail(err)
	}
	in.Notef("Started %d processes (logs in %s); waiting until they are ready...", len(procs), filepath.Join(dir, "logs"))
	hc, err := stackClient(in, st)
	if err != nil {
		return fail(err)
	}
	err = devstack.WaitReady(ctx, hc, o.readyWait, children...)
	hc.CloseIdleConnections()
	if err != nil {
		return fail(err)
	}
	writeDevBanner(in, st, o)
	if !o.foreground {
		return nil
	}

	// Foreground: report processes that end, stop everything on a signal.
	ended := make(chan string, len(children))
	for _, c := range children {
		go func() {
			<-c.Exited()
			msg := fmt.Sprintf("%s (pid %d) exited: %v; see %s", c.Name, c.PID, devstack.ExitText(c.Err()), c.Log)
			if now := replacedBy(dir, c.Process); now != 0 {
				msg = fmt.Sprintf("%s (pid %d) was replaced by pid %d (a rollout or 'cellctl dev replace'): it is stopped with the stack", c.Name, c.PID, now)
			}
			ended <- msg
		}()
	}
	for {
		select {
		case msg := <-ended:
			in.Warnf("%s", msg)
			continue
		case <-ctx.Done():
		}
		break
	}
	fmt.Fprintln(in.Stdout(), "\nStopping the stack...")
	devstack.StopAll(context.WithoutCancel(ctx), stackProcesses(dir, st.Processes), devstack.StopGrace, reportStop(in))
	if err := os.Remove(devstack.StatePath(dir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	fmt.Fprintf(in.Stdout(), "Stopped; data kept in %s for the next run.\n", o.dir)
	return nil
}

// devCellsAndRouter are the stack's cells and its router. With certs, the
// cells' intake takes only the router's certificate and their admin API
// only an operator's (the cells' default client roles), and the router
// serves https and calls the cells with its certificate.
func devCellsAndRouter(o devOptions, dir, regURL string, bins map[string]string, ports devPorts, certs *devstack.TLS) []DevProcess {
	scheme := "http"
	if certs != nil {
		scheme = "https"
	}
	file := func(name string) string { return filepath.Join(certs.Dir, name) }
	var procs []DevProcess
	for i := 1; i <= o.cells; i++ {
		id := cellName(i)
		args := []string{"--cell", id, "--registry", regURL, "--store", filepath.Join(dir, "cells", id),
			"--intake", ports.intake[i-1], "--admin", ports.admin[i-1],
			"--agency", "nice=" + ports.nice, "--agency", "kcb=" + ports.kcb,
			"--callback-allow", "127.0.0.0/8,::1/128"} // a callback receiver on this machine
		if o.ageBudget > 0 {
			args = append(args, "--age-budget", o.ageBudget.String())
		}
		if slices.Contains(strings.Split(o.laneBlind, ","), id) {
			args = append(args, "--lane-blind")
		}
		if certs != nil {
			cert, key := file(pki.DevCell+".pem"), file(pki.DevCell+"-key.pem")
			args = append(args,
				"--tls-cert", cert, "--tls-key", key, "--tls-client-ca", certs.CA,
				"--admin-tls-cert", cert, "--admin-tls-key", key, "--admin-tls-client-ca", certs.CA)
		}
		procs = append(procs, DevProcess{
			Name: id, Cell: id, Bin: bins["cell"],
			Args:  args,
			Ready: scheme + "://" + ports.admin[i-1] + "/readyz",
			Addrs: map[string]string{"intake": ports.intake[i-1], "admin": ports.admin[i-1]},
		})
	}
	args := []string{"-listen", ports.router, "-admin-listen", ports.routerAdmin, "-registry", regURL,
		"-keys", filepath.Join(dir, "router", "keys.json"), "-map-cache", filepath.Join(dir, "router", "map-cache.json"),
		"-handoff-socket", filepath.Join(dir, "router", "handoff", "router.sock")} // a private directory, which the router makes
	if certs != nil {
		cert, key := file(pki.DevRouter+".pem"), file(pki.DevRouter+"-key.pem")
		args = append(args, "-tls-cert", cert, "-tls-key", key,
			"-cell-tls-ca", certs.CA, "-cell-tls-cert", cert, "-cell-tls-key", key)
	}
	return append(procs, DevProcess{
		Name: "router", Bin: bins["router"],
		Args:  args,
		Ready: "http://" + ports.routerAdmin + "/readyz",
		Addrs: map[string]string{"listen": ports.router, "admin": ports.routerAdmin},
	})
}

// devConsole is the stack's web console: cellctl console on the stack's
// registry, calling the cells' admin APIs with the operator's certificate
// on a stack on TLS, and only the stack's own admin APIs (trusted).
func devConsole(regURL, cellctl, listen, tokenFile string, certs *devstack.TLS, trusted []string) DevProcess {
	args := []string{"--registry", regURL}
	if certs != nil {
		args = append(args, "--tls-ca", certs.CA,
			"--tls-cert", filepath.Join(certs.Dir, pki.DevOperator+".pem"), "--tls-key", filepath.Join(certs.Dir, pki.DevOperator+"-key.pem"))
	}
	args = append(args, "console", "--listen", listen, "--token-file", tokenFile, "--trust-admin", strings.Join(trusted, ","))
	return DevProcess{Name: devstack.ConsoleName, Bin: cellctl, Args: args,
		Ready: "http://" + listen + "/readyz", Addrs: map[string]string{"listen": listen}}
}

// devConsoleToken makes the console's token once, in DIR/console/token
// (only its owner may read it), and returns the file.
func devConsoleToken(dir string) (string, error) {
	path := filepath.Join(dir, "console", "token")
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= 32 {
		return path, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return "", err
	}
	return path, atomicfile.WriteFile(path, []byte(hex.EncodeToString(tok)+"\n"), 0o600)
}

// devAdminURLs are the stack's admin APIs: every cell's and the
// router's, those the console may call with its credentials.
func devAdminURLs(ports devPorts, scheme string) []string {
	out := make([]string, 0, len(ports.admin)+1)
	for _, a := range ports.admin {
		out = append(out, scheme+"://"+a)
	}
	return append(out, "http://"+ports.routerAdmin)
}

// consoleURL is the stack's console URL for the banner, and where its
// token is: the token itself is not printed (the output may be kept).
func consoleURL(st *DevStack, rel string) string {
	return st.Console + "   (sign in with the token in " + filepath.Join(rel, "console", filepath.Base(st.ConsoleToken)) + ")"
}

func cellName(i int) string { return "c" + strconv.Itoa(i) }

// devPorts are the stack's listen addresses.
type devPorts struct {
	router, routerAdmin    string
	agencyAdmin, nice, kcb string
	console                string
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
			a, err = freeport.Addr()
			return a
		}
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(base+off))
	}
	p.router, p.routerAdmin = addr(o.routerPort, 0), addr(o.routerPort, 1)
	p.agencyAdmin, p.nice, p.kcb = addr(o.agencyPort, 0), addr(o.agencyPort, 1), addr(o.agencyPort, 2)
	if o.consolePort < 0 {
		p.console = addr(o.routerPort, 2)
	} else {
		p.console = addr(o.consolePort, 0)
	}
	for i := 1; i <= o.cells; i++ {
		p.intake = append(p.intake, addr(o.portBase, i))
		p.admin = append(p.admin, addr(o.portBase, 100+i))
	}
	return p, err
}

// binDirs are where the programs are looked for: dir if given, else
// beside this cellctl, then ./bin.
func binDirs(dir string) []string {
	if dir != "" {
		return []string{dir}
	}
	var dirs []string
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(exe))
	}
	return append(dirs, "bin")
}

// devMap makes sure the registry holds a map with cells c1..cN at the given
// addresses, with scheme (https for a stack on TLS), through
// control.Ensure (the operations of the init, provision and endpoints
// commands). Their plans go to DIR/logs/setup.log.
func devMap(ctx context.Context, in *cellctl.Invocation, regURL string, cells int, ports devPorts, scheme string) error {
	dir := filepath.Dir(filepath.Dir(strings.TrimPrefix(regURL, "file:")))
	logf, err := os.OpenFile(filepath.Join(dir, "logs", "setup.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	reg, err := registry.Open(registry.Config{URL: regURL}, registry.Options{})
	if err != nil {
		return err
	}
	defer reg.Close()
	ctl := control.New(reg, control.Config{Holder: in.Holder(), LockWait: in.LockWait()},
		control.Options{Now: in.Now, Note: func(n control.Note) { fmt.Fprintf(logf, "%s\n", n.Text) }})
	var want []control.StackCell
	for i := 1; i <= cells; i++ {
		want = append(want, control.StackCell{ID: cellName(i),
			Intake: scheme + "://" + ports.intake[i-1], Admin: scheme + "://" + ports.admin[i-1]})
	}
	// Each step written to the log as the command prints it.
	shown := ""
	return ctl.Ensure(ctx, control.EnsureChange{
		Agencies: devstack.Agencies,
		Cells:    want,
		Planned: func(what string, p *slotmap.Plan) {
			if what != shown {
				fmt.Fprintf(logf, "$ cellctl %s\n", what)
				shown = what
			}
			cellctl.WritePlan(logf, p)
		},
		Failed: func(_ string, err error) { fmt.Fprintf(logf, "%v\n", err) },
		Step: func(s control.Step) {
			switch s.Kind {
			case control.StepInit:
				fmt.Fprintf(logf, "$ cellctl init --agency nice=80 --agency kcb=40\n")
				in.Notef("Created the map in %s (plans in %s).", regURL, logf.Name())
				return
			case control.StepProvision:
				in.Notef("Provisioned cell %s (intake %s, admin %s).", s.Cell.ID, s.Cell.Intake, s.Cell.Admin)
			case control.StepEndpoints:
				in.Notef("Moved cell %s to intake %s, admin %s.", s.Cell.ID, s.Cell.Intake, s.Cell.Admin)
			}
			if s.Result.Applied {
				fmt.Fprintf(logf, "\nApplied: map version %d (%s).\n", s.Result.Version, s.Result.Plan.Op)
			}
		},
	})
}

// writeDevBanner prints what to do with a ready stack.
func writeDevBanner(in *cellctl.Invocation, st *DevStack, o devOptions) {
	rel := o.dir
	var cells []string
	for _, p := range st.Cells() {
		cells = append(cells, fmt.Sprintf("%s %s", p.Name, p.Addrs["intake"]))
	}
	curl, cellAdmin, onTLS := "curl -s", "http://ADMIN", ""
	if st.TLS != nil {
		curl = "curl -s --cacert " + filepath.Join(rel, "certs", filepath.Base(st.TLS.CA))
		cellAdmin = "https://ADMIN"
		onTLS = fmt.Sprintf(`
TLS:      certificates in %s; the cells take only the router's certificate
          on their intake and an operator's on their admin API. For cellctl:
          %s
`, filepath.Join(rel, "certs"), cellctlTLSEnv(st.TLS))
	}
	fmt.Fprintf(in.Stdout(), `
cellkit local stack is ready: agency simulator, %d cells, router.

  router      %s   (admin %s)
  console     %s
  cells       %s
  registry    %s
  dev API key %s   (kept in %s)

Try it:
  %s -H 'X-API-Key: %s' -H 'Content-Type: application/json' -d '{"user_id":"u-42","product":"credit_loan","amount":5000000,"priority":"high"}' %s/v1/inquiries
  %s -H 'X-API-Key: %s' %s/v1/inquiries/ID        # the status_url it answered

Metrics:  %s/metrics (router), %s/metrics per cell (see 'cellctl dev status --dir %s'), %s/metrics (agencies)
Scrape:   %s (Prometheus file_sd targets: see deploy/observability/README.md)
Status:   ./bin/cellctl --registry %s status
Traffic:  ./bin/cellctl --registry %s rebalance --by traffic --dry-run   (the router announces itself in the registry)
%s`, len(cells), st.Router, st.RouterAdmin, consoleURL(st, rel), strings.Join(cells, ", "), st.Registry,
		st.APIKey, filepath.Join(rel, "router", "dev-key"),
		curl, st.APIKey, st.Router, curl, st.APIKey, st.Router,
		st.RouterAdmin, cellAdmin, rel, st.AgencyAdmin, filepath.Join(rel, scrapeTargetsFile), relRegistry(st.Registry),
		relRegistry(st.Registry), onTLS)
	if o.foreground {
		fmt.Fprintln(in.Stdout(), "\nCtrl-C stops everything.")
	} else {
		fmt.Fprintf(in.Stdout(), "\nStop it with: cellctl dev down --dir %s\n", rel)
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

// scrapeTargetsFile is where dev up writes the stack's Prometheus targets,
// relative to the stack's directory.
const scrapeTargetsFile = "prometheus/targets.json"

// The Prometheus job of each kind of process in the targets file.
const (
	jobRouter    = "cellkit-router"
	jobCell      = "cellkit-cell"
	jobAgencySim = "cellkit-agencysim"
)

// scrapeGroup is one entry of a Prometheus file_sd file: targets
// (host:port) and the labels Prometheus puts on every series scraped from
// them.
type scrapeGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// scrapeTargets lists every scraped process's admin listener, where it serves
// /metrics, in the stack's order: job cellkit-agencysim, cellkit-cell with
// cell="<id>", cellkit-router.
func scrapeTargets(st *DevStack) []scrapeGroup {
	var groups []scrapeGroup
	for _, p := range st.Scraped() {
		labels := map[string]string{}
		switch p.Name {
		case "agencysim":
			labels["job"] = jobAgencySim
		case "router":
			labels["job"] = jobRouter
		default:
			labels["job"], labels["cell"] = jobCell, p.Name
		}
		groups = append(groups, scrapeGroup{Targets: []string{p.Addrs["admin"]}, Labels: labels})
	}
	return groups
}

// writeScrapeTargets replaces DIR/prometheus/targets.json atomically, so
// that a Prometheus watching it never reads half a file.
func writeScrapeTargets(dir string, st *DevStack) error {
	path := filepath.Join(dir, scrapeTargetsFile)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(scrapeTargets(st), "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write the scrape targets: %w", err)
	}
	return nil
}

// stackProcesses are the processes to stop with the stack: those its
// record names now — a deployer (a rollout, 'cellctl dev replace')
// replaces processes and records what it started, which is the stack's
// too — and those dev up started, in the order of start (a replacement
// beside the process it replaced), each pid once.
func stackProcesses(dir string, started []DevProcess) []DevProcess {
	rec, err := devstack.Read(devstack.StatePath(dir))
	if err != nil {
		return started
	}
	var out []DevProcess
	add := func(p DevProcess) {
		if !slices.ContainsFunc(out, func(q DevProcess) bool { return q.PID == p.PID }) {
			out = append(out, p)
		}
	}
	for _, p := range started {
		add(p)
		for _, q := range rec.Processes {
			if q.Name == p.Name {
				add(q)
			}
		}
	}
	for _, q := range rec.Processes {
		add(q)
	}
	return out
}

// replacedBy is the pid the stack's record names for p now, when a
// deployer replaced it (0: it did not).
func replacedBy(dir string, p DevProcess) int {
	rec, err := devstack.Read(devstack.StatePath(dir))
	if err != nil {
		return 0
	}
	for _, q := range rec.Processes {
		if q.Name == p.Name && q.PID != p.PID && devstack.Alive(q.PID) {
			return q.PID
		}
	}
	return 0
}
