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
