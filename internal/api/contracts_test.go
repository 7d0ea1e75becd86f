package api_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/testkit"
)

// declaring names, for each kind of contract literal, the package
// directories that may spell it: the one that declares it.
var declaring = map[string]string{
	"metric":  "internal/api",
	"path":    "internal/api",
	"header":  "internal/api",
	"problem": "internal/problem",
}

// metricNames are the names a metric literal may take: every catalogue
// entry's (a histogram's series' too) and the prefixes. The registry
// readers' names without their prefix (map_version) are not looked for:
// log keys and JSON fields share them.
func metricNames() map[string]bool {
	out := map[string]bool{api.MetricPrefixRouter: true, api.MetricPrefixCell: true}
	for _, m := range append(api.Metrics(), api.ThirdPartyMetrics()...) {
		out[m.Name] = true
		if m.Type == api.Histogram {
			for _, sfx := range []string{"_bucket", "_sum", "_count"} {
				out[m.Name+sfx] = true
			}
		}
	}
	return out
}

// metricShaped is a literal that looks like a cellkit series name: one
// outside the catalogue is a series exported behind its back.
var metricShaped = regexp.MustCompile(`^cellkit_[a-z0-9_]+$`)

// notMetrics are the cellkit_ names that are no series.
var notMetrics = map[string]bool{
	"cellkit_console": true, // the console's session cookie
	"cellkit_leases_": true, // the prefix of a cell's session-lease bucket
}

// contractKind says which kind of contract literal s is ("" for none): a
// series of the catalogue, a path of cellkit's APIs (a mux pattern's
// method aside), a Cellkit-* header field or a problem type.
func contractKind(s string, metrics map[string]bool) string {
	switch {
	case metrics[s], metricShaped.MatchString(s) && !notMetrics[s]:
		return "metric"
	case strings.HasPrefix(s, "Cellkit-"):
		return "header"
	case strings.Contains(s, "cellkit.dev/problems"):
		return "problem"
	}
	if _, p, ok := strings.Cut(s, " "); ok && strings.HasPrefix(p, "/") && !strings.Contains(p, " ") {
		s = p // a mux pattern: METHOD /path
	}
	for _, root := range []string{"/v1/admin/", api.PathInquiries, api.PathAgencies} {
		if s == root || strings.HasPrefix(s, strings.TrimSuffix(root, "/")+"/") {
			return "path"
		}
	}
	if s == api.PathHealth {
		return "path"
	}
	return ""
}

// TestContractsDeclaredOnce walks the module's non-test Go files outside
// third_party and fails on a string literal that spells a metric name, an
// API path, a Cellkit-* header or a problem type outside the package that
// declares it: the others use its constant, so that a renamed contract is
// renamed for all its writers and readers.
func TestContractsDeclaredOnce(t *testing.T) {
	root, err := testkit.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	metrics := metricNames()
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if e.IsDir() {
			if rel == "third_party" || rel == "bin" || rel == "var" || strings.HasPrefix(e.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		dir := filepath.ToSlash(filepath.Dir(rel))
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			if kind := contractKind(s, metrics); kind != "" && dir != declaring[kind] {
				t.Errorf("%s: %s %q is spelled here; use the constant of %s", fset.Position(lit.Pos()), kind, s, declaring[kind])
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("walked %d Go files under %s, want the module's", files, root)
	}
}

// TestContractKind checks what the walk counts as a contract literal.
func TestContractKind(t *testing.T) {
	metrics := metricNames()
	for s, want := range map[string]string{
		"cellkit_router_requests_total":           "metric",
		"cellkit_cell_inquiry_seconds_bucket":     "metric",
		"map_version":                             "", // a log key too
		"cellkit_console":                         "",
		"cellkit_cell_new_total":                  "metric", // a series the catalogue lacks
		"Cellkit-Slot":                            "header",
		"https://cellkit.dev/problems/overloaded": "problem",
		"/v1/admin/status":                        "path",
		"GET /v1/admin/hotkeys":                   "path",
		"/v1/inquiries/":                          "path",
		"/v1/health":                              "path",
		"/v1/health/node/":                        "", // Consul's
		"/v1/status/leader":                       "", // Consul's
		"see GET /v1/admin/slots for the rates":   "",
	} {
		if got := contractKind(s, metrics); got != want {
			t.Errorf("contractKind(%q) = %q, want %q", s, got, want)
		}
	}
}
