// Package drill runs the chaos drills against a local stack (see
// internal/devstack): under open-loop load from internal/loadtest it injects
// a fault (kill a cell, drain one, slow the agencies), then asserts what the
// system promises under that fault and that no accepted inquiry was lost or
// duplicated. A drill's result is the load's report with its verdict.
package drill

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cellkit/cellkit/internal/backoff"
	"github.com/cellkit/cellkit/internal/loadtest"
)

// ErrAssertion is returned when a drill ran and one of its assertions
// failed.
var ErrAssertion = errors.New("drill assertion failed")

// Config is one drill. Zero values mean the defaults in brackets (see
// DefaultConfig).
type Config struct {
	Stack *Stack
	// Bin is the directory of the programs (release: its bad releases are
	// Bin/faults/cell-*).
	Bin string
	// Rate is the constant request rate [100/s].
	Rate float64
	// Users and Zipf as in loadtest.Config [200 users, uniform].
	Users int
	Zipf  float64
	// Cell is the cell the drill acts on [c2].
	Cell string
	// Baseline is the load before the fault [15s].
	Baseline time.Duration
	// Fault is how long the fault lasts: kill → restart, slow → restore
	// [10s kill, 20s agency-slow]; for drain, the longest the drain may take
	// [60s].
	Fault time.Duration
	// After is the load after the fault [15s].
	After time.Duration
	// P99Factor bounds the other cells' p99 during the fault against their
	// baseline p99 [1.2].
	P99Factor float64
	// DownP99 bounds the p99 of the killed cell's users while it is down
	// [50ms].
	DownP99 time.Duration
	// SlowFactor multiplies the agencies' latency in agency-slow [10] and
	// priority.
	SlowFactor float64
	// HighShare is the share of requests asking for the high lane
	// [loadtest's 0.25; the priority command passes 0.2].
	HighShare float64
	// IntakeP99 bounds the intake p99 while the agencies are slow [250ms].
	IntakeP99 time.Duration
	// VerifyWithin bounds the polling of accepted ids [120s].
	VerifyWithin time.Duration
	// Replays is how many accepted requests are re-sent with their
	// Idempotency-Key to check they keep their id [300].
	Replays int
	// Poison is the number of poison inquiries of the poison drill's
	// burst [20].
	Poison int
	// Disk is the size in bytes of the filesystem the disk-full drill puts
	// the cell's store on [640 MiB].
	Disk int64
	// Prometheus, when set, is a prometheus binary: the drill runs it on
	// loopback against the stack with the alert rules of Rules and checks
	// the alerts (kill: the killed cell's down alert fires within
	// CellDownBound and resolves after the restart, none for the others).
	Prometheus string
	// Rules is the alert rules file [deploy/observability/prometheus/rules.yml].
	Rules string
	// ReadShare is the share of requests that read an inquiry's status
	// (loadtest.Config.ReadShare) [0; handoff: HandoffReadShare; moves:
	// 0.3].
	ReadShare float64
	// NewConnShare is the share of the handoff drill's requests sent each
	// on a new connection, the rest on kept-alive ones [0: 0.5].
	NewConnShare float64
	// Progress gets the progress lines (nil: none).
	Progress io.Writer
}

// DefaultConfig returns the defaults. Fault is left zero: its default
// depends on the drill.
func DefaultConfig() Config {
	return Config{
		Rate: 100, Users: 200, Cell: "c2", Baseline: 15 * time.Second, After: 15 * time.Second,
		P99Factor: 1.2, DownP99: 50 * time.Millisecond, SlowFactor: 10, IntakeP99: 250 * time.Millisecond,
		VerifyWithin: 120 * time.Second, Replays: 300, Rules: "deploy/observability/prometheus/rules.yml", Poison: 20, Disk: 640 << 20,
	}
}

// or sets *v to def when *v is unset: zero, negative or empty.
func or[T cmp.Ordered](v *T, def T) {
	var zero T
	if *v <= zero {
		*v = def
	}
}

// withDefaults fills the zero fields of c from DefaultConfig, field by
// field; Fault from fault, the drill's own.
func (c Config) withDefaults(fault time.Duration) Config {
	d := DefaultConfig()
	or(&c.Rate, d.Rate)
	or(&c.Users, d.Users)
	or(&c.Cell, d.Cell)
	or(&c.Baseline, d.Baseline)
	or(&c.Fault, fault)
	or(&c.After, d.After)
	or(&c.P99Factor, d.P99Factor)
	or(&c.DownP99, d.DownP99)
	or(&c.SlowFactor, d.SlowFactor)
	or(&c.IntakeP99, d.IntakeP99)
	or(&c.VerifyWithin, d.VerifyWithin)
	or(&c.Replays, d.Replays)
	or(&c.Rules, d.Rules)
	or(&c.Poison, d.Poison)
	or(&c.Disk, d.Disk)
	return c
}

