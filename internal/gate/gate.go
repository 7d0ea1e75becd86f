// Package gate decides whether the cells of a rollout's wave are worse
// than their baselines — the cells still on the old release over the
// same window, the wave's own cells before they were replaced, the
// earlier waves' cells baked on the new release: their failures and
// refusals by Fisher's exact test, their latency by a Mann-Whitney test
// on histogram buckets and their tail by the share of requests above the
// baseline's p99, each with a minimum of samples on both sides and a
// margin that makes a difference worth a halt. Pure functions over
// counts; the rollout scrapes the counts (see
// docs/decisions/rollout-gates.md).
package gate

import (
	"fmt"
	"math"
	"strings"
)

// Decision is a gate's verdict on a wave.
type Decision uint8

// The verdicts: go on, too few samples (or none to compare with) yet,
// stop the wave.
const (
	Pass Decision = iota
	Wait
	Fail
)

func (d Decision) String() string {
	switch d {
	case Pass:
		return "pass"
	case Wait:
		return "wait"
	}
	return "fail"
}

// Verdict is a decision with the figures it was made from.
type Verdict struct {
	// Gate names what was judged ("intake 5xx", "time to done tail").
	Gate     string
	Decision Decision
	// P is the one-sided p-value of "the wave is worse" against the
	// baseline that came closest to failing it (1 when no test was made).
	P float64
	// WaveSamples are the wave's samples; Baseline and BaselineSamples
	// name the baseline of P and its samples ("" and 0: none compared).
	WaveSamples     int64
	Baseline        string
	BaselineSamples int64
	// Text says what was compared and found, for the rollout's record.
	Text string
}

// Config are the gates' thresholds. Zero values mean DefaultConfig's,
// filled field by field at each judgement (Judge, JudgeRouters): the gate
// has no New, and a rollout's record written before a threshold existed
// is judged with its default.
type Config struct {
	// Alpha is the p-value under which a difference is taken as real,
	// for a gate as a whole: a gate that compares the wave with k
	// baselines tests each at Alpha/k (Bonferroni).
	Alpha float64
	// InterimAlpha is Alpha for the looks a bake takes before its end
	// (Interim): a bake judges every scrape, and a wave tested at Alpha
	// at each of them fails a good release several times as often as
	// one test does; at InterimAlpha, a tenth of it, the early looks
	// halt only what is plainly worse (Haybittle and Peto's rule for
	// looks before a trial's end).
	InterimAlpha float64
	// MinSamples is the fewest requests (or inquiries, or latency
	// samples) of the wave a gate decides on, fewer is Wait; and of a
	// baseline it compares with, fewer is no baseline.
	MinSamples int64
	// FailureMargin is how much higher the wave's failure rate must be
	// than the baseline's to fail it (absolute: 0.005 is half a
	// percentage point), beside significance.
	FailureMargin float64
	// RefusalMargin is the same for refusals (503s: shed, intake closed,
	// storage full, a cell the routers cannot reach).
	RefusalMargin float64
	// LatencyFactor and LatencyMargin: the wave's p99 must exceed the
	// baseline's × LatencyFactor and by LatencyMargin seconds to fail it,
	// beside significance.
	LatencyFactor float64
	LatencyMargin float64
	// TailMargin is how much larger the wave's share of samples above the
	// baseline's p99 must be than the baseline's own share to fail it
	// (absolute), beside significance.
	TailMargin float64
}

// DefaultConfig: a 1 % false alarm rate per gate at the bake's end and
// 0.1 % before it, 200 samples, half a point of failures, of refusals and
// of the tail, a p99 25 % and 10 ms worse.
func DefaultConfig() Config {
	return Config{Alpha: 0.01, InterimAlpha: 0.001, MinSamples: 200, FailureMargin: 0.005, RefusalMargin: 0.005,
		LatencyFactor: 1.25, LatencyMargin: 0.010, TailMargin: 0.005}
}

// Interim is cfg for a look before the bake's end: its tests at
// InterimAlpha (never above Alpha), every other threshold as it is.
func (cfg Config) Interim() Config {
	cfg = cfg.withDefaults()
	cfg.Alpha = min(cfg.Alpha, cfg.InterimAlpha)
	return cfg
}

