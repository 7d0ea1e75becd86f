package drill

import (
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/loadtest"
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

// The release drill on a cluster toggles a setting: taken out where the
// Cells hold it, added where they do not, the Cells' slice untouched.
func TestToggle(t *testing.T) {
	set := []string{"a=1", "record-ttl=36h", "b=2"}
	out := toggle(set, "record-ttl=36h")
	if len(out) != 2 || out[0] != "a=1" || out[1] != "b=2" || set[1] != "record-ttl=36h" {
		t.Errorf("toggle out: %v (the original %v)", out, set)
	}
	if in := toggle(out, "record-ttl=36h"); len(in) != 3 || in[2] != "record-ttl=36h" || len(out) != 2 {
		t.Errorf("toggle in: %v", in)
	}
	if in := toggle(nil, "x=1"); len(in) != 1 || in[0] != "x=1" {
		t.Errorf("toggle of none: %v", in)
	}
}
