package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestEveryMetricListed checks that every MetricSpec this package declares
// is in the catalogue's lists (Metrics, ThirdPartyMetrics, or the registry
// readers' under a prefix): an entry left out of them would escape the
// tests that hold the docs and the pack to the catalogue.
func TestEveryMetricListed(t *testing.T) {
	listed := map[string]bool{}
	for _, m := range append(append(Metrics(), ThirdPartyMetrics()...), append(mapMetrics(), rolloutMetrics()...)...) {
		listed[m.Name] = true
	}
	fset := token.NewFileSet()
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	declared := 0
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			if id, ok := lit.Type.(*ast.Ident); !ok || id.Name != "MetricSpec" {
				return true
			}
			for _, e := range lit.Elts {
				kv, ok := e.(*ast.KeyValueExpr)
				if !ok || kv.Key.(*ast.Ident).Name != "Name" {
					continue
				}
				bl, ok := kv.Value.(*ast.BasicLit)
				if !ok {
					continue
				}
				name, _ := strconv.Unquote(bl.Value)
				declared++
				if !listed[name] {
					t.Errorf("%s: %s is in none of the catalogue's lists", fset.Position(lit.Pos()), name)
				}
			}
			return true
		})
	}
	if declared < 100 {
		t.Errorf("found %d declared entries, want the whole catalogue's", declared)
	}
}
