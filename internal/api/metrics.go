package api

// The catalogue of the series cellkit's processes export (docs/metrics.md
// describes each). An exporter builds its collector from the entry — name,
// help and label names — and every reader (the rollout's gates, the
// console's rates, the dashboards' generator, the alert and recording
// rules, held by a test) names the series and its labels by the same
// entry, so a renamed series or label renames it for all of them or
// fails a test. What the catalogue leaves to the exporter is how it
// measures: a histogram's buckets, a counter's pre-created series.
//
// The entries are in metrics_router.go, metrics_cell.go,
// metrics_shared.go (every program's, and the registry readers' series
// under a process's prefix) and metrics_tools.go (the agency simulator's
// and the console's). Third-party collectors' series (client_golang's Go
// and process collectors) are not cellkit's to declare, but for the ones
// cellkit reads (ThirdPartyMetrics).

// MetricSpec is one series family as its exporter registers it.
type MetricSpec struct {
	Name string
	Type MetricType
	Help string
	// Labels are the label names the exporter gives the series, variable
	// or constant, in the order it passes their values.
	Labels []string
	// Outer are the labels the process adds to every series of the
	// registry the exporter registers on (a cell's id), which the
	// exporter does not set.
	Outer []string
}

// MetricType is a family's type as the text format's # TYPE line names it.
type MetricType string

// The types cellkit exports.
const (
	Counter   MetricType = "counter"
	Gauge     MetricType = "gauge"
	Histogram MetricType = "histogram"
)

// The label names of cellkit's series: an exporter and a reader name a
// label by its constant.
const (
	LabelAgency   = "agency"
	LabelBaseline = "baseline"
	LabelCell     = "cell"
	LabelClient   = "client"
	LabelCode     = "code"
	LabelGate     = "gate"
	LabelHow      = "how"
	LabelKind     = "kind"
	LabelLane     = "lane"
	LabelOf       = "of"
	LabelOp       = "op"
	LabelOutcome  = "outcome"
	LabelProgram  = "program"
	LabelReason   = "reason"
	LabelRegistry = "registry"
	LabelRelease  = "release"
	LabelResult   = "result"
	LabelRevision = "revision"
	LabelRollout  = "rollout"
	LabelRoute    = "route"
	LabelState    = "state"
	LabelStep     = "step"
	LabelTo       = "to"
	LabelVersion  = "version"
	LabelWave     = "wave"
	LabelWhat     = "what"
)

// The prefixes a router and a cell put on the registry readers' series
// (MetricMap…, MetricRollout…): the registerer they hand the follower
// and the rollout watch adds it.
const (
	MetricPrefixRouter = "cellkit_router_"
	MetricPrefixCell   = "cellkit_cell_"
)

// Prefixed is m as exported under prefix, with the labels the process
// adds to every series (outer).
func (m MetricSpec) Prefixed(prefix string, outer ...string) MetricSpec {
	m.Name = prefix + m.Name
	m.Outer = outer
	return m
}

// MetricProcessStarted is client_golang's process collector's start time
// of the process (Unix seconds): a change is a restart. The gates and the
// alert rules read it.
var MetricProcessStarted = MetricSpec{
	Name: "process_start_time_seconds",
	Type: Gauge,
	Help: "Start time of the process since unix epoch in seconds.",
}

// ThirdPartyMetrics are the series of collectors cellkit does not write
// that cellkit reads.
func ThirdPartyMetrics() []MetricSpec {
	return []MetricSpec{MetricProcessStarted}
}

// RouterMetrics are the series a router exports (besides SharedMetrics).
func RouterMetrics() []MetricSpec {
	return append([]MetricSpec{
		MetricRouterAcceptErrors, MetricRouterAuthFailures, MetricRouterBreakerState, MetricRouterBulkheadLimit,
		MetricRouterCellPeeks, MetricRouterConnectionsEvicted, MetricRouterConnectionsRefused, MetricRouterDeduped,
		MetricRouterGeneration, MetricRouterHandoffCutConnections, MetricRouterHandoffDrainedConnections,
		MetricRouterHandoffOffering, MetricRouterHandoffs, MetricRouterInFlight, MetricRouterInstanceEjections,
		MetricRouterInstanceShedRetries, MetricRouterLimited, MetricRouterLoopBatchedOps, MetricRouterLoopBatches,
		MetricRouterLoopWaits, MetricRouterMapRefreshes, MetricRouterMisdirected, MetricRouterPanics, MetricRouterProbes,
		MetricRouterQuotaBadLeases, MetricRouterQuotaEvenSplit, MetricRouterQuotaLeaseAgeSeconds,
		MetricRouterQuotaOvercommitRatio, MetricRouterQuotaRounds, MetricRouterQuotaRouters, MetricRouterQuotaShare,
		MetricRouterRequestSeconds, MetricRouterRequests, MetricRouterShed, MetricRouterTLSHandshakeSeconds,
		MetricRouterTLSHandshakes, MetricRouterUpstreamErrors,
	}, prefixed(MetricPrefixRouter, nil, append(mapMetrics(), rolloutMetrics()...))...)
}

