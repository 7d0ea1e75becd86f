package grafana

//lint:file-ignore SA1019 the SDK marks its dashboard (v1) builder deprecated in favour of the v2 schema, which Grafana 10 and 11 cannot import; these dashboards are v1 JSON on purpose

import (
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"

	"github.com/cellkit/cellkit/internal/api"
)

// cellDetail is cellkit-cell.json: one cell (the `cell` variable) in detail,
// from its intake to its agencies, and the router's view of it.
// One piece: the dashboard's rows in the order they are shown.
func cellDetail() *dashboard.DashboardBuilder {
	const c = `cell="$cell"`
	sel := func(name string, more ...string) string {
		s := name + "{" + c
		for _, m := range more {
			s += ", " + m
		}
		return s + "}"
	}
	sumRate := func(by, name string, more ...string) string {
		return "sum by (" + by + ") (" + rate(sel(name, more...)) + ")"
	}
	return newDashboard("cellkit-cell", "cellkit cell",
		"One cell in detail (the cell variable): intake, queue, pipeline, agencies and sessions, the map, and the router's view of the cell.", false).
		WithRow(row("Intake")).
		WithPanel(series("Intake requests", "Intake API requests by route (post, get, other) and status code.", "reqps", 8,
			q(sumRate("route, code", api.MetricCellIntakeRequests.Name), "{{route}} {{code}}"))).
		WithPanel(series("Intake latency", "Intake API latency by route; a POST includes the synced record write and the PubAck.", "s", 8,
			q(quantile("0.5", sel(api.MetricCellIntakeSeconds.Name+"_bucket"), "route"), "{{route}} p50"),
			q(quantile("0.99", sel(api.MetricCellIntakeSeconds.Name+"_bucket"), "route"), "{{route}} p99"))).
		WithPanel(series("Shed by reason", "Inquiries turned away with 503: age (oldest pending over budget), wait (backlog over budget), depth, full, closed, nats; and refused with 421 (not this cell's user).", "reqps", 8,
			q(sumRate("reason", api.MetricCellIntakeShed.Name), "{{reason}}"),
			q(`sum(`+rate(sel(api.MetricCellIntakeMisdirected.Name))+`)`, "misdirected (421)"))).
		WithRow(row("Queue")).
		WithPanel(series("Queue depth", "Work messages not yet acked, by lane, and messages in the work stream.", "short", 6,
			q(`sum by (lane) (`+sel(api.MetricCellQueueDepth.Name)+`)`, "{{lane}}"),
			q(`max(`+sel(api.MetricCellQueueMessages.Name)+`)`, "stream messages"))).
		WithPanel(series("Oldest pending", "Age of the oldest unacked work message (0 when the queue is empty).", "s", 6,
			q(`max(`+sel(api.MetricCellQueueOldestAgeSeconds.Name)+`)`, "oldest"))).
		WithPanel(series("Drain rate", "Work messages settled per second (the cell's moving average).", "short", 6,
			q(`max(`+sel(api.MetricCellQueueDrainRate.Name)+`)`, "settled/s"))).
		WithPanel(series("Deliveries", "Work messages handled, by outcome: done, failed, dead, retry, interrupted, duplicate, stale, malformed.", "ops", 6,
			q(sumRate("outcome", api.MetricCellDeliveries.Name), "{{outcome}}"))).
		WithRow(row("Pipeline")).
		WithPanel(series("In flight", "Inquiries being processed by the workers.", "short", 6,
			q(`max(`+sel(api.MetricCellInflight.Name)+`)`, "workers"))).
		WithPanel(series("Inquiry latency", "Time from intake to a final status (done or failed); and to handle one work message.", "s", 6,
			q(quantile("0.5", sel(api.MetricCellInquirySeconds.Name+"_bucket")), "inquiry p50"),
			q(quantile("0.99", sel(api.MetricCellInquirySeconds.Name+"_bucket")), "inquiry p99"),
			q(quantile("0.99", sel(api.MetricCellDeliverySeconds.Name+"_bucket", `outcome="done"`)), "delivery p99 (done)"))).
		WithPanel(series("Step p99", "Pipeline step latency (each agency, css, core_banking), waits for a session included.", "s", 6,
			q(quantile("0.99", sel(api.MetricCellStepSeconds.Name+"_bucket"), "step"), "{{step}}"))).
		WithPanel(series("Failures", "Failed pipeline attempts by kind; inquiries on the error and dead-letter streams.", "short", 6,
			q(sumRate("kind", api.MetricCellFailures.Name), "{{kind}} /s"),
			q(`max(`+sel(api.MetricCellFailedInquiries.Name)+`)`, "failed inquiries"),
			q(`max(`+sel(api.MetricCellDeadLetters.Name)+`)`, "dead letters"))).
		WithPanel(series("Callbacks", "Callbacks by outcome: ok, retry, error, refused (an internal address), dropped (queue full).", "ops", 6,
			q(sumRate("outcome", api.MetricCellCallbacks.Name), "{{outcome}}"))).
		WithPanel(series("Ready", "Scraped (up), ready (/readyz answers 200) and taking inquiries (intake open).", "short", 6,
			q(`max(up{job="cellkit-cell", `+c+`})`, "up"),
			q(`max(`+sel(api.MetricCellReady.Name)+`)`, "ready"),
			q(`max(`+sel(api.MetricCellIntakeOpen.Name)+`)`, "intake open"))).
		WithRow(row("Agencies")).
		WithPanel(series("Agency calls", "Agency calls by agency and outcome: ok, code_error, timeout, transport_error, circuit_open, limited, exhausted, canceled.", "ops", 8,
			q(sumRate("agency, outcome", api.MetricAgencyCalls.Name), "{{agency}} {{outcome}}"))).
		WithPanel(series("Agency call p50 / p99", "Agency call latency, rejections included.", "s", 8,
			q(quantile("0.5", sel(api.MetricAgencyCallSeconds.Name+"_bucket"), "agency"), "{{agency}} p50"),
			q(quantile("0.99", sel(api.MetricAgencyCallSeconds.Name+"_bucket"), "agency"), "{{agency}} p99"))).
		WithPanel(breakers("Agency breakers", "Circuit breaker per agency: closed, open (calls fail fast), half-open, forced open, forced closed.", 8,
			q(`max by (agency) (`+sel(api.MetricAgencyBreakerState.Name)+`)`, "{{agency}}"))).
		WithPanel(series("Breaker transitions", "Circuit breaker state changes, by agency and the state entered.", "short", 8,
			q(`sum by (agency, to) (increase(`+sel(api.MetricAgencyBreakerTransitions.Name)+`[$__rate_interval]))`, "{{agency}} to {{to}}"))).
		WithPanel(series("Adaptive concurrency limit", "The agency client's concurrency limit per agency: it drops when the agency slows down.", "short", 8,
			q(`max by (agency) (`+sel(api.MetricAgencyConcurrencyLimit.Name)+`)`, "{{agency}}"))).
		WithPanel(series("Sessions", "Sessions per agency: in use, idle and being dialed against the pool size (its quota); borrowers waiting.", "short", 8,
			q(`sum by (agency) (`+sel(api.MetricPoolInUse.Name)+`)`, "{{agency}} in use"),
			q(`sum by (agency) (`+sel(api.MetricPoolIdle.Name)+`)`, "{{agency}} idle"),
			q(`sum by (agency) (`+sel(api.MetricPoolDialing.Name)+`)`, "{{agency}} dialing"),
			q(`sum by (agency) (`+sel(api.MetricPoolSize.Name)+`)`, "{{agency}} pool size"),
			q(`sum by (agency) (`+sel(api.MetricPoolWaiters.Name)+`)`, "{{agency}} waiters"))).
		WithPanel(series("Session wait p99", "Time a borrower waited for a session, successful or not.", "s", 8,
			q(quantile("0.99", sel(api.MetricPoolWaitSeconds.Name+"_bucket"), "agency"), "{{agency}}"))).
		WithPanel(series("Session events", "Sessions established, reused, closed broken or retired, failed dials and borrows that hit their deadline.", "ops", 8,
			q(sumRate("agency", api.MetricPoolCreated.Name), "{{agency}} created"),
			q(sumRate("agency", api.MetricPoolReused.Name), "{{agency}} reused"),
			q(sumRate("agency", api.MetricPoolBroken.Name), "{{agency}} broken"),
			q(sumRate("agency", api.MetricPoolRetired.Name), "{{agency}} retired"),
			q(sumRate("agency", api.MetricPoolDialErrors.Name), "{{agency}} dial errors"),
			q(sumRate("agency", api.MetricPoolExhausted.Name), "{{agency}} exhausted"))).
		WithPanel(series("Heartbeats", "Heartbeats sent on idle sessions.", "ops", 8,
			q(sumRate("agency", api.MetricPoolHeartbeats.Name), "{{agency}}"))).
		WithRow(row("Map")).
		WithPanel(series("Map version", "The cell map version this cell and the router use.", "none", 8,
			q(`max(`+sel(api.MetricPrefixCell+api.MetricMapVersion.Name)+`)`, "cell"),
			q(`max by (instance) (cellkit_router_map_version)`, "router {{instance}}"))).
		WithPanel(series("Map age", "Seconds since the last successful registry round trip; stale (1) while the map is unconfirmed past the threshold (the cell keeps serving it).", "s", 8,
			q(`max(`+sel(api.MetricPrefixCell+api.MetricMapAgeSeconds.Name)+`)`, "age"),
			q(`max(`+sel(api.MetricPrefixCell+api.MetricMapStale.Name)+`)`, "stale"))).
		WithPanel(series("Map updates and sync errors", "New map versions installed and registry round trips that failed.", "short", 8,
			q(`sum(increase(`+sel(api.MetricPrefixCell+api.MetricMapUpdates.Name)+`[$__rate_interval]))`, "updates"),
			q(`sum(increase(`+sel(api.MetricPrefixCell+api.MetricMapSyncErrors.Name)+`[$__rate_interval]))`, "sync errors"))).
		WithRow(row("Router to this cell")).
		WithPanel(series("Answers by code", "The router's answers for this cell, by status code.", "reqps", 8,
			q(`sum by (code) (`+rate(sel(api.MetricRouterRequests.Name))+`)`, "{{code}}"))).
		WithPanel(series("Answer p50 / p99", "Time from a request's arrival at the router to its answer.", "s", 8,
			q(quantile("0.5", sel(api.MetricRouterRequestSeconds.Name+"_bucket")), "p50"),
			q(quantile("0.99", sel(api.MetricRouterRequestSeconds.Name+"_bucket")), "p99"))).
		WithPanel(series("In flight / bulkhead", "Requests the router proxies to the cell, against its bulkhead limit.", "short", 8,
			q(`sum(`+sel(api.MetricRouterInFlight.Name)+`)`, "in flight"),
			q(`max(`+sel(api.MetricRouterBulkheadLimit.Name)+`)`, "bulkhead limit"))).
		WithPanel(breakers("Router breaker", "The router's circuit breaker for this cell.", 8,
			q(`max(`+sel(api.MetricRouterBreakerState.Name)+`)`, "router to cell"))).
		WithPanel(series("Shed and errors", "Requests the router's guard answered 503 at once (breaker, bulkhead), calls that got no answer (timeout, connection), and 421 answers (the map changed).", "reqps", 8,
			q(sumRate("reason", api.MetricRouterShed.Name), "shed {{reason}}"),
			q(sumRate("kind", api.MetricRouterUpstreamErrors.Name), "no answer: {{kind}}"),
			q(`sum(`+rate(sel(api.MetricRouterMisdirected.Name))+`)`, "misdirected (421)")))
}
