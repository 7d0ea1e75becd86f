package gate

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
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

// base is one baseline named "old release".
func base[T any](v T) Of[T] { return Of[T]{Name: BaselineOld, V: v} }

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
		{"no baseline, clean: no pass", Counts{1000, 2}, Counts{}, Wait},
		{"no baseline, failing", Counts{1000, 100}, Counts{}, Fail},
	} {
		if v := cfg.Failures("5xx", tc.wave, base(tc.base)); v.Decision != tc.want {
			t.Errorf("%s: %v (%s), want %v", tc.name, v.Decision, v.Text, tc.want)
		}
	}
}

// TestThinBaselineIsNoBaseline: a baseline under MinSamples is no
// baseline. 100 failures in 1,000 requests against a baseline of one
// request passed (Fisher p=0.90 against 0 of 1, 1.0 against 1 of 1); now
// the wave is held to the margin alone and fails, and a clean wave
// against a thin baseline waits instead of passing.
func TestThinBaselineIsNoBaseline(t *testing.T) {
	cfg := DefaultConfig()
	if p := fisherGreater(100, 1000, 0, 1); math.Abs(p-0.9001) > 1e-4 {
		t.Errorf("Fisher p of 100/1000 against 0/1 = %.4f, want 0.9001", p)
	}
	for _, b := range []Counts{{1, 0}, {1, 1}, {199, 0}} {
		v := cfg.Failures("5xx", Counts{1000, 100}, base(b))
		if v.Decision != Fail || v.Baseline != "" || !strings.Contains(v.Text, "too few to compare") {
			t.Errorf("100 of 1000 against %d of %d: %v (%s), want fail with no baseline", b.Failed, b.Total, v.Decision, v.Text)
		}
		if v := cfg.Failures("5xx", Counts{1000, 2}, base(b)); v.Decision != Wait {
			t.Errorf("2 of 1000 against %d of %d: %v (%s), want wait", b.Failed, b.Total, v.Decision, v.Text)
		}
	}
	if v := cfg.Failures("5xx", Counts{1000, 100}, base(Counts{200, 0})); v.Decision != Fail || v.Baseline != BaselineOld || v.BaselineSamples != 200 {
		t.Errorf("against a baseline of 200: %+v", v)
	}
	if v := cfg.Latency("latency", histogram(1000, func() float64 { return 0.05 }), base(histogram(199, func() float64 { return 0.05 }))); v.Decision != Wait {
		t.Errorf("latency against 199 samples: %v (%s), want wait", v.Decision, v.Text)
	}
}

// TestRefusals: a wave refusing 45 % of its POSTs (503) while the
// baseline refuses none fails by the refusals gate (Fisher p=9.4e-313)
// though its 5xx gate, which leaves 503s out, passes; a refusal rate the
// baseline shares passes (12 of 1,000 against 30 of 3,000: p=0.35).
func TestRefusals(t *testing.T) {
	cfg := DefaultConfig()
	v := cfg.Refusals("intake refusals", Counts{1000, 450}, base(Counts{3000, 0}))
	if v.Decision != Fail || v.P > 1e-300 || v.WaveSamples != 1000 || v.BaselineSamples != 3000 {
		t.Errorf("45%% refused against none: %+v", v)
	}
	if v := cfg.Refusals("intake refusals", Counts{1000, 12}, base(Counts{3000, 30})); v.Decision != Pass || math.Abs(v.P-0.3508) > 1e-3 {
		t.Errorf("the baseline's refusal rate: %+v, want pass with p=0.3508", v)
	}
}

