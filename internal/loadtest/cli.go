package loadtest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/cellkit/cellkit/internal/flagenv"
)

const usage = `loadtest — open-loop load and chaos drills for cellkit

  loadtest run   --target URL --key KEY (--rate R --duration D | --steps "60:10s,200:5s")
                 [--users K] [--zipf S] [--json out.json] [--svg out.svg]
  loadtest drill kill|drain|agency-slow [--dev-json var/dev.json | --bin ./bin]
                 [--rate R] [--users K] [--cell c2] [--json out.json] [--svg out.svg]

'loadtest run -h' and 'loadtest drill -h' list every flag. A flag not on the
command line is read from CELLKIT_LOADTEST_<FLAG>, else CELLKIT_<FLAG>.`

// ErrAssertion is returned when a drill ran and one of its assertions
// failed.
var ErrAssertion = errors.New("drill assertion failed")

// Main runs the command line.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(stdout, usage)
		return nil
	}
	switch args[0] {
	case "run":
		return cmdRun(ctx, args[1:], stdout, stderr)
	case "drill":
		return cmdDrill(ctx, args[1:], stdout, stderr)
	}
	return fmt.Errorf("unknown command %q\n%s", args[0], usage)
}

type outputs struct{ json, svg string }

func (o *outputs) register(fs *flag.FlagSet) {
	fs.StringVar(&o.json, "json", "", "write the report as JSON to `FILE`")
	fs.StringVar(&o.svg, "svg", "", "write the chart as SVG to `FILE`")
}

func (o *outputs) write(stdout io.Writer, res *Result) error {
	WriteText(stdout, res)
	if o.json != "" {
		if err := WriteJSONFile(o.json, res); err != nil {
			return err
		}
	}
	if o.svg != "" {
		if err := WriteSVGFile(o.svg, res); err != nil {
			return err
		}
	}
	return nil
}

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadtest run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg Config
	d := DefaultConfig()
	var rate float64
	var dur time.Duration
	var steps string
	var out outputs
	var quiet bool
	fs.StringVar(&cfg.Target, "target", "http://127.0.0.1:8080", "router base `URL`")
	fs.StringVar(&cfg.Key, "key", "", "API `KEY` (X-API-Key); see var/router/dev-key")
	fs.Float64Var(&rate, "rate", 0, "constant rate in requests per second")
	fs.DurationVar(&dur, "duration", 0, "how long to send at --rate")
	fs.StringVar(&steps, "steps", "", `rates over time, "RATE:DURATION,...", instead of --rate/--duration`)
	fs.IntVar(&cfg.Users, "users", d.Users, "K distinct users")
	fs.Float64Var(&cfg.Zipf, "zipf", 0, "Zipf exponent `S` over the users (0: uniform)")
	fs.Uint64Var(&cfg.Seed, "seed", d.Seed, "seed of the user sequence")
	fs.DurationVar(&cfg.Timeout, "timeout", d.Timeout, "per-request timeout")
	fs.BoolVar(&quiet, "quiet", false, "no progress line")
	out.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := flagenv.Fill(fs, "loadtest", nil); err != nil {
		return err
	}
	switch {
	case steps != "" && (rate != 0 || dur != 0):
		return errors.New("give --steps or --rate/--duration, not both")
	case steps != "":
		s, err := ParseSteps(steps)
		if err != nil {
			return err
		}
		cfg.Steps = s
	case rate > 0 && dur > 0:
		cfg.Steps = []Step{{Rate: rate, For: dur}}
	default:
		return errors.New("give --rate and --duration, or --steps")
	}
	var opts Options
	if !quiet {
		opts.Progress = stderr
	}
	r, err := NewRunner(cfg, opts)
	if err != nil {
		return err
	}
	res, err := r.Run(ctx)
	if err != nil {
		return err
	}
	return out.write(stdout, res)
}

func cmdDrill(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(stdout, "loadtest drill kill|drain|agency-slow [flags]; 'loadtest drill kill -h' lists the flags")
		return nil
	}
	name := args[0]
	drills := map[string]func(context.Context, DrillConfig) (*Result, error){
		"kill": DrillKill, "drain": DrillDrain, "agency-slow": DrillAgencySlow,
	}
	drill, ok := drills[name]
	if !ok {
		return fmt.Errorf("unknown drill %q: kill, drain or agency-slow", name)
	}
	fs := flag.NewFlagSet("loadtest drill "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c DrillConfig
	d := DefaultDrillConfig()
	var devJSON, bin string
	var out outputs
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
	fs.BoolVar(&quiet, "quiet", false, "no progress lines")
	var ageBudget time.Duration
	fs.DurationVar(&ageBudget, "age-budget", 0, "the cells' oldest-pending budget for a stack the drill starts (`D`; 0: the cell's default)")
	out.register(fs)
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
	res, err := drill(ctx, c)
	if res != nil {
		if werr := out.write(stdout, res); werr != nil && err == nil {
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
