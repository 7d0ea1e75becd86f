package drill

import (
	"math"
	"math/rand"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cellkit/cellkit/internal/loadtest"
	"github.com/cellkit/cellkit/internal/operator/api/v1alpha1"
)

func TestScaleLatency(t *testing.T) {
	got, err := scaleLatency(agencyLatency{"dist": "lognormal", "p50": "50ms", "p99": "150ms"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got["p50"] != "500ms" || got["p99"] != "1.5s" || got["dist"] != "lognormal" {
		t.Errorf("scaleLatency = %v", got)
	}
}

// The kill drill's alert checks: the killed cell's down alert within its
// bounds passes; late, unresolved, missing, or another cell alerting fails.
func TestCheckCellDownAlert(t *testing.T) {
	const kill, ready = 10 * time.Second, 60 * time.Second
	down := func(firing, resolved time.Duration) AlertSeen {
		return AlertSeen{Name: "CellkitCellDown", Labels: map[string]string{"alertname": "CellkitCellDown", "cell": "c2"}, Pending: kill + time.Second, Firing: firing, Resolved: resolved}
	}
	other := AlertSeen{Name: "CellkitCellDown", Labels: map[string]string{"alertname": "CellkitCellDown", "cell": "c3"}, Pending: 20 * time.Second, Firing: 50 * time.Second, Resolved: -1}
	for _, tc := range []struct {
		name string
		seen []AlertSeen
		pass bool
	}{
		{"in time, resolved", []AlertSeen{down(kill+32*time.Second, ready+3*time.Second)}, true},
		{"fired late", []AlertSeen{down(kill+CellDownBound+time.Second, ready+3*time.Second)}, false},
		{"never resolved", []AlertSeen{down(kill+32*time.Second, -1)}, false},
		{"resolved late", []AlertSeen{down(kill+32*time.Second, ready+ResolveBound+time.Second)}, false},
		{"never fired", []AlertSeen{down(-1, ready)}, false},
		{"another cell alerted", []AlertSeen{down(kill+32*time.Second, ready+3*time.Second), other}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &loadtest.Verdict{Name: "kill"}
			checkCellDownAlert(d, tc.seen, "c2", kill, ready)
			d.Finish()
			if d.Pass != tc.pass {
				t.Errorf("pass = %v, want %v: %+v", d.Pass, tc.pass, d.Assertions)
			}
			if len(d.Notes) != len(tc.seen) {
				t.Errorf("notes %v: want one per alert seen", d.Notes)
			}
		})
	}
}

// The other cells' tail check: a window drawn from the baseline's
// distribution passes (in every one of many seeds: the allowance is 3σ), a
// window with a few shared stalls passes, one where 5 % of the requests
// are slowed past the bound fails, as does a slower p99 throughout.
func TestCheckTail(t *testing.T) {
	const n = 1200
	// A lognormal-ish latency: median ~3 ms, long tail.
	draw := func(rng *rand.Rand) time.Duration {
		return time.Duration(math.Exp(rng.NormFloat64()*0.6) * float64(3*time.Millisecond))
	}
	samples := func(seed int64, from time.Duration, slowShare float64, scale float64) []loadtest.Sample {
		rng := rand.New(rand.NewSource(seed))
		out := make([]loadtest.Sample, n)
		for i := range out {
			lat := time.Duration(float64(draw(rng)) * scale)
			if rng.Float64() < slowShare {
				lat = 50 * time.Millisecond
			}
			out[i] = loadtest.Sample{At: from + time.Duration(i)*10*time.Millisecond, User: i % 3, Latency: lat}
		}
		return out
	}
	run := func(seed int64, slowShare, scale float64) *loadtest.Verdict {
		base := samples(seed, 0, 0, 1)
		base = append(base, samples(seed+1, time.Minute, slowShare, scale)...)
		baseline := loadtest.Window{To: time.Minute}.Stats(base)
		d := &loadtest.Verdict{Name: "t"}
		checkTail(d, "others", base, baseline, "baseline", loadtest.Window{From: time.Minute, To: 2 * time.Minute}, 1.2)
		d.Finish()
		return d
	}
	fails := 0
	for seed := int64(1); seed <= 200; seed += 2 {
		if !run(seed, 0, 1).Pass {
			fails++
		}
	}
	if fails > 1 {
		t.Errorf("same distribution: %d of 100 seeds failed, want at most 1", fails)
	}
	if d := run(7, 0.004, 1); !d.Pass {
		t.Errorf("a few stalls failed: %+v", d.Assertions)
	}
	if d := run(7, 0.05, 1); d.Pass {
		t.Errorf("5 %% slowed passed: %+v", d.Assertions)
	}
	if d := run(7, 0, 1.5); d.Pass {
		t.Errorf("1.5× slower passed: %+v", d.Assertions)
	}
	if got := tailAllowance(1200); got != 22 {
		t.Errorf("tailAllowance(1200) = %d, want 22", got)
	}
}

// The release drill on a cluster sets a flag: in place of the Cells'
// value of it, or added, the Cells' slice untouched; each run asks for a
// value of its own.
func TestSetFlag(t *testing.T) {
	set := []string{"a=1", "record-ttl=36h", "b=2"}
	out := setFlag(set, "record-ttl=40h")
	if !slices.Equal(out, []string{"a=1", "b=2", "record-ttl=40h"}) || set[1] != "record-ttl=36h" {
		t.Errorf("setFlag over a value: %v (the original %v)", out, set)
	}
	if in := setFlag(nil, "x=1"); !slices.Equal(in, []string{"x=1"}) {
		t.Errorf("setFlag of none: %v", in)
	}
	at := time.Date(2026, 12, 4, 16, 30, 0, 0, time.UTC)
	if a, b := runTTL(at), runTTL(at.Add(time.Minute)); a == b || !strings.HasPrefix(a, "record-ttl=") {
		t.Errorf("runTTL a minute apart: %s and %s", a, b)
	}
}

// The release drill starts only from Cells that run their spec: a spec
// left changed by a halted release (its pods rolled back) would have the
// drill wait for a rollout the operator never starts. Cells on different
// releases may start it.
func TestRunningTheirSpec(t *testing.T) {
	cell := func(name, image string, released metav1.ConditionStatus) v1alpha1.Cell {
		x := v1alpha1.Cell{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.CellSpec{Image: image}}
		if released != "" {
			x.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReleased, Status: released, Message: "its pods run another"}}
		}
		return x
	}
	ids, err := runningTheirSpec([]v1alpha1.Cell{cell("c1", "a", metav1.ConditionTrue), cell("c2", "b", metav1.ConditionTrue)})
	if err != nil || !slices.Equal(ids, []string{"c1", "c2"}) {
		t.Fatalf("two Cells that run their spec: %v, %v", ids, err)
	}
	for name, cells := range map[string][]v1alpha1.Cell{
		"one Cell":         {cell("c1", "a", metav1.ConditionTrue)},
		"not released":     {cell("c1", "a", metav1.ConditionTrue), cell("c2", "a", metav1.ConditionFalse)},
		"no condition yet": {cell("c1", "a", ""), cell("c2", "a", metav1.ConditionTrue)},
	} {
		if _, err := runningTheirSpec(cells); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// The quota drill's windows: a client accepted at its quota in every
// phase passes; a burst over the quota plus its burst and a tenth in any
// 10-second window fails, as does a phase that must use its quota and
// took too little of it.
func TestCheckQuotaWindows(t *testing.T) {
	const phase = 20 * time.Second
	var starts []time.Duration
	for i := range quotaPhases {
		starts = append(starts, time.Duration(i)*phase)
	}
	end := time.Duration(len(quotaPhases)) * phase
	// accepted at rate/s spread over the run, and extra in [at, at+1s).
	run := func(rate float64, extra int, at time.Duration) *loadtest.Verdict {
		var res [2]*loadtest.Result
		for i := range res {
			res[i] = &loadtest.Result{}
		}
		gap := time.Duration(float64(time.Second) / rate)
		for t, i := time.Duration(0), 0; t < end; t, i = t+gap, i+1 {
			res[i%2].Samples = append(res[i%2].Samples, loadtest.Sample{At: t, Status: http.StatusAccepted})
			res[i%2].Samples = append(res[i%2].Samples, loadtest.Sample{At: t, Status: http.StatusTooManyRequests})
		}
		for i := range extra {
			res[0].Samples = append(res[0].Samples, loadtest.Sample{At: at + time.Duration(i)*time.Millisecond, Status: http.StatusAccepted})
		}
		d := &loadtest.Verdict{Name: "t"}
		checkQuotaWindows(d, res, starts, phase)
		d.Finish()
		return d
	}
	if d := run(quotaRate, quotaBurst, 0); !d.Pass {
		t.Errorf("the quota and one burst failed: %+v", d.Assertions)
	}
	if d := run(quotaRate, quotaBurst+quotaRate*2, 45*time.Second); d.Pass {
		t.Errorf("twice the quota's second more in one window passed: %+v", d.Assertions)
	}
	if d := run(quotaRate*0.7, 0, 0); d.Pass {
		t.Errorf("70 %% of the quota passed: %+v", d.Assertions)
	}
}

// The error answers by kind: status and problem type, or the transport
// error, with the cells and the span of send times; answers as asked are
// left out.
func TestErrorKinds(t *testing.T) {
	samples := []loadtest.Sample{
		{At: 31 * time.Second, Status: 503, Problem: "outcome-unknown", Cell: "c2"},
		{At: 10 * time.Second, Status: 202, Cell: "c1"},
		{At: 44 * time.Second, Status: 503, Problem: "outcome-unknown", Cell: "c3"},
		{At: 12 * time.Second, Err: "timeout"},
		{At: 13 * time.Second, Status: 200, Read: true, Cell: "c1"},
		{At: 14 * time.Second, Status: 429},
	}
	want := "429 ×1 (; 14.0s–14.0s), 503 outcome-unknown ×2 (c2,c3; 31.0s–44.0s), timeout ×1 (; 12.0s–12.0s)"
	if got := errorKinds(samples); got != want {
		t.Errorf("errorKinds = %q, want %q", got, want)
	}
	if got := errorKinds(samples[1:2]); got != "" {
		t.Errorf("only 202s: %q, want none", got)
	}
}
