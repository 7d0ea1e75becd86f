package observability

import (
	"bytes"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// target is one entry of the stack's file_sd targets file.
type target struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// exports is what a stack exports, from its scrapes: every metric family
// (its # TYPE line) with the label names of its samples and the jobs that
// export it, and the targets' own labels, which Prometheus adds to every
// series it scrapes (with instance).
type exports struct {
	families map[string]*family
	targets  []target
	rare     map[string]*family // rareMetrics as the catalogue declares them
}

// rareMetrics are the metrics used by the pack that a plain stack does not
// export, with what would. They are checked against the catalogue
// (internal/api) instead. Every other metric the pack reads is exported
// from the start.
var rareMetrics = map[string]string{
	"cellkit_tls_certificate_expiry_timestamp_seconds": "a listener or a client on TLS (cellctl dev up --tls; TestLivePackTLSSeries)",
}

type family struct {
	typ    dto.MetricType
	labels set
	jobs   set
	series []map[string]string // each sample's labels, with its target's
}

type set map[string]bool

func setOf(names ...string) set {
	s := set{}
	for _, n := range names {
		s[n] = true
	}
	return s
}

func (s set) union(o set) set {
	out := maps.Clone(s)
	if out == nil {
		out = set{}
	}
	maps.Copy(out, o)
	return out
}

func (s set) sorted() []string { return slices.Sorted(maps.Keys(s)) }

func newExports(targets []target) *exports {
	return &exports{families: map[string]*family{}, targets: targets}
}

// add reads one scrape in the text format, from a target of job.
func (x *exports) add(job string, body []byte) error {
	return x.addTarget(map[string]string{"job": job}, body)
}

// addTarget reads one scrape of a target with labels (job among them),
// which Prometheus puts on each of its series.
func (x *exports) addTarget(targetLabels map[string]string, body []byte) error {
	job := targetLabels["job"]
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return err
	}
	for name, mf := range mfs {
		f := x.families[name]
		if f == nil {
			f = &family{typ: mf.GetType(), labels: set{}, jobs: set{}}
			x.families[name] = f
		}
		f.jobs[job] = true
		for _, m := range mf.GetMetric() {
			series := maps.Clone(targetLabels)
			for _, l := range m.GetLabel() {
				f.labels[l.GetName()] = true
				series[l.GetName()] = l.GetValue()
			}
			f.series = append(f.series, series)
		}
	}
	return nil
}

// targetLabels are the labels Prometheus adds to a series scraped from a
// target of one of jobs: the target's labels from the file, and instance.
func (x *exports) targetLabels(jobs set) set {
	s := setOf("instance", "job")
	for _, t := range x.targets {
		if jobs == nil || jobs[t.Labels["job"]] {
			for k := range t.Labels {
				s[k] = true
			}
		}
	}
	return s
}

// prometheusOwn are the series Prometheus writes for every target.
var prometheusOwn = setOf("up", "scrape_duration_seconds", "scrape_samples_scraped",
	"scrape_samples_post_metric_relabeling", "scrape_series_added")

// lookup returns the label names a series of name may carry once
// Prometheus has scraped it, and whether the stack exports it: a family,
// a histogram's _bucket (with le), _sum or _count, a summary's _sum or
// _count, or one of Prometheus's own series per target.
func (x *exports) lookup(name string) (set, bool) {
	if prometheusOwn[name] {
		return x.targetLabels(nil), true
	}
	if f, ok := x.families[name]; ok {
		return f.labels.union(x.targetLabels(f.jobs)), true
	}
	for _, sfx := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, sfx)
		if !ok {
			continue
		}
		f, ok := x.families[base]
		if !ok {
			continue
		}
		switch {
		case f.typ == dto.MetricType_HISTOGRAM && sfx == "_bucket":
			return f.labels.union(x.targetLabels(f.jobs)).union(setOf("le")), true
		case f.typ == dto.MetricType_HISTOGRAM, f.typ == dto.MetricType_SUMMARY && sfx != "_bucket":
			return f.labels.union(x.targetLabels(f.jobs)), true
		}
	}
	if f, ok := x.rare[name]; ok {
		return f.labels.union(x.targetLabels(f.jobs)), true
	}
	return nil, false
}