// withDefaults fills the zero fields from DefaultConfig (a configuration
// written before a field existed gets its default).
func (cfg Config) withDefaults() Config {
	d := DefaultConfig()
	for _, f := range []struct{ v, d *float64 }{
		{&cfg.Alpha, &d.Alpha}, {&cfg.InterimAlpha, &d.InterimAlpha}, {&cfg.FailureMargin, &d.FailureMargin}, {&cfg.RefusalMargin, &d.RefusalMargin},
		{&cfg.LatencyFactor, &d.LatencyFactor}, {&cfg.LatencyMargin, &d.LatencyMargin}, {&cfg.TailMargin, &d.TailMargin},
	} {
		if *f.v == 0 {
			*f.v = *f.d
		}
	}
	if cfg.MinSamples == 0 {
		cfg.MinSamples = d.MinSamples
	}
	return cfg
}

// Counts are requests (or inquiries) and how many of them had the outcome
// a gate counts (failed, refused).
type Counts struct {
	Total, Failed int64
}

// Rate is the counted share (0 with no requests).
func (c Counts) Rate() float64 {
	if c.Total <= 0 {
		return 0
	}
	return float64(c.Failed) / float64(c.Total)
}

// Of is one baseline's figures for a gate: its name ("old release",
// "before", "baked") and V; Unread, when set, says which of its sources
// could not be read, and it is not compared. Then and Now are its
// control, a difference that shows without the release: a difference of
// the wave from V that Now shows from Then too, by the same test, fails
// nothing. For a baseline of another window than the wave's (the wave's
// own cells before they were replaced) they are the other cells' figures
// in that window and in the wave's: the world moved (more load, a slower
// agency). For a baseline of other cells over the wave's window (the
// old release, the baked: any but before) they are those cells' figures
// (Then) and the wave's own (Now) in a window before the wave was
// replaced: the wave's cells differ from those by their users and
// agencies, not by the release.
type Of[T any] struct {
	Name      string
	V         T
	Unread    string
	Then, Now *T
}

// comparison is the wave against one baseline.
type comparison struct {
	name string
	n    int64 // the baseline's samples
	p    float64
	fail bool
}

// compareAll compares the wave with each baseline that was read and has
// MinSamples, each at Alpha over their number: Fail when one fails; Pass
// when at least one was compared; Wait with none (no baseline is not a
// pass). head starts the text; size is a sample's size; cmp makes one
// comparison of w with b at a given alpha (fail: significant and over
// the margin). A comparison that fails is excused when the baseline's
// control shows the same difference (Of). moved, when not nil, is the
// p-value that the control's Now is worse than its Then in the measure
// the comparison with base judged (a gate whose test takes its
// threshold from the baseline judges the control at that same
// threshold, not at one of its own); nil is cmp's p-value of Now
// against Then.
func compareAll[T any](cfg Config, what, head string, wave T, bases []Of[T], size func(T) int64,
	cmp func(w, b T, alpha float64) (p float64, fail bool, text string), moved func(now, then, base T) float64) Verdict {
	usable := 0
	for _, b := range bases {
		if b.Unread == "" && size(b.V) >= cfg.MinSamples {
			usable++
		}
	}
	v := Verdict{Gate: what, Decision: Wait, P: 1, WaveSamples: size(wave)}
	parts := []string{head}
	var worst *comparison
	for _, b := range bases {
		n := size(b.V)
		switch {
		case b.Unread != "":
			parts = append(parts, fmt.Sprintf("%s not read (%s)", b.Name, b.Unread))
			continue
		case n < cfg.MinSamples:
			parts = append(parts, fmt.Sprintf("%s %d samples, too few to compare", b.Name, n))
			continue
		}
		alpha := cfg.Alpha / float64(usable)
		p, fail, text := cmp(wave, b.V, alpha)
		if fail && b.Then != nil && b.Now != nil && size(*b.Then) >= cfg.MinSamples && size(*b.Now) >= cfg.MinSamples {
			// The other cells between the same two windows.
			var cp float64
			if moved != nil {
				cp = moved(*b.Now, *b.Then, b.V)
			} else {
				cp, _, _ = cmp(*b.Now, *b.Then, alpha)
			}
			if cp < alpha {
				fail = false
				alike := "the wave's cells were as far from these before they were replaced"
				if b.Name == BaselineBefore {
					alike = "the other cells moved alike between the two windows"
				}
				text += fmt.Sprintf(" — %s (p=%.2g): not the release's", alike, cp)
			}
		}
		c := comparison{name: b.Name, n: n, p: p, fail: fail}
		parts = append(parts, b.Name+" "+text)
		if worst == nil || (c.fail && !worst.fail) || (c.fail == worst.fail && c.p < worst.p) {
			worst = &c
		}
	}
	if len(bases) == 0 {
		parts = append(parts, "no baseline")
	}
	v.Text = what + ": " + strings.Join(parts, "; ")
	if worst == nil {
		return v
	}
	v.P, v.Baseline, v.BaselineSamples = worst.p, worst.name, worst.n
	v.Decision = Pass
	if worst.fail {
		v.Decision = Fail
	}
	return v
}

