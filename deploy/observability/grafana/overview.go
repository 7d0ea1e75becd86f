package grafana

//lint:file-ignore SA1019 the SDK marks its dashboard (v1) builder deprecated in favour of the v2 schema, which Grafana 10 and 11 cannot import; these dashboards are v1 JSON on purpose

import (
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"

	"github.com/cellkit/cellkit/internal/api"
)

// overview is cellkit-overview.json: the edge on one row, then a row per
// cell (repeated by the `cell` variable) with what says whether the cell
// keeps up.
func overview() *dashboard.DashboardBuilder {
	const c = `cell="$cell"`
	return newDashboard("cellkit-overview", "cellkit overview",
		"The router and every cell: answers, latency, queue, sessions, breakers, shedding and the map. One row per cell (the cell variable); cellkit-cell has one cell in detail.", true).
		WithRow(row("Edge")).
		WithPanel(series("Targets up", "Processes Prometheus scrapes, by job (up = 1).", "short", 6,
			q(`sum by (job) (up{job=~"cellkit-.*"})`, "{{job}}"))).
		WithPanel(series("Requests by cell", "Router answers by the cell that served them (none: answered before routing).", "reqps", 6,
			q(`sum by (cell) (`+rate(api.MetricRouterRequests.Name)+`)`, "{{cell}}"))).
		WithPanel(series("Answers by code", "Router answers by status code, all cells.", "reqps", 6,
			q(`sum by (code) (`+rate(api.MetricRouterRequests.Name)+`)`, "{{code}}"))).
		WithPanel(series("Refused at the edge", "Requests refused for their API key (missing 401, unknown 403) or their client's rate limit; connections refused at accept.", "reqps", 6,
			q(`sum by (reason) (`+rate(api.MetricRouterAuthFailures.Name)+`)`, "key {{reason}}"),
			q(`sum(`+rate(api.MetricRouterLimited.Name)+`)`, "rate limited"),
			q(`sum by (reason) (`+rate(api.MetricRouterConnectionsRefused.Name)+`)`, "connection {{reason}}"))).
		WithRow(row("Cell $cell").Repeat("cell")).
		WithPanel(series("Requests by code", "Router answers for this cell, by status code.", "reqps", 6,
			q(`sum by (code) (`+rate(api.MetricRouterRequests.Name+`{`+c+`}`)+`)`, "{{code}}"))).
		WithPanel(series("Latency p50 / p99", "The router's answer time for this cell (the POST: intake, record write and queue), and the inquiry's time from intake to done or failed.", "s", 6,
			q(quantile("0.5", api.MetricRouterRequestSeconds.Name+"_bucket"+`{`+c+`}`), "answer p50"),
			q(quantile("0.99", api.MetricRouterRequestSeconds.Name+"_bucket"+`{`+c+`}`), "answer p99"),
			q(quantile("0.5", api.MetricCellInquirySeconds.Name+"_bucket"+`{`+c+`}`), "inquiry p50"),
			q(quantile("0.99", api.MetricCellInquirySeconds.Name+"_bucket"+`{`+c+`}`), "inquiry p99"))).
		WithPanel(series("Queue depth", "Work messages not yet acked, by lane.", "short", 6,
			q(`sum by (lane) (cellkit_cell_queue_depth{`+c+`})`, "{{lane}}"))).
		WithPanel(series("Oldest pending", "Age of the oldest unacked work message: the cell sheds new inquiries when it passes the age budget (--age-budget).", "s", 6,
			q(`max(cellkit_cell_queue_oldest_age_seconds{`+c+`})`, "oldest"))).
		WithPanel(series("In flight", "Inquiries the workers process; requests the router proxies to the cell, against its bulkhead limit.", "short", 6,
			q(`sum(cellkit_cell_inflight{`+c+`})`, "workers"),
			q(`sum(cellkit_router_in_flight{`+c+`})`, "router to cell"),
			q(`max(cellkit_router_bulkhead_limit{`+c+`})`, "router bulkhead limit"))).
		WithPanel(breakers("Breakers", "The cell's breaker per agency, and the router's breaker for this cell.", 6,
			q(`max by (agency) (cellkit_agency_breaker_state{`+c+`})`, "{{agency}}"),
			q(`max(cellkit_router_breaker_state{`+c+`})`, "router to cell"))).
		WithPanel(series("Sessions in use / pool size", "Agency sessions lent out against the sessions the pool keeps (its quota): in use at the pool size is a saturated pool.", "short", 6,
			q(`sum by (agency) (cellkit_pool_in_use{`+c+`})`, "{{agency}} in use"),
			q(`sum by (agency) (cellkit_pool_size{`+c+`})`, "{{agency}} pool size"))).
		WithPanel(series("Adaptive concurrency limit", "The agency client's concurrency limit: it drops when the agency slows down.", "short", 6,
			q(`max by (agency) (cellkit_agency_concurrency_limit{`+c+`})`, "{{agency}}"))).
		WithPanel(series("Shed share", "Share of the POSTs the cell's intake turned away with 503, and of the router's requests for this cell its guard answered 503 at once (breaker open, bulkhead full).", "percentunit", 6,
			q(`sum(`+rate(api.MetricCellIntakeShed.Name+`{`+c+`}`)+`) / sum(`+rate(api.MetricCellIntakeRequests.Name+`{`+c+`, route="post"}`)+`)`, "cell intake"),
			q(`sum(`+rate(api.MetricRouterShed.Name+`{`+c+`}`)+`) / sum(`+rate(api.MetricRouterRequests.Name+`{`+c+`}`)+`)`, "router guard"))).
		WithPanel(series("Map version", "The cell map version the cell and the router use: they agree within seconds of a change.", "none", 6,
			q(`max(cellkit_cell_map_version{`+c+`})`, "cell"),
			q(`max by (instance) (cellkit_router_map_version)`, "router {{instance}}"))).
		WithPanel(series("Up / ready / intake open", "Scraped (up), ready (/readyz answers 200) and taking inquiries: 1 each on a healthy cell.", "short", 6,
			q(`max(up{job="cellkit-cell", `+c+`})`, "up"),
			q(`max(cellkit_cell_ready{`+c+`})`, "ready"),
			q(`max(cellkit_cell_intake_open{`+c+`})`, "intake open"))).
		WithPanel(series("Failed / dead letters", "Inquiries on the error stream and on the dead-letter stream.", "short", 6,
			q(`max(cellkit_cell_failed_inquiries{`+c+`})`, "failed"),
			q(`max(cellkit_cell_dead_letters{`+c+`})`, "dead letters")))
}
