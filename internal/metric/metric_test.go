package metric

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cellkit/cellkit/internal/api"
)

// Entries of a catalogue of the test's own, one of each shape.
var (
	plainCounter = api.MetricSpec{Name: "t_plain_total", Type: api.Counter, Help: "A counter."}
	labelCounter = api.MetricSpec{Name: "t_label_total", Type: api.Counter, Help: "Counters by result.", Labels: []string{"result", "lane"}}
	plainGauge   = api.MetricSpec{Name: "t_plain", Type: api.Gauge, Help: "A gauge."}
	laneGauge    = api.MetricSpec{Name: "t_lane", Type: api.Gauge, Help: "Gauges by lane.", Labels: []string{"lane"}}
	plainHist    = api.MetricSpec{Name: "t_plain_seconds", Type: api.Histogram, Help: "A histogram."}
	labelHist    = api.MetricSpec{Name: "t_label_seconds", Type: api.Histogram, Help: "Histograms by route.", Labels: []string{"route"}}
)

// TestBuildsTheEntry scrapes what each constructor registers: the name,
// help, type and label names are the entry's, and the buckets the
// exporter's.
func TestBuildsTheEntry(t *testing.T) {
	reg := prometheus.NewRegistry()
	Counter(reg, plainCounter).Inc()
	CounterVec(reg, labelCounter).WithLabelValues("ok", "high").Inc()
	CounterFunc(reg, api.MetricSpec{Name: "t_func_total", Type: api.Counter, Help: "By op.", Labels: []string{"op"}},
		func() float64 { return 7 }, prometheus.Labels{"op": "read"})
	Gauge(reg, plainGauge).Set(2)
	GaugeVec(reg, laneGauge).WithLabelValues("high").Set(3)
	GaugeFunc(reg, api.MetricSpec{Name: "t_func", Type: api.Gauge, Help: "By lane, constant.", Labels: []string{"lane"}},
		func() float64 { return 4 }, prometheus.Labels{"lane": "normal"})
	Histogram(reg, plainHist, []float64{1, 2}).Observe(1.5)
	HistogramVec(reg, labelHist, []float64{0.5}).WithLabelValues("post").Observe(0.1)

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		typ    dto.MetricType
		help   string
		labels []string
	}
	got := map[string]seen{}
	for _, mf := range mfs {
		var labels []string
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		got[mf.GetName()] = seen{mf.GetType(), mf.GetHelp(), labels}
		if h := mf.GetMetric()[0].GetHistogram(); h != nil && mf.GetName() == plainHist.Name && len(h.GetBucket()) != 2 {
			t.Errorf("%s has %d buckets, want the 2 given", mf.GetName(), len(h.GetBucket()))
		}
	}
	for name, want := range map[string]seen{
		plainCounter.Name: {dto.MetricType_COUNTER, plainCounter.Help, nil},
		labelCounter.Name: {dto.MetricType_COUNTER, labelCounter.Help, []string{"lane", "result"}},
		"t_func_total":    {dto.MetricType_COUNTER, "By op.", []string{"op"}},
		plainGauge.Name:   {dto.MetricType_GAUGE, plainGauge.Help, nil},
		laneGauge.Name:    {dto.MetricType_GAUGE, laneGauge.Help, []string{"lane"}},
		"t_func":          {dto.MetricType_GAUGE, "By lane, constant.", []string{"lane"}},
		plainHist.Name:    {dto.MetricType_HISTOGRAM, plainHist.Help, nil},
		labelHist.Name:    {dto.MetricType_HISTOGRAM, labelHist.Help, []string{"route"}},
	} {
		g, ok := got[name]
		if !ok {
			t.Errorf("%s not registered", name)
			continue
		}
		if g.typ != want.typ || g.help != want.help || !slices.Equal(g.labels, want.labels) {
			t.Errorf("%s: got %v %q %v, want %v %q %v", name, g.typ, g.help, g.labels, want.typ, want.help, want.labels)
		}
	}
}

// TestNilRegistererBuildsUnregistered: with no registerer the collector
// is built and works, and is registered later by its exporter.
func TestNilRegistererBuildsUnregistered(t *testing.T) {
	g := Gauge(nil, plainGauge)
	g.Set(1)
	reg := prometheus.NewRegistry()
	if err := reg.Register(g); err != nil {
		t.Fatalf("a collector built without a registerer was registered somewhere: %v", err)
	}
}

// TestDesc: the labels given constant values leave the variable ones, in
// the entry's order.
func TestDesc(t *testing.T) {
	d := Desc(labelCounter, prometheus.Labels{"result": "ok"})
	s := d.String()
	if !strings.Contains(s, `fqName: "t_label_total"`) || !strings.Contains(s, `constLabels: {result="ok"}`) ||
		!strings.Contains(s, "variableLabels: {lane}") {
		t.Errorf("Desc = %s", s)
	}
	if s := Desc(labelCounter).String(); !strings.Contains(s, "variableLabels: {result,lane}") {
		t.Errorf("Desc without constant labels = %s", s)
	}
}

// TestRefusesWhatTheEntryDoesNotDescribe: each mismatch between the
// constructor and the entry panics, naming the series.
func TestRefusesWhatTheEntryDoesNotDescribe(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func()
		says  string
	}{
		{"counter of a gauge", func() { Counter(nil, plainGauge) }, "is a gauge, not a counter"},
		{"gauge vector of a counter", func() { GaugeVec(nil, labelCounter) }, "is a counter, not a gauge"},
		{"histogram of a gauge", func() { Histogram(nil, plainGauge, nil) }, "is a gauge, not a histogram"},
		{"counter vector without labels", func() { CounterVec(nil, plainCounter) }, "has no labels"},
		{"gauge vector without labels", func() { GaugeVec(nil, plainGauge) }, "has no labels"},
		{"histogram vector without labels", func() { HistogramVec(nil, plainHist, nil) }, "has no labels"},
		{"plain counter of a labelled entry", func() { Counter(nil, labelCounter) }, "each needs one"},
		{"plain gauge of a labelled entry", func() { GaugeFunc(nil, laneGauge, func() float64 { return 0 }) }, "each needs one"},
		{"plain histogram of a labelled entry", func() { Histogram(nil, labelHist, nil) }, "each needs one"},
		{"some labels constant", func() { Counter(nil, labelCounter, prometheus.Labels{"result": "ok"}) }, "each needs one"},
		{"a label the entry lacks", func() { Gauge(nil, laneGauge, prometheus.Labels{"lane": "high", "cell": "c1"}) }, "each needs one"},
		{"constant labels on an entry without", func() { CounterFunc(nil, plainCounter, nil, prometheus.Labels{"op": "read"}) }, "each needs one"},
		{"desc with a label the entry lacks", func() { Desc(laneGauge, prometheus.Labels{"cell": "c1"}) }, `has no label "cell"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				s, _ := r.(string)
				if r == nil || !strings.Contains(s, tc.says) || !strings.Contains(s, "t_") {
					t.Errorf("panic %v, want one that names the series and says %q", r, tc.says)
				}
			}()
			tc.build()
		})
	}
}
