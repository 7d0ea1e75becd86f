package release

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the generated files (the PrometheusRule)")

var (
	rulesFile      = filepath.Join(root, "deploy", "observability", "prometheus", "rules.yml")
	prometheusRule = filepath.Join(kube, "components", "prometheus-operator", "prometheusrule.yaml")
)

// prometheusRuleOf is rules.yml as a PrometheusRule: the file itself,
// comments included, under spec.
func prometheusRuleOf(rules []byte) []byte {
	var b bytes.Buffer
	b.WriteString(`# The observability pack's rules (deploy/observability/prometheus/rules.yml)
# as a PrometheusRule. Generated: ` + "`go test . -update`" + ` in deploy/release
# rewrites it, and the test fails while it differs.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: cellkit
spec:
`)
	for _, line := range strings.SplitAfter(strings.TrimRight(string(rules), "\n")+"\n", "\n") {
		if strings.TrimSpace(line) != "" {
			b.WriteString("  ")
		}
		b.WriteString(strings.TrimLeft(line, "\r"))
	}
	return b.Bytes()
}

// TestPrometheusRuleIsTheRules: the PrometheusRule is rules.yml, and every
// field of rules.yml is one the Prometheus Operator knows.
func TestPrometheusRuleIsTheRules(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	want := prometheusRuleOf(rules)
	if *update {
		if err := os.WriteFile(prometheusRule, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(prometheusRule)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not %s: `go test . -update` in deploy/release rewrites it", prometheusRule, rulesFile)
	}
	o, err := decodeAll(got)
	if err != nil {
		t.Fatalf("decoding the PrometheusRule: %v", err)
	}
	if len(o.rules) != 1 {
		t.Fatalf("decoding the PrometheusRule: %d PrometheusRules of %d objects", len(o.rules), len(o.all))
	}
	var spec monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(rules, &spec); err != nil {
		t.Fatalf("rules.yml as a PrometheusRule's spec: %v", err)
	}
	if len(spec.Groups) == 0 || !reflect.DeepEqual(spec, o.rules[0].Spec) {
		t.Errorf("the PrometheusRule's groups differ from rules.yml's")
	}
}
