package console

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
)

// fill sets every float reachable in v (exported fields, pointers made,
// one element per slice, one entry per map) to f and counts them.
func fill(v reflect.Value, f float64, depth int) int {
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		v.SetFloat(f)
		return 1
	case reflect.Pointer:
		if depth > 8 {
			return 0
		}
		v.Set(reflect.New(v.Type().Elem()))
		return fill(v.Elem(), f, depth+1)
	case reflect.Struct:
		if v.Type() == timeType {
			return 0
		}
		n := 0
		for i := range v.NumField() {
			if sf := v.Type().Field(i); sf.IsExported() && sf.Tag.Get("json") != "-" {
				n += fill(v.Field(i), f, depth+1)
			}
		}
		return n
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return 0 // bytes (json.RawMessage): no number
		}
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		return fill(v.Index(0), f, depth+1)
	case reflect.Array:
		n := 0
		for i := range v.Len() {
			n += fill(v.Index(i), f, depth+1)
		}
		return n
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String {
			return 0
		}
		v.Set(reflect.MakeMap(v.Type()))
		e := reflect.New(v.Type().Elem()).Elem()
		n := fill(e, f, depth+1)
		v.SetMapIndex(reflect.ValueOf("k").Convert(v.Type().Key()), e)
		return n
	default:
		return 0
	}
}

// TestEveryNumberInTheViewIsDropped: a view with NaN, +Inf or -Inf in
// every number it holds — the cards, the statuses and readinesses read
// from the processes, the map's summary, the rollout's record, whatever
// field is added later — is made encodable, and each value is named.
func TestEveryNumberInTheViewIsDropped(t *testing.T) {
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		var v View
		n := fill(reflect.ValueOf(&v).Elem(), f, 0)
		if n < 20 {
			t.Fatalf("only %d numbers filled in a view", n)
		}
		if _, err := json.Marshal(&v); err == nil {
			t.Fatalf("a view with %v encoded: the test fills nothing", f)
		}
		bad := dropNonFinite(&v)
		if len(bad) != n {
			t.Errorf("%v: %d of %d numbers dropped: %q", f, len(bad), n, bad)
		}
		if _, err := json.Marshal(&v); err != nil {
			t.Errorf("%v: the view still cannot be encoded: %v", f, err)
		}
		for _, want := range []string{"cells[0].rates.requests = ", "cells[0].status.queue.oldest_age_seconds = ", "collect_seconds = ",
			"cells[0].status.queue.lanes.k.", "routers[0].readiness.map_age_seconds = ", "routers[0].hot[0].share = ",
			"rollout.bake_left_seconds = ", "map.cells[0].users_pct = "} {
			if !strings.Contains(strings.Join(bad, "\n"), want) {
				t.Errorf("%v: no %q among %q", f, want, bad[:min(len(bad), 10)])
			}
		}
	}
}

// TestRatesWithBadCounters: a counter that is not a finite number, now or
// at the read before, leaves its rates unknown (named bad), and the others
// known; a restart is not read from a start time that is not known.
func TestRatesWithBadCounters(t *testing.T) {
	before := counters{requests: 10, errors: 1, shed: 0, started: 100, bad: map[string]string{}}
	now := counters{requests: 20, errors: 1, shed: 5, started: 100, bad: map[string]string{rateShed: "x = NaN"}}
	now.at = before.at.Add(2e9)
	r, overflow := now.ratesSince(&before)
	if !r.Known || r.Requests != 5 || r.Errors != 0 || r.Shed != 0 || len(r.Bad) != 1 || r.Bad[0] != rateShed || len(overflow) != 0 {
		t.Errorf("a bad shed counter now: %+v %q", r, overflow)
	}
	// Bad before, fine now: still not known (the sum before was short).
	r, _ = counters{at: now.at.Add(2e9), requests: 30, errors: 1, shed: 9, started: 100, bad: map[string]string{}}.ratesSince(&now)
	if r.Shed != 0 || len(r.Bad) != 1 || r.Requests != 5 {
		t.Errorf("a bad shed counter before: %+v", r)
	}
	// A start time not known now does not read as a restart.
	r, _ = counters{at: now.at.Add(2e9), requests: 30, errors: 1, shed: 5, bad: map[string]string{}}.ratesSince(&now)
	if r.Requests != 5 {
		t.Errorf("a start time not known: %+v, want 5/s, not counted from zero", r)
	}
	if s := (Rates{Requests: math.MaxFloat64, Known: true}).add(Rates{Requests: math.MaxFloat64}); s.Requests != 0 || len(s.Bad) != 1 {
		t.Errorf("a sum that overflows: %+v", s)
	}
}
