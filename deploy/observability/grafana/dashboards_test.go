package grafana

//lint:file-ignore SA1019 the SDK marks its dashboard (v1) builder deprecated in favour of the v2 schema, which Grafana 10 and 11 cannot import; these dashboards are v1 JSON on purpose

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// TestCommittedDashboards fails when a committed dashboard is not what the
// code builds: edit the Go code, then `go generate ./deploy/observability/grafana`.
func TestCommittedDashboards(t *testing.T) {
	files, err := Dashboards()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		t.Run(f.Name, func(t *testing.T) {
			got, err := os.ReadFile(f.Name)
			if err != nil {
				t.Fatalf("%v: run go generate ./deploy/observability/grafana", err)
			}
			if !bytes.Equal(got, f.JSON) {
				t.Fatalf("%s differs from what the code builds (first at line %d): run go generate ./deploy/observability/grafana",
					f.Name, firstDiffLine(got, f.JSON))
			}
		})
	}
}

func firstDiffLine(a, b []byte) int {
	la, lb := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			return i + 1
		}
	}
	return min(len(la), len(lb)) + 1
}

// board is the part of a dashboard's JSON the checks read.
type board struct {
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *dsRef          `json:"datasource"`
			Multi      bool            `json:"multi"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID         int    `json:"id"`
		Type       string `json:"type"`
		Title      string `json:"title"`
		Repeat     string `json:"repeat"`
		Datasource *dsRef `json:"datasource"`
		GridPos    struct {
			X, Y, W, H int
		} `json:"gridPos"`
		Targets []struct {
			RefID      string `json:"refId"`
			Expr       string `json:"expr"`
			Datasource *dsRef `json:"datasource"`
		} `json:"targets"`
	} `json:"panels"`
}

type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func (d *dsRef) isVariable() bool {
	return d != nil && d.Type == "prometheus" && d.UID == "${datasource}"
}

// TestDashboardsShape checks what Grafana needs of every dashboard: the
// SDK's schema (strict), a schema version of Grafana 11 or later, a
// Prometheus `datasource` variable that every panel and query uses, a `cell`
// variable, unique panel ids, panels inside the 24-unit grid, a query in
// every panel.
func TestDashboardsShape(t *testing.T) {
	plugins.RegisterDefaultPlugins() // the SDK's panel and query types, for the strict decoding
	files, err := Dashboards()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		t.Run(f.Name, func(t *testing.T) {
			var sdk dashboard.Dashboard
			// The SDK returns its error list typed even when it is empty.
			if err := sdk.UnmarshalJSONStrict(f.JSON); err != nil {
				if errs, ok := err.(cog.BuildErrors); !ok || len(errs) > 0 {
					t.Fatalf("strict decoding with the SDK: %v", err)
				}
			}
			if err := sdk.Validate(); err != nil {
				t.Fatalf("the SDK's validation: %v", err)
			}
			var b board
			if err := json.Unmarshal(f.JSON, &b); err != nil {
				t.Fatal(err)
			}
			if b.UID == "" || strings.TrimSuffix(f.Name, ".json") != b.UID {
				t.Errorf("uid %q, want the file's name without .json", b.UID)
			}
			if b.SchemaVersion < 39 {
				t.Errorf("schemaVersion %d, want 39 (Grafana 11) or later", b.SchemaVersion)
			}
			vars := map[string]string{}
			for _, v := range b.Templating.List {
				vars[v.Name] = v.Type
				switch v.Name {
				case "datasource":
					if v.Type != "datasource" || string(v.Query) != `"prometheus"` {
						t.Errorf("variable datasource: type %q, query %s; want a data source variable of type prometheus", v.Type, v.Query)
					}
				case "cell":
					if v.Type != "query" || !v.Datasource.isVariable() {
						t.Errorf("variable cell: type %q, datasource %+v; want a query on ${datasource}", v.Type, v.Datasource)
					}
				}
			}
			if vars["datasource"] == "" || vars["cell"] == "" {
				t.Errorf("variables %v, want datasource and cell", vars)
			}
			ids := map[int]bool{}
			for _, p := range b.Panels {
				if ids[p.ID] || p.ID == 0 {
					t.Errorf("panel %q: id %d is zero or taken", p.Title, p.ID)
				}
				ids[p.ID] = true
				if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
					t.Errorf("panel %q: gridPos %+v is outside the 24-unit grid", p.Title, p.GridPos)
				}
				if p.Repeat != "" && vars[p.Repeat] == "" {
					t.Errorf("panel %q repeats by %q, no such variable", p.Title, p.Repeat)
				}
				if p.Type == "row" {
					continue
				}
				if p.Title == "" || len(p.Targets) == 0 {
					t.Errorf("panel %d: title %q and %d queries, want a title and a query", p.ID, p.Title, len(p.Targets))
				}
				if !p.Datasource.isVariable() {
					t.Errorf("panel %q: datasource %+v, want ${datasource}", p.Title, p.Datasource)
				}
				refs := map[string]bool{}
				for _, q := range p.Targets {
					if !q.Datasource.isVariable() || q.Expr == "" || q.RefID == "" || refs[q.RefID] {
						t.Errorf("panel %q: query %+v, want an expression on ${datasource} with its own refId", p.Title, q)
					}
					refs[q.RefID] = true
				}
			}
		})
	}
}

// TestOverviewRepeatsCells checks that the overview has a row repeated by
// the cell variable, with panels under it reading $cell.
func TestOverviewRepeatsCells(t *testing.T) {
	b, err := render(overview())
	if err != nil {
		t.Fatal(err)
	}
	var d board
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	inCell, panels := false, 0
	for _, p := range d.Panels {
		if p.Type == "row" {
			inCell = p.Repeat == "cell"
			continue
		}
		if !inCell {
			continue
		}
		panels++
		for _, q := range p.Targets {
			if !strings.Contains(q.Expr, `cell="$cell"`) && !strings.Contains(q.Expr, "cellkit_router_map_version") {
				t.Errorf("panel %q in the cell row: %s does not select the row's cell", p.Title, q.Expr)
			}
		}
	}
	if panels == 0 {
		t.Fatal("no row repeated by the cell variable, or no panels under it")
	}
}
