package agencysim

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func sample(l Latency, n int, seed uint64) []time.Duration {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = l.Sample(r)
	}
	slices.Sort(out)
	return out
}

// quantile of sorted samples.
func quantile(sorted []time.Duration, q float64) time.Duration {
	return sorted[int(q*float64(len(sorted)-1))]
}

func within(got, want time.Duration, tol float64) bool {
	return float64(got) >= float64(want)*(1-tol) && float64(got) <= float64(want)*(1+tol)
}

func TestLogNormalLatencyHitsItsPercentiles(t *testing.T) {
	tests := []struct{ p50, p99 time.Duration }{
		{500 * time.Millisecond, 1500 * time.Millisecond},
		{20 * time.Millisecond, 400 * time.Millisecond},
		{time.Second, time.Second}, // degenerate: fixed
	}
	for _, tt := range tests {
		l := LogNormalLatency(tt.p50, tt.p99)
		s := sample(l, 20000, 42)
		if got := quantile(s, 0.50); !within(got, tt.p50, 0.05) {
			t.Errorf("%v: p50 = %v, want %v ±5%%", l, got, tt.p50)
		}
		if got := quantile(s, 0.99); !within(got, tt.p99, 0.10) {
			t.Errorf("%v: p99 = %v, want %v ±10%%", l, got, tt.p99)
		}
		if s[0] <= 0 {
			t.Errorf("%v: smallest sample %v, want > 0", l, s[0])
		}
	}
}

func TestUniformLatencyStaysInBounds(t *testing.T) {
	lo, hi := 100*time.Millisecond, 300*time.Millisecond
	s := sample(UniformLatency(lo, hi), 20000, 7)
	if s[0] < lo || s[len(s)-1] > hi {
		t.Errorf("uniform [%v, %v] sampled [%v, %v]", lo, hi, s[0], s[len(s)-1])
	}
	if got := quantile(s, 0.5); !within(got, 200*time.Millisecond, 0.03) {
		t.Errorf("uniform [%v, %v] median %v, want about 200ms", lo, hi, got)
	}
	if got := quantile(s, 0.01); got > lo+5*time.Millisecond {
		t.Errorf("uniform [%v, %v] 1st percentile %v, want near the low bound", lo, hi, got)
	}
	if got := sample(UniformLatency(lo, lo), 10, 1); got[0] != lo || got[9] != lo {
		t.Errorf("uniform [%v, %v] sampled %v, want always %v", lo, lo, got, lo)
	}
}

func TestFixedAndNoLatency(t *testing.T) {
	tests := []struct {
		l    Latency
		want time.Duration
	}{
		{Latency{}, 0},
		{Latency{Dist: DistNone, Fixed: time.Second}, 0},
		{FixedLatency(250 * time.Millisecond), 250 * time.Millisecond},
		{FixedLatency(25 * time.Millisecond).Scaled(10), 250 * time.Millisecond},
	}
	for _, tt := range tests {
		for _, got := range sample(tt.l, 100, 3) {
			if got != tt.want {
				t.Fatalf("%v.Sample() = %v, want %v", tt.l, got, tt.want)
			}
		}
	}
}

func TestSamplingIsDeterministicPerSeed(t *testing.T) {
	l := LogNormalLatency(500*time.Millisecond, 1500*time.Millisecond)
	a, b := sample(l, 100, 9), sample(l, 100, 9)
	if !slices.Equal(a, b) {
		t.Error("two samplers with the same seed disagree")
	}
	if slices.Equal(a, sample(l, 100, 10)) {
		t.Error("two samplers with different seeds agree")
	}
}

func TestScaledKeepsTheShape(t *testing.T) {
	l := LogNormalLatency(500*time.Millisecond, 1500*time.Millisecond).Scaled(10)
	if l.Dist != DistLogNormal || l.P50 != 5*time.Second || l.P99 != 15*time.Second {
		t.Errorf("Scaled(10) = %+v, want lognormal p50 5s p99 15s", l)
	}
}

func TestLatencyValidate(t *testing.T) {
	tests := []struct {
		l  Latency
		ok bool
	}{
		{Latency{}, true},
		{Latency{Dist: DistNone}, true},
		{FixedLatency(0), true},
		{FixedLatency(-1), false},
		{UniformLatency(0, 0), true},
		{UniformLatency(2, 1), false},
		{UniformLatency(-1, 1), false},
		{LogNormalLatency(1, 1), true},
		{LogNormalLatency(0, 1), false},
		{LogNormalLatency(2, 1), false},
		{Latency{Dist: "pareto"}, false},
	}
	for _, tt := range tests {
		if err := tt.l.Validate(); (err == nil) != tt.ok {
			t.Errorf("%+v.Validate() = %v, want ok %v", tt.l, err, tt.ok)
		}
	}
}
