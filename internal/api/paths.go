package api

// The paths of a cell's intake API, which routers call.
const (
	// PathInquiries takes a new inquiry (POST); PathInquiries + "/" + id
	// reads one (GET). The router's public API has the same paths.
	PathInquiries = "/v1/inquiries"
	// PathHealth is what routers probe, on a connection of their own, to
	// find an instance that hangs: 200 while the instance answers and
	// reaches its queue, 503 (queue-unavailable) when it cannot. It reads
	// nothing from the store and is never shed.
	PathHealth = "/v1/health"
)

// PathRouterQuota is a router's admin path for its view of the clients'
// quotas (RouterQuota).
const PathRouterQuota = "/v1/admin/quota"

// A cell's admin paths (besides PathCellLedger, PathCellMoves and
// PathCellMoveSize), which cellctl, the console, the drills and the
// rollout call through internal/adminclient.
const (
	// PathCellStatus is the cell's status document (GET, CellStatus).
	PathCellStatus = "/v1/admin/status"
	// PathCellCircuit + agency + "/" + action forces an agency's breaker
	// (POST; open, close or auto).
	PathCellCircuit = "/v1/admin/circuit/"
	// PathCellIntake + action opens or closes the intake (POST).
	PathCellIntake = "/v1/admin/intake/"
	// PathCellFailed lists the failed inquiries (GET, []FailedInquiry).
	PathCellFailed = "/v1/admin/failed"
	// PathCellFailedRetry retries failed inquiries (POST, RetryResult).
	PathCellFailedRetry = "/v1/admin/failed/retry"
)

// A router's admin paths (besides PathRouterQuota).
const (
	// PathRouterHotKeys is the router's hottest users (GET, HotKeys).
	PathRouterHotKeys = "/v1/admin/hotkeys"
	// PathRouterCells is each cell's endpoint, guard and breaker (GET).
	PathRouterCells = "/v1/admin/cells"
	// PathRouterSlots is the per-slot request rates (GET, SlotRates).
	PathRouterSlots = "/v1/admin/slots"
)

// PathAgencies is the agency simulator's admin API: GET lists the
// agencies; PathAgencies + "/" + name + "/..." is one agency's (its
// config, its sessions), which the drills call.
const PathAgencies = "/v1/agencies"
