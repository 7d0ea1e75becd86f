package gate

import (
	"math"
	"slices"
	"strconv"

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
}

// The metrics a Sample is read from (docs/metrics.md, the cell's).
const (
	metricIntake      = "cellkit_cell_intake_requests_total"
	metricDeliveries  = "cellkit_cell_deliveries_total"
	metricPanics      = "cellkit_cell_panics_total"
	metricIntakeTime  = "cellkit_cell_intake_seconds"
	metricInquiryTime = "cellkit_cell_inquiry_seconds"
)

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
			s.IntakeLatency = s.IntakeLatency.add(histogramOf(m))
		}
	}
	for _, m := range metrics(mfs, metricInquiryTime) {
		s.DoneLatency = s.DoneLatency.add(histogramOf(m))
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

// add is h and o together (the same buckets, or h empty).
func (h Histogram) add(o Histogram) Histogram {
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
		Intake: Counts{Total: counterSince(s.Intake.Total, before.Intake.Total), Failed: counterSince(s.Intake.Failed, before.Intake.Failed)},
		Inquiries: Counts{Total: counterSince(s.Inquiries.Total, before.Inquiries.Total),
			Failed: counterSince(s.Inquiries.Failed, before.Inquiries.Failed)},
		Panics:        counterSince(s.Panics, before.Panics),
		IntakeLatency: s.IntakeLatency.since(before.IntakeLatency),
		DoneLatency:   s.DoneLatency.since(before.DoneLatency),
	}
}

// Sum is the windows of several processes together (a wave's, or the
// baseline's).
func Sum(samples ...Sample) Sample {
	var out Sample
	for _, s := range samples {
		out.Intake.Total += s.Intake.Total
		out.Intake.Failed += s.Intake.Failed
		out.Inquiries.Total += s.Inquiries.Total
		out.Inquiries.Failed += s.Inquiries.Failed
		out.Panics += s.Panics
		out.IntakeLatency = out.IntakeLatency.add(s.IntakeLatency)
		out.DoneLatency = out.DoneLatency.add(s.DoneLatency)
	}
	return out
}

// Judge runs every gate on a window of the wave against the baseline's:
// failures of the intake and of the inquiries (an inquiry whose
// processing panicked is failed and dead-lettered: counted there, once),
// then the intake's latency and the time to done.
func (cfg Config) Judge(wave, base Sample) []Verdict {
	return []Verdict{
		cfg.Failures("intake 5xx", wave.Intake, base.Intake),
		cfg.Failures("failed inquiries", wave.Inquiries, base.Inquiries),
		cfg.Latency("intake latency", wave.IntakeLatency, base.IntakeLatency),
		cfg.Latency("time to done", wave.DoneLatency, base.DoneLatency),
	}
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
