package gate

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// Sample is what the gates read of one cell process's metrics at one
// moment: running totals, made into a window's counts by Since.
type Sample struct {
	// Intake are the POSTs, failed those answered 5xx but 503 (a 503 is a
	// refusal: shed, storage full, intake closed; it says "retry", not
	// "broken").
	Intake Counts
	// Inquiries are the inquiries settled (done, failed, dead), failed
	// those that failed or were dead-lettered.
	Inquiries Counts
	// Panics are the panics recovered (each fails its inquiry, which
	// Inquiries counts; reported, not judged again).
	Panics int64
	// IntakeLatency is the POSTs' latency, DoneLatency the time from
	// intake to a final status.
	IntakeLatency, DoneLatency Histogram
	// Edge is what the routers saw of the same cells: their requests,
	// failed those answered 5xx but a cell's own 503, or 503 because the
	// cell's breaker is open (a cell that hangs or resets connections
	// counts none of its own failures); EdgeLatency their time to an
	// answer. Routers is how many routers' figures are in it (none: the
	// edge gates are not run).
	Edge        Counts
	EdgeLatency Histogram
	Routers     int
	// Health is the window's crash restarts and readiness losses: per
	// process for one process's window, the worst process's in a Sum.
	Health Health
}

// Health are a process's events over a window, counted by whoever
// scrapes it: Restarts, its start time changed between two scrapes (it
// ended and was started again: a crash, a supervisor's restart);
// Flaps, it answered ready at one scrape and not ready, or nothing, at
// the next.
type Health struct {
	Restarts, Flaps int64
}

// worst is the larger of each count.
func (h Health) worst(o Health) Health {
	return Health{Restarts: max(h.Restarts, o.Restarts), Flaps: max(h.Flaps, o.Flaps)}
}

// The metrics a Sample is read from (docs/metrics.md, the cell's).
const (
	metricIntake      = "cellkit_cell_intake_requests_total"
	metricDeliveries  = "cellkit_cell_deliveries_total"
	metricPanics      = "cellkit_cell_panics_total"
	metricIntakeTime  = "cellkit_cell_intake_seconds"
	metricInquiryTime = "cellkit_cell_inquiry_seconds"
	metricStarted     = "process_start_time_seconds"
	metricReady       = "cellkit_cell_ready"
	// The router's, by cell.
	metricEdge     = "cellkit_router_requests_total"
	metricEdgeShed = "cellkit_router_shed_total"
	metricEdgeTime = "cellkit_router_request_duration_seconds"
)

// StartedOf is a process's start time (process_start_time_seconds, Unix
// seconds; 0 when it does not say): a change between two scrapes is a
// restart.
func StartedOf(mfs map[string]*dto.MetricFamily) float64 {
	for _, m := range metrics(mfs, metricStarted) {
		return m.GetGauge().GetValue()
	}
	return 0
}

// ReadyOf says whether a cell process's scrape says it is ready
// (cellkit_cell_ready, its /readyz at the moment of the scrape).
func ReadyOf(mfs map[string]*dto.MetricFamily) bool {
	for _, m := range metrics(mfs, metricReady) {
		if m.GetGauge().GetValue() != 1 {
			return false
		}
	}
	return len(metrics(mfs, metricReady)) > 0
}

// Edge is one router's figures for one cell (running totals).
type Edge struct {
	Requests Counts
	Latency  Histogram
}

// EdgeOf reads a router's figures by cell from its metric families:
// requests routed to the cell, failed those answered 5xx other than 503,
// plus the 503s of its open breaker; the time to an answer.
func EdgeOf(mfs map[string]*dto.MetricFamily) map[string]Edge {
	out := map[string]Edge{}
	for _, m := range metrics(mfs, metricEdge) {
		cell := label(m, "cell")
		e, v := out[cell], int64(m.GetCounter().GetValue())
		e.Requests.Total += v
		if code, _ := strconv.Atoi(label(m, "code")); code >= 500 && code != 503 {
			e.Requests.Failed += v
		}
		out[cell] = e
	}
	for _, m := range metrics(mfs, metricEdgeShed) {
		if label(m, "reason") == "breaker" {
			cell := label(m, "cell")
			e := out[cell]
			e.Requests.Failed += int64(m.GetCounter().GetValue())
			out[cell] = e
		}
	}
	for _, m := range metrics(mfs, metricEdgeTime) {
		cell := label(m, "cell")
		e := out[cell]
		e.Latency = e.Latency.Add(histogramOf(m))
		out[cell] = e
	}
	delete(out, "none") // answered before routing: no cell's doing
	return out
}

