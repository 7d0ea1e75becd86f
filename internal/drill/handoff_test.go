package drill

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/loadtest"
)

// countingTripper counts the requests it is given and answers none.
type countingTripper struct{ n int }

func (c *countingTripper) RoundTrip(*http.Request) (*http.Response, error) {
	c.n++
	return nil, http.ErrNotSupported
}

// TestMixedSendsItsShareOnNewConnections: the handoff drill's client
// sends the share asked of its requests on new connections, spread over
// the run, the rest on kept-alive ones.
func TestMixedSendsItsShareOnNewConnections(t *testing.T) {
	for _, share := range []float64{0.5, 0.1, 1} {
		kept, fresh := &countingTripper{}, &countingTripper{}
		m := &mixed{kept: kept, fresh: fresh, share: share}
		req, _ := http.NewRequest("GET", "http://x/", nil)
		for i := 0; i < 100; i++ {
			_, _ = m.RoundTrip(req)
			if want := int(float64(i+1) * share); fresh.n != want {
				t.Fatalf("share %g: after %d requests %d on new connections, want %d", share, i+1, fresh.n, want)
			}
		}
		if kept.n+fresh.n != 100 {
			t.Fatalf("share %g: %d + %d requests of 100", share, kept.n, fresh.n)
		}
	}
}

// requests are samples at 400/s over [from, to), each answered as asked
// in lat(i) (i counts from 0 in the span).
func requests(from, to time.Duration, lat func(i int) time.Duration) []loadtest.Sample {
	var out []loadtest.Sample
	for i, at := 0, from; at < to; i, at = i+1, at+2500*time.Microsecond {
		out = append(out, loadtest.Sample{At: at, Status: http.StatusOK, Read: true, Latency: lat(i)})
	}
	return out
}

func flat(d time.Duration) func(int) time.Duration { return func(int) time.Duration { return d } }

// tail is d for one request in every `every`, else 10 ms.
func tail(d time.Duration, every int) func(int) time.Duration {
	return func(i int) time.Duration {
		if i%every == 0 {
			return d
		}
		return 10 * time.Millisecond
	}
}

// TestAHandoffsP99IsJudgedAgainstItsControl: a handoff's p99 line holds
// it to its control, the A/A window after it, not to the baseline: a
// machine that got busier after the baseline (every window slower)
// passes, as does a handoff after which the load fell (its control before
// as slow as it); a handoff whose own tail is worse than both its
// controls' fails, and a control with a refused request fails its hard
// line.
func TestAHandoffsP99IsJudgedAgainstItsControl(t *testing.T) {
	s := time.Second
	var samples []loadtest.Sample
	add := func(from, to time.Duration, lat func(int) time.Duration) loadtest.Window {
		samples = append(samples, requests(from, to, lat)...)
		return loadtest.Window{From: from, To: to}
	}
	base := add(0, 10*s, flat(10*time.Millisecond)).Stats(samples)
	// The machine got busier: the restart and its controls all at 3× the
	// baseline's p99. The old line (≤ 2× the baseline) failed this.
	busyBefore := add(10*s, 14*s, flat(26*time.Millisecond))
	add(14*s, 18*s, flat(30*time.Millisecond))
	busyAfter := add(18*s, 22*s, flat(28*time.Millisecond))
	// A handoff whose tail is its own: 5 % at 80 ms, its controls 25–28 ms.
	add(22*s, 26*s, tail(80*time.Millisecond, 20))
	calm := add(26*s, 30*s, flat(25*time.Millisecond))
	// The load fell right after a handoff: its control before is as slow
	// as the handoff, the one after calm.
	slow := add(30*s, 34*s, flat(60*time.Millisecond))
	add(34*s, 38*s, flat(60*time.Millisecond))
	fell := add(38*s, 42*s, flat(8*time.Millisecond))
	// A control with a refused connection.
	add(42*s, 46*s, flat(10*time.Millisecond))
	refusedCtl := add(46*s, 50*s, flat(10*time.Millisecond))
	samples[len(samples)-1].Status, samples[len(samples)-1].Err = 0, "dial tcp: connect: connection refused"
	aa := func(w loadtest.Window) aaWindow { return aaWindow{w: w, busy: 0.5} }
	outs := []handoffOutcome{
		{step: handoffStep{name: "restart 1"}, from: 14 * s, to: 15 * s, before: aa(busyBefore), after: aa(busyAfter), drained: drainReport{found: true}},
		{step: handoffStep{name: "restart 2"}, from: 22 * s, to: 23 * s, before: aa(busyAfter), after: aa(calm), drained: drainReport{found: true}},
		{step: handoffStep{name: "restart 3"}, from: 34 * s, to: 35 * s, before: aa(slow), after: aa(fell), drained: drainReport{found: true}},
		{step: handoffStep{name: "restart 4"}, from: 42 * s, to: 43 * s, before: aa(fell), after: aa(refusedCtl), drained: drainReport{found: true}},
	}
	v := &loadtest.Verdict{}
	judgeHandoffs(v, samples, base, 0.7, outs)
	want := map[string]bool{
		"restart 1: p99 over the handoff":                           true,
		"restart 2: p99 over the handoff":                           false,
		"restart 3: p99 over the handoff":                           true,
		"restart 4: p99 over the handoff":                           true,
		"restart 1: its control before, requests refused or failed": true,
		"restart 4: its control after, requests refused or failed":  false,
		"restart 2: connections refused":                            true,
		"restart 2: the old router drained, nothing cut":            true,
	}
	for _, a := range v.Assertions {
		if pass, ok := want[a.Name]; ok {
			if a.Pass != pass {
				t.Errorf("%s: pass %v (%s), want %v", a.Name, a.Pass, a.Measured, pass)
			}
			delete(want, a.Name)
		}
	}
	for name := range want {
		t.Errorf("no line %q", name)
	}
	// The same failing line on a saturated machine says so.
	o := outs[1]
	o.after.busy = 0.99
	if text := o.p99Text(samples, o.window().Stats(samples).P99, base.P99, 0.7); !strings.Contains(text, "the machine was saturated") {
		t.Errorf("a failing line on a saturated machine: %s", text)
	}
	if text := outs[1].p99Text(samples, outs[1].window().Stats(samples).P99, base.P99, 0.7); strings.Contains(text, "saturated") {
		t.Errorf("a failing line on a machine half busy: %s", text)
	}
}
