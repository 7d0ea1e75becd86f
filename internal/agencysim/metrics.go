package agencysim

import "github.com/prometheus/client_golang/prometheus"

// collector exports a server's Stats as metrics; Stats stays the one source
// of truth. Its descriptors carry agency=<profile name> as a constant label,
// so servers of different profiles register side by side.
type collector struct{ s *Server }

type metricDesc struct {
	name, help string
	kind       prometheus.ValueType
	value      func(Stats) int64
}

// metricDescs lists the exported counters (a function: no package state).
func metricDescs() []metricDesc {
	return []metricDesc{
		{"sessions_active", "Admitted sessions now open.", prometheus.GaugeValue, func(st Stats) int64 { return st.ActiveSessions }},
		{"sessions_peak", "Most admitted sessions open at once.", prometheus.GaugeValue, func(st Stats) int64 { return st.PeakSessions }},
		{"sessions_accepted_total", "Sessions admitted.", prometheus.CounterValue, func(st Stats) int64 { return st.Accepted }},
		{"sessions_refused_total", "Connections refused over the session limit.", prometheus.CounterValue, func(st Stats) int64 { return st.Refused }},
		{"calls_total", "Requests received, whatever their outcome.", prometheus.CounterValue, func(st Stats) int64 { return st.Calls }},
		{"errors_total", "Requests answered with an error code.", prometheus.CounterValue, func(st Stats) int64 { return st.Errors }},
		{"garbage_total", "Requests answered with a garbage frame.", prometheus.CounterValue, func(st Stats) int64 { return st.Garbage }},
		{"resets_total", "Requests answered by resetting the connection.", prometheus.CounterValue, func(st Stats) int64 { return st.Resets }},
		{"idle_cuts_total", "Sessions cut by the idle firewall.", prometheus.CounterValue, func(st Stats) int64 { return st.IdleCuts }},
		{"heartbeats_total", "Heartbeats answered.", prometheus.CounterValue, func(st Stats) int64 { return st.Heartbeats }},
		{"malformed_frames_total", "Sessions closed for a malformed client frame.", prometheus.CounterValue, func(st Stats) int64 { return st.Malformed }},
		{"written_bytes_total", "Bytes written to clients.", prometheus.CounterValue, func(st Stats) int64 { return st.BytesOut }},
	}
}

func (c collector) desc(d metricDesc) *prometheus.Desc {
	return prometheus.NewDesc("cellkit_agencysim_"+d.name, d.help, nil, prometheus.Labels{"agency": c.s.profile.Name})
}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range metricDescs() {
		ch <- c.desc(d)
	}
	c.s.delay.Describe(ch)
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	for _, d := range metricDescs() {
		ch <- prometheus.MustNewConstMetric(c.desc(d), d.kind, float64(d.value(st)))
	}
	c.s.delay.Collect(ch)
}
