package gate

import (
	"fmt"
	"math"
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

// Latency compares the wave's latency with the baseline's: Fail when the
// wave's is larger by a one-sided Mann-Whitney test on the buckets (ties
// within a bucket, corrected) at Alpha and its p99 exceeds the
// baseline's by LatencyFactor and LatencyMargin; Wait under MinSamples;
// Pass without a baseline to compare with. Both histograms must have the
// same buckets.
func (cfg Config) Latency(what string, wave, base Histogram) Verdict {
	n1, n2 := wave.Count(), base.Count()
	if n1 < cfg.MinSamples {
		return Verdict{Decision: Wait, P: 1, Text: fmt.Sprintf("%s: %d of %d samples", what, n1, cfg.MinSamples)}
	}
	q1, q2 := wave.Quantile(0.99), base.Quantile(0.99)
	text := fmt.Sprintf("%s: p99 wave %s of %d, baseline %s of %d", what, ms(q1), n1, ms(q2), n2)
	if n2 == 0 {
		return Verdict{Decision: Pass, P: 1, Text: text + ": no baseline"}
	}
	if len(wave.Bounds) != len(base.Bounds) {
		return Verdict{Decision: Fail, P: 0, Text: text + ": the histograms' buckets differ"}
	}
	p := mannWhitneyGreater(wave.counts(), base.counts())
	text += fmt.Sprintf(", Mann-Whitney p=%.2g", p)
	if p < cfg.Alpha && q1 > q2*cfg.LatencyFactor && q1-q2 > cfg.LatencyMargin {
		return Verdict{Decision: Fail, P: p, Text: text}
	}
	return Verdict{Decision: Pass, P: p, Text: text}
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
