// Package gate decides whether the cells of a rollout's wave are worse
// than the cells still on the old release over the same window: their
// failures by Fisher's exact test, their latency by a Mann-Whitney test
// on histogram buckets, each with a minimum of samples and a margin that
// makes a difference worth a halt. Pure functions over counts; the
// rollout scrapes the counts (see docs/decisions/rollout-gates.md).
package gate

import (
	"fmt"
	"math"
)

// Decision is a gate's verdict on a wave.
type Decision uint8

// The verdicts: go on, too few samples yet, stop the wave.
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
	Decision Decision
	// P is the one-sided p-value of "the wave is worse" (1 when no test
	// was made).
	P float64
	// Text says what was compared and found, for the rollout's record.
	Text string
}

// Config are the gates' thresholds.
type Config struct {
	// Alpha is the p-value under which a difference is taken as real.
	Alpha float64
	// MinSamples is the fewest requests (or inquiries, or latency
	// samples) of the wave a gate decides on; fewer is Wait.
	MinSamples int64
	// FailureMargin is how much higher the wave's failure rate must be
	// than the baseline's to fail it (absolute: 0.005 is half a
	// percentage point), beside significance.
	FailureMargin float64
	// LatencyFactor and LatencyMargin: the wave's p99 must exceed the
	// baseline's × LatencyFactor and by LatencyMargin seconds to fail it,
	// beside significance.
	LatencyFactor float64
	LatencyMargin float64
}

// DefaultConfig: a 1 % false alarm rate per gate, 200 samples, half a
// point of failures, a p99 25 % and 10 ms worse.
func DefaultConfig() Config {
	return Config{Alpha: 0.01, MinSamples: 200, FailureMargin: 0.005, LatencyFactor: 1.25, LatencyMargin: 0.010}
}

// Counts are requests (or inquiries) and how many of them failed.
type Counts struct {
	Total, Failed int64
}

// Rate is the failed share (0 with no requests).
func (c Counts) Rate() float64 {
	if c.Total <= 0 {
		return 0
	}
	return float64(c.Failed) / float64(c.Total)
}

// Failures compares the wave's failures with the baseline's: Fail when
// the wave's rate is higher by the margin and Fisher's exact test says
// so at Alpha; Wait under MinSamples. With no baseline (every other cell
// already reached, or none has traffic) the wave's rate alone is held to
// the margin.
func (cfg Config) Failures(what string, wave, base Counts) Verdict {
	if wave.Total < cfg.MinSamples {
		return Verdict{Decision: Wait, P: 1, Text: fmt.Sprintf("%s: %d of %d samples", what, wave.Total, cfg.MinSamples)}
	}
	text := fmt.Sprintf("%s: wave %d of %d (%.2f%%), baseline %d of %d (%.2f%%)", what,
		wave.Failed, wave.Total, 100*wave.Rate(), base.Failed, base.Total, 100*base.Rate())
	if base.Total == 0 {
		if wave.Rate() > cfg.FailureMargin {
			return Verdict{Decision: Fail, P: 0, Text: text + ": over the margin, no baseline"}
		}
		return Verdict{Decision: Pass, P: 1, Text: text + ": no baseline"}
	}
	p := fisherGreater(wave.Failed, wave.Total, base.Failed, base.Total)
	text += fmt.Sprintf(", Fisher p=%.2g", p)
	if p < cfg.Alpha && wave.Rate()-base.Rate() > cfg.FailureMargin {
		return Verdict{Decision: Fail, P: p, Text: text}
	}
	return Verdict{Decision: Pass, P: p, Text: text}
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
