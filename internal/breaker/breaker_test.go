package breaker

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/testkit"
)

func newClock() *testkit.Clock {
	return testkit.NewClock(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC))
}

func call(t *testing.T, b *Breaker, fail bool, took time.Duration) {
	t.Helper()
	p, err := b.Acquire()
	if err != nil {
		t.Fatalf("Acquire() = %v in state %v, want a permit", err, b.State())
	}
	p.Done(fail, took)
}

type transitions struct {
	mu  sync.Mutex
	got []string
}

func (tr *transitions) record(from, to State) {
	tr.mu.Lock()
	tr.got = append(tr.got, from.String()+"->"+to.String())
	tr.mu.Unlock()
}

func TestTripsOnFailureRateAfterMinCalls(t *testing.T) {
	tests := []struct {
		name     string
		ok, fail int
		wantOpen bool
	}{
		{"19 calls all failed: below the minimum", 0, 19, false},
		{"20 calls, 4 failed (20%)", 16, 4, true},
		{"20 calls, 3 failed (15%)", 17, 3, false},
		{"100 calls, 19 failed", 81, 19, false},
		{"100 calls, 20 failed", 80, 20, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := New(Config{}, Options{Now: newClock().Now})
			for i := 0; i < tt.ok; i++ {
				call(t, b, false, time.Millisecond)
			}
			for i := 0; i < tt.fail && b.State() == Closed; i++ {
				call(t, b, true, time.Millisecond)
			}
			if got := b.State() == Open; got != tt.wantOpen {
				calls, failures, _ := b.Counts()
				t.Fatalf("open = %v after %d ok and %d failed (window %d/%d), want %v", got, tt.ok, tt.fail, failures, calls, tt.wantOpen)
			}
		})
	}
}

func TestWindowForgetsOldFailures(t *testing.T) {
	b := New(Config{}, Options{Now: newClock().Now})
	// One failure in six (under 20%), then 100 successes: the failures
	// slide out of the window.
	for i := 0; i < 100; i++ {
		call(t, b, i%6 == 5, 0)
	}
	for i := 0; i < 100; i++ {
		call(t, b, false, 0)
	}
	if calls, failures, _ := b.Counts(); calls != 100 || failures != 0 {
		t.Fatalf("window = %d calls, %d failures; want 100, 0", calls, failures)
	}
	for i := 0; i < 19; i++ {
		call(t, b, true, 0)
	}
	if b.State() != Closed {
		t.Fatal("19 failures in a window of 100 opened the breaker")
	}
	call(t, b, true, 0)
	if b.State() != Open {
		t.Fatal("20 failures in a window of 100 did not open the breaker")
	}
}

func TestTripsOnSlowCalls(t *testing.T) {
	b := New(Config{}, Options{Now: newClock().Now})
	for i := 0; i < 10; i++ {
		call(t, b, false, time.Second)
	}
	for i := 0; i < 9; i++ {
		call(t, b, false, 5*time.Second) // slow but successful
	}
	if b.State() != Closed {
		t.Fatal("opened before the minimum number of calls")
	}
	call(t, b, false, 6*time.Second) // 10 of 20 slow = 50%
	if b.State() != Open {
		_, _, s := b.Counts()
		t.Fatalf("state %v with %d of 20 calls slow, want open", b.State(), s)
	}
}