var docSection = regexp.MustCompile(`^## (\w+)`)

// rareFromCatalogue is rareMetrics as the catalogue declares them.
func rareFromCatalogue(t *testing.T) map[string]*family {
	t.Helper()
	all := catalogueExports(t)
	out := map[string]*family{}
	for name := range rareMetrics {
		if f, ok := all.families[name]; ok {
			out[name] = f
		}
	}
	return out
}

// checker checks the pack's expressions against what a stack exports.
// Recording rules' outputs are defined as they are checked, with the
// labels their expression leaves and their static labels.
type checker struct {
	exp      *exports
	records  map[string]set
	problems []string
	names    set // metric names checked
}

func newChecker(x *exports) *checker {
	return &checker{exp: x, records: map[string]set{}, names: set{}}
}

func (c *checker) failf(where, format string, args ...any) {
	c.problems = append(c.problems, where+": "+fmt.Sprintf(format, args...))
}

func (c *checker) lookup(name string) (set, bool) {
	if ls, ok := c.records[name]; ok {
		return ls, true
	}
	return c.exp.lookup(name)
}

var legendLabel = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// check checks one expression: every selector's metric and matcher label
// names; the labels its aggregations, vector matchings and label functions
// name; the labels its legend names. A recording rule's output is then
// defined.
func (c *checker) check(e packExpr) {
	parser.Inspect(e.expr, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			c.selector(e.where, vs)
		}
		return nil
	})
	out := c.labelsOf(e.where, e.expr)
	if out == nil {
		return
	}
	for _, m := range legendLabel.FindAllStringSubmatch(e.legend, -1) {
		if !out[m[1]] {
			c.failf(e.where, "legend %q names label %s; the query's series have %v", e.legend, m[1], out.sorted())
		}
	}
	if e.record != "" {
		for k := range e.labels {
			out[k] = true
		}
		c.records[e.record] = out
	}
}

// selector checks a vector selector: its metric is exported (or recorded),
// its matchers name labels the metric has, and a job matcher names a job
// of the targets file.
func (c *checker) selector(where string, vs *parser.VectorSelector) {
	name := vs.Name
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
			name = m.Value
		}
	}
	if name == "" {
		c.failf(where, "selector %s names no metric", vs)
		return
	}
	c.names[name] = true
	ls, ok := c.lookup(name)
	if !ok {
		if why := rareMetrics[name]; why != "" {
			c.failf(where, "metric %s is not exported (it needs %s) and not in the catalogue", name, why)
			return
		}
		c.failf(where, "metric %s is not exported by any process of the stack (nor recorded by a rule)", name)
		return
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel {
			continue
		}
		if !ls[m.Name] {
			c.failf(where, "%s has no label %s (it has %v)", name, m.Name, ls.sorted())
		}
		if m.Name == "job" && !c.jobMatches(m) {
			c.failf(where, "matcher %s matches no job of the targets file", m)
		}
	}
}

func (c *checker) jobMatches(m *labels.Matcher) bool {
	for _, t := range c.exp.targets {
		if m.Matches(t.Labels["job"]) {
			return true
		}
	}
	return false
}

