// Package observability holds the tests that keep the observability pack
// true: every PromQL expression of the rule files in prometheus/ and of the
// dashboards in grafana/ parses, and (live_test.go) every metric and label
// it uses is one that a running stack exports.
package observability

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// packExpr is one PromQL expression of the pack.
type packExpr struct {
	where  string // file and rule, or dashboard, panel and query
	text   string // as written
	expr   parser.Expr
	record string            // the series a recording rule writes
	labels map[string]string // a rule's static labels
	legend string            // a dashboard query's legend template
}

// grafanaVars are what the dashboards' variables stand for when a query is
// parsed: a range for Grafana's intervals, one cell for $cell.
var grafanaVars = map[string]string{
	"__rate_interval": "1m",
	"__interval":      "1m",
	"__range":         "5m",
	"cell":            "c1",
}

var grafanaVar = regexp.MustCompile(`\$\{?(\w+)\}?`)

// substitute replaces the Grafana variables in a query.
func substitute(q string) (string, error) {
	var unknown []string
	out := grafanaVar.ReplaceAllStringFunc(q, func(m string) string {
		name := grafanaVar.FindStringSubmatch(m)[1]
		v, ok := grafanaVars[name]
		if !ok {
			unknown = append(unknown, m)
		}
		return v
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("unknown Grafana variable %s", strings.Join(unknown, ", "))
	}
	return out, nil
}

var promql = parser.NewParser(parser.Options{})

// ruleFiles are the Prometheus rule files in dir: the YAML files with a
// top-level groups key (not prometheus.yml, not promtool's test files).
func ruleFiles(t *testing.T, dir string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.yml"))
	if err != nil {
		t.Fatal(err)
	}
	groups := regexp.MustCompile(`(?m)^groups:`)
	var out []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if groups.Match(b) {
			out = append(out, p)
		}
	}
	return out
}

// ruleExprs parses the rule files with Prometheus's own rule parser,
// reporting every error, and returns their expressions in file order.
func ruleExprs(t *testing.T, files []string) []packExpr {
	t.Helper()
	var out []packExpr
	for _, f := range files {
		rgs, errs := rulefmt.ParseFile(f, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
		for _, err := range errs {
			t.Errorf("%s: %v", rel(f), err)
		}
		if rgs == nil {
			continue
		}
		for _, g := range rgs.Groups {
			for _, r := range g.Rules {
				name := r.Alert
				if r.Record != "" {
					name = r.Record
				}
				e := packExpr{where: fmt.Sprintf("%s: group %s, rule %s", rel(f), g.Name, name), text: r.Expr, record: r.Record, labels: r.Labels}
				var err error
				if e.expr, err = promql.ParseExpr(r.Expr); err != nil {
					t.Errorf("%s: %v", e.where, err)
					continue
				}
				out = append(out, e)
			}
		}
	}
	return out
}

// dashboard is the part of a dashboard's JSON whose queries are read.
type dashboard struct {
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		RefID        string `json:"refId"`
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

// labelValues is a Prometheus variable query label_values(metric, label).
var labelValues = regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)

// dashboardExprs returns every query of the dashboards in dir, and each
// label_values variable as the selector it reads (metric{label!=""}).
func dashboardExprs(t *testing.T, dir string) []packExpr {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatalf("no dashboards in %s", dir)
	}
	var out []packExpr
	add := func(where, text, legend string) {
		e := packExpr{where: where, text: text, legend: legend}
		q, err := substitute(text)
		if err == nil {
			e.expr, err = promql.ParseExpr(q)
		}
		if err != nil {
			t.Errorf("%s: %s: %v", where, text, err)
			return
		}
		out = append(out, e)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", rel(p), err)
		}
		for _, v := range d.Templating.List {
			q, _ := v.Query.(string)
			if v.Type != "query" {
				continue
			}
			m := labelValues.FindStringSubmatch(q)
			if m == nil {
				t.Errorf("%s: variable %s: query %v, want label_values(metric, label)", rel(p), v.Name, v.Query)
				continue
			}
			add(fmt.Sprintf("%s: variable %s", rel(p), v.Name), fmt.Sprintf(`%s{%s!=""}`, m[1], m[2]), "")
		}
		var walk func([]panel)
		walk = func(ps []panel) {
			for _, pn := range ps {
				walk(pn.Panels)
				for _, q := range pn.Targets {
					if q.Expr == "" {
						t.Errorf("%s: panel %q query %s has no expression", rel(p), pn.Title, q.RefID)
						continue
					}
					add(fmt.Sprintf("%s: panel %q query %s", rel(p), pn.Title, q.RefID), q.Expr, q.LegendFormat)
				}
			}
		}
		walk(d.Panels)
	}
	return out
}

// rel names a file of the pack relative to this directory.
func rel(p string) string {
	if r, err := filepath.Rel(".", p); err == nil {
		return r
	}
	return p
}

// packExprs is every expression of the pack: the rule files' (in order,
// so that a recording rule is defined before it is used) then the
// dashboards'.
func packExprs(t *testing.T) []packExpr {
	t.Helper()
	files := ruleFiles(t, "prometheus")
	if len(files) == 0 {
		t.Fatal("no rule files in prometheus/")
	}
	return append(ruleExprs(t, files), dashboardExprs(t, "grafana")...)
}

// TestPackExpressionsParse parses every expression of the rule files and
// the dashboards (no stack needed).
func TestPackExpressionsParse(t *testing.T) {
	exprs := packExprs(t)
	rules, boards := 0, 0
	for _, e := range exprs {
		if strings.HasPrefix(e.where, "grafana") {
			boards++
		} else {
			rules++
		}
	}
	if rules == 0 || boards == 0 {
		t.Fatalf("%d rule and %d dashboard expressions, want some of each", rules, boards)
	}
	t.Logf("%d rule and %d dashboard expressions parse", rules, boards)
}

// TestSubstitute checks the Grafana variables a query may use.
func TestSubstitute(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`rate(x{cell="$cell"}[$__rate_interval])`, `rate(x{cell="c1"}[1m])`},
		{`x{cell="${cell}"}`, `x{cell="c1"}`},
	} {
		if got, err := substitute(tc.in); err != nil || got != tc.want {
			t.Errorf("substitute(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := substitute(`x{agency="$agency"}`); err == nil {
		t.Error("substitute($agency) succeeded, want an unknown variable")
	}
}

// TestPrometheusConfigPaths checks that prometheus.yml reads the rule files
// next to it and the targets file of the make run stack: Prometheus
// resolves relative paths against the config file's directory, so that
// must be <repository>/var/prometheus/targets.json.
func TestPrometheusConfigPaths(t *testing.T) {
	b, err := os.ReadFile("prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	conf := string(b)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*- (\S*targets\.json)\s*$`).FindStringSubmatch(conf)
	if m == nil {
		t.Fatal("prometheus.yml names no targets.json under file_sd_configs")
	}
	if got, want := filepath.Join(root, "deploy/observability/prometheus", m[1]), filepath.Join(root, "var/prometheus/targets.json"); got != want {
		t.Errorf("file_sd file %s resolves to %s, want %s (what cellctl dev up writes for make run)", m[1], got, want)
	}
	for _, f := range ruleFiles(t, "prometheus") {
		if !regexp.MustCompile(`(?m)^\s*- ` + regexp.QuoteMeta(filepath.Base(f)) + `\s*$`).MatchString(conf) {
			t.Errorf("prometheus.yml does not load the rule file %s", filepath.Base(f))
		}
	}
}
