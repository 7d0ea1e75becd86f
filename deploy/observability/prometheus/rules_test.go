// Package prometheus_test checks the Prometheus rules of the observability
// pack with the real promtool (bin/promtool, built by `make tools`): the
// rules load, every alert's unit tests in rules_test.yml pass, and every
// alert carries a summary, a description and a runbook that points at its
// section of docs/alerts.md.
package prometheus_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

const (
	rulesFile = "rules.yml"
	testsFile = "rules_test.yml"
	alertsDoc = "../../../docs/alerts.md"
)

// promtool returns the path of bin/promtool, failing the test when it is
// not there.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("../../../bin/promtool")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s not found: run make tools", p)
	}
	return p
}

func runPromtool(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), promtool(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestRulesLoad(t *testing.T) {
	out := runPromtool(t, "check", "rules", rulesFile)
	m := regexp.MustCompile(`SUCCESS: (\d+) rules found`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("promtool check rules: no rule count in\n%s", out)
	}
	// Every rule promtool loaded is one the checks below see.
	rules := parseRules(t, rulesFile)
	if n, _ := strconv.Atoi(m[1]); n != len(rules) {
		t.Fatalf("promtool found %d rules, this test parsed %d from %s", n, len(rules), rulesFile)
	}
}

func TestRulesUnitTests(t *testing.T) {
	runPromtool(t, "test", "rules", testsFile)
}

// TestAlertAnnotations checks that every alert has a summary, a description
// and a runbook, that the runbook is the alert's own section of
// docs/alerts.md, and that the document has no section for an alert that
// does not exist.
func TestAlertAnnotations(t *testing.T) {
	anchors := headingAnchors(t, alertsDoc)
	alerts := map[string]bool{}
	for _, r := range parseRules(t, rulesFile) {
		if r.kind != "alert" {
			continue
		}
		alerts[r.name] = true
		for _, key := range []string{"summary", "description", "runbook"} {
			if strings.TrimSpace(r.annotations[key]) == "" {
				t.Errorf("alert %s has no %s annotation", r.name, key)
			}
		}
		rb := r.annotations["runbook"]
		want := "docs/alerts.md#" + strings.ToLower(r.name)
		if rb != want {
			t.Errorf("alert %s: runbook %q, want %q", r.name, rb, want)
		}
		if _, anchor, _ := strings.Cut(rb, "#"); !anchors[anchor] {
			t.Errorf("alert %s: runbook %q: docs/alerts.md has no heading with anchor %q", r.name, rb, anchor)
		}
	}
	if len(alerts) == 0 {
		t.Fatalf("no alert in %s", rulesFile)
	}
	for anchor := range anchors {
		if strings.HasPrefix(anchor, "cellkit") && !alerts[alertByAnchor(alerts, anchor)] {
			t.Errorf("docs/alerts.md has a section %q for no alert", anchor)
		}
	}
}

// TestEveryAlertIsUnitTested checks that rules_test.yml expects every alert
// to fire at least once.
func TestEveryAlertIsUnitTested(t *testing.T) {
	f, err := os.ReadFile(testsFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(f), "\n")
	fires := map[string]bool{}
	for i, l := range lines {
		name, ok := strings.CutPrefix(strings.TrimSpace(l), "alertname: ")
		if ok && i+1 < len(lines) && strings.TrimSpace(lines[i+1]) != "exp_alerts: []" {
			fires[name] = true
		}
	}
	for _, r := range parseRules(t, rulesFile) {
		if r.kind == "alert" && !fires[r.name] {
			t.Errorf("%s has no test where alert %s fires", testsFile, r.name)
		}
	}
}

func alertByAnchor(alerts map[string]bool, anchor string) string {
	for name := range alerts {
		if strings.ToLower(name) == anchor {
			return name
		}
	}
	return ""
}

// rule is one recording or alerting rule of a rules file.
type rule struct {
	kind        string // alert or record
	name        string
	annotations map[string]string
}

var ruleStart = regexp.MustCompile(`^(\s*)- (alert|record): *(\S+)\s*$`)

// parseRules reads the rules of a Prometheus rules file written in this
// pack's block style (one `- alert: NAME` or `- record: NAME` line per
// rule, its keys below it, annotations as `key: value` or a block scalar).
// TestRulesLoad checks that it finds as many rules as promtool does.
func parseRules(t *testing.T, path string) []rule {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		rules     []rule
		cur       *rule
		keyIndent int    // indent of the current rule's keys
		inAnn     bool   // inside its annotations
		annIndent int    // indent of the annotation keys (0: not seen yet)
		blockKey  string // annotation whose block scalar is being read
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		text := strings.TrimSpace(line)
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		indent := len(line) - len(strings.TrimLeftFunc(line, unicode.IsSpace))
		if m := ruleStart.FindStringSubmatch(line); m != nil {
			rules = append(rules, rule{kind: m[2], name: m[3], annotations: map[string]string{}})
			cur = &rules[len(rules)-1]
			keyIndent, inAnn, annIndent, blockKey = len(m[1])+2, false, 0, ""
			continue
		}
		if cur == nil {
			continue
		}
		if indent < keyIndent {
			cur, inAnn = nil, false
			continue
		}
		if indent == keyIndent {
			inAnn, blockKey = text == "annotations:", ""
			continue
		}
		if !inAnn {
			continue
		}
		if annIndent == 0 {
			annIndent = indent
		}
		if indent > annIndent && blockKey != "" {
			cur.annotations[blockKey] = strings.TrimSpace(cur.annotations[blockKey] + " " + text)
			continue
		}
		key, value, ok := strings.Cut(text, ":")
		if indent != annIndent || !ok {
			t.Fatalf("%s: rule %s: cannot read annotation line %q", path, cur.name, line)
		}
		value = strings.TrimSpace(value)
		blockKey = ""
		if value == ">-" || value == ">" || value == "|" || value == "|-" {
			blockKey, value = key, ""
		}
		cur.annotations[key] = strings.Trim(value, `'"`)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rules
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown file: lower case, punctuation but '-' and '_' dropped, spaces
// as '-', a repeated anchor suffixed -1, -2...
func headingAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	seen := map[string]int{}
	inCode := false
	for _, line := range strings.Split(string(f), "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
			continue
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a]++
			a += "-" + strconv.Itoa(n)
		} else {
			seen[a] = 1
		}
		anchors[a] = true
	}
	return anchors
}