// labelsOf returns the label names the series of e may carry, checking the
// label names e's aggregations, matchings and functions use against what
// their operands carry; nil when an operand is unknown (already reported).
func (c *checker) labelsOf(where string, e parser.Expr) set {
	switch n := e.(type) {
	case *parser.VectorSelector:
		name := n.Name
		for _, m := range n.LabelMatchers {
			if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		ls, ok := c.lookup(name)
		if !ok {
			return nil
		}
		return maps.Clone(ls)
	case *parser.MatrixSelector:
		return c.labelsOf(where, n.VectorSelector)
	case *parser.SubqueryExpr:
		return c.labelsOf(where, n.Expr)
	case *parser.ParenExpr:
		return c.labelsOf(where, n.Expr)
	case *parser.UnaryExpr:
		return c.labelsOf(where, n.Expr)
	case *parser.StepInvariantExpr:
		return c.labelsOf(where, n.Expr)
	case *parser.NumberLiteral, *parser.StringLiteral:
		return set{}
	case *parser.AggregateExpr:
		if n.Param != nil {
			c.labelsOf(where, n.Param)
		}
		in := c.labelsOf(where, n.Expr)
		if in == nil {
			return nil
		}
		c.need(where, in, n.Grouping, fmt.Sprintf("%s %s", n.Op, groupingText(n)))
		var out set
		switch {
		case n.Without:
			out = maps.Clone(in)
			for _, l := range n.Grouping {
				delete(out, l)
			}
		case n.Op == parser.TOPK || n.Op == parser.BOTTOMK || n.Op == parser.LIMITK || n.Op == parser.LIMIT_RATIO:
			out = in
		default:
			out = setOf(n.Grouping...)
		}
		if s, ok := n.Param.(*parser.StringLiteral); ok && n.Op == parser.COUNT_VALUES {
			out[s.Val] = true
		}
		return out
	case *parser.Call:
		args := make([]set, len(n.Args))
		for i, a := range n.Args {
			args[i] = c.labelsOf(where, a)
		}
		str := func(i int) string {
			if i < len(n.Args) {
				if s, ok := n.Args[i].(*parser.StringLiteral); ok {
					return s.Val
				}
			}
			return ""
		}
		switch n.Func.Name {
		case "label_replace":
			if args[0] == nil {
				return nil
			}
			if src := str(3); src != "" {
				c.need(where, args[0], []string{src}, "label_replace")
			}
			return args[0].union(setOf(str(1)))
		case "label_join":
			if args[0] == nil {
				return nil
			}
			for i := 3; i < len(n.Args); i++ {
				c.need(where, args[0], []string{str(i)}, "label_join")
			}
			return args[0].union(setOf(str(1)))
		case "histogram_quantile", "histogram_fraction":
			in := args[len(args)-1]
			if in == nil {
				return nil
			}
			c.need(where, in, []string{"le"}, n.Func.Name)
			out := maps.Clone(in)
			delete(out, "le")
			return out
		}
		for i, a := range n.Args {
			if t := a.Type(); t == parser.ValueTypeVector || t == parser.ValueTypeMatrix {
				return args[i]
			}
		}
		return set{}
	case *parser.BinaryExpr:
		l, r := c.labelsOf(where, n.LHS), c.labelsOf(where, n.RHS)
		if l == nil || r == nil {
			return nil
		}
		lv, rv := n.LHS.Type() == parser.ValueTypeVector, n.RHS.Type() == parser.ValueTypeVector
		switch {
		case lv && !rv:
			return l
		case rv && !lv:
			return r
		case !lv && !rv:
			return set{}
		}
		vm := n.VectorMatching
		if vm == nil {
			return l
		}
		op := n.Op.String()
		if vm.On {
			c.need(where, l, vm.MatchingLabels, op+" on (left)")
			c.need(where, r, vm.MatchingLabels, op+" on (right)")
		} else {
			c.need(where, l.union(r), vm.MatchingLabels, op+" ignoring")
		}
		switch vm.Card {
		case parser.CardManyToMany:
			if n.Op == parser.LOR {
				return l.union(r)
			}
			return l
		case parser.CardManyToOne:
			c.need(where, r, vm.Include, "group_left")
			return l.union(setOf(vm.Include...))
		case parser.CardOneToMany:
			c.need(where, l, vm.Include, "group_right")
			return r.union(setOf(vm.Include...))
		}
		if vm.On {
			return setOf(vm.MatchingLabels...)
		}
		out := maps.Clone(l)
		for _, k := range vm.MatchingLabels {
			delete(out, k)
		}
		return out
	}
	c.failf(where, "cannot follow the labels through %T (%s)", e, e)
	return nil
}

// need reports the names that have is missing.
func (c *checker) need(where string, have set, names []string, what string) {
	for _, n := range names {
		if !have[n] {
			c.failf(where, "%s uses label %s, which its operand's series do not have (they have %v)", what, n, have.sorted())
		}
	}
}

func groupingText(n *parser.AggregateExpr) string {
	kw := "by"
	if n.Without {
		kw = "without"
	}
	return kw + " (" + strings.Join(n.Grouping, ", ") + ")"
}
