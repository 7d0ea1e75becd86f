package gate

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	dto "github.com/prometheus/client_model/go"

	"github.com/cellkit/cellkit/internal/api"
)

// Sample is what the gates read of one process's metrics at one moment:
// running totals, made into a window's counts by Since.
type Sample struct {
	// Intake are the POSTs, failed those answered 5xx but 503 (a 503 is a
	// refusal: shed, storage full, intake closed; it says "retry", not
	// "broken"); Refusals the same POSTs, failed those answered 503.
	Intake, Refusals Counts
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
	// failed those answered 5xx but 503, or 503 because the cell's breaker
	// is open (a cell that hangs or resets connections counts none of its
	// own failures); EdgeRefusals the same requests, failed the other
	// 503s (the cell's own refusals, a full bulkhead, a cell the router
	// cannot reach); EdgeLatency their time to an answer. Routers is how
	// many routers' figures are expected in it (none: the edge gates are
	// not run).
	Edge, EdgeRefusals Counts
	EdgeLatency        Histogram
	Routers            int
	// Unread are the sources of the figures (the processes; for a
	// wave of cells, the cells' processes) that could not be read at the
	// window's end, each with why; EdgeUnread the same for the routers.
	// Their gates wait: figures that are not there are no pass.
	Unread, EdgeUnread []string
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

// OpenBreakers are those of cells whose circuit breaker a router's
// scrape says is open or half-open (cellkit_router_breaker_state 1 or 2):
// the router does not send them all their users. A breaker forced by an
// operator is not the release's doing and is left out.
func OpenBreakers(mfs map[string]*dto.MetricFamily, cells []string) []string {
	var out []string
	for _, m := range metrics(mfs, api.MetricRouterBreakerState.Name) {
		if v := m.GetGauge().GetValue(); (v == 1 || v == 2) && slices.Contains(cells, label(m, api.LabelCell)) {
			out = append(out, label(m, api.LabelCell))
		}
	}
	return out
}

// StartedOf is a process's start time (process_start_time_seconds, Unix
// seconds; 0 when it does not say): a change between two scrapes is a
// restart. A value that is not a finite positive number is an error.
func StartedOf(mfs map[string]*dto.MetricFamily) (float64, error) {
	ms := metrics(mfs, api.MetricProcessStarted.Name)
	if len(ms) == 0 {
		return 0, nil
	}
	v := ms[0].GetGauge().GetValue()
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("%s is %v, not a time", api.MetricProcessStarted.Name, v)
	}
	return v, nil
}

// ReadyOf says whether a cell process's scrape says it is ready
// (cellkit_cell_ready, its /readyz at the moment of the scrape).
func ReadyOf(mfs map[string]*dto.MetricFamily) bool {
	for _, m := range metrics(mfs, api.MetricCellReady.Name) {
		if m.GetGauge().GetValue() != 1 {
			return false
		}
	}
	return len(metrics(mfs, api.MetricCellReady.Name)) > 0
}

// Edge is one router's figures for one cell (running totals).
type Edge struct {
	Requests, Refusals Counts
	Latency            Histogram
}

// EdgeOf reads a router's figures by cell from its metric families:
// requests routed to the cell, failed those answered 5xx other than 503,
// plus the 503s of its open breaker; refused the other 503s; the time to
// an answer. A value that is not a count (NaN, infinite, negative) or
// histogram buckets out of order is an error, not a number.
func EdgeOf(mfs map[string]*dto.MetricFamily) (map[string]Edge, error) {
	out, err := edgeByCell(mfs)
	delete(out, "none") // answered before routing: no cell's doing
	return out, err
}

// refusal says whether a status turns the user away unserved: 503, 429
// (the client's rate limit), 401 and 403 (the keys) — the last three
// answered before routing, a router's own doing.
func refusal(code int) bool { return code == 503 || code == 429 || code == 401 || code == 403 }

