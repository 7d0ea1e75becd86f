package loadtest

import (
	"context"
	"errors"
	"flag"
	"io"
	"time"

	"github.com/cellkit/cellkit/internal/flagenv"
)

// Outputs are the report files a command writes besides its text table.
type Outputs struct{ JSON, SVG string }

// Register adds the --json and --svg flags.
func (o *Outputs) Register(fs *flag.FlagSet) {
	fs.StringVar(&o.JSON, "json", "", "write the report as JSON to `FILE`")
	fs.StringVar(&o.SVG, "svg", "", "write the chart as SVG to `FILE`")
}

// Write writes the text table to stdout and the files asked for.
func (o *Outputs) Write(stdout io.Writer, res *Result) error {
	WriteText(stdout, res)
	if o.JSON != "" {
		if err := WriteJSONFile(o.JSON, res); err != nil {
			return err
		}
	}
	if o.SVG != "" {
		if err := WriteSVGFile(o.SVG, res); err != nil {
			return err
		}
	}
	return nil
}

// Command is `loadtest run`: open-loop load at a router, reported as a
// table and optionally as JSON and SVG. args are the flags after "run".
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadtest run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg Config
	d := DefaultConfig()
	var rate float64
	var dur time.Duration
	var steps string
	var out Outputs
	var quiet bool
	fs.StringVar(&cfg.Target, "target", "http://127.0.0.1:8080", "router base `URL`")
	fs.StringVar(&cfg.Key, "key", "", "API `KEY` (X-API-Key); see var/router/dev-key")
	fs.Float64Var(&rate, "rate", 0, "constant rate in requests per second")
	fs.DurationVar(&dur, "duration", 0, "how long to send at --rate")
	fs.StringVar(&steps, "steps", "", `rates over time, "RATE:DURATION,...", instead of --rate/--duration`)
	fs.IntVar(&cfg.Users, "users", d.Users, "K distinct users")
	fs.Float64Var(&cfg.Zipf, "zipf", 0, "Zipf exponent `S` over the users (0: uniform)")
	fs.Float64Var(&cfg.HighShare, "high-share", d.HighShare, "share of requests asking for the high lane (negative: none)")
	fs.Float64Var(&cfg.ReadShare, "read-share", 0, "share of requests that read the status of an inquiry accepted earlier in the run (GET /v1/inquiries/{id}) instead of asking a new one, 0 to below 1")
	fs.Uint64Var(&cfg.Seed, "seed", d.Seed, "seed of the user sequence")
	fs.DurationVar(&cfg.Timeout, "timeout", d.Timeout, "per-request timeout")
	fs.StringVar(&cfg.CA, "ca", "", "PEM `FILE` of the CAs an https target's certificate is checked against (default: the system's)")
	fs.StringVar(&cfg.ServerName, "server-name", "", "the `NAME` asked of an https target (default: its host), such as a router's name when --target is its Service's cluster IP")
	fs.BoolVar(&quiet, "quiet", false, "no progress line")
	out.Register(fs)
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
	return out.Write(stdout, res)
}
