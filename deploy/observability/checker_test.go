package observability

import (
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/promql/parser"
)

// fakeCell and fakeRouter are a cell's and a router's exposition, as the checker's tests
// see a stack.
const (
	fakeCell = `# HELP cellkit_cell_queue_depth Work messages not yet acked, by lane.
# TYPE cellkit_cell_queue_depth gauge
cellkit_cell_queue_depth{cell="c1",lane="high"} 0
# HELP cellkit_cell_inquiry_seconds Time from intake to a final status.
# TYPE cellkit_cell_inquiry_seconds histogram
cellkit_cell_inquiry_seconds_bucket{cell="c1",le="0.5"} 1
cellkit_cell_inquiry_seconds_bucket{cell="c1",le="+Inf"} 1
cellkit_cell_inquiry_seconds_sum{cell="c1"} 0.3
cellkit_cell_inquiry_seconds_count{cell="c1"} 1
# HELP cellkit_pool_size Sessions the pool keeps.
# TYPE cellkit_pool_size gauge
cellkit_pool_size{agency="kcb",cell="c1"} 20
`
	fakeRouter = `# HELP cellkit_router_requests_total Answers by cell and status code.
# TYPE cellkit_router_requests_total counter
cellkit_router_requests_total{cell="c1",code="202"} 3
`
)

func fakeExports(t *testing.T) *exports {
	t.Helper()
	x := newExports([]target{
		{Targets: []string{"127.0.0.1:1"}, Labels: map[string]string{"job": "cellkit-cell", "cell": "c1"}},
		{Targets: []string{"127.0.0.1:2"}, Labels: map[string]string{"job": "cellkit-router"}},
	})
	x.rare = map[string]*family{
		"cellkit_router_limited_total": {typ: dto.MetricType_COUNTER, jobs: setOf("cellkit-router"), labels: setOf("client")},
	}
	if err := x.add("cellkit-cell", []byte(fakeCell)); err != nil {
		t.Fatal(err)
	}
	if err := x.add("cellkit-router", []byte(fakeRouter)); err != nil {
		t.Fatal(err)
	}
	return x
}

// TestChecker checks what the live test reports, on a fake stack: each
// case is one expression (after a recording rule that defines
// cell:requests:rate5m) and the problem it must report, "" for none.
func TestChecker(t *testing.T) {
	for _, tc := range []struct {
		name, expr, legend, want string
	}{
		{"gauge", `sum by (lane) (cellkit_cell_queue_depth{cell="c1"})`, "{{lane}}", ""},
		{"histogram buckets", `histogram_quantile(0.99, sum by (cell, le) (rate(cellkit_cell_inquiry_seconds_bucket[5m])))`, "{{cell}}", ""},
		{"histogram count", `rate(cellkit_cell_inquiry_seconds_count[5m])`, "", ""},
		{"up and target labels", `up{job="cellkit-cell", cell="c1"} == 0`, "{{instance}}", ""},
		{"recorded", `cell:requests:rate5m{cell="c1"} > 0`, "{{cell}} {{team}}", ""},
		{"rare, from the catalogue", `sum by (client) (rate(cellkit_router_limited_total[5m]))`, "", ""},
		{"group_left", `cellkit_pool_size / on (cell) group_left () sum by (cell) (cellkit_cell_queue_depth)`, "{{agency}}", ""},
		{"renamed metric", `cellkit_cell_queue_length{cell="c1"}`, "", "metric cellkit_cell_queue_length is not exported"},
		{"sum of a bucket-less histogram", `histogram_quantile(0.5, rate(cellkit_cell_inquiry_seconds_sum[5m]))`, "", "histogram_quantile uses label le"},
		{"unknown matcher label", `cellkit_cell_queue_depth{priority="high"}`, "", "cellkit_cell_queue_depth has no label priority"},
		{"unknown by label", `sum by (agency) (cellkit_cell_queue_depth)`, "", "sum by (agency) uses label agency"},
		{"label gone after sum", `sum(cellkit_pool_size)`, "{{agency}}", `legend "{{agency}}" names label agency`},
		{"unknown job", `up{job="cellkit-cells"}`, "", `matches no job of the targets file`},
		{"on a label one side lacks", `cellkit_pool_size / on (agency) cellkit_cell_queue_depth`, "", "/ on (right) uses label agency"},
		{"agencysim label on a router metric", `cellkit_router_requests_total{agency="kcb"}`, "", "cellkit_router_requests_total has no label agency"},
		{"label_replace source", `label_replace(cellkit_pool_size, "a", "$1", "agencyy", "(.*)")`, "{{a}}", "label_replace uses label agencyy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newChecker(fakeExports(t))
			rec := packExpr{where: "record", record: "cell:requests:rate5m", labels: map[string]string{"team": "x"},
				expr: mustParse(t, `sum by (cell) (rate(cellkit_router_requests_total[5m]))`)}
			c.check(rec)
			c.check(packExpr{where: "test", text: tc.expr, expr: mustParse(t, tc.expr), legend: tc.legend})
			got := strings.Join(c.problems, "\n")
			switch {
			case tc.want == "" && got != "":
				t.Errorf("check(%s) reported:\n%s\nwant nothing", tc.expr, got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Errorf("check(%s) reported %q, want %q", tc.expr, got, tc.want)
			}
		})
	}
}

func mustParse(t *testing.T, q string) parser.Expr {
	t.Helper()
	e, err := promql.ParseExpr(q)
	if err != nil {
		t.Fatalf("parse %s: %v", q, err)
	}
	return e
}