func TestOpenHalfOpenClosedCycle(t *testing.T) {
	c := newClock()
	var tr transitions
	b := New(Config{MinCalls: 5, Window: 10, OpenFor: 30 * time.Second, HalfOpenProbes: 3}, Options{Now: c.Now, OnChange: tr.record})
	for i := 0; i < 5; i++ {
		call(t, b, true, 0)
	}
	if _, err := b.Acquire(); !errors.Is(err, ErrOpen) {
		t.Fatalf("Acquire while open = %v, want ErrOpen", err)
	}
	c.Advance(29 * time.Second)
	if _, err := b.Acquire(); !errors.Is(err, ErrOpen) {
		t.Fatal("admitted a call before OpenFor passed")
	}
	c.Advance(time.Second)
	// Half-open: three probes, no fourth until they finish.
	var probes []Permit
	for i := 0; i < 3; i++ {
		p, err := b.Acquire()
		if err != nil {
			t.Fatalf("probe %d: %v", i, err)
		}
		probes = append(probes, p)
	}
	if _, err := b.Acquire(); !errors.Is(err, ErrOpen) {
		t.Fatal("a fourth call passed in half-open")
	}
	// One probe fails: open again for another 30 s.
	probes[0].Done(true, 0)
	if b.State() != Open {
		t.Fatalf("state after a failed probe = %v, want open", b.State())
	}
	probes[1].Done(false, 0) // stale: ignored
	c.Advance(30 * time.Second)
	for i := 0; i < 3; i++ {
		call(t, b, false, time.Millisecond)
	}
	if b.State() != Closed {
		t.Fatalf("state after 3 good probes = %v, want closed", b.State())
	}
	if calls, _, _ := b.Counts(); calls != 0 {
		t.Fatalf("closed with %d old outcomes in the window, want a fresh window", calls)
	}
	want := []string{"closed->open", "open->half_open", "half_open->open", "open->half_open", "half_open->closed"}
	if len(tr.got) != len(want) {
		t.Fatalf("transitions = %v, want %v", tr.got, want)
	}
	for i := range want {
		if tr.got[i] != want[i] {
			t.Fatalf("transitions = %v, want %v", tr.got, want)
		}
	}
}

func TestSlowProbeReopens(t *testing.T) {
	c := newClock()
	b := New(Config{MinCalls: 1, Window: 1, SlowCall: time.Second}, Options{Now: c.Now})
	call(t, b, true, 0)
	c.Advance(31 * time.Second)
	call(t, b, false, 2*time.Second)
	if b.State() != Open {
		t.Fatalf("state after a slow probe = %v, want open", b.State())
	}
}

func TestManualOverrides(t *testing.T) {
	c := newClock()
	var tr transitions
	b := New(Config{MinCalls: 2, Window: 2}, Options{Now: c.Now, OnChange: tr.record})
	b.ForceOpen()
	if _, err := b.Acquire(); !errors.Is(err, ErrOpen) || b.State() != ForcedOpen {
		t.Fatalf("forced open: Acquire = %v, state %v", err, b.State())
	}
	c.Advance(time.Hour)
	if _, err := b.Acquire(); !errors.Is(err, ErrOpen) {
		t.Fatal("forced open admitted a call after OpenFor")
	}
	b.ForceClose()
	for i := 0; i < 10; i++ {
		call(t, b, true, 0) // failures do not open a forced-closed breaker
	}
	if b.State() != ForcedClosed {
		t.Fatalf("state = %v, want forced_closed", b.State())
	}
	b.Reset()
	if b.State() != Closed {
		t.Fatalf("after Reset: %v, want closed", b.State())
	}
	if calls, _, _ := b.Counts(); calls != 0 {
		t.Fatalf("after Reset the window holds %d outcomes", calls)
	}
	call(t, b, true, 0)
	call(t, b, true, 0)
	if b.State() != Open {
		t.Fatal("automatic tripping does not work after Reset")
	}
	b.Reset()
	want := []string{"closed->forced_open", "forced_open->forced_closed", "forced_closed->closed", "closed->open", "open->closed"}
	if len(tr.got) != len(want) {
		t.Fatalf("transitions = %v, want %v", tr.got, want)
	}
	for i := range want {
		if tr.got[i] != want[i] {
			t.Fatalf("transitions = %v, want %v", tr.got, want)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	b := New(Config{}, Options{})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				if p, err := b.Acquire(); err == nil {
					p.Done(i%7 == 0, 0)
				}
				_ = b.State()
			}
		}()
	}
	wg.Wait()
}

func BenchmarkAcquireDone(b *testing.B) {
	br := New(Config{}, Options{})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		p, err := br.Acquire()
		if err == nil {
			p.Done(false, time.Millisecond)
		}
	}
}

