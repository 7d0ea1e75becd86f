package api

// cellOuter is the label a cell adds to every series of its registry (its
// id): the exporters below do not set it.
var cellOuter = []string{LabelCell}

// A cell's series (docs/metrics.md, "cell"): the intake's, the pipeline's,
// the queue's, the store's, the agency clients' and the session pools'.
// The map follower's are MetricMap… under MetricPrefixCell (CellMetrics).
var (
	MetricAgencyBreakerState = MetricSpec{
		Name:   "cellkit_agency_breaker_state",
		Type:   Gauge,
		Help:   "Circuit breaker state: 0 closed, 1 open, 2 half-open, 3 forced open, 4 forced closed.",
		Labels: []string{LabelAgency},
		Outer:  cellOuter,
	}
	MetricAgencyBreakerTransitions = MetricSpec{
		Name:   "cellkit_agency_breaker_transitions_total",
		Type:   Counter,
		Help:   "Circuit breaker state changes, by the state entered.",
		Labels: []string{LabelAgency, LabelTo},
		Outer:  cellOuter,
	}
	MetricAgencyCallSeconds = MetricSpec{
		Name:   "cellkit_agency_call_seconds",
		Type:   Histogram,
		Help:   "Agency call latency, rejections included.",
		Labels: []string{LabelAgency, LabelOutcome},
		Outer:  cellOuter,
	}
	MetricAgencyCalls = MetricSpec{
		Name:   "cellkit_agency_calls_total",
		Type:   Counter,
		Help:   "Agency calls by outcome: ok, code_error, timeout, transport_error, circuit_open, limited, exhausted, canceled.",
		Labels: []string{LabelAgency, LabelOutcome},
		Outer:  cellOuter,
	}
	MetricAgencyConcurrencyLimit = MetricSpec{
		Name:   "cellkit_agency_concurrency_limit",
		Type:   Gauge,
		Help:   "Current adaptive concurrency limit.",
		Labels: []string{LabelAgency},
		Outer:  cellOuter,
	}
	MetricCellAgencyLimit = MetricSpec{
		Name:   "cellkit_cell_agency_limit",
		Type:   Gauge,
		Help:   "Sessions the agency allows across all cells (its limit in the cell's map).",
		Labels: []string{LabelAgency},
		Outer:  cellOuter,
	}
	MetricCellCallbacks = MetricSpec{
		Name:   "cellkit_cell_callbacks_total",
		Type:   Counter,
		Help:   "Callbacks, by outcome: ok (delivered), retry (an attempt failed transiently and is tried again), error (failed for good), refused (an internal address), dropped (queue full).",
		Labels: []string{LabelOutcome},
		Outer:  cellOuter,
	}
	MetricCellDeadLetters = MetricSpec{
		Name:  "cellkit_cell_dead_letters",
		Type:  Gauge,
		Help:  "Inquiries on the dead-letter stream.",
		Outer: cellOuter,
	}
	MetricCellDeliveries = MetricSpec{
		Name:   "cellkit_cell_deliveries_total",
		Type:   Counter,
		Help:   "Work messages handled, by outcome: done, failed, dead, retry, interrupted, duplicate, stale, malformed.",
		Labels: []string{LabelOutcome},
		Outer:  cellOuter,
	}
	MetricCellDeliverySeconds = MetricSpec{
		Name:   "cellkit_cell_delivery_seconds",
		Type:   Histogram,
		Help:   "Time to handle one work message, by outcome.",
		Labels: []string{LabelOutcome},
		Outer:  cellOuter,
	}
	MetricCellFailedInquiries = MetricSpec{
		Name:  "cellkit_cell_failed_inquiries",
		Type:  Gauge,
		Help:  "Inquiries on the error stream.",
		Outer: cellOuter,
	}
	MetricCellFailures = MetricSpec{
		Name:   "cellkit_cell_failures_total",
		Type:   Counter,
		Help:   "Failed pipeline attempts, by kind.",
		Labels: []string{LabelKind},
		Outer:  cellOuter,
	}
	MetricCellInflight = MetricSpec{
		Name:  "cellkit_cell_inflight",
		Type:  Gauge,
		Help:  "Inquiries being processed by workers.",
		Outer: cellOuter,
	}
	MetricCellInquirySeconds = MetricSpec{
		Name:  "cellkit_cell_inquiry_seconds",
		Type:  Histogram,
		Help:  "Time from intake to a final status (done or failed).",
		Outer: cellOuter,
	}
	MetricCellIntakeLaneAccepted = MetricSpec{
		Name:   "cellkit_cell_intake_lane_accepted_total",
		Type:   Counter,
		Help:   "New inquiries accepted (202, not replays), by lane.",
		Labels: []string{LabelLane},
		Outer:  cellOuter,
	}
	MetricCellIntakeLaneShed = MetricSpec{
		Name:   "cellkit_cell_intake_lane_shed_total",
		Type:   Counter,
		Help:   "Inquiries the shedder turned away (age, depth, wait, share), by lane (the router's Cellkit-Priority; normal without it).",
		Labels: []string{LabelLane},
		Outer:  cellOuter,
	}
	MetricCellIntakeLeaderWaits = MetricSpec{
		Name:  "cellkit_cell_intake_leader_waits_total",
		Type:  Counter,
		Help:  "New inquiries that waited for the cell's streams to have a leader again (tried more than once), whatever came of it.",
		Outer: cellOuter,
	}
	MetricCellIntakeMisdirected = MetricSpec{
		Name:  "cellkit_cell_intake_misdirected_total",
		Type:  Counter,
		Help:  "Inquiries refused with 421 because this cell does not own the user.",
		Outer: cellOuter,
	}
	MetricCellIntakeOpen = MetricSpec{
		Name:  "cellkit_cell_intake_open",
		Type:  Gauge,
		Help:  "1 while the intake takes new inquiries.",
		Outer: cellOuter,
	}
	MetricCellIntakeRequests = MetricSpec{
		Name:   "cellkit_cell_intake_requests_total",
		Type:   Counter,
		Help:   "Intake API requests, by route (post, get, health: the routers' probes, other) and status code.",
		Labels: []string{LabelRoute, LabelCode},
		Outer:  cellOuter,
	}
	MetricCellIntakeSeconds = MetricSpec{
		Name:   "cellkit_cell_intake_seconds",
		Type:   Histogram,
		Help:   "Intake API latency, by route; a POST includes the synced record write and PubAck.",
		Labels: []string{LabelRoute},
		Outer:  cellOuter,
	}
	MetricCellIntakeShed = MetricSpec{
		Name:   "cellkit_cell_intake_shed_total",
		Type:   Counter,
		Help:   "Inquiries turned away with 503, by reason: age (oldest pending over budget), wait (backlog would take longer than the budget to drain), depth, share (high priority over its share while normal asks for the rest), full (stream limit), closed, nats, storage (the store near full or failing a write), moving (the user's inquiries being moved to another cell).",
		Labels: []string{LabelReason},
		Outer:  cellOuter,
	}
	MetricCellPanics = MetricSpec{
		Name:   "cellkit_cell_panics_total",
		Type:   Counter,
		Help:   "Panics recovered while processing an inquiry (which is then failed with \"internal error\" and dead-lettered), delivering a callback or serving a request (answered 500), by step: an agency's name, css, scoring, core_banking, pipeline, callback, intake, admin.",
		Labels: []string{LabelStep},
		Outer:  cellOuter,
	}
	MetricCellQuarantined = MetricSpec{
		Name:  "cellkit_cell_quarantined_total",
		Type:  Counter,
		Help:  "Inquiries quarantined at a start (failed as suspected poison and dead-lettered): in flight at each of the last crashes of the cell.",
		Outer: cellOuter,
	}
	MetricCellQueueDepth = MetricSpec{
		Name:   "cellkit_cell_queue_depth",
		Type:   Gauge,
		Help:   "Work messages not yet acked, by lane.",
		Labels: []string{LabelLane},
		Outer:  cellOuter,
	}
	MetricCellQueueDrainRate = MetricSpec{
		Name:  "cellkit_cell_queue_drain_rate",
		Type:  Gauge,
		Help:  "Work messages settled per second (moving average).",
		Outer: cellOuter,
	}
	MetricCellQueueLaneOldestAgeSeconds = MetricSpec{
		Name:   "cellkit_cell_queue_lane_oldest_age_seconds",
		Type:   Gauge,
		Help:   "Age of the lane's oldest unacked work message (0 when the lane is empty); the lane is shed past its age budget.",
		Labels: []string{LabelLane},
		Outer:  cellOuter,
	}
	MetricCellQueueMessages = MetricSpec{
		Name:  "cellkit_cell_queue_messages",
		Type:  Gauge,
		Help:  "Inquiries queued or in flight.",
		Outer: cellOuter,
	}
	MetricCellQueueOldestAgeSeconds = MetricSpec{
		Name:  "cellkit_cell_queue_oldest_age_seconds",
		Type:  Gauge,
		Help:  "Age of the oldest unacked work message (0 when the queue is empty).",
		Outer: cellOuter,
	}
	MetricCellReady = MetricSpec{
		Name:  "cellkit_cell_ready",
		Type:  Gauge,
		Help:  "1 when /readyz answers 200.",
		Outer: cellOuter,
	}
	MetricCellSessionLeases = MetricSpec{
		Name:   "cellkit_cell_session_leases",
		Type:   Gauge,
		Help:   "Agency session slots this instance of the cell holds a lease on (its session limit).",
		Labels: []string{LabelAgency},
		Outer:  cellOuter,
	}
	MetricCellStepSeconds = MetricSpec{
		Name:   "cellkit_cell_step_seconds",
		Type:   Histogram,
		Help:   "Pipeline step latency (each agency, css, core_banking), waits for a session included.",
		Labels: []string{LabelStep},
		Outer:  cellOuter,
	}
	MetricCellStoreBytes = MetricSpec{
		Name:   "cellkit_cell_store_bytes",
		Type:   Gauge,
		Help:   "The filesystem of the cell's store, by kind: size, used, free (what the store may still write), and the high watermark as bytes in use (high_watermark).",
		Labels: []string{LabelKind},
		Outer:  cellOuter,
	}
	MetricCellStoreRefusing = MetricSpec{
		Name:  "cellkit_cell_store_refusing",
		Type:  Gauge,
		Help:  "1 while the cell refuses new inquiries for its store: above the high watermark until below the low one, or after a write failed until the store is open again.",
		Outer: cellOuter,
	}
	MetricCellStoreWriteFailures = MetricSpec{
		Name:  "cellkit_cell_store_write_failures_total",
		Type:  Counter,
		Help:  "Times the cell's store failed a write for lack of space (it refuses writes until the cell opens it again).",
		Outer: cellOuter,
	}
	MetricPoolBroken = MetricSpec{
		Name:   "cellkit_pool_broken_total",
		Type:   Counter,
		Help:   "Sessions closed because they broke.",
		Labels: []string{LabelAgency},
		Outer:  cellOuter,
	}
	MetricPoolCreated = MetricSpec{
		Name:   "cellkit_pool_created_total",
		Type:   Counter,
		Help:   "Sessions established.",
		Labels: []string{LabelAgency},
		Outer:  cellOuter,
	}
	MetricPoolDialErrors = MetricSpec{
		Name:   "cellkit_pool_dial_errors_total",
		Type:   Counter,
		Help:   "Failed dials.",
		Labels: []string{LabelAgency},
		Outer:  cellOuter,
	}
	MetricPoolDialing = MetricSpec{
		Name:   "cellkit_pool_dialing",
		Type:   Gauge,
		Help:   "Sessions being established.",
		Labels: []string{LabelAgency},
		Outer:  cellOuter,
	}
	MetricPoolExhausted = MetricSpec{
		Name:   "cellkit_pool_exhausted_total",
		Type:   Counter,
		Help:   "Borrows that hit the deadline.",
		Labels: []string{LabelAgency},
		Outer:  cellOuter,
	}
	MetricPoolHeartbeats = MetricSpec{
		Name:   "cellkit_pool_heartbeats_total",
		Type:   Counter,
		Help:   "Heartbeats sent on idle sessions.",
		Labels: []string{LabelAgency},
		Outer:  cellOuter,
	}
	MetricPoolIdle = MetricSpec{
		Name:   "cellkit_pool_idle",
		Type:   Gauge,
		Help:   "Sessions ready to lend.",
		Labels: []string{LabelAgency},
		Outer:  cellOuter,
	}
	MetricPoolInUse = MetricSpec{
		Name:   "cellkit_pool_in_use",
		Type:   Gauge,
		Help:   "Sessions lent out.",
		Labels: []string{LabelAgency},
		Outer:  cellOuter,
	}
	MetricPoolRetired = MetricSpec{
		Name:   "cellkit_pool_retired_total",
		Type:   Counter,
		Help:   "Sessions closed for age or because the pool shrank.",
		Labels: []string{LabelAgency},
		Outer:  cellOuter,
	}
	MetricPoolReused = MetricSpec{
		Name:   "cellkit_pool_reused_total",
		Type:   Counter,
		Help:   "Borrows of a session that served before.",
		Labels: []string{LabelAgency},
		Outer:  cellOuter,
	}
	MetricPoolSize = MetricSpec{
		Name:   "cellkit_pool_size",
		Type:   Gauge,
		Help:   "Sessions the pool keeps (its quota).",
		Labels: []string{LabelAgency},
		Outer:  cellOuter,
	}
	MetricPoolWaitSeconds = MetricSpec{
		Name:   "cellkit_pool_wait_seconds",
		Type:   Histogram,
		Help:   "Time Borrow waited for a session, successful or not.",
		Labels: []string{LabelAgency},
		Outer:  cellOuter,
	}
	MetricPoolWaiters = MetricSpec{
		Name:   "cellkit_pool_waiters",
		Type:   Gauge,
		Help:   "Borrowers waiting for a session.",
		Labels: []string{LabelAgency},
		Outer:  cellOuter,
	}
)
