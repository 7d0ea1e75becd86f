package drill

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/cellkit/cellkit/internal/flagenv"
	"github.com/cellkit/cellkit/internal/loadtest"
)

// Command is `loadtest drill NAME`: args are the name and its flags.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(stdout, "loadtest drill kill|drain|agency-slow [flags]; 'loadtest drill kill -h' lists the flags")
		return nil
	}
	name := args[0]
	drills := map[string]func(context.Context, Config) (*loadtest.Result, error){
		"kill": Kill, "drain": Drain, "agency-slow": AgencySlow,
	}
	run, ok := drills[name]
	if !ok {
		return fmt.Errorf("unknown drill %q: kill, drain or agency-slow", name)
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
	fs.Float64Var(&c.Rate, "rate", d.Rate, "requests per second")
	fs.IntVar(&c.Users, "users", d.Users, "K distinct users")
	fs.Float64Var(&c.Zipf, "zipf", 0, "Zipf exponent over the users (0: uniform)")
	fs.StringVar(&c.Cell, "cell", d.Cell, "the cell to kill or drain")
	fs.DurationVar(&c.Baseline, "baseline", d.Baseline, "load before the fault")
	fs.DurationVar(&c.Fault, "fault", 0, "how long the fault lasts (kill: until restart [10s]; agency-slow [20s]; drain: its limit [60s])")
	fs.DurationVar(&c.After, "after", d.After, "load after the fault")
	fs.Float64Var(&c.P99Factor, "p99-factor", d.P99Factor, "kill: other cells' p99 ≤ this × their baseline p99")
	fs.DurationVar(&c.DownP99, "down-p99", d.DownP99, "kill: the killed cell's users' p99 while down must be below this")
	fs.Float64Var(&c.SlowFactor, "slow-factor", d.SlowFactor, "agency-slow: latency multiplier")
	fs.DurationVar(&c.IntakeP99, "intake-p99", d.IntakeP99, "agency-slow: intake p99 bound while slow")
	fs.DurationVar(&c.VerifyWithin, "verify-within", d.VerifyWithin, "how long to poll accepted ids until final")
	fs.StringVar(&c.Prometheus, "prometheus", "", "kill: run this prometheus `BIN` against the stack and check the alerts (needs --fault 45s or more)")
	fs.StringVar(&c.Rules, "rules", d.Rules, "the alert rules `FILE` for --prometheus")
	fs.BoolVar(&quiet, "quiet", false, "no progress lines")
	var ageBudget time.Duration
	fs.DurationVar(&ageBudget, "age-budget", 0, "the cells' oldest-pending budget for a stack the drill starts (`D`; 0: the cell's default)")
	out.Register(fs)
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if err := flagenv.Fill(fs, "loadtest", nil); err != nil {
		return err
	}
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
	c.Stack = st
	res, err := run(ctx, c)
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
