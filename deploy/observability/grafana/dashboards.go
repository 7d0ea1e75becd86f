// Package grafana builds cellkit's Grafana dashboards from Go, with the
// Grafana Foundation SDK, so that their queries live in code a test can
// check: the JSON files next to this one are what Dashboards returns
// (`go generate ./deploy/observability/grafana` rewrites them; a test fails
// when they differ), and the live test in deploy/observability checks every
// metric and label their queries use against what a running stack exports.
//
// Every panel and query reads the data source of the `datasource` variable
// (any Prometheus); cells are chosen with the `cell` variable, whose values
// are the cell labels of cellkit_cell_ready.
package grafana

//lint:file-ignore SA1019 the SDK marks its dashboard (v1) builder deprecated in favour of the v2 schema, which Grafana 10 and 11 cannot import; these dashboards are v1 JSON on purpose

//go:generate go run gen.go

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/statetimeline"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// File is one dashboard: its file name in this directory and its JSON.
type File struct {
	Name string
	JSON []byte
}

// Dashboards builds every dashboard, as committed in this directory.
func Dashboards() ([]File, error) {
	var files []File
	for _, d := range []struct {
		name  string
		build func() *dashboard.DashboardBuilder
	}{
		{"cellkit-overview.json", overview},
		{"cellkit-cell.json", cellDetail},
	} {
		b, err := render(d.build())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.name, err)
		}
		files = append(files, File{Name: d.name, JSON: b})
	}
	return files, nil
}

// render builds the dashboard, numbers its panels 1.. in order and writes
// it as indented JSON.
func render(b *dashboard.DashboardBuilder) ([]byte, error) {
	d, err := b.Build()
	if err != nil {
		return nil, err
	}
	id := uint32(0)
	for _, p := range d.Panels {
		id++
		switch {
		case p.Panel != nil:
			p.Panel.Id = cog.ToPtr(id)
		case p.RowPanel != nil:
			p.RowPanel.Id = id
		}
	}
	out, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// The data source every panel and query uses: the `datasource` variable's.
var datasource = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

// newDashboard is a dashboard with the `datasource` variable and the `cell`
// variable (several cells, all by default, when multi).
func newDashboard(uid, title, description string, multi bool) *dashboard.DashboardBuilder {
	cell := dashboard.NewQueryVariableBuilder("cell").
		Label("cell").
		Datasource(datasource).
		Query(dashboard.StringOrMap{String: cog.ToPtr("label_values(cellkit_cell_ready, cell)")}).
		Definition("label_values(cellkit_cell_ready, cell)").
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortNaturalAsc).
		Multi(multi).
		IncludeAll(multi)
	if multi {
		cell = cell.Current(dashboard.VariableOption{
			Selected: cog.ToPtr(true),
			Text:     dashboard.StringOrArrayOfString{ArrayOfString: []string{"All"}},
			Value:    dashboard.StringOrArrayOfString{ArrayOfString: []string{"$__all"}},
		})
	}
	return dashboard.NewDashboardBuilder(title).
		Uid(uid).
		Description(description).
		Tags([]string{"cellkit"}).
		Editable().
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Refresh("10s").
		Time("now-30m", "now").
		Timezone(common.TimeZoneBrowser).
		// Grafana's own annotations (alerts, annotations made by hand), as
		// a dashboard saved by Grafana has them.
		Annotation(dashboard.NewAnnotationQueryBuilder().
			Name("Annotations & Alerts").
			Datasource(common.DataSourceRef{Type: cog.ToPtr("grafana"), Uid: cog.ToPtr("-- Grafana --")}).
			Type("dashboard").
			BuiltIn(1).
			Enable(true).
			Hide(true).
			IconColor("rgba(0, 211, 255, 1)")).
		// A release going out: each wave's start and each halt, from the
		// routers' view of the rollout's record.
		Annotation(dashboard.NewAnnotationQueryBuilder().
			Name("Rollout waves").
			Datasource(datasource).
			Enable(true).
			IconColor("rgba(255, 152, 48, 1)").
			Expr("changes(max(cellkit_router_rollout_wave)[1m:15s]) > 0").
			Step("15s").
			TitleFormat("rollout: the next wave")).
		Annotation(dashboard.NewAnnotationQueryBuilder().
			Name("Rollout halts").
			Datasource(datasource).
			Enable(true).
			IconColor("rgba(242, 73, 92, 1)").
			Expr(`max(cellkit_router_rollout_state{state="halted"}) == 1`).
			Step("15s").
			TitleFormat("rollout halted: rolling the wave back")).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").
			Label("Prometheus").
			Type("prometheus")).
		WithVariable(cell)
}

