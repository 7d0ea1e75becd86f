package gate

import (
	"math"
	"math/rand/v2"
	"testing"
)

// fisherGreater against the hypergeometric tail summed exactly with
// integer binomials (Python's math.comb) for the 2×2 tables below.
func TestFisherGreater(t *testing.T) {
	for _, tc := range []struct {
		a, n1, b, n2 int64
		want         float64
	}{
		{3, 3, 0, 3, 0.05},          // all three failures in the first group: 1/C(6,3)
		{1, 3, 1, 3, 0.8},           // one each: P(X≥1) = 1 − C(4,3)/C(6,3)
		{0, 10, 5, 10, 1},           // none in the first: certainly not greater
		{10, 100, 1, 100, 0.004829}, // the exact sum: 0.0048291
	} {
		if got := fisherGreater(tc.a, tc.n1, tc.b, tc.n2); math.Abs(got-tc.want) > 1e-6 {
			t.Errorf("fisherGreater(%d/%d, %d/%d) = %.5f, want %.5f", tc.a, tc.n1, tc.b, tc.n2, got, tc.want)
		}
	}
}

func TestFailures(t *testing.T) {
	cfg := DefaultConfig()
	for _, tc := range []struct {
		name       string
		wave, base Counts
		want       Decision
	}{
		{"too few", Counts{150, 50}, Counts{5000, 5}, Wait},
		{"the same rate", Counts{1000, 10}, Counts{3000, 30}, Pass},
		{"a failing share", Counts{1000, 60}, Counts{3000, 30}, Fail},
		{"significant but under the margin", Counts{100000, 1100}, Counts{300000, 3000}, Pass},
		{"better", Counts{1000, 0}, Counts{3000, 30}, Pass},
		{"no baseline, clean", Counts{1000, 2}, Counts{}, Pass},
		{"no baseline, failing", Counts{1000, 100}, Counts{}, Fail},
	} {
		if v := cfg.Failures("5xx", tc.wave, tc.base); v.Decision != tc.want {
			t.Errorf("%s: %v (%s), want %v", tc.name, v.Decision, v.Text, tc.want)
		}
	}
}

// histogram observes n samples of draw into the buckets Prometheus's
// default buckets would hold.
func histogram(n int, draw func() float64) Histogram {
	bounds := []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, math.Inf(1)}
	h := Histogram{Bounds: bounds, Cumulative: make([]int64, len(bounds))}
	for range n {
		v := draw()
		for i, b := range bounds {
			if v <= b {
				h.Cumulative[i]++
			}
		}
	}
	return h
}

func TestLatency(t *testing.T) {
	cfg := DefaultConfig()
	rng := rand.New(rand.NewPCG(1, 2))
	usual := func() float64 { return 0.004 + rng.ExpFloat64()*0.02 }
	slower := func() float64 { return 0.054 + rng.ExpFloat64()*0.02 }
	if v := cfg.Latency("intake", histogram(100, usual), histogram(3000, usual)); v.Decision != Wait {
		t.Errorf("100 samples: %v (%s)", v.Decision, v.Text)
	}
	if v := cfg.Latency("intake", histogram(1000, slower), histogram(3000, usual)); v.Decision != Fail {
		t.Errorf("50 ms added: %v (%s)", v.Decision, v.Text)
	}
	// The same distribution passes in nearly every draw: at most the
	// alpha's share of false alarms, here none of 200 seeds beyond 1 %.
	alarms := 0
	for range 200 {
		if cfg.Latency("intake", histogram(500, usual), histogram(1500, usual)).Decision == Fail {
			alarms++
		}
	}
	if alarms > 2 {
		t.Errorf("the same distribution failed %d of 200 times", alarms)
	}
	if v := cfg.Latency("intake", histogram(1000, usual), Histogram{}); v.Decision != Pass {
		t.Errorf("no baseline: %v (%s)", v.Decision, v.Text)
	}
}

func TestQuantile(t *testing.T) {
	h := Histogram{Bounds: []float64{0.1, 0.2, math.Inf(1)}, Cumulative: []int64{50, 100, 100}}
	if q := h.Quantile(0.5); math.Abs(q-0.1) > 1e-9 {
		t.Errorf("median %v, want 0.1", q)
	}
	if q := h.Quantile(0.75); math.Abs(q-0.15) > 1e-9 {
		t.Errorf("p75 %v, want 0.15", q)
	}
	if q := (Histogram{}).Quantile(0.99); !math.IsNaN(q) {
		t.Errorf("empty: %v", q)
	}
}
