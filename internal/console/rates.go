package console

import (
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/cellkit/cellkit/internal/gate"
)

// counters are a process's running totals that the cards show as rates.
type counters struct {
	at                     time.Time
	started                float64 // process_start_time_seconds: a change is a restart
	requests, errors, shed float64
}

// The metrics the rates are read from (docs/metrics.md).
const (
	metricCellIntake = "cellkit_cell_intake_requests_total"
	metricCellShed   = "cellkit_cell_intake_shed_total"
	metricRouterReqs = "cellkit_router_requests_total"
	metricRouterShed = "cellkit_router_shed_total"
)

// cellCounters reads a cell process's intake counters: requests but the
// routers' probes, those answered 5xx but 503, and those shed.
func cellCounters(mfs map[string]*dto.MetricFamily, at time.Time) counters {
	return countersOf(mfs, at, metricCellIntake, metricCellShed, func(m *dto.Metric) bool { return labelOf(m, "route") != "health" })
}

// routerCounters reads a router's: every answer, those 5xx but a cell's
// 503, and those its guards answered 503 at once.
func routerCounters(mfs map[string]*dto.MetricFamily, at time.Time) counters {
	return countersOf(mfs, at, metricRouterReqs, metricRouterShed, func(*dto.Metric) bool { return true })
}

// countersOf sums the counter family requests (the series counted, 5xx
// but 503 as errors) and the family shed.
func countersOf(mfs map[string]*dto.MetricFamily, at time.Time, requests, shed string, counted func(*dto.Metric) bool) counters {
	c := counters{at: at}
	c.started, _ = gate.StartedOf(mfs) // a start time that is no number: unknown (0)
	for _, m := range family(mfs, requests) {
		if !counted(m) {
			continue
		}
		v := m.GetCounter().GetValue()
		c.requests += v
		if code, _ := strconv.Atoi(labelOf(m, "code")); code >= 500 && code != 503 {
			c.errors += v
		}
	}
	for _, m := range family(mfs, shed) {
		c.shed += m.GetCounter().GetValue()
	}
	return c
}

// ratesSince are the rates from before to now; unknown without a before,
// and counted from zero when the process restarted in between.
func (now counters) ratesSince(before *counters) Rates {
	if before == nil {
		return Rates{}
	}
	dt := now.at.Sub(before.at).Seconds()
	if dt <= 0 {
		return Rates{}
	}
	since := func(n, b float64) float64 {
		if now.started != before.started || n < b {
			return n / dt
		}
		return (n - b) / dt
	}
	return Rates{Known: true, Requests: since(now.requests, before.requests),
		Errors: since(now.errors, before.errors), Shed: since(now.shed, before.shed)}
}

// add sums two rates (a cell's instances).
func (r Rates) add(o Rates) Rates {
	return Rates{Known: r.Known || o.Known, Requests: r.Requests + o.Requests, Errors: r.Errors + o.Errors, Shed: r.Shed + o.Shed}
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