// q is a range query on the dashboard's data source.
func q(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Datasource(datasource).Expr(expr).LegendFormat(legend).Range()
}

// refIDs names the queries A, B, C...
func refIDs(qs []*prometheus.DataqueryBuilder) []cog.Builder[variants.Dataquery] {
	out := make([]cog.Builder[variants.Dataquery], len(qs))
	for i, x := range qs {
		out[i] = x.RefId(string(rune('A' + i)))
	}
	return out
}

// series is a time series panel, w grid units wide (of 24) and 7 high.
func series(title, description, unit string, w uint32, qs ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	return timeseries.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource).
		Unit(unit).
		Min(0).
		Span(w).
		Height(7).
		FillOpacity(10).
		ShowPoints(common.VisibilityModeNever).
		Legend(common.NewVizLegendOptionsBuilder().
			DisplayMode(common.LegendDisplayModeList).
			Placement(common.LegendPlacementBottom).
			ShowLegend(true)).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending)).
		Targets(refIDs(qs))
}

// breakerStates are the values of every breaker state gauge.
var breakerStates = []struct{ text, color string }{
	{"closed", "green"}, {"open", "red"}, {"half-open", "orange"}, {"forced open", "purple"}, {"forced closed", "blue"},
}

// breakers is a state timeline of breaker state gauges (0 closed, 1 open,
// 2 half-open, 3 forced open, 4 forced closed).
func breakers(title, description string, w uint32, qs ...*prometheus.DataqueryBuilder) *statetimeline.PanelBuilder {
	m := dashboard.NewValueMap()
	for i, s := range breakerStates {
		m.Options[fmt.Sprint(i)] = dashboard.ValueMappingResult{Text: cog.ToPtr(s.text), Color: cog.ToPtr(s.color), Index: cog.ToPtr(int32(i))}
	}
	return statetimeline.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource).
		Span(w).
		Height(7).
		Mappings([]dashboard.ValueMapping{{ValueMap: m}}).
		ColorScheme(dashboard.NewFieldColorBuilder().Mode(dashboard.FieldColorModeIdThresholds)).
		Thresholds(dashboard.NewThresholdsConfigBuilder().
			Mode(dashboard.ThresholdsModeAbsolute).
			Steps([]dashboard.Threshold{{Color: "green"}, {Value: cog.ToPtr(1.0), Color: "red"}})).
		ShowValue(common.VisibilityModeNever).
		MergeValues(true).
		Legend(common.NewVizLegendOptionsBuilder().
			DisplayMode(common.LegendDisplayModeList).
			Placement(common.LegendPlacementBottom).
			ShowLegend(true)).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeSingle).Sort(common.SortOrderNone)).
		Targets(refIDs(qs))
}

// row is a row header; the panels added after it, up to the next row,
// are its panels (an expanded row).
func row(title string) *dashboard.RowBuilder {
	return dashboard.NewRowBuilder(title)
}

// rate is the per-second rate of a counter over Grafana's rate interval.
func rate(sel string) string { return "rate(" + sel + "[$__rate_interval])" }

// quantile is a quantile of a histogram's buckets, summed by le and by.
func quantile(phi, bucket string, by ...string) string {
	return fmt.Sprintf("histogram_quantile(%s, sum by (%s) (%s))", phi, strings.Join(append(by, "le"), ", "), rate(bucket))
}