// RouterSampleOf is a router's own figures (every cell's together) as a
// Sample, for a wave of routers judged by JudgeRouters.
func RouterSampleOf(mfs map[string]*dto.MetricFamily) Sample {
	s := Sample{Routers: 1}
	for _, e := range EdgeOf(mfs) {
		s.Edge.Total += e.Requests.Total
		s.Edge.Failed += e.Requests.Failed
		s.EdgeLatency = s.EdgeLatency.Add(e.Latency)
	}
	return s
}

// Since is the window's figures: e's totals less before's (a router that
// restarted counts from zero).
func (e Edge) Since(before Edge) Edge {
	return Edge{Requests: e.Requests.since(before.Requests), Latency: e.Latency.since(before.Latency)}
}

func (c Counts) since(before Counts) Counts {
	return Counts{Total: counterSince(c.Total, before.Total), Failed: counterSince(c.Failed, before.Failed)}
}

// SampleOf reads a Sample from a cell process's metric families.
func SampleOf(mfs map[string]*dto.MetricFamily) Sample {
	var s Sample
	for _, m := range metrics(mfs, metricIntake) {
		if label(m, "route") != "post" {
			continue
		}
		v := int64(m.GetCounter().GetValue())
		s.Intake.Total += v
		if code, _ := strconv.Atoi(label(m, "code")); code >= 500 && code != 503 {
			s.Intake.Failed += v
		}
	}
	for _, m := range metrics(mfs, metricDeliveries) {
		v := int64(m.GetCounter().GetValue())
		switch label(m, "outcome") {
		case "done":
			s.Inquiries.Total += v
		case "failed", "dead":
			s.Inquiries.Total += v
			s.Inquiries.Failed += v
		}
	}
	for _, m := range metrics(mfs, metricPanics) {
		s.Panics += int64(m.GetCounter().GetValue())
	}
	for _, m := range metrics(mfs, metricIntakeTime) {
		if label(m, "route") == "post" {
			s.IntakeLatency = s.IntakeLatency.Add(histogramOf(m))
		}
	}
	for _, m := range metrics(mfs, metricInquiryTime) {
		s.DoneLatency = s.DoneLatency.Add(histogramOf(m))
	}
	return s
}

