package problem

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The type URIs are a public contract and docs/problems.md is its
// catalogue: every type defined here has its row there, every row names
// a type defined here, and the statuses a row gives include the one the
// definition's comment names.
func TestCatalogueMatchesTheTypes(t *testing.T) {
	defined := definedTypes(t)
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "problems.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9-]+)` \\| ([^|]+) \\|")
	documented := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		if _, dup := documented[m[1]]; dup {
			t.Errorf("docs/problems.md lists %s twice", m[1])
		}
		documented[m[1]] = m[2]
	}
	for _, name := range slices.Sorted(maps.Keys(defined)) {
		statuses, ok := documented[name]
		if !ok {
			t.Errorf("problem type %s is not in docs/problems.md", name)
			continue
		}
		if want := defined[name]; want != "" && !strings.Contains(statuses, want) {
			t.Errorf("docs/problems.md gives %s the statuses %q; its definition says %s", name, strings.TrimSpace(statuses), want)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(documented)) {
		if _, ok := defined[name]; !ok {
			t.Errorf("docs/problems.md lists %s, which internal/problem does not define", name)
		}
	}
	if len(defined) < 30 {
		t.Fatalf("found %d problem types in problem.go: the parse is wrong", len(defined))
	}
}

// definedTypes reads the constants TypeBase + "name" of problem.go: name
// → the status its comment starts with ("" when the comment names none).
func definedTypes(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "problem.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	status := regexp.MustCompile(`^([1-5][0-9][0-9])\b`)
	out := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Values) != 1 {
			return true
		}
		bin, ok := vs.Values[0].(*ast.BinaryExpr)
		if !ok || bin.Op != token.ADD {
			return true
		}
		if id, ok := bin.X.(*ast.Ident); !ok || id.Name != "TypeBase" {
			return true
		}
		lit, ok := bin.Y.(*ast.BasicLit)
		if !ok {
			return true
		}
		name, err := strconv.Unquote(lit.Value)
		if err != nil {
			t.Fatal(err)
		}
		code := ""
		if vs.Comment != nil {
			if m := status.FindStringSubmatch(strings.TrimSpace(vs.Comment.Text())); m != nil {
				code = m[1]
			}
		}
		out[name] = code
		return true
	})
	return out
}
