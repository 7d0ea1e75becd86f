package drill

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/flagenv"
	"github.com/cellkit/cellkit/internal/loadtest"
	"github.com/cellkit/cellkit/internal/netlab"
	"github.com/cellkit/cellkit/internal/netlab/netstack"
)

// Command is `loadtest drill NAME`: args are the name and its flags.
// One piece: the shared flag set and the table of drills, read together.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(stdout, "loadtest drill kill|freeze|disk-full|drain|moves|agency-slow|priority|poison|release|handoff [flags]; 'loadtest drill kill -h' lists the flags")
		fmt.Fprintln(stdout, "loadtest drill "+strings.Join(slices.Sorted(maps.Keys(NetDrills)), "|")+" [flags]: on a network lab, as root; 'loadtest drill host-loss -h' lists the flags")
		fmt.Fprintln(stdout, "loadtest drill "+strings.Join(slices.Sorted(maps.Keys(K8sDrills)), "|")+" [flags]: on the cluster of make cluster-stack, as root; 'loadtest drill k8s-pod-delete -h' lists the flags")
		return nil
	}
	name := args[0]
	if run, ok := NetDrills[name]; ok {
		return netCommand(ctx, name, run, args[1:], stdout, stderr)
	}
	if run, ok := K8sDrills[name]; ok {
		return k8sCommand(ctx, name, run, args[1:], stdout, stderr)
	}
	drills := map[string]func(context.Context, Config) (*loadtest.Result, error){
		"kill": Kill, "freeze": Freeze, "disk-full": DiskFull, "drain": Drain, "moves": Moves, "agency-slow": AgencySlow, "priority": Priority, "poison": Poison,
		"release": Release, "handoff": Handoff,
	}
	run, ok := drills[name]
	if !ok {
		return fmt.Errorf("unknown drill %q: kill, freeze, disk-full, drain, moves, agency-slow, priority, poison, release, handoff, or on a network lab %s, or on a cluster %s", name,
			strings.Join(slices.Sorted(maps.Keys(NetDrills)), ", "), strings.Join(slices.Sorted(maps.Keys(K8sDrills)), ", "))
	}
	fs := flag.NewFlagSet("loadtest drill "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c Config
	d := DefaultConfig()
	var devJSON, bin string
	var out loadtest.Outputs
	var quiet bool
	fs.StringVar(&devJSON, "dev-json", "", "use the running stack recorded in `FILE` (var/dev.json) instead of starting one")
	fs.StringVar(&bin, "bin", "bin", "`DIR` holding cellctl, cell, router and agencysim")
	fs.Float64Var(&c.Rate, "rate", d.Rate, fmt.Sprintf("requests per second (handoff: %d when not given)", HandoffRate))
	fs.IntVar(&c.Users, "users", d.Users, "K distinct users")
	fs.Float64Var(&c.Zipf, "zipf", 0, "Zipf exponent over the users (0: uniform)")
	fs.StringVar(&c.Cell, "cell", d.Cell, "the cell to kill, freeze, fill the disk of, drain or poison")
	fs.IntVar(&c.Poison, "poison", d.Poison, "poison: the poison inquiries of the burst")
	diskMiB := fs.Int64("disk-mib", d.Disk>>20, "disk-full: the size of the filesystem the cell's store is moved onto, in MiB (a tmpfs; needs root)")
	fs.DurationVar(&c.Baseline, "baseline", d.Baseline, "load before the fault")
	fs.DurationVar(&c.Fault, "fault", 0, "how long the fault lasts (kill: until restart [10s]; freeze: until SIGCONT [20s]; disk-full: until the space is freed [15s]; agency-slow [20s]; drain: its limit [60s])")
	fs.DurationVar(&c.After, "after", d.After, "load after the fault")
	fs.Float64Var(&c.P99Factor, "p99-factor", d.P99Factor, "kill, freeze: other cells' p99 ≤ this × their baseline p99")
	fs.DurationVar(&c.DownP99, "down-p99", d.DownP99, "kill, freeze: the killed (frozen) cell's users' p99 while down (once found) must be below this")
	fs.Float64Var(&c.SlowFactor, "slow-factor", d.SlowFactor, "agency-slow: latency multiplier")
	fs.DurationVar(&c.IntakeP99, "intake-p99", d.IntakeP99, "agency-slow: intake p99 bound while slow")
	fs.DurationVar(&c.VerifyWithin, "verify-within", d.VerifyWithin, "how long to poll accepted ids until final")
	fs.StringVar(&c.Prometheus, "prometheus", "", "kill, poison, disk-full: run this prometheus `BIN` against the stack and check the alerts (kill: CellkitCellDown, needs --fault 45s or more; poison: CellkitInquiryPanics; disk-full: CellkitStoreNearFull, with a phase of 2m30s at 88.5% full first)")
	fs.StringVar(&c.Rules, "rules", d.Rules, "the alert rules `FILE` for --prometheus")
	fs.BoolVar(&quiet, "quiet", false, "no progress lines")
	fs.Float64Var(&c.ReadShare, "read-share", 0, "share of requests that read an inquiry's status instead of asking a new one (0: none; handoff: 0.9)")
	fs.Float64Var(&c.NewConnShare, "new-conn-share", 0, "handoff: share of requests sent each on a new connection, the rest on kept-alive ones (0: 0.5)")
	var tlsStack bool
	fs.BoolVar(&tlsStack, "tls", false, "start the stack on TLS (cellctl dev up --tls): the router's public listener on HTTPS")
	fs.Float64Var(&c.HighShare, "high-share", 0, "share of requests asking for the high lane (0: 0.2 in priority, else 0.25)")
	var laneBlind string
	fs.StringVar(&laneBlind, "lane-blind", "c2,c4", "priority: the `CELLS` of a stack the drill starts that shed lane-blind, for comparison")
	var ageBudget time.Duration
	fs.DurationVar(&ageBudget, "age-budget", 0, "the cells' oldest-pending budget for a stack the drill starts (`D`; 0: the cell's default)")
	out.Register(fs)
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if err := flagenv.Fill(fs, "loadtest", nil); err != nil {
		return err
	}
	rateSet := false
	fs.Visit(func(f *flag.Flag) { rateSet = rateSet || f.Name == "rate" })
	if name == "handoff" && !rateSet {
		c.Rate = 0 // the drill's own: HandoffRate
	}
	if *diskMiB <= 0 {
		return fmt.Errorf("--disk-mib %d: want a size above 0", *diskMiB)
	}
	c.Disk = *diskMiB << 20
	if !quiet {
		c.Progress = stderr
	}
	var st *Stack
	var err error
	if devJSON != "" {
		st, err = LoadStack(devJSON, filepath.Join(bin, "cellctl"))
	} else {
		fmt.Fprintln(stderr, "drill: starting a local stack (cellctl dev up on free ports)...")
		var extra []string
		if ageBudget > 0 {
			extra = append(extra, "--age-budget", ageBudget.String())
		}
		if name == "priority" && laneBlind != "" {
			extra = append(extra, "--lane-blind", laneBlind)
		}
		if tlsStack {
			extra = append(extra, "--tls")
		}
		switch name {
		case "poison":
			// The cells' build with the fault hooks (make build).
			extra = append(extra, "--cell-bin", filepath.Join(bin, "faults", "cell"))
		case "release":
			// The release before the ledger (make build-previous), which
			// the drill upgrades.
			if _, err := os.Stat(PreviousCell(bin)); err != nil {
				return fmt.Errorf("drill release starts its stack on %s: %w (make build-previous)", PreviousCell(bin), err)
			}
			extra = append(extra, "--cell-bin", PreviousCell(bin))
		}
		st, err = StartStack(ctx, bin, extra...)
		if err == nil {
			defer func() {
				if err := st.Stop(context.WithoutCancel(ctx)); err != nil {
					fmt.Fprintln(stderr, "drill: stop the stack:", err)
				}
			}()
		}
	}
	if err != nil {
		return err
	}
	c.Stack, c.Bin = st, bin
	if name == "priority" && c.HighShare == 0 {
		c.HighShare = 0.2
	}
	res, err := run(ctx, c)
	return report(stdout, out, name, res, err)
}

