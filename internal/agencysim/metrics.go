package agencysim

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/metric"
)

// collector exports a server's Stats as metrics; Stats stays the one source
// of truth. Its descriptors carry agency=<profile name> as a constant label,
// so servers of different profiles register side by side.
type collector struct{ s *Server }

type metricDesc struct {
	spec  api.MetricSpec
	kind  prometheus.ValueType
	value func(Stats) int64
}

// metricDescs lists the exported counters (a function: no package state).
func metricDescs() []metricDesc {
	return []metricDesc{
		{api.MetricAgencysimSessionsActive, prometheus.GaugeValue, func(st Stats) int64 { return st.ActiveSessions }},
		{api.MetricAgencysimSessionsPeak, prometheus.GaugeValue, func(st Stats) int64 { return st.PeakSessions }},
		{api.MetricAgencysimSessionsAccepted, prometheus.CounterValue, func(st Stats) int64 { return st.Accepted }},
		{api.MetricAgencysimSessionsRefused, prometheus.CounterValue, func(st Stats) int64 { return st.Refused }},
		{api.MetricAgencysimCalls, prometheus.CounterValue, func(st Stats) int64 { return st.Calls }},
		{api.MetricAgencysimErrors, prometheus.CounterValue, func(st Stats) int64 { return st.Errors }},
		{api.MetricAgencysimGarbage, prometheus.CounterValue, func(st Stats) int64 { return st.Garbage }},
		{api.MetricAgencysimResets, prometheus.CounterValue, func(st Stats) int64 { return st.Resets }},
		{api.MetricAgencysimIdleCuts, prometheus.CounterValue, func(st Stats) int64 { return st.IdleCuts }},
		{api.MetricAgencysimHeartbeats, prometheus.CounterValue, func(st Stats) int64 { return st.Heartbeats }},
		{api.MetricAgencysimMalformedFrames, prometheus.CounterValue, func(st Stats) int64 { return st.Malformed }},
		{api.MetricAgencysimWrittenBytes, prometheus.CounterValue, func(st Stats) int64 { return st.BytesOut }},
	}
}

func (c collector) desc(d metricDesc) *prometheus.Desc {
	return metric.Desc(d.spec, prometheus.Labels{api.LabelAgency: c.s.profile.Name})
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
