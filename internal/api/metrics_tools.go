package api

// The agency simulator's series (docs/metrics.md, "agencysim"): the test
// double's own view, which tests and drills read.
var (
	MetricAgencysimCalls = MetricSpec{
		Name:   "cellkit_agencysim_calls_total",
		Type:   Counter,
		Help:   "Requests received, whatever their outcome.",
		Labels: []string{LabelAgency},
	}
	MetricAgencysimDelaySeconds = MetricSpec{
		Name:   "cellkit_agencysim_delay_seconds",
		Type:   Histogram,
		Help:   "Latency the simulator added before answering a request.",
		Labels: []string{LabelAgency},
	}
	MetricAgencysimErrors = MetricSpec{
		Name:   "cellkit_agencysim_errors_total",
		Type:   Counter,
		Help:   "Requests answered with an error code.",
		Labels: []string{LabelAgency},
	}
	MetricAgencysimGarbage = MetricSpec{
		Name:   "cellkit_agencysim_garbage_total",
		Type:   Counter,
		Help:   "Requests answered with a garbage frame.",
		Labels: []string{LabelAgency},
	}
	MetricAgencysimHeartbeats = MetricSpec{
		Name:   "cellkit_agencysim_heartbeats_total",
		Type:   Counter,
		Help:   "Heartbeats answered.",
		Labels: []string{LabelAgency},
	}
	MetricAgencysimIdleCuts = MetricSpec{
		Name:   "cellkit_agencysim_idle_cuts_total",
		Type:   Counter,
		Help:   "Sessions cut by the idle firewall.",
		Labels: []string{LabelAgency},
	}
	MetricAgencysimMalformedFrames = MetricSpec{
		Name:   "cellkit_agencysim_malformed_frames_total",
		Type:   Counter,
		Help:   "Sessions closed for a malformed client frame.",
		Labels: []string{LabelAgency},
	}
	MetricAgencysimResets = MetricSpec{
		Name:   "cellkit_agencysim_resets_total",
		Type:   Counter,
		Help:   "Requests answered by resetting the connection.",
		Labels: []string{LabelAgency},
	}
	MetricAgencysimSessionsAccepted = MetricSpec{
		Name:   "cellkit_agencysim_sessions_accepted_total",
		Type:   Counter,
		Help:   "Sessions admitted.",
		Labels: []string{LabelAgency},
	}
	MetricAgencysimSessionsActive = MetricSpec{
		Name:   "cellkit_agencysim_sessions_active",
		Type:   Gauge,
		Help:   "Admitted sessions now open.",
		Labels: []string{LabelAgency},
	}
	MetricAgencysimSessionsPeak = MetricSpec{
		Name:   "cellkit_agencysim_sessions_peak",
		Type:   Gauge,
		Help:   "Most admitted sessions open at once.",
		Labels: []string{LabelAgency},
	}
	MetricAgencysimSessionsRefused = MetricSpec{
		Name:   "cellkit_agencysim_sessions_refused_total",
		Type:   Counter,
		Help:   "Connections refused over the session limit.",
		Labels: []string{LabelAgency},
	}
	MetricAgencysimWrittenBytes = MetricSpec{
		Name:   "cellkit_agencysim_written_bytes_total",
		Type:   Counter,
		Help:   "Bytes written to clients.",
		Labels: []string{LabelAgency},
	}
)

// The console's series (docs/metrics.md, "console"), its rollout's gate
// figures among them.
var (
	MetricConsoleAdminUntrusted = MetricSpec{
		Name: "cellkit_console_admin_untrusted",
		Type: Gauge,
		Help: "Admin endpoints in the map or the routers' announcements the console did not call at the last collection: not trusted with its credentials.",
	}
	MetricConsoleAuthFailures = MetricSpec{
		Name:   "cellkit_console_auth_failures_total",
		Type:   Counter,
		Help:   "Console requests refused: reason missing (no token, cookie or certificate), wrong (a token that is not the console's), expired (a session cookie ended, expired or unknown), all 401; limited (429: a token while its client's, or everyone's, budget of wrong tokens is spent).",
		Labels: []string{LabelReason},
	}
	MetricConsoleBadValues = MetricSpec{
		Name: "cellkit_console_bad_values",
		Type: Gauge,
		Help: "Values in the last view that were not finite numbers (NaN, ±Inf), dropped and named on their cards.",
	}
	MetricConsoleCellsUnreachable = MetricSpec{
		Name: "cellkit_console_cells_unreachable",
		Type: Gauge,
		Help: "Cells whose admin API no instance answered at the last collection.",
	}
	MetricConsoleCollectionSeconds = MetricSpec{
		Name: "cellkit_console_collection_seconds",
		Type: Histogram,
		Help: "Time one collection of the console's view took (every admin API asked in parallel, each bounded).",
	}
	MetricConsoleCollections = MetricSpec{
		Name:   "cellkit_console_collections_total",
		Type:   Counter,
		Help:   "Collections of the console's view, by registry: ok (the map read) or error (the last map kept).",
		Labels: []string{LabelRegistry},
	}
	MetricConsoleRolloutBakeDecision = MetricSpec{
		Name:   "cellkit_console_rollout_bake_decision",
		Type:   Gauge,
		Help:   "The decision of the rollout's last bake judgement: 0 pass, 1 wait, 2 fail.",
		Labels: []string{LabelRollout, LabelWave},
	}
	MetricConsoleRolloutGateDecision = MetricSpec{
		Name:   "cellkit_console_rollout_gate_decision",
		Type:   Gauge,
		Help:   "Each gate's decision at the rollout's last bake judgement: 0 pass, 1 wait, 2 fail.",
		Labels: []string{LabelRollout, LabelWave, LabelGate},
	}
	MetricConsoleRolloutGatePValue = MetricSpec{
		Name:   "cellkit_console_rollout_gate_p_value",
		Type:   Gauge,
		Help:   "Each gate's one-sided p-value of the wave being worse, against the baseline that came closest to failing it (1: no test made).",
		Labels: []string{LabelRollout, LabelWave, LabelGate, LabelBaseline},
	}
	MetricConsoleRolloutGateSamples = MetricSpec{
		Name:   "cellkit_console_rollout_gate_samples",
		Type:   Gauge,
		Help:   "Each gate's samples: of the wave (of=wave), of the baseline of its p-value (of=baseline); the events of the worst process for the events gates.",
		Labels: []string{LabelRollout, LabelWave, LabelGate, LabelOf},
	}
	MetricConsoleStreams = MetricSpec{
		Name: "cellkit_console_streams",
		Type: Gauge,
		Help: "Event streams (pages) open.",
	}
)
