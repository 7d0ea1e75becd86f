package gate

import (
	"fmt"
	"math"
	"slices"
)

// Histogram is a Prometheus histogram's counts over a window: the buckets'
// upper bounds in seconds, ascending (the last may be +Inf), and the
// cumulative count at each (the difference of two scrapes).
type Histogram struct {
	Bounds     []float64
	Cumulative []int64
}

// Count is the number of observations.
func (h Histogram) Count() int64 {
	if len(h.Cumulative) == 0 {
		return 0
	}
	return h.Cumulative[len(h.Cumulative)-1]
}

// counts are the observations per bucket.
func (h Histogram) counts() []int64 {
	out := make([]int64, len(h.Cumulative))
	prev := int64(0)
	for i, c := range h.Cumulative {
		out[i] = max(c-prev, 0)
		prev = c
	}
	return out
}

// Quantile estimates the q-quantile as Prometheus's histogram_quantile
// does: linearly within its bucket (the lowest bucket from 0; the +Inf
// bucket answers the highest finite bound).
func (h Histogram) Quantile(q float64) float64 {
	n := h.Count()
	if n == 0 || len(h.Bounds) == 0 {
		return math.NaN()
	}
	rank := q * float64(n)
	prevBound, prevCum := 0.0, int64(0)
	for i, c := range h.Cumulative {
		if float64(c) >= rank {
			b := h.Bounds[i]
			if math.IsInf(b, 1) {
				return prevBound
			}
			inBucket := c - prevCum
			if inBucket == 0 {
				return b
			}
			return prevBound + (b-prevBound)*(rank-float64(prevCum))/float64(inBucket)
		}
		prevBound, prevCum = h.Bounds[i], c
	}
	return prevBound
}

// Latency compares the wave's latency with each baseline's: Fail when
// the wave's is larger than one's by a one-sided Mann-Whitney test on the
// buckets (ties within a bucket, corrected) and its p99 exceeds that
// baseline's by LatencyFactor and LatencyMargin; Wait under MinSamples,
// and with no baseline to compare. Histograms of other buckets than the
// wave's fail it: they cannot be compared.
func (cfg Config) Latency(what string, wave Histogram, bases ...Of[Histogram]) Verdict {
	n1 := wave.Count()
	if n1 < cfg.MinSamples {
		return cfg.waitFor(what, n1)
	}
	head := fmt.Sprintf("wave p99 %s of %d", ms(wave.Quantile(0.99)), n1)
	return compareAll(cfg, what, head, wave, bases, Histogram.Count, func(w, b Histogram, alpha float64) (float64, bool, string) {
		q1, q2 := w.Quantile(0.99), b.Quantile(0.99)
		text := fmt.Sprintf("p99 %s of %d", ms(q2), b.Count())
		if !slices.Equal(w.Bounds, b.Bounds) {
			return 0, true, text + ": the histograms' buckets differ"
		}
		p := mannWhitneyGreater(w.counts(), b.counts())
		return p, p < alpha && q1 > q2*cfg.LatencyFactor && q1-q2 > cfg.LatencyMargin, text + fmt.Sprintf(", Mann-Whitney p=%.2g", p)
	}, nil)
}