// edgeByCell is EdgeOf with the answers given before routing, under
// cell "none".
func edgeByCell(mfs map[string]*dto.MetricFamily) (map[string]Edge, error) {
	out := map[string]Edge{}
	refused := map[string]int64{} // 503s, the breaker's among them
	for _, m := range metrics(mfs, api.MetricRouterRequests.Name) {
		v, err := count(api.MetricRouterRequests.Name, m)
		if err != nil {
			return nil, err
		}
		cell := label(m, api.LabelCell)
		e := out[cell]
		e.Requests.Total += v
		switch code, _ := strconv.Atoi(label(m, api.LabelCode)); {
		case refusal(code):
			refused[cell] += v
		case code >= 500:
			e.Requests.Failed += v
		}
		out[cell] = e
	}
	for _, m := range metrics(mfs, api.MetricRouterShed.Name) {
		if label(m, api.LabelReason) != "breaker" {
			continue
		}
		v, err := count(api.MetricRouterShed.Name, m)
		if err != nil {
			return nil, err
		}
		cell := label(m, api.LabelCell)
		e := out[cell]
		e.Requests.Failed += v
		refused[cell] -= v
		out[cell] = e
	}
	for cell, e := range out {
		e.Refusals = Counts{Total: e.Requests.Total, Failed: max(refused[cell], 0)}
		out[cell] = e
	}
	for _, m := range metrics(mfs, api.MetricRouterRequestSeconds.Name) {
		h, err := histogramOf(api.MetricRouterRequestSeconds.Name, m)
		if err != nil {
			return nil, err
		}
		cell := label(m, api.LabelCell)
		e := out[cell]
		e.Latency = e.Latency.Add(h)
		out[cell] = e
	}
	return out, nil
}

// RouterSampleOf is a router's own figures (every cell's together, and
// its answers before routing: a router that turns users away with 401,
// 403 or 429 refuses them) as a Sample, for a wave of routers judged by
// JudgeRouters.
func RouterSampleOf(mfs map[string]*dto.MetricFamily) (Sample, error) {
	edges, err := edgeByCell(mfs)
	if err != nil {
		return Sample{}, err
	}
	s := Sample{Routers: 1}
	for _, e := range edges {
		s.add(Sample{Edge: e.Requests, EdgeRefusals: e.Refusals, EdgeLatency: e.Latency})
	}
	return s, nil
}

// Since is the window's figures: e's totals less before's (a router that
// restarted counts from zero).
func (e Edge) Since(before Edge) Edge {
	return Edge{Requests: e.Requests.since(before.Requests), Refusals: e.Refusals.since(before.Refusals),
		Latency: e.Latency.since(before.Latency)}
}

func (c Counts) since(before Counts) Counts {
	return Counts{Total: counterSince(c.Total, before.Total), Failed: counterSince(c.Failed, before.Failed)}
}

// SampleOf reads a Sample from a cell process's metric families. A value
// that is not a count (NaN, infinite, negative) or histogram buckets out
// of order is an error, not a number.
func SampleOf(mfs map[string]*dto.MetricFamily) (Sample, error) {
	var s Sample
	for _, m := range metrics(mfs, api.MetricCellIntakeRequests.Name) {
		v, err := count(api.MetricCellIntakeRequests.Name, m)
		if err != nil {
			return Sample{}, err
		}
		if label(m, api.LabelRoute) != "post" {
			continue
		}
		s.Intake.Total += v
		switch code, _ := strconv.Atoi(label(m, api.LabelCode)); {
		case code == 503:
			s.Refusals.Failed += v
		case code >= 500:
			s.Intake.Failed += v
		}
	}
	s.Refusals.Total = s.Intake.Total
	for _, m := range metrics(mfs, api.MetricCellDeliveries.Name) {
		v, err := count(api.MetricCellDeliveries.Name, m)
		if err != nil {
			return Sample{}, err
		}
		switch label(m, api.LabelOutcome) {
		case "done":
			s.Inquiries.Total += v
		case "failed", "dead":
			s.Inquiries.Total += v
			s.Inquiries.Failed += v
		}
	}
	for _, m := range metrics(mfs, api.MetricCellPanics.Name) {
		v, err := count(api.MetricCellPanics.Name, m)
		if err != nil {
			return Sample{}, err
		}
		s.Panics += v
	}
	for _, name := range []string{api.MetricCellIntakeSeconds.Name, api.MetricCellInquirySeconds.Name} {
		for _, m := range metrics(mfs, name) {
			h, err := histogramOf(name, m)
			switch {
			case err != nil:
				return Sample{}, err
			case name == api.MetricCellInquirySeconds.Name:
				s.DoneLatency = s.DoneLatency.Add(h)
			case label(m, api.LabelRoute) == "post":
				s.IntakeLatency = s.IntakeLatency.Add(h)
			}
		}
	}
	return s, nil
}