// TestInterimLooksAtInterimAlpha: a difference significant at Alpha but
// not at InterimAlpha (4 of 300 failed against none of 900, p≈0.004)
// fails a bake's last look and passes the looks before it; Interim never
// tests above Alpha, and a record without InterimAlpha gets its default.
func TestInterimLooksAtInterimAlpha(t *testing.T) {
	cfg := Config{Alpha: 0.01, MinSamples: 200, FailureMargin: 0.005}
	wave, old := Counts{300, 4}, base(Counts{900, 0})
	if v := cfg.Failures("intake 5xx", wave, old); v.Decision != Fail || v.P < 0.001 || v.P > 0.01 {
		t.Fatalf("at the bake's end: %+v, want a fail with 0.001 < p < 0.01", v)
	}
	if v := cfg.Interim().Failures("intake 5xx", wave, old); v.Decision != Pass {
		t.Errorf("before the bake's end: %+v, want a pass", v)
	}
	if v := cfg.Interim().Failures("intake 5xx", Counts{300, 12}, old); v.Decision != Fail {
		t.Errorf("plainly worse before the bake's end: %+v, want a fail", v)
	}
	if a := (Config{}).Interim().Alpha; a != DefaultConfig().InterimAlpha {
		t.Errorf("an older record's interim alpha: %v", a)
	}
	if a := (Config{Alpha: 0.0005}).Interim().Alpha; a != 0.0005 {
		t.Errorf("interim alpha above alpha: %v", a)
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
	if v := cfg.Latency("intake", histogram(100, usual), base(histogram(3000, usual))); v.Decision != Wait {
		t.Errorf("100 samples: %v (%s)", v.Decision, v.Text)
	}
	if v := cfg.Latency("intake", histogram(1000, slower), base(histogram(3000, usual))); v.Decision != Fail {
		t.Errorf("50 ms added: %v (%s)", v.Decision, v.Text)
	}
	// The same distribution passes in nearly every draw: at most the
	// alpha's share of false alarms, here none of 200 seeds beyond 1 %.
	alarms := 0
	for range 200 {
		if cfg.Latency("intake", histogram(500, usual), base(histogram(1500, usual))).Decision == Fail {
			alarms++
		}
	}
	if alarms > 2 {
		t.Errorf("the same distribution failed %d of 200 times", alarms)
	}
	if v := cfg.Latency("intake", histogram(1000, usual), base(Histogram{})); v.Decision != Wait {
		t.Errorf("no baseline: %v (%s), want wait", v.Decision, v.Text)
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

// hist is a histogram of counts per bucket over the bounds below.
func hist(perBucket ...int64) Histogram {
	bounds := []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, math.Inf(1)}
	h := Histogram{Bounds: bounds, Cumulative: make([]int64, len(bounds))}
	var c int64
	for i, n := range perBucket {
		c += n
		h.Cumulative[i] = c
	}
	for i := len(perBucket); i < len(bounds); i++ {
		h.Cumulative[i] = c
	}
	return h
}

// TestTail: 2 % of the wave's samples a second slower, the rest as the
// baseline's. The Mann-Whitney test does not see it (p=0.147) though the
// p99 is 1.82 s against 0.47 s, so the latency gate passes; the tail
// gate counts the samples slower than the baseline's p99 by the margins
// (0.47 s × 1.25: above the 1 s bucket bound): 22 of 1,000 (2.2 %)
// against 5 of 3,000 (0.17 %), Fisher p=1.0e-9, and fails. A healthy
// wave of the same shape passes both (p=0.50, and 2 of 1,000 above 1 s:
// p=0.56).
func TestTail(t *testing.T) {
	cfg := DefaultConfig()
	baseline := base(hist(300, 1200, 900, 460, 125, 10, 5))
	slowTail := hist(100, 390, 290, 153, 42, 3, 22)
	healthy := hist(100, 400, 300, 153, 42, 3, 2)
	lat := cfg.Latency("time to done", slowTail, baseline)
	if lat.Decision != Pass || math.Abs(lat.P-0.1473) > 1e-3 {
		t.Errorf("the slow tail by Mann-Whitney: %v p=%.4f (%s), want pass, p=0.1473", lat.Decision, lat.P, lat.Text)
	}
	if q := slowTail.Quantile(0.99); math.Abs(q-1.818) > 1e-3 {
		t.Errorf("the slow tail's p99 %.4f, want 1.818", q)
	}
	tail := cfg.Tail("time to done tail", slowTail, baseline)
	if tail.Decision != Fail || math.Abs(tail.P-1.0095e-9)/1.0095e-9 > 1e-3 || !strings.Contains(tail.Text, "above 1000.0ms (its p99 470.0ms and the margins): wave 22 (2.20%), baseline 5 of 3000 (0.17%)") {
		t.Errorf("the slow tail: %v p=%.4g (%s), want fail, p=1.0095e-9", tail.Decision, tail.P, tail.Text)
	}
	for _, v := range []Verdict{cfg.Latency("time to done", healthy, baseline), cfg.Tail("time to done tail", healthy, baseline)} {
		if v.Decision != Pass {
			t.Errorf("a healthy wave: %v (%s)", v.Decision, v.Text)
		}
	}
	// The same distribution on both sides passes the tail gate in nearly
	// every draw, against one baseline and against three (each at a third
	// of alpha).
	rng := rand.New(rand.NewPCG(3, 4))
	usual := func() float64 { return 0.004 + rng.ExpFloat64()*0.02 }
	alarms := 0
	for range 200 {
		w := histogram(500, usual)
		if cfg.Tail("tail", w, base(histogram(1500, usual))).Decision == Fail {
			alarms++
		}
		three := []Of[Histogram]{base(histogram(1500, usual)), {Name: BaselineBefore, V: histogram(500, usual)}, {Name: BaselineBaked, V: histogram(500, usual)}}
		if cfg.Tail("tail", w, three...).Decision == Fail {
			alarms++
		}
	}
	if alarms > 4 {
		t.Errorf("the same distribution failed the tail gate %d of 400 times", alarms)
	}
}

// TestBaselines: a wave is compared with every baseline it has — the
// old release, its own cells before, the baked waves — and fails when it
// is worse than one; with none (the last wave) it is compared with its
// own figures from before and passes only on them; a baseline that could
// not be read is left out, never a pass.
func TestBaselines(t *testing.T) {
	cfg := DefaultConfig()
	usual := hist(100, 400, 300, 153, 42, 3, 2)
	slower := hist(0, 0, 100, 400, 300, 150, 50)
	before := Of[Histogram]{Name: BaselineBefore, V: usual}
	baked := Of[Histogram]{Name: BaselineBaked, V: slower}
	if v := cfg.Latency("time to done", slower, baked); v.Decision != Pass {
		t.Errorf("against the baked waves alone (as slow): %v (%s)", v.Decision, v.Text)
	}
	v := cfg.Latency("time to done", slower, baked, before)
	if v.Decision != Fail || v.Baseline != BaselineBefore || v.BaselineSamples != 1000 {
		t.Errorf("against its own cells before: %+v, want fail by before", v)
	}
	// Before is another window: when the other cells slowed as much
	// between the two windows (more load), the wave's slowing is the
	// world's; when they did not, it is the release's.
	worldSlowed := Of[Histogram]{Name: BaselineBefore, V: usual, Then: &usual, Now: &slower}
	if v := cfg.Latency("time to done", slower, worldSlowed); v.Decision != Pass || !strings.Contains(v.Text, "the other cells moved alike") {
		t.Errorf("against before, the other cells as slow now: %v (%s), want pass", v.Decision, v.Text)
	}
	worldSteady := Of[Histogram]{Name: BaselineBefore, V: usual, Then: &usual, Now: &usual}
	if v := cfg.Latency("time to done", slower, worldSteady); v.Decision != Fail {
		t.Errorf("against before, the other cells steady: %v (%s), want fail", v.Decision, v.Text)
	}
	// The tail against before, while every cell slowed for a few seconds:
	// the other cells' own p99 is higher than the wave's was, so their
	// own margins' bound (1 s) sees no change, but at the bound the wave
	// is judged at (500 ms) they rose as the wave did.
	waveBefore, waveNow := hist(0, 300, 300, 165, 1), hist(0, 150, 150, 100, 32, 18)
	othersThen := hist(0, 100, 150, 100, 40, 10)
	if v := cfg.Tail("tail", waveNow, Of[Histogram]{Name: BaselineBefore, V: waveBefore}); v.Decision != Fail {
		t.Fatalf("the tail against before with no control: %v (%s), want fail", v.Decision, v.Text)
	}
	othersSlowed := hist(0, 40, 60, 50, 36, 30)
	if v := cfg.Tail("tail", waveNow, Of[Histogram]{Name: BaselineBefore, V: waveBefore, Then: &othersThen, Now: &othersSlowed}); v.Decision != Pass || !strings.Contains(v.Text, "the other cells moved alike") {
		t.Errorf("the tail against before, the other cells' tail past 500 ms risen too: %v (%s), want pass", v.Decision, v.Text)
	}
	othersSteady := hist(0, 54, 81, 54, 22, 5)
	if v := cfg.Tail("tail", waveNow, Of[Histogram]{Name: BaselineBefore, V: waveBefore, Then: &othersThen, Now: &othersSteady}); v.Decision != Fail {
		t.Errorf("the tail against before, the other cells steady: %v (%s), want fail", v.Decision, v.Text)
	}
	// The old release is other cells over the same window: a wave whose
	// cells were as much slower than those cells before they were
	// replaced (their users, their agencies) is not slower by the
	// release; one that was not, is.
	old := Of[Histogram]{Name: BaselineOld, V: usual}
	if v := cfg.Latency("time to done", slower, old); v.Decision != Fail {
		t.Fatalf("against the old release with no control: %v (%s), want fail", v.Decision, v.Text)
	}
	old.Then, old.Now = &usual, &slower // those cells, and the wave's own, before
	if v := cfg.Latency("time to done", slower, old); v.Decision != Pass || !strings.Contains(v.Text, "the wave's cells were as far from these before") {
		t.Errorf("against the old release, the wave's cells as slow before: %v (%s), want pass", v.Decision, v.Text)
	}
	old.Now = &usual
	if v := cfg.Latency("time to done", slower, old); v.Decision != Fail {
		t.Errorf("against the old release, the wave's cells like these before: %v (%s), want fail", v.Decision, v.Text)
	}
	unread := Of[Histogram]{Name: BaselineBefore, V: usual, Unread: "c1: connection refused"}
	if v := cfg.Latency("time to done", usual, unread); v.Decision != Wait || !strings.Contains(v.Text, "before not read (c1: connection refused)") {
		t.Errorf("a baseline not read: %v (%s), want wait", v.Decision, v.Text)
	}
	if v := cfg.Latency("time to done", usual); v.Decision != Wait || !strings.Contains(v.Text, "no baseline") {
		t.Errorf("no baseline at all: %v (%s), want wait", v.Decision, v.Text)
	}
}

// TestOlderThresholds: a gate block written before some thresholds
// existed (a rollout's record) is filled, as Judge fills it, with today's
// default for each missing one, and the ones it has keep their values.
func TestOlderThresholds(t *testing.T) {
	var cfg Config
	if err := json.Unmarshal([]byte(`{"Alpha":0.05,"MinSamples":50}`), &cfg); err != nil {
		t.Fatal(err)
	}
	got, d := cfg.withDefaults(), DefaultConfig()
	want := d
	want.Alpha, want.MinSamples = 0.05, 50
	if got != want {
		t.Fatalf("filled %+v, want %+v", got, want)
	}
}
