package api

// The router's series (docs/metrics.md, "router"). The map follower's and
// the rollout watch's are MetricMap… and MetricRollout… under
// MetricPrefixRouter (RouterMetrics).
var (
	MetricRouterAcceptErrors = MetricSpec{
		Name: "cellkit_router_accept_errors_total",
		Type: Counter,
		Help: "Errors accepting a client connection (EMFILE, ENFILE, ENOMEM, ENOBUFS...); each is retried after a backoff.",
	}
	MetricRouterAuthFailures = MetricSpec{
		Name:   "cellkit_router_auth_failures_total",
		Type:   Counter,
		Help:   "Requests refused for a missing (401) or unknown (403) API key.",
		Labels: []string{LabelReason},
	}
	MetricRouterBreakerState = MetricSpec{
		Name:   "cellkit_router_breaker_state",
		Type:   Gauge,
		Help:   "The cell's circuit breaker: 0 closed, 1 open, 2 half-open, 3 forced open, 4 forced closed.",
		Labels: []string{LabelCell},
	}
	MetricRouterBulkheadLimit = MetricSpec{
		Name:   "cellkit_router_bulkhead_limit",
		Type:   Gauge,
		Help:   "Most requests the router proxies to the cell at once.",
		Labels: []string{LabelCell},
	}
	MetricRouterCellPeeks = MetricSpec{
		Name: "cellkit_router_cell_peeks_total",
		Type: Counter,
		Help: "System calls asking the kernel whether a cell wrote unasked bytes to a kept-alive connection before a call: once per connection to a cell that echoes Cellkit-Call, once per call to one that does not.",
	}
	MetricRouterConnectionsEvicted = MetricSpec{
		Name: "cellkit_router_connections_evicted_total",
		Type: Counter,
		Help: "Idle client connections closed to make room for a new one at the connection limit.",
	}
	MetricRouterConnectionsRefused = MetricSpec{
		Name:   "cellkit_router_connections_refused_total",
		Type:   Counter,
		Help:   "Client connections closed as soon as accepted: reason max_conns (no room, none idle to evict), per_addr (the address's cap) or draining.",
		Labels: []string{LabelReason},
	}
	MetricRouterDeduped = MetricSpec{
		Name: "cellkit_router_deduped_total",
		Type: Counter,
		Help: "New inquiries answered from the same client's inquiry with the same Idempotency-Key and body still in flight at this router, not sent to the cell again.",
	}
	MetricRouterGeneration = MetricSpec{
		Name: "cellkit_router_generation",
		Type: Gauge,
		Help: "How many routers in a row have served these listening sockets on this host: 1 for a router that listened afresh, its predecessor's + 1 for one that took them over.",
	}
	MetricRouterHandoffCutConnections = MetricSpec{
		Name: "cellkit_router_handoff_cut_connections_total",
		Type: Counter,
		Help: "Client connections a router that handed over still had at --shutdown-timeout, closed then.",
	}
	MetricRouterHandoffDrainedConnections = MetricSpec{
		Name:   "cellkit_router_handoff_drained_connections_total",
		Type:   Counter,
		Help:   "Client connections a router that handed over closed without cutting a request: after_answer (told Connection: close) or idle (kept alive and idle for a second).",
		Labels: []string{LabelHow},
	}
	MetricRouterHandoffOffering = MetricSpec{
		Name: "cellkit_router_handoff_offering",
		Type: Gauge,
		Help: "1 while the router offers its sockets to a successor at --handoff-socket.",
	}
	MetricRouterHandoffs = MetricSpec{
		Name:   "cellkit_router_handoffs_total",
		Type:   Counter,
		Help:   "Successors that came for the router's sockets: handed_over (the successor serves; this router drains and ends) or failed (it ended, refused them or was not ready within --handoff-wait; this router serves on).",
		Labels: []string{LabelOutcome},
	}
	MetricRouterInFlight = MetricSpec{
		Name:   "cellkit_router_in_flight",
		Type:   Gauge,
		Help:   "Requests being proxied to the cell.",
		Labels: []string{LabelCell},
	}
	MetricRouterInstanceEjections = MetricSpec{
		Name:   "cellkit_router_instance_ejections_total",
		Type:   Counter,
		Help:   "Times an instance of a cell was taken out of the rotation: for failing calls (a cell of several instances), or for missing its health checks (any cell).",
		Labels: []string{LabelCell},
	}
	MetricRouterInstanceShedRetries = MetricSpec{
		Name:   "cellkit_router_instance_shed_retries_total",
		Type:   Counter,
		Help:   "Requests an instance of a cell of several shed (503, Cellkit-Overloaded) that were sent once to another of its instances.",
		Labels: []string{LabelCell},
	}
	MetricRouterLimited = MetricSpec{
		Name:   "cellkit_router_limited_total",
		Type:   Counter,
		Help:   "Requests refused with 429 by the client's rate limit.",
		Labels: []string{LabelClient},
	}
	MetricRouterLoopBatchedOps = MetricSpec{
		Name:   "cellkit_router_loop_batched_ops_total",
		Type:   Counter,
		Help:   "Socket reads and writes the event loops made in batches (cellkit_router_loop_batches_total), by op.",
		Labels: []string{LabelOp},
	}
	MetricRouterLoopBatches = MetricSpec{
		Name: "cellkit_router_loop_batches_total",
		Type: Counter,
		Help: "io_uring calls of the event loops, each a system call carrying a round's reads or its writes (two or more; one is a read or write call of its own). None where the kernel refuses io_uring.",
	}
	MetricRouterLoopWaits = MetricSpec{
		Name: "cellkit_router_loop_waits_total",
		Type: Counter,
		Help: "epoll_wait calls of the event loops, each a system call: a loop makes one per wake-up.",
	}
	MetricRouterMapRefreshes = MetricSpec{
		Name:   "cellkit_router_map_refreshes_total",
		Type:   Counter,
		Help:   "Registry reads forced by a 421: result newer, same or error.",
		Labels: []string{LabelResult},
	}
	MetricRouterMisdirected = MetricSpec{
		Name:   "cellkit_router_misdirected_total",
		Type:   Counter,
		Help:   "421 Misdirected Request answers from a cell (each refreshes the map and retries once).",
		Labels: []string{LabelCell},
	}
	MetricRouterPanics = MetricSpec{
		Name: "cellkit_router_panics_total",
		Type: Counter,
		Help: "Panics recovered in the event loops (each closed the connection it happened on).",
	}
	MetricRouterProbes = MetricSpec{
		Name:   "cellkit_router_probes_total",
		Type:   Counter,
		Help:   "Health checks of a cell's instances (GET /v1/health on a connection of their own), by result: ok, missed (no answer within the probe timeout), refused (no process listens), unhealthy (a 5xx: alive, cannot take work) or skipped (the router could not open a socket: its own open-file limit or memory; not held against the cell).",
		Labels: []string{LabelCell, LabelResult},
	}
	MetricRouterQuotaBadLeases = MetricSpec{
		Name: "cellkit_router_quota_bad_leases_total",
		Type: Counter,
		Help: "Other routers' quota leases read and not believed (malformed, out of bounds).",
	}
	MetricRouterQuotaEvenSplit = MetricSpec{
		Name: "cellkit_router_quota_even_split",
		Type: Gauge,
		Help: "1 while the router's quota lease has lapsed and every client's quota is split evenly over the routers it last counted.",
	}
	MetricRouterQuotaLeaseAgeSeconds = MetricSpec{
		Name: "cellkit_router_quota_lease_age_seconds",
		Type: Gauge,
		Help: "Seconds since the write of the router's last quota lease was sent (-1: none yet). Past its lease (4 rounds by default) the router splits every quota evenly.",
	}
	MetricRouterQuotaOvercommitRatio = MetricSpec{
		Name: "cellkit_router_quota_overcommit_ratio",
		Type: Gauge,
		Help: "The largest excess, over all clients, of the shares the live routers hold together over the whole quota (0: none), as of the last round: the estimate of over-admission.",
	}
	MetricRouterQuotaRounds = MetricSpec{
		Name:   "cellkit_router_quota_rounds_total",
		Type:   Counter,
		Help:   "Lease rounds of the router's quota sharing, by result: ok, unread (the others' leases could not be read: shares held), unwritten (its lease could not be written: no share raised; past its lease the quotas are split evenly).",
		Labels: []string{LabelResult},
	}
	MetricRouterQuotaRouters = MetricSpec{
		Name: "cellkit_router_quota_routers",
		Type: Gauge,
		Help: "Routers sharing the quotas as this one counted them at its last round, itself included.",
	}
	MetricRouterQuotaShare = MetricSpec{
		Name:   "cellkit_router_quota_share",
		Type:   Gauge,
		Help:   "The fraction of the client's quota (rate and burst) this router holds, as of its last round.",
		Labels: []string{LabelClient},
	}
	MetricRouterRequestSeconds = MetricSpec{
		Name:   "cellkit_router_request_duration_seconds",
		Type:   Histogram,
		Help:   "Time from the request's arrival to its answer, by cell.",
		Labels: []string{LabelCell},
	}
	MetricRouterRequests = MetricSpec{
		Name:   "cellkit_router_requests_total",
		Type:   Counter,
		Help:   "Answers by cell and status code (cell \"none\": answered before routing).",
		Labels: []string{LabelCell, LabelCode},
	}
	MetricRouterShed = MetricSpec{
		Name:   "cellkit_router_shed_total",
		Type:   Counter,
		Help:   "Requests answered 503 at once by a cell's guard: reason breaker (open), bulkhead (full) or no_cell (no active cell).",
		Labels: []string{LabelCell, LabelReason},
	}
	MetricRouterTLSHandshakeSeconds = MetricSpec{
		Name: "cellkit_router_tls_handshake_seconds",
		Type: Histogram,
		Help: "Time from a TLS client's connection accepted to its handshake done.",
	}
	MetricRouterTLSHandshakes = MetricSpec{
		Name:   "cellkit_router_tls_handshakes_total",
		Type:   Counter,
		Help:   "TLS handshakes on the public listener: ok, or failed (a bad or missing certificate, a protocol error, no handshake within the read-header timeout, or stopping).",
		Labels: []string{LabelResult},
	}
	MetricRouterUpstreamErrors = MetricSpec{
		Name:   "cellkit_router_upstream_errors_total",
		Type:   Counter,
		Help:   "Calls to a cell that got no answer: kind timeout or connection.",
		Labels: []string{LabelCell, LabelKind},
	}
)
