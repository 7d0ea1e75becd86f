package api

// The metrics one process exports and another reads — the rollout's
// gates (internal/gate) and the console's rates read the cells' and the
// routers' scrapes — declared once: the exporter registers the name
// declared here and every reader reads it, so a renamed series renames
// it for both (docs/metrics.md describes each). The labels each reader
// reads are named beside it.
const (
	// MetricCellIntakeRequests counts the intake's answers (route, code).
	MetricCellIntakeRequests = "cellkit_cell_intake_requests_total"
	// MetricCellIntakeSeconds is the intake's latency (route).
	MetricCellIntakeSeconds = "cellkit_cell_intake_seconds"
	// MetricCellIntakeShed counts the intake's refusals (reason).
	MetricCellIntakeShed = "cellkit_cell_intake_shed_total"
	// MetricCellDeliveries counts the pipeline's deliveries (outcome).
	MetricCellDeliveries = "cellkit_cell_deliveries_total"
	// MetricCellPanics counts the pipeline's recovered panics.
	MetricCellPanics = "cellkit_cell_panics_total"
	// MetricCellInquirySeconds is an inquiry's time to done.
	MetricCellInquirySeconds = "cellkit_cell_inquiry_seconds"
	// MetricCellReady is 1 while the cell's readiness passes.
	MetricCellReady = "cellkit_cell_ready"

	// MetricRouterRequests counts the router's answers (cell, code).
	MetricRouterRequests = "cellkit_router_requests_total"
	// MetricRouterRequestSeconds is the router's latency (cell).
	MetricRouterRequestSeconds = "cellkit_router_request_duration_seconds"
	// MetricRouterShed counts the router's refusals (cell, reason).
	MetricRouterShed = "cellkit_router_shed_total"
	// MetricRouterBreakerState is the router's breaker of each cell
	// (cell): 0 closed, 1 open, 2 half-open, 3 forced open.
	MetricRouterBreakerState = "cellkit_router_breaker_state"

	// MetricProcessStarted is client_golang's process collector's start
	// time of the process (Unix seconds): a change is a restart.
	MetricProcessStarted = "process_start_time_seconds"
)