// netCommand is `loadtest drill NAME` of a drill on the network lab.
func netCommand(ctx context.Context, name string, run func(context.Context, NetConfig) (*loadtest.Result, error), args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadtest drill "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := DefaultNetConfig()
	var netDir string
	var out loadtest.Outputs
	var quiet bool
	fs.StringVar(&netDir, "net-dir", "", "use the stack of 'loadtest net up' recorded in `DIR` instead of bringing one up (it must have the cell and instance named)")
	fs.StringVar(&c.Bin, "bin", c.Bin, "`DIR` holding cellctl, cell, router, agencysim, nats-server and consul")
	fs.IntVar(&c.Cells, "cells", c.Cells, "cells of a stack the drill brings up")
	fs.IntVar(&c.Instances, "instances", c.Instances, "instances of each cell of a stack the drill brings up")
	fs.Float64Var(&c.Rate, "rate", c.Rate, "requests per second, through router1")
	fs.IntVar(&c.Users, "users", c.Users, "K distinct users")
	fs.StringVar(&c.Cell, "cell", c.Cell, "the cell the fault hits")
	fs.StringVar(&c.Instance, "instance", c.Instance, "host-loss, cut-nats, freeze-instance: the instance of --cell whose host goes (host-loss: leader, the one beside the node that leads the cell's ledger)")
	fs.DurationVar(&c.Baseline, "baseline", c.Baseline, "load before the fault")
	fs.DurationVar(&c.Fault, "fault", 0, "how long the fault lasts [20s; host-loss, cut-nats 30s; cut-consul-* 40s]")
	fs.DurationVar(&c.After, "after", c.After, "load after the heal")
	fs.DurationVar(&c.ErrorWindow, "error-window", c.ErrorWindow, "host-loss, cut-nats: from the fault, how long the cell's users may see errors for requests in flight on the instance that went")
	fs.DurationVar(&c.DownP99, "down-p99", c.DownP99, "cut-router: bound of the cut cell's users' p99")
	fs.DurationVar(&c.Recover, "recover", c.Recover, "bound from the heal to the last error, and to a map change applied everywhere")
	fs.IntVar(&c.Moves, "moves", c.Moves, "cut-consul-*: users moved each way during the cut")
	fs.DurationVar(&c.VerifyWithin, "verify-within", c.VerifyWithin, "how long to poll accepted ids until final")
	fs.BoolVar(&quiet, "quiet", false, "no progress lines")
	if err := parseDrillFlags(fs, &out, name, args); err != nil {
		return err
	}
	if !quiet {
		c.Progress = stderr
	}
	if netDir != "" {
		st, err := netstack.Read(netDir)
		if err != nil {
			return fmt.Errorf("read the stack in %s: %w (start one with 'loadtest net up')", netDir, err)
		}
		c.Stack = st
	} else {
		if err := netlab.Available(); err != nil {
			return fmt.Errorf("drill %s needs a network lab: %w", name, err)
		}
		dir, err := os.MkdirTemp("", "cellkit-netdrill-")
		if err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(dir) }()
		fmt.Fprintf(stderr, "drill: bringing up %d cells of %d instances on a network lab (%s)...\n", c.Cells, c.Instances, dir)
		cfg := netstack.DefaultConfig()
		cfg.Dir, cfg.Bin, cfg.Cells, cfg.Instances = dir, c.Bin, c.Cells, c.Instances
		cfg.Lab.Family, cfg.Lab.Detached = "ckd", false
		st, err := netstack.Up(ctx, cfg, netstack.Options{})
		if err != nil {
			return err
		}
		c.Stack = st
		defer func() {
			if _, err := netstack.Down(context.WithoutCancel(ctx), dir, nil); err != nil {
				fmt.Fprintln(stderr, "drill: take the lab down:", err)
			}
		}()
	}
	res, err := run(ctx, c)
	return report(stdout, out, name, res, err)
}

// parseDrillFlags parses the flags of the drill name on a lab or a
// cluster: fs's own, the outputs', then the environment's (LOADTEST_*);
// no argument may be left.
func parseDrillFlags(fs *flag.FlagSet, out *loadtest.Outputs, name string, args []string) error {
	out.Register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("loadtest drill %s: unexpected arguments %q", name, fs.Args())
	}
	return flagenv.Fill(fs, "loadtest", nil)
}

// report writes a drill's result (what there is of it, also when it
// failed to run) and turns a failed verdict into ErrAssertion.
func report(stdout io.Writer, out loadtest.Outputs, name string, res *loadtest.Result, err error) error {
	if res != nil {
		if werr := out.Write(stdout, res); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return err
	}
	if !res.Drill.Pass {
		return fmt.Errorf("%w: %s", ErrAssertion, name)
	}
	return nil
}