// CellMetrics are the series a cell exports (besides SharedMetrics).
func CellMetrics() []MetricSpec {
	return append([]MetricSpec{
		MetricAgencyBreakerState, MetricAgencyBreakerTransitions, MetricAgencyCallSeconds, MetricAgencyCalls,
		MetricAgencyConcurrencyLimit, MetricCellAgencyLimit, MetricCellCallbacks, MetricCellDeadLetters,
		MetricCellDeliveries, MetricCellDeliverySeconds, MetricCellFailedInquiries, MetricCellFailures,
		MetricCellInflight, MetricCellInquirySeconds, MetricCellIntakeLaneAccepted, MetricCellIntakeLaneShed,
		MetricCellIntakeLeaderWaits, MetricCellIntakeMisdirected, MetricCellIntakeOpen, MetricCellIntakeRequests,
		MetricCellIntakeSeconds, MetricCellIntakeShed, MetricCellPanics, MetricCellQuarantined, MetricCellQueueDepth,
		MetricCellQueueDrainRate, MetricCellQueueLaneOldestAgeSeconds, MetricCellQueueMessages,
		MetricCellQueueOldestAgeSeconds, MetricCellReady, MetricCellSessionLeases, MetricCellStepSeconds,
		MetricCellStoreBytes, MetricCellStoreRefusing, MetricCellStoreWriteFailures, MetricPoolBroken,
		MetricPoolCreated, MetricPoolDialErrors, MetricPoolDialing, MetricPoolExhausted, MetricPoolHeartbeats,
		MetricPoolIdle, MetricPoolInUse, MetricPoolRetired, MetricPoolReused, MetricPoolSize, MetricPoolWaitSeconds,
		MetricPoolWaiters,
	}, prefixed(MetricPrefixCell, cellOuter, mapMetrics())...)
}

// AgencysimMetrics are the series the agency simulator exports (besides
// SharedMetrics).
func AgencysimMetrics() []MetricSpec {
	return []MetricSpec{
		MetricAgencysimCalls, MetricAgencysimDelaySeconds, MetricAgencysimErrors, MetricAgencysimGarbage,
		MetricAgencysimHeartbeats, MetricAgencysimIdleCuts, MetricAgencysimMalformedFrames, MetricAgencysimResets,
		MetricAgencysimSessionsAccepted, MetricAgencysimSessionsActive, MetricAgencysimSessionsPeak,
		MetricAgencysimSessionsRefused, MetricAgencysimWrittenBytes,
	}
}

// ConsoleMetrics are the series the console exports (besides
// SharedMetrics).
func ConsoleMetrics() []MetricSpec {
	return []MetricSpec{
		MetricConsoleAdminUntrusted, MetricConsoleAuthFailures, MetricConsoleBadValues, MetricConsoleCellsUnreachable,
		MetricConsoleCollectionSeconds, MetricConsoleCollections, MetricConsoleRolloutBakeDecision,
		MetricConsoleRolloutGateDecision, MetricConsoleRolloutGatePValue, MetricConsoleRolloutGateSamples,
		MetricConsoleStreams,
	}
}

// SharedMetrics are the series every program exports the same way (the
// ones it has: a program without TLS files exports no certificate's
// expiry).
func SharedMetrics() []MetricSpec {
	return []MetricSpec{
		MetricAdminAuthFailures, MetricBuildInfo, MetricReloadLastSuccessTimestampSeconds, MetricReloadRefused,
		MetricReloads, MetricTLSCertificateExpiryTimestampSeconds,
	}
}

// Metrics is the whole catalogue: every series a cellkit process exports,
// each once.
func Metrics() []MetricSpec {
	var all []MetricSpec
	for _, part := range [][]MetricSpec{SharedMetrics(), RouterMetrics(), CellMetrics(), AgencysimMetrics(), ConsoleMetrics()} {
		all = append(all, part...)
	}
	return all
}

func mapMetrics() []MetricSpec {
	return []MetricSpec{MetricMapAgeSeconds, MetricMapStale, MetricMapSyncErrors, MetricMapUpdates, MetricMapVersion}
}

func rolloutMetrics() []MetricSpec {
	return []MetricSpec{MetricRolloutReadErrors, MetricRolloutState, MetricRolloutUpdatedTimestampSeconds,
		MetricRolloutWave, MetricRolloutWaves}
}

func prefixed(prefix string, outer []string, ms []MetricSpec) []MetricSpec {
	out := make([]MetricSpec, len(ms))
	for i, m := range ms {
		out[i] = m.Prefixed(prefix, outer...)
	}
	return out
}
