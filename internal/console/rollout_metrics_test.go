package console_test

import (
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/console"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/testkit"
)

// TestRolloutGateMetrics: the console exports the gate figures of the
// rollout record's last bake (each gate's decision, p-value against its
// baseline, the wave's and the baseline's samples, the bake's decision),
// labelled by rollout and wave, once it has read the record; none before
// there is a bake. Every series it exports is a row of docs/metrics.md,
// with its labels, and every such row is exported.
func TestRolloutGateMetrics(t *testing.T) {
	reg := celltest.NewRegistry(t, map[string]int{"nice": 80, "kcb": 40}, celltest.TestCell("c1"), celltest.TestCell("c2"))
	prom := prometheus.NewRegistry()
	con, err := console.New(console.Config{Token: token},
		console.Options{Registry: reg.Reg, Admin: adminclient.Client{HTTP: &http.Client{Timeout: time.Second}}, Registerer: prom})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t, 30*time.Second)
	ctl := control.New(reg.Reg, control.Config{Holder: "gate metrics test"}, control.Options{})
	if _, err := ctl.StartRollout(ctx, control.Rollout{ID: "r1", Waves: []control.Wave{{Cells: []string{"c1"}, Bake: time.Minute}, {Cells: []string{"c2"}, Bake: time.Minute}}}); err != nil {
		t.Fatal(err)
	}
	con.Collect(ctx)
	if fams := rolloutFamilies(t, prom); len(fams) != 0 {
		t.Errorf("no bake yet: %v", fams)
	}
	if _, err := ctl.UpdateRollout(ctx, "r1", func(ro *control.Rollout) error {
		ro.Bake = &control.BakeStatus{Wave: 0, Decision: "fail", Gates: []string{"fail intake refusals: ..."}, Verdicts: []control.GateVerdict{
			{Gate: "intake refusals", Decision: "fail", P: 9.4e-313, WaveSamples: 1000, Baseline: "old release", BaselineSamples: 3000},
			{Gate: "time to done", Decision: "pass", P: 0.147, WaveSamples: 1000, Baseline: "before", BaselineSamples: 950},
			{Gate: "edge 5xx", Decision: "wait", P: 1, WaveSamples: 120},
		}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	con.Collect(ctx)
	fams := rolloutFamilies(t, prom)
	value := func(name string, labels ...string) float64 {
		t.Helper()
		for _, m := range fams[name].GetMetric() {
			if matches(m, labels...) {
				return m.GetGauge().GetValue()
			}
		}
		t.Errorf("%s%v: no series", name, labels)
		return -100
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"cellkit_console_rollout_bake_decision", []string{"rollout", "r1", "wave", "1"}, 2},
		{"cellkit_console_rollout_gate_decision", []string{"wave", "1", "gate", "intake refusals"}, 2},
		{"cellkit_console_rollout_gate_decision", []string{"gate", "time to done"}, 0},
		{"cellkit_console_rollout_gate_decision", []string{"gate", "edge 5xx"}, 1},
		{"cellkit_console_rollout_gate_p_value", []string{"gate", "intake refusals", "baseline", "old release"}, 9.4e-313},
		{"cellkit_console_rollout_gate_p_value", []string{"gate", "time to done", "baseline", "before"}, 0.147},
		{"cellkit_console_rollout_gate_samples", []string{"gate", "intake refusals", "of", "wave"}, 1000},
		{"cellkit_console_rollout_gate_samples", []string{"gate", "intake refusals", "of", "baseline"}, 3000},
		{"cellkit_console_rollout_gate_samples", []string{"gate", "edge 5xx", "of", "baseline"}, 0},
	} {
		if got := value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}

	// docs/metrics.md, the console's section: the same names and labels.
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile("(?m)^\\| `(cellkit_console_rollout_[a-z_]+)` \\| gauge \\| ([a-z_, ]*) \\|").FindAllStringSubmatch(string(doc), -1)
	documented := map[string]string{}
	for _, r := range rows {
		labels := strings.Split(strings.ReplaceAll(r[2], " ", ""), ",")
		slices.Sort(labels)
		documented[r[1]] = strings.Join(labels, ",")
	}
	for name, f := range fams {
		var labels []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		slices.Sort(labels)
		if want := strings.Join(labels, ","); documented[name] != want {
			t.Errorf("docs/metrics.md: %s with labels %q, the code exports %q", name, documented[name], want)
		}
	}
	for name := range documented {
		if _, ok := fams[name]; !ok {
			t.Errorf("docs/metrics.md lists %s, the console does not export it", name)
		}
	}
}

func rolloutFamilies(t *testing.T, g prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "cellkit_console_rollout_") {
			out[mf.GetName()] = mf
		}
	}
	return out
}

// matches says whether m has each label name, value pair given.
func matches(m *dto.Metric, pairs ...string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == pairs[i] && l.GetValue() == pairs[i+1] }) {
			return false
		}
	}
	return true
}
