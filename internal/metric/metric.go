// Package metric builds cellkit's Prometheus collectors from the metric
// catalogue (internal/api's api.Metric… entries): one call a collector,
// which takes the name, the help, the type and the label names from the
// entry, so that an exporter writes only what the catalogue leaves to it —
// a histogram's buckets, the values of its constant labels, the series it
// creates ahead. internal/api stays free of client_golang; this is where
// the catalogue meets it.
//
// Each constructor registers what it builds on reg, as promauto does (nil
// reg: built, not registered, for a collector that is registered later or
// collected by another), and panics — a programmer's error, like a failed
// registration — when asked for a collector the entry does not describe:
// one of another type, a vector of an entry without labels, or a single
// series whose constant labels are not exactly the entry's labels.
package metric

import (
	"fmt"
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/cellkit/cellkit/internal/api"
)

// Counter builds spec's counter; constLabels give the values of the
// entry's labels, if it has any.
func Counter(reg prometheus.Registerer, spec api.MetricSpec, constLabels ...prometheus.Labels) prometheus.Counter {
	return promauto.With(reg).NewCounter(prometheus.CounterOpts(opts(spec, api.Counter, constLabels)))
}

// CounterVec builds spec's counters, labelled by the entry's labels.
func CounterVec(reg prometheus.Registerer, spec api.MetricSpec) *prometheus.CounterVec {
	return promauto.With(reg).NewCounterVec(prometheus.CounterOpts{Name: spec.Name, Help: spec.Help}, vector(spec, api.Counter))
}

// CounterFunc builds spec's counter whose value fn gives at each scrape;
// constLabels as Counter's.
func CounterFunc(reg prometheus.Registerer, spec api.MetricSpec, fn func() float64, constLabels ...prometheus.Labels) prometheus.CounterFunc {
	return promauto.With(reg).NewCounterFunc(prometheus.CounterOpts(opts(spec, api.Counter, constLabels)), fn)
}

// Gauge builds spec's gauge; constLabels as Counter's.
func Gauge(reg prometheus.Registerer, spec api.MetricSpec, constLabels ...prometheus.Labels) prometheus.Gauge {
	return promauto.With(reg).NewGauge(prometheus.GaugeOpts(opts(spec, api.Gauge, constLabels)))
}

// GaugeVec builds spec's gauges, labelled by the entry's labels.
func GaugeVec(reg prometheus.Registerer, spec api.MetricSpec) *prometheus.GaugeVec {
	return promauto.With(reg).NewGaugeVec(prometheus.GaugeOpts{Name: spec.Name, Help: spec.Help}, vector(spec, api.Gauge))
}

// GaugeFunc builds spec's gauge whose value fn gives at each scrape;
// constLabels as Counter's.
func GaugeFunc(reg prometheus.Registerer, spec api.MetricSpec, fn func() float64, constLabels ...prometheus.Labels) prometheus.GaugeFunc {
	return promauto.With(reg).NewGaugeFunc(prometheus.GaugeOpts(opts(spec, api.Gauge, constLabels)), fn)
}

// Histogram builds spec's histogram with the exporter's buckets;
// constLabels as Counter's.
func Histogram(reg prometheus.Registerer, spec api.MetricSpec, buckets []float64, constLabels ...prometheus.Labels) prometheus.Histogram {
	return promauto.With(reg).NewHistogram(prometheus.HistogramOpts{
		Name: spec.Name, Help: spec.Help, ConstLabels: single(spec, api.Histogram, constLabels), Buckets: buckets,
	})
}

// HistogramVec builds spec's histograms with the exporter's buckets,
// labelled by the entry's labels.
func HistogramVec(reg prometheus.Registerer, spec api.MetricSpec, buckets []float64) *prometheus.HistogramVec {
	return promauto.With(reg).NewHistogramVec(prometheus.HistogramOpts{
		Name: spec.Name, Help: spec.Help, Buckets: buckets,
	}, vector(spec, api.Histogram))
}

// Desc describes spec's series for a collector of its own, which gives
// their values (and their type) at each scrape: constLabels give some of
// the entry's labels constant values, and the others, in the entry's
// order, are the values Collect gives.
func Desc(spec api.MetricSpec, constLabels ...prometheus.Labels) *prometheus.Desc {
	labels := merged(constLabels)
	var variable []string
	for _, l := range spec.Labels {
		if _, ok := labels[l]; !ok {
			variable = append(variable, l)
		}
	}
	for l := range labels {
		if !slices.Contains(spec.Labels, l) {
			panic(fmt.Sprintf("metric: %s has no label %q (its labels: %v)", spec.Name, l, spec.Labels))
		}
	}
	return prometheus.NewDesc(spec.Name, spec.Help, variable, labels)
}

// opts are the options of spec's one series of type want (counters' and
// gauges' options are both prometheus.Opts).
func opts(spec api.MetricSpec, want api.MetricType, constLabels []prometheus.Labels) prometheus.Opts {
	return prometheus.Opts{Name: spec.Name, Help: spec.Help, ConstLabels: single(spec, want, constLabels)}
}

// single checks that spec is of type want and that constLabels give each
// of its labels a value, and no other; it returns them merged (nil for
// none, as an exporter's options left them).
func single(spec api.MetricSpec, want api.MetricType, constLabels []prometheus.Labels) prometheus.Labels {
	typed(spec, want)
	labels := merged(constLabels)
	names := slices.Sorted(maps.Keys(labels))
	if !slices.Equal(names, slices.Sorted(slices.Values(spec.Labels))) {
		panic(fmt.Sprintf("metric: %s has the labels %v, given constant values for %v: each needs one, and no other "+
			"(variable labels are a vector's)", spec.Name, spec.Labels, names))
	}
	return labels
}

// vector checks that spec is of type want and has labels to vary by, and
// returns them.
func vector(spec api.MetricSpec, want api.MetricType) []string {
	typed(spec, want)
	if len(spec.Labels) == 0 {
		panic(fmt.Sprintf("metric: %s has no labels: it is one series, not a vector", spec.Name))
	}
	return spec.Labels
}

func typed(spec api.MetricSpec, want api.MetricType) {
	if spec.Type != want {
		panic(fmt.Sprintf("metric: %s is a %s, not a %s", spec.Name, spec.Type, want))
	}
}

// merged is constLabels as one set, nil when they are empty.
func merged(constLabels []prometheus.Labels) prometheus.Labels {
	var labels prometheus.Labels
	for _, l := range constLabels {
		for k, v := range l {
			if labels == nil {
				labels = prometheus.Labels{}
			}
			labels[k] = v
		}
	}
	return labels
}