// count is a counter's value as a count: NaN, an infinity or a negative
// value is an error (a broken exporter, a scrape cut short), never a
// number the gates would judge by.
func count(name string, m *dto.Metric) (int64, error) {
	v := m.GetCounter().GetValue()
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v >= 1<<62 {
		return 0, fmt.Errorf("%s%s is %v, not a count", name, labels(m), v)
	}
	return int64(v), nil
}

func labels(m *dto.Metric) string {
	out := "{"
	for i, l := range m.GetLabel() {
		if i > 0 {
			out += ","
		}
		out += l.GetName() + "=" + strconv.Quote(l.GetValue())
	}
	return out + "}"
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

// histogramOf is a histogram's buckets; bounds that are not numbers in
// ascending order, or cumulative counts that go down, are an error.
func histogramOf(name string, m *dto.Metric) (Histogram, error) {
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
	for i, b := range out.Bounds {
		if math.IsNaN(b) || out.Cumulative[i] < 0 || (i > 0 && (b <= out.Bounds[i-1] || out.Cumulative[i] < out.Cumulative[i-1])) {
			return Histogram{}, fmt.Errorf("%s%s: bucket le=%v of %d out of order", name, labels(m), b, out.Cumulative[i])
		}
	}
	return out, nil
}

// Add is h and o together (the same buckets, or h empty).
func (h Histogram) Add(o Histogram) Histogram {
	if len(h.Bounds) == 0 {
		return Histogram{Bounds: slices.Clone(o.Bounds), Cumulative: slices.Clone(o.Cumulative)}
	}
	if len(o.Bounds) == 0 {
		return h
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
		Refusals:      s.Refusals.since(before.Refusals),
		Inquiries:     s.Inquiries.since(before.Inquiries),
		Panics:        counterSince(s.Panics, before.Panics),
		IntakeLatency: s.IntakeLatency.since(before.IntakeLatency),
		DoneLatency:   s.DoneLatency.since(before.DoneLatency),
		Edge:          s.Edge.since(before.Edge),
		EdgeRefusals:  s.EdgeRefusals.since(before.EdgeRefusals),
		EdgeLatency:   s.EdgeLatency.since(before.EdgeLatency),
		Routers:       s.Routers,
		Unread:        s.Unread,
		EdgeUnread:    s.EdgeUnread,
		Health:        s.Health,
	}
}

// add adds o's window to s's: counts added, Health the worse, Routers
// the most either was seen by, the unread sources of both.
func (s *Sample) add(o Sample) {
	addCounts := func(a *Counts, b Counts) { a.Total += b.Total; a.Failed += b.Failed }
	addCounts(&s.Intake, o.Intake)
	addCounts(&s.Refusals, o.Refusals)
	addCounts(&s.Inquiries, o.Inquiries)
	addCounts(&s.Edge, o.Edge)
	addCounts(&s.EdgeRefusals, o.EdgeRefusals)
	s.Panics += o.Panics
	s.IntakeLatency = s.IntakeLatency.Add(o.IntakeLatency)
	s.DoneLatency = s.DoneLatency.Add(o.DoneLatency)
	s.EdgeLatency = s.EdgeLatency.Add(o.EdgeLatency)
	s.Routers = max(s.Routers, o.Routers)
	s.Health = s.Health.worst(o.Health)
	s.Unread = append(slices.Clip(s.Unread), o.Unread...)
	s.EdgeUnread = append(slices.Clip(s.EdgeUnread), o.EdgeUnread...)
}

// AddEdge adds one router's window of a cell to s (a wave's, a
// baseline's).
func (s *Sample) AddEdge(e Edge) {
	s.add(Sample{Edge: e.Requests, EdgeRefusals: e.Refusals, EdgeLatency: e.Latency})
}

// Sum is the windows of several processes together (a wave's, or a
// baseline's): counts added, Health the worst process's, Routers the
// most any of them was seen by, every unread source.
func Sum(samples ...Sample) Sample {
	var out Sample
	for _, s := range samples {
		out.add(s)
	}
	return out
}