func (c *Config) runner(total time.Duration) (*loadtest.Runner, error) {
	quietDisk()
	return loadtest.NewRunner(loadtest.Config{
		Target: c.Stack.Router, Key: c.Stack.APIKey, Steps: []loadtest.Step{{Rate: c.Rate, For: total}},
		Users: c.Users, Zipf: c.Zipf, KeepSamples: true, Timeout: 5 * time.Second, HighShare: c.HighShare, ReadShare: c.ReadShare,
	}, loadtest.Options{Progress: c.Progress})
}

// quietDisk writes back everything the machine has yet to write to its
// disks, before a run: what an earlier drill or this one's setup wrote (a
// store copied, a stack removed) would otherwise be flushed some 30 s
// later, in the middle of the run, where the cells' stores sync every
// write and every cell's latency doubled.
func quietDisk() { syscall.Sync() }

func (c *Config) logf(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "drill: "+format+"\n", args...)
	}
}

// startLoad runs r in the background.
func startLoad(ctx context.Context, r *loadtest.Runner) func() (*loadtest.Result, error) {
	var res *loadtest.Result
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err = r.Run(ctx)
	}()
	return func() (*loadtest.Result, error) { <-done; return res, err }
}

// loadEnded waits for the load startLoad started and joins the drill's
// own error to it: the load's failure alone (no result), else the result
// with the drill's failure, if any.
func loadEnded(name string, wait func() (*loadtest.Result, error), actErr error) (*loadtest.Result, error) {
	res, err := wait()
	if err != nil {
		return nil, err
	}
	if actErr != nil {
		return res, fmt.Errorf("drill %s: %w", name, actErr)
	}
	return res, nil
}

// sleepUntil waits until the run's clock reaches at.
func sleepUntil(ctx context.Context, r *loadtest.Runner, at time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(at - r.Elapsed()):
		return nil
	}
}

func sinceText(at, from time.Duration) string {
	if at < 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fs", max(at-from, 0).Seconds())
}

func countAccepted(samples []loadtest.Sample) int {
	n := 0
	for _, s := range samples {
		if s.ID != "" && !s.Read {
			n++
		}
	}
	return n
}

func msf(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }

// until polls cond every 200 ms for up to within; what names the wait in
// the error.
func until(ctx context.Context, within time.Duration, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last error
	for {
		ok, err := cond(ctx)
		if ok && err == nil {
			return nil
		}
		if err != nil {
			last = err
		}
		if err := backoff.Sleep(ctx, 200*time.Millisecond); err != nil {
			if last != nil {
				return fmt.Errorf("%s: not within %s (last: %v)", what, within, last)
			}
			return fmt.Errorf("%s: not within %s", what, within)
		}
	}
}

// errorKinds counts the answers other than the one asked for (202, or
// 200 for a read) by status and problem type, or transport error, each
// with the cells that answered and the first and last send time: "503
// outcome-unknown ×2 (c2; 31.0s–44.2s), timeout ×1 (; 12.0s)".
func errorKinds(samples []loadtest.Sample) string {
	type kind struct {
		n        int
		cells    map[string]bool
		from, to time.Duration
	}
	kinds := map[string]*kind{}
	for _, s := range samples {
		if s.OK() {
			continue
		}
		name := s.Err
		if s.Status != 0 {
			name = strings.TrimSpace(strconv.Itoa(s.Status) + " " + s.Problem)
		}
		k := kinds[name]
		if k == nil {
			k = &kind{cells: map[string]bool{}, from: s.At}
			kinds[name] = k
		}
		k.n++
		k.cells[s.Cell] = true
		k.from, k.to = min(k.from, s.At), max(k.to, s.At)
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(kinds)) {
		k := kinds[name]
		out = append(out, fmt.Sprintf("%s ×%d (%s; %.1fs–%.1fs)", name, k.n, strings.Join(slices.Sorted(maps.Keys(k.cells)), ","), k.from.Seconds(), k.to.Seconds()))
	}
	return strings.Join(out, ", ")
}