// Tail compares the wave's slowest requests with each baseline's: the
// share of the wave's samples slower than the baseline's p99 by the
// latency margins (above the first bucket bound past its p99 ×
// LatencyFactor and + LatencyMargin) against the baseline's own share
// above it, by Fisher's exact test; Fail when significant and larger by
// TailMargin. A regression of the slowest 1 or 2 % alone moves the
// Mann-Whitney statistic too little to see, and the p99 margin alone is
// no test; this is the test of the tail, of a slowing as large as the
// latency gate's margins ask. Wait as Latency. Against a baseline of
// another window, the other cells are judged at the same bound: their
// share above it rising between the two windows (the whole node slowed)
// makes the wave's rise the world's.
func (cfg Config) Tail(what string, wave Histogram, bases ...Of[Histogram]) Verdict {
	n1 := wave.Count()
	if n1 < cfg.MinSamples {
		return cfg.waitFor(what, n1)
	}
	head := fmt.Sprintf("wave of %d", n1)
	return compareAll(cfg, what, head, wave, bases, Histogram.Count, func(w, b Histogram, alpha float64) (float64, bool, string) {
		if !slices.Equal(w.Bounds, b.Bounds) {
			return 0, true, "the histograms' buckets differ"
		}
		i := cfg.tailBucket(b)
		bound := b.Bounds[i]
		if math.IsInf(bound, 1) {
			return 1, false, "p99 beyond the last bucket: no tail to compare"
		}
		above, base := w.above(i), b.above(i)
		p := fisherGreater(above.Failed, above.Total, base.Failed, base.Total)
		return p, p < alpha && above.Rate()-base.Rate() > cfg.TailMargin,
			fmt.Sprintf("above %s (its p99 %s and the margins): wave %d (%.2f%%), baseline %d of %d (%.2f%%), Fisher p=%.2g",
				ms(bound), ms(b.Quantile(0.99)), above.Failed, 100*above.Rate(), base.Failed, base.Total, 100*base.Rate(), p)
	}, func(now, then, b Histogram) float64 {
		// The control's shares above the bound the wave was judged
		// at: a node-wide slowing lifts the other cells' too, though it
		// may not reach past their own p99's margins; cells slower than
		// others by their users had more above it before the release.
		i := cfg.tailBucket(b)
		if !slices.Equal(now.Bounds, b.Bounds) || !slices.Equal(then.Bounds, b.Bounds) || math.IsInf(b.Bounds[i], 1) {
			return 1
		}
		a, t := now.above(i), then.above(i)
		return fisherGreater(a.Failed, a.Total, t.Failed, t.Total)
	})
}

// tailBucket is the bucket the tail gate judges against baseline b: the
// first past its p99 by the latency margins.
func (cfg Config) tailBucket(b Histogram) int {
	return b.bucketAbove(cfg.slower(b.Quantile(0.99)))
}

// above counts h's samples above bucket i's upper bound.
func (h Histogram) above(i int) Counts {
	return Counts{Total: h.Count(), Failed: h.Count() - h.Cumulative[i]}
}

// slower is the least latency worse than q by the latency margins: ×
// LatencyFactor and + LatencyMargin.
func (cfg Config) slower(q float64) float64 {
	return max(q*cfg.LatencyFactor, q+cfg.LatencyMargin)
}

// bucketAbove is the index of the first bucket whose upper bound is at
// least v (the last, +Inf, when none is).
func (h Histogram) bucketAbove(v float64) int {
	for i, b := range h.Bounds {
		if b >= v {
			return i
		}
	}
	return len(h.Bounds) - 1
}

// mannWhitneyGreater is the one-sided p-value that the first sample is
// stochastically larger, from counts per ordered bucket (a bucket's
// values are ties): the normal approximation with the tie correction and
// a continuity correction, good for the hundreds of samples a gate
// waits for.
func mannWhitneyGreater(a, b []int64) float64 {
	var n1, n2 float64
	for i := range a {
		n1 += float64(a[i])
		n2 += float64(b[i])
	}
	if n1 == 0 || n2 == 0 {
		return 1
	}
	u, below, ties := 0.0, 0.0, 0.0
	for i := range a {
		u += float64(a[i]) * (below + float64(b[i])/2)
		below += float64(b[i])
		t := float64(a[i] + b[i])
		ties += t*t*t - t
	}
	n := n1 + n2
	sigma2 := n1 * n2 / 12 * ((n + 1) - ties/(n*(n-1)))
	if sigma2 <= 0 {
		return 1 // every value in one bucket: no difference to see
	}
	z := (u - n1*n2/2 - 0.5) / math.Sqrt(sigma2)
	return 0.5 * math.Erfc(z/math.Sqrt2)
}

func ms(s float64) string {
	if math.IsNaN(s) {
		return "-"
	}
	return fmt.Sprintf("%.1fms", 1000*s)
}
