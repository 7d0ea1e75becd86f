package console

import (
	"math"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/metric"
)

// The rollout's gate figures as the console exports them (docs/metrics.md,
// api.MetricConsoleRollout…):
// the bake of the wave in progress, or of the last wave baked, as the
// rollout's record holds it (control.BakeStatus), read at every
// collection. The rollout is driven by a cellctl that ends with it; the
// console lasts, and so its /metrics is where a dashboard finds why a
// bake passed or failed.
// decisionValue is a decision as a gauge's value: 0 pass, 1 wait, 2 fail
// (internal/gate's order); -1 for one it does not know.
func decisionValue(d string) float64 {
	switch d {
	case "pass":
		return 0
	case "wait":
		return 1
	case "fail":
		return 2
	}
	return -1
}

// rolloutGates exports the record's last bake judgement: series for the
// gates it names, labelled by the rollout's id and the wave (from 1), and
// none without a record or a bake.
type rolloutGates struct {
	record                          func() *control.Rollout
	bake, decision, pValue, samples *prometheus.Desc
}

// registerRolloutMetrics exports the gate figures of the record that
// record returns (nil: none) on reg (nil: nowhere).
func registerRolloutMetrics(reg prometheus.Registerer, record func() *control.Rollout) {
	if reg == nil {
		return
	}
	reg.MustRegister(&rolloutGates{
		record:   record,
		bake:     metric.Desc(api.MetricConsoleRolloutBakeDecision),
		decision: metric.Desc(api.MetricConsoleRolloutGateDecision),
		pValue:   metric.Desc(api.MetricConsoleRolloutGatePValue),
		samples:  metric.Desc(api.MetricConsoleRolloutGateSamples),
	})
}

// rolloutRecord is the rollout's record as last read (nil: none).
func (c *collector) rolloutRecord() *control.Rollout {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rollout
}

func (g *rolloutGates) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{g.bake, g.decision, g.pValue, g.samples} {
		ch <- d
	}
}

func (g *rolloutGates) Collect(ch chan<- prometheus.Metric) {
	ro := g.record()
	if ro == nil || ro.Bake == nil {
		return
	}
	b := ro.Bake
	wave := strconv.Itoa(b.Wave + 1)
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(g.bake, decisionValue(b.Decision), ro.ID, wave)
	seen := map[string]bool{}
	for _, v := range b.Verdicts {
		if seen[v.Gate] {
			continue // one series per gate: the first verdict of a name
		}
		seen[v.Gate] = true
		gauge(g.decision, decisionValue(v.Decision), ro.ID, wave, v.Gate)
		if !math.IsNaN(v.P) && !math.IsInf(v.P, 0) {
			gauge(g.pValue, v.P, ro.ID, wave, v.Gate, v.Baseline)
		}
		gauge(g.samples, float64(v.WaveSamples), ro.ID, wave, v.Gate, "wave")
		gauge(g.samples, float64(v.BaselineSamples), ro.ID, wave, v.Gate, "baseline")
	}
}