func metrics(mfs map[string]*dto.MetricFamily, name string) []*dto.Metric {
	if mf := mfs[name]; mf != nil {
		return mf.GetMetric()
	}
	return nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func histogramOf(m *dto.Metric) Histogram {
	h := m.GetHistogram()
	var out Histogram
	for _, b := range h.GetBucket() {
		out.Bounds = append(out.Bounds, b.GetUpperBound())
		out.Cumulative = append(out.Cumulative, int64(b.GetCumulativeCount()))
	}
	if len(out.Bounds) == 0 || !math.IsInf(out.Bounds[len(out.Bounds)-1], 1) {
		out.Bounds = append(out.Bounds, math.Inf(1))
		out.Cumulative = append(out.Cumulative, int64(h.GetSampleCount()))
	}
	return out
}

// Add is h and o together (the same buckets, or h empty).
func (h Histogram) Add(o Histogram) Histogram {
	if len(h.Bounds) == 0 {
		return Histogram{Bounds: slices.Clone(o.Bounds), Cumulative: slices.Clone(o.Cumulative)}
	}
	if !slices.Equal(h.Bounds, o.Bounds) {
		return h // a histogram of other buckets is not summed; Latency refuses a mismatch anyway
	}
	out := Histogram{Bounds: h.Bounds, Cumulative: slices.Clone(h.Cumulative)}
	for i := range out.Cumulative {
		out.Cumulative[i] += o.Cumulative[i]
	}
	return out
}

// since is h's counts after before's; a count that went down is a
// process that restarted, whose counts start again from zero.
func (h Histogram) since(before Histogram) Histogram {
	if !slices.Equal(h.Bounds, before.Bounds) || h.Count() < before.Count() {
		return h
	}
	out := Histogram{Bounds: h.Bounds, Cumulative: slices.Clone(h.Cumulative)}
	for i := range out.Cumulative {
		out.Cumulative[i] -= before.Cumulative[i]
	}
	return out
}

func counterSince(now, before int64) int64 {
	if now < before {
		return now // restarted: its counter began again
	}
	return now - before
}

// Since is the window's counts: s's totals less before's, for the same
// process (a counter that went down restarted, and counts from zero).
func (s Sample) Since(before Sample) Sample {
	return Sample{
		Intake:        s.Intake.since(before.Intake),
		Inquiries:     s.Inquiries.since(before.Inquiries),
		Panics:        counterSince(s.Panics, before.Panics),
		IntakeLatency: s.IntakeLatency.since(before.IntakeLatency),
		DoneLatency:   s.DoneLatency.since(before.DoneLatency),
		Edge:          s.Edge.since(before.Edge),
		EdgeLatency:   s.EdgeLatency.since(before.EdgeLatency),
		Routers:       s.Routers,
		Health:        s.Health,
	}
}

// Sum is the windows of several processes together (a wave's, or the
// baseline's): counts added, Health the worst process's, Routers the
// most any of them was seen by.
func Sum(samples ...Sample) Sample {
	var out Sample
	for _, s := range samples {
		out.Edge.Total += s.Edge.Total
		out.Edge.Failed += s.Edge.Failed
		out.EdgeLatency = out.EdgeLatency.Add(s.EdgeLatency)
		out.Routers = max(out.Routers, s.Routers)
		out.Health = out.Health.worst(s.Health)
		out.Intake.Total += s.Intake.Total
		out.Intake.Failed += s.Intake.Failed
		out.Inquiries.Total += s.Inquiries.Total
		out.Inquiries.Failed += s.Inquiries.Failed
		out.Panics += s.Panics
		out.IntakeLatency = out.IntakeLatency.Add(s.IntakeLatency)
		out.DoneLatency = out.DoneLatency.Add(s.DoneLatency)
	}
	return out
}

// Judge runs every gate on a window of the wave against the baseline's:
// failures of the intake and of the inquiries (an inquiry whose
// processing panicked is failed and dead-lettered: counted there, once),
// the intake's latency and the time to done; with routers, the routers'
// failures and latency for the same cells; crash restarts and readiness
// losses.
func (cfg Config) Judge(wave, base Sample) []Verdict {
	vs := []Verdict{
		cfg.Failures("intake 5xx", wave.Intake, base.Intake),
		cfg.Failures("failed inquiries", wave.Inquiries, base.Inquiries),
		cfg.Latency("intake latency", wave.IntakeLatency, base.IntakeLatency),
		cfg.Latency("time to done", wave.DoneLatency, base.DoneLatency),
	}
	if wave.Routers > 0 {
		vs = append(vs, cfg.Failures("edge 5xx", wave.Edge, base.Edge),
			cfg.Latency("edge latency", wave.EdgeLatency, base.EdgeLatency))
	}
	return append(vs, Events("crash restarts", wave.Health.Restarts, base.Health.Restarts),
		Events("readiness lost", wave.Health.Flaps, base.Health.Flaps))
}

// JudgeRouters runs the gates of a wave of routers against the routers
// still on the old release (or the same routers before they were
// replaced): their failures and latency over every cell, crash restarts
// and readiness losses.
func (cfg Config) JudgeRouters(wave, base Sample) []Verdict {
	return []Verdict{
		cfg.Failures("router 5xx", wave.Edge, base.Edge),
		cfg.Latency("router latency", wave.EdgeLatency, base.EdgeLatency),
		Events("crash restarts", wave.Health.Restarts, base.Health.Restarts),
		Events("readiness lost", wave.Health.Flaps, base.Health.Flaps),
	}
}

// Alerts fails a wave for which a Prometheus alert fires that fires for
// no process of the baseline (by alert name): an alert of every cell is
// the world's doing (an agency down), one of the wave's alone is the
// release's. wave and base are the alerts' names firing for each;
// unread says the alerts could not be read (Wait, with why: it halts
// once the bake's wait is over, fail closed).
func Alerts(wave, base []string, unread string) Verdict {
	if unread != "" {
		return Verdict{Decision: Wait, P: 1, Text: "alerts: " + unread}
	}
	var own []string
	for _, a := range wave {
		if !slices.Contains(base, a) && !slices.Contains(own, a) {
			own = append(own, a)
		}
	}
	text := fmt.Sprintf("alerts: firing for the wave %s, for the baseline %s", names(wave), names(base))
	if len(own) > 0 {
		return Verdict{Decision: Fail, P: 0, Text: text}
	}
	return Verdict{Decision: Pass, P: 1, Text: text}
}

func names(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(slices.Compact(slices.Sorted(slices.Values(s))), ",")
}

// Events compares events too rare for a test of rates (a crash, a
// readiness lost), each process's over the same window: Fail when the
// wave's worst process has more than the baseline's worst (none, with no
// baseline). The baseline absorbs what is not the release's doing — a
// host restarting everything, an agency outage that makes every cell
// unready — and one crash of a new release is one too many. Never Wait:
// no event is a pass however little traffic there was.
func Events(what string, wave, base int64) Verdict {
	text := fmt.Sprintf("%s: wave's worst process %d, baseline's %d", what, wave, base)
	if wave > base {
		return Verdict{Decision: Fail, P: 0, Text: text}
	}
	return Verdict{Decision: Pass, P: 1, Text: text}
}

// Overall is the verdicts' decision: Fail if one fails, else Wait if one
// waits, else Pass.
func Overall(vs []Verdict) Decision {
	d := Pass
	for _, v := range vs {
		d = max(d, v.Decision)
	}
	return d
}