// waitFor is a gate's Wait for too few samples of the wave.
func (cfg Config) waitFor(what string, n int64) Verdict {
	return Verdict{Gate: what, Decision: Wait, P: 1, WaveSamples: n, Text: fmt.Sprintf("%s: %d of %d samples", what, n, cfg.MinSamples)}
}

// Failures compares the wave's failures with each baseline's: Fail when
// the wave's rate is higher than one's by FailureMargin and Fisher's
// exact test says so; Wait under MinSamples of the wave. With no
// baseline to compare (none read with MinSamples), a wave whose own rate
// is over the margin fails, and one under it waits.
func (cfg Config) Failures(what string, wave Counts, bases ...Of[Counts]) Verdict {
	return cfg.rates(what, wave, cfg.FailureMargin, bases)
}

// Refusals is Failures for the wave's refusals, with RefusalMargin: a
// wave that refuses its users (sheds, closes its intake, has its
// routers find it unreachable) more than its baselines do fails.
func (cfg Config) Refusals(what string, wave Counts, bases ...Of[Counts]) Verdict {
	return cfg.rates(what, wave, cfg.RefusalMargin, bases)
}

func (cfg Config) rates(what string, wave Counts, margin float64, bases []Of[Counts]) Verdict {
	if wave.Total < cfg.MinSamples {
		return cfg.waitFor(what, wave.Total)
	}
	head := fmt.Sprintf("wave %d of %d (%.2f%%)", wave.Failed, wave.Total, 100*wave.Rate())
	v := compareAll(cfg, what, head, wave, bases, func(c Counts) int64 { return c.Total },
		func(w, b Counts, alpha float64) (float64, bool, string) {
			p := fisherGreater(w.Failed, w.Total, b.Failed, b.Total)
			return p, p < alpha && w.Rate()-b.Rate() > margin,
				fmt.Sprintf("%d of %d (%.2f%%), Fisher p=%.2g", b.Failed, b.Total, 100*b.Rate(), p)
		}, nil)
	if v.Decision == Wait && v.Baseline == "" && wave.Rate() > margin {
		v.Decision, v.P = Fail, 0
		v.Text += fmt.Sprintf(": over the margin of %.2f%% with no baseline to compare", 100*margin)
	}
	return v
}

// fisherGreater is the one-sided p-value of Fisher's exact test that the
// first group's failure rate is higher: P(X ≥ a) for X hypergeometric
// with the margins of the 2×2 table [a, n1-a; b, n2-b].
func fisherGreater(a, n1, b, n2 int64) float64 {
	n, k := n1+n2, a+b // population, failures in it
	lo, hi := max(a, k-n2), min(k, n1)
	if a > hi {
		return 0
	}
	base := lchoose(n, n1)
	p := 0.0
	for x := max(a, lo); x <= hi; x++ {
		p += math.Exp(lchoose(k, x) + lchoose(n-k, n1-x) - base)
	}
	return min(p, 1)
}

func lchoose(n, k int64) float64 {
	if k < 0 || k > n {
		return math.Inf(-1)
	}
	a, _ := math.Lgamma(float64(n + 1))
	b, _ := math.Lgamma(float64(k + 1))
	c, _ := math.Lgamma(float64(n - k + 1))
	return a - b - c
}
