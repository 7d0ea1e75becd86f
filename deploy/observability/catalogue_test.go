package observability

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/cellkit/cellkit/internal/api"
)

// The jobs of the stack's targets file and the labels each target adds
// (cellctl dev up writes it; TestLivePackMatchesStack reads a real one).
// The console is no target of the stack: its series are declared under a
// job of their own, which no rule or dashboard may name.
const (
	jobRouter    = "cellkit-router"
	jobCell      = "cellkit-cell"
	jobAgencysim = "cellkit-agencysim"
	jobConsole   = "cellkit-console"
)

var catalogueTargets = []target{
	{Labels: map[string]string{"job": jobRouter}},
	{Labels: map[string]string{"job": jobCell, api.LabelCell: "c1"}},
	{Labels: map[string]string{"job": jobAgencysim}},
}

// processMetrics are the catalogue's series of each job, SharedMetrics
// aside.
var processMetrics = map[string]func() []api.MetricSpec{
	jobRouter:    api.RouterMetrics,
	jobCell:      api.CellMetrics,
	jobAgencysim: api.AgencysimMetrics,
	jobConsole:   api.ConsoleMetrics,
}

var metricTypes = map[api.MetricType]dto.MetricType{
	api.Counter: dto.MetricType_COUNTER, api.Gauge: dto.MetricType_GAUGE, api.Histogram: dto.MetricType_HISTOGRAM,
}

// catalogueExports is what the catalogue says each process exports: its
// own series, the shared ones and the third-party ones cellkit reads.
func catalogueExports(t *testing.T) *exports {
	t.Helper()
	x := newExports(catalogueTargets)
	add := func(job string, m api.MetricSpec) {
		f := x.families[m.Name]
		if f == nil {
			typ, ok := metricTypes[m.Type]
			if !ok {
				t.Fatalf("%s: type %q is none of the catalogue's", m.Name, m.Type)
			}
			f = &family{typ: typ, labels: setOf(m.Labels...).union(setOf(m.Outer...)), jobs: set{}}
			x.families[m.Name] = f
		}
		f.jobs[job] = true
	}
	for job, specs := range processMetrics {
		for _, m := range slices.Concat(specs(), api.SharedMetrics(), api.ThirdPartyMetrics()) {
			add(job, m)
		}
	}
	return x
}

// TestCatalogueOnce checks that every name of the catalogue is declared
// once and its label names once each.
func TestCatalogueOnce(t *testing.T) {
	seen := set{}
	for _, m := range slices.Concat(api.Metrics(), api.ThirdPartyMetrics()) {
		if seen[m.Name] {
			t.Errorf("%s is declared twice", m.Name)
		}
		seen[m.Name] = true
		all := slices.Concat(m.Labels, m.Outer)
		if len(setOf(all...)) != len(all) {
			t.Errorf("%s names a label twice: %v", m.Name, all)
		}
		if m.Help == "" {
			t.Errorf("%s has no help", m.Name)
		}
	}
}

// TestPackReadsCatalogue checks every expression of the rule files and the
// dashboards against the catalogue: each series it names is a catalogue
// entry (a histogram's _bucket, _sum or _count its entry's), the output
// of a recording rule above it or Prometheus's own, and each label it
// matches, groups by or shows is one those series carry. A renamed series
// or label in the catalogue fails it, without a stack.
func TestPackReadsCatalogue(t *testing.T) {
	c := newChecker(catalogueExports(t))
	for _, e := range packExprs(t) {
		c.check(e)
	}
	for _, p := range c.problems {
		t.Error(p)
	}
	if len(c.names) == 0 {
		t.Fatal("the pack names no series")
	}
	t.Logf("%d series names of the pack checked against %d catalogue entries", len(c.names), len(api.Metrics()))
}

// docSections are docs/metrics.md's sections of the processes' series,
// by their job.
var docSections = map[string]string{"router": jobRouter, "cell": jobCell, "agencysim": jobAgencysim, "console": jobConsole}

// docMetric is a row of docs/metrics.md's tables.
type docMetric struct {
	typ    string
	labels set
}

var docTableRow = regexp.MustCompile("^\\| `([a-zA-Z_:][a-zA-Z0-9_:]*)` \\|")

// readDocMetrics reads the rows of each process's table of
// docs/metrics.md. A row's labels are the label names of its labels
// column: backquotes and the values in parentheses left out.
func readDocMetrics(t *testing.T) map[string]map[string]docMetric {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]docMetric{}
	job := ""
	parens := regexp.MustCompile(`\([^)]*\)`)
	for i, line := range strings.Split(string(b), "\n") {
		if m := docSection.FindStringSubmatch(line); m != nil {
			job = docSections[m[1]]
			continue
		}
		m := docTableRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if job == "" {
			t.Errorf("docs/metrics.md:%d: %s is in no process's section", i+1, m[1])
			continue
		}
		cols := strings.Split(line, "|")
		if len(cols) < 5 {
			t.Errorf("docs/metrics.md:%d: not a row of metric, type, labels, meaning", i+1)
			continue
		}
		labels := set{}
		for _, l := range strings.Split(parens.ReplaceAllString(strings.ReplaceAll(cols[3], "`", ""), ""), ",") {
			if l = strings.TrimSpace(l); l != "" {
				labels[l] = true
			}
		}
		if out[job] == nil {
			out[job] = map[string]docMetric{}
		}
		if _, dup := out[job][m[1]]; dup {
			t.Errorf("docs/metrics.md:%d: %s is listed twice in its section", i+1, m[1])
		}
		out[job][m[1]] = docMetric{typ: strings.TrimSpace(cols[2]), labels: labels}
	}
	return out
}

// TestDocsListCatalogue checks docs/metrics.md against the catalogue: each
// process's section lists exactly that process's series, and may list the
// shared ones it exports; each row has its entry's type and labels; each
// shared series is listed somewhere.
func TestDocsListCatalogue(t *testing.T) {
	docs := readDocMetrics(t)
	shared := map[string]api.MetricSpec{}
	for _, m := range api.SharedMetrics() {
		shared[m.Name] = m
	}
	listed := set{}
	check := func(job string, m api.MetricSpec, d docMetric) {
		listed[m.Name] = true
		if d.typ != string(m.Type) {
			t.Errorf("docs/metrics.md (%s): %s is a %s, the catalogue says %s", job, m.Name, d.typ, m.Type)
		}
		if want := setOf(m.Labels...).union(setOf(m.Outer...)); !sameSet(d.labels, want) {
			t.Errorf("docs/metrics.md (%s): %s has labels %v, the catalogue says %v", job, m.Name, d.labels.sorted(), want.sorted())
		}
	}
	for job, specs := range processMetrics {
		rows := docs[job]
		own := map[string]bool{}
		for _, m := range specs() {
			own[m.Name] = true
			d, ok := rows[m.Name]
			if !ok {
				t.Errorf("docs/metrics.md (%s) does not list %s", job, m.Name)
				continue
			}
			check(job, m, d)
		}
		for name, d := range rows {
			if own[name] {
				continue
			}
			if m, ok := shared[name]; ok {
				check(job, m, d)
				continue
			}
			t.Errorf("docs/metrics.md (%s) lists %s, which the catalogue does not declare for that process", job, name)
		}
	}
	for name := range shared {
		if !listed[name] {
			t.Errorf("docs/metrics.md lists no %s", name)
		}
	}
}

func sameSet(a, b set) bool {
	return len(a) == len(b) && len(a.union(b)) == len(a)
}