func TestCancelFreesAProbe(t *testing.T) {
	c := newClock()
	b := New(Config{MinCalls: 1, Window: 1, HalfOpenProbes: 1}, Options{Now: c.Now})
	call(t, b, true, 0)
	c.Advance(31 * time.Second)
	p, err := b.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(); !errors.Is(err, ErrOpen) {
		t.Fatal("second probe admitted")
	}
	p.Cancel()
	call(t, b, false, 0)
	if b.State() != Closed {
		t.Fatalf("state = %v after a cancelled and a good probe, want closed", b.State())
	}
}

func TestProbeTrials(t *testing.T) {
	clock := newClock()
	var tr transitions
	b := New(Config{MinCalls: 4, Window: 4, FailureRate: 0.5, OpenFor: 5 * time.Second, HalfOpenProbes: 2},
		Options{Now: clock.Now, OnChange: tr.record, ProbeTrials: true})

	// Tripped by the checks: open at once, closed by a healthy check,
	// without waiting OpenFor and without a call let through.
	b.Probe(true) // closed: nothing to do
	b.Trip()
	if b.State() != Open {
		t.Fatalf("after Trip: %v, want open", b.State())
	}
	b.Trip() // already open: stays so
	if _, err := b.Acquire(); !errors.Is(err, ErrOpen) {
		t.Fatalf("Acquire while tripped = %v, want ErrOpen", err)
	}
	b.Probe(false)
	if b.State() != Open {
		t.Fatalf("after an unhealthy check: %v, want open", b.State())
	}
	b.Probe(true)
	if b.State() != Closed {
		t.Fatalf("after a healthy check of a tripped breaker: %v, want closed", b.State())
	}
	// On probation: the first failure among the next 2 calls opens it.
	call(t, b, false, time.Millisecond)
	call(t, b, true, time.Millisecond)
	if b.State() != Open {
		t.Fatalf("a failure on probation: %v, want open", b.State())
	}

	// Opened by calls: past OpenFor it never turns half-open for a call;
	// healthy checks close it only once OpenFor has passed.
	clock.Advance(6 * time.Second)
	if _, err := b.Acquire(); !errors.Is(err, ErrOpen) {
		t.Fatalf("Acquire past OpenFor = %v, want ErrOpen: the trials are the checks", err)
	}
	b.Reset()
	for range 4 {
		call(t, b, true, time.Millisecond)
	}
	if b.State() != Open {
		t.Fatalf("4 failed calls of 4: %v, want open", b.State())
	}
	b.Probe(true)
	b.Probe(true)
	if b.State() != Open {
		t.Fatalf("healthy checks before OpenFor closed a breaker that calls opened")
	}
	clock.Advance(5 * time.Second)
	b.Probe(true)
	b.Probe(false) // the count starts again
	b.Probe(true)
	if b.State() != Open {
		t.Fatalf("after an unhealthy check between healthy ones: %v, want open", b.State())
	}
	b.Probe(true)
	if b.State() != Closed {
		t.Fatalf("2 healthy checks past OpenFor: %v, want closed", b.State())
	}
	// Probation passed: a failure now is counted in the window as usual.
	call(t, b, false, time.Millisecond)
	call(t, b, false, time.Millisecond)
	call(t, b, true, time.Millisecond)
	if b.State() != Closed {
		t.Fatalf("one failure after probation: %v, want closed", b.State())
	}
	// Trip, healthy checks, probation, Reset, calls, healthy checks.
	want := []string{"closed->open", "open->closed", "closed->open", "open->closed", "closed->open", "open->closed"}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if !slices.Equal(tr.got, want) {
		t.Fatalf("transitions %v, want %v", tr.got, want)
	}
}

func TestProbeWithoutProbeTrialsDoesNothing(t *testing.T) {
	clock := newClock()
	b := New(Config{OpenFor: time.Second, HalfOpenProbes: 1}, Options{Now: clock.Now})
	b.Trip()
	b.Probe(true)
	if b.State() != Open {
		t.Fatalf("Probe closed a breaker without ProbeTrials")
	}
	clock.Advance(time.Second)
	call(t, b, false, time.Millisecond) // the half-open trial is a call
	if b.State() != Closed {
		t.Fatalf("after a good trial call: %v, want closed", b.State())
	}
}
