package console

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/gate"
)

// counters are a process's running totals that the cards show as rates.
type counters struct {
	at                     time.Time
	started                float64 // process_start_time_seconds: a change is a restart (0: not known)
	requests, errors, shed float64
	// bad names, for each rate (rateRequests, rateErrors, rateShed),
	// the first series of its counters whose value was not a finite
	// number: dropped from the sum, and the rate not known.
	bad map[string]string
	// startedBad names a process_start_time_seconds that was not finite.
	startedBad string
}

// The rates of a card, as Rates.Bad names them.
const (
	rateRequests = "requests"
	rateErrors   = "errors"
	rateShed     = "shed"
)

// cellCounters reads a cell process's intake counters: requests but the
// routers' probes, those answered 5xx but 503, and those shed.
func cellCounters(mfs map[string]*dto.MetricFamily, at time.Time) counters {
	return countersOf(mfs, at, api.MetricCellIntakeRequests.Name, api.MetricCellIntakeShed.Name, func(m *dto.Metric) bool { return labelOf(m, api.LabelRoute) != "health" })
}

// routerCounters reads a router's: every answer, those 5xx but a cell's
// 503, and those its guards answered 503 at once.
func routerCounters(mfs map[string]*dto.MetricFamily, at time.Time) counters {
	return countersOf(mfs, at, api.MetricRouterRequests.Name, api.MetricRouterShed.Name, func(*dto.Metric) bool { return true })
}

// countersOf sums the counter family requests (the series counted, 5xx
// but 503 as errors) and the family shed. A value that is not a finite
// number (a process may expose NaN or ±Inf) is left out of its sum and
// named in bad: the rates it would feed are not known.
func countersOf(mfs map[string]*dto.MetricFamily, at time.Time, requests, shed string, counted func(*dto.Metric) bool) counters {
	c := counters{at: at, bad: map[string]string{}}
	var err error
	if c.started, err = gate.StartedOf(mfs); err != nil {
		c.startedBad = err.Error() // a start time not known: 0
	}
	note := func(rate, name string, m *dto.Metric, v float64) {
		if _, ok := c.bad[rate]; !ok {
			c.bad[rate] = series(name, m, v)
		}
	}
	for _, m := range family(mfs, requests) {
		if !counted(m) {
			continue
		}
		v := m.GetCounter().GetValue()
		code, _ := strconv.Atoi(labelOf(m, api.LabelCode))
		isError := code >= 500 && code != 503
		if !finite(v) {
			note(rateRequests, requests, m, v)
			if isError {
				note(rateErrors, requests, m, v)
			}
			continue
		}
		c.requests += v
		if isError {
			c.errors += v
		}
	}
	for _, m := range family(mfs, shed) {
		if v := m.GetCounter().GetValue(); finite(v) {
			c.shed += v
		} else {
			note(rateShed, shed, m, v)
		}
	}
	return c
}

// badValues names the values of c that were dropped, for the card.
func (c counters) badValues() []string {
	var out []string
	if c.startedBad != "" {
		out = append(out, c.startedBad)
	}
	for _, rate := range []string{rateRequests, rateErrors, rateShed} {
		if s, ok := c.bad[rate]; ok && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// ratesSince are the rates from before to now; unknown without a before,
// and counted from zero when the process restarted in between. A rate
// whose counters held a value that is not finite, now or before, or that
// does not come out finite, is not known: 0, and named in Rates.Bad (and
// in overflow, for the card, when it did not come out finite).
func (now counters) ratesSince(before *counters) (r Rates, overflow []string) {
	if before == nil {
		return Rates{}, nil
	}
	dt := now.at.Sub(before.at).Seconds()
	if dt <= 0 {
		return Rates{}, nil
	}
	// A start time not known (0) on either side says nothing.
	restarted := now.started != 0 && before.started != 0 && now.started != before.started
	r = Rates{Known: true}
	since := func(rate string, n, b float64) float64 {
		_, badNow := now.bad[rate]
		_, badBefore := before.bad[rate]
		v := (n - b) / dt
		if restarted || n < b {
			v = n / dt
		}
		if !badNow && !badBefore && !finite(v) {
			overflow = append(overflow, fmt.Sprintf("%s/s from %g to %g in %.3f s = %v", rate, b, n, dt, v))
		}
		if badNow || badBefore || !finite(v) {
			r.Bad = append(r.Bad, rate)
			return 0
		}
		return v
	}
	r.Requests = since(rateRequests, now.requests, before.requests)
	r.Errors = since(rateErrors, now.errors, before.errors)
	r.Shed = since(rateShed, now.shed, before.shed)
	return r, overflow
}

// add sums two rates (a cell's instances): a rate not known in either,
// or whose sum is not finite, is not known in the sum.
func (r Rates) add(o Rates) Rates {
	s := Rates{Known: r.Known || o.Known}
	for _, rate := range r.Bad {
		s.markBad(rate)
	}
	for _, rate := range o.Bad {
		s.markBad(rate)
	}
	sum := func(rate string, a, b float64) float64 {
		if v := a + b; finite(v) && !slices.Contains(s.Bad, rate) {
			return v
		}
		s.markBad(rate)
		return 0
	}
	s.Requests = sum(rateRequests, r.Requests, o.Requests)
	s.Errors = sum(rateErrors, r.Errors, o.Errors)
	s.Shed = sum(rateShed, r.Shed, o.Shed)
	return s
}

func (r *Rates) markBad(rate string) {
	if !slices.Contains(r.Bad, rate) {
		r.Bad = append(r.Bad, rate)
	}
}

// finite says whether v is a number JSON can carry (not NaN, not ±Inf).
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// maxSeriesText bounds how a bad series is named on a card (its labels
// are the scraped process's).
const maxSeriesText = 200

// series names one sample: name{label="value",...} = v.
func series(name string, m *dto.Metric, v float64) string {
	var b strings.Builder
	b.WriteString(name)
	if ls := m.GetLabel(); len(ls) > 0 {
		b.WriteByte('{')
		for i, l := range ls {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(l.GetName() + "=" + strconv.Quote(l.GetValue()))
		}
		b.WriteByte('}')
	}
	s := b.String()
	if len(s) > maxSeriesText {
		s = s[:maxSeriesText] + "…"
	}
	return fmt.Sprintf("%s = %v", s, v)
}

func family(mfs map[string]*dto.MetricFamily, name string) []*dto.Metric {
	if mf := mfs[name]; mf != nil {
		return mf.GetMetric()
	}
	return nil
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
