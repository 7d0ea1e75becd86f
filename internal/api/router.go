package api

// The documents of a router's admin API.

// RouterReadiness is a router's /readyz document.
type RouterReadiness struct {
	Ready             bool    `json:"ready"`
	MapVersion        int64   `json:"map_version"`      // the version being routed with
	FollowerMap       int64   `json:"follower_version"` // the version the registry follower holds
	Stale             bool    `json:"stale"`            // the registry has not confirmed the map for a while
	MapAgeSeconds     float64 `json:"map_age_seconds"`  // since the registry last answered
	Registry          string  `json:"registry"`
	LastError         string  `json:"last_error,omitempty"`
	FromCache         bool    `json:"from_cache,omitempty"`
	RegistryOlder     int64   `json:"registry_older,omitempty"` // the registry's map is this older version (rebuilt behind the cache)
	Detail            string  `json:"detail"`
	RefreshedAfter421 bool    `json:"refreshed_after_421,omitempty"` // routing with a map read after a 421
	Failure           string  `json:"failure,omitempty"`             // why the router cannot go on serving (the process is ending)
	Release           Release `json:"release"`                       // what the process runs
	// PID is the process that answered; Generation counts the routers
	// that served its listening sockets in a row on this host (1: it
	// listened afresh; see --handoff-socket).
	PID        int `json:"pid"`
	Generation int `json:"generation"`
}

// HotUser is one heavy user of the last minute.
type HotUser struct {
	UserID   string  `json:"user_id"`
	Count    int64   `json:"count"` // requests in the window, an upper bound
	Error    int64   `json:"error"` // how much Count may overestimate
	Share    float64 `json:"share"` // Count / all requests routed by user in the window
	Slot     int     `json:"slot"`
	Cell     string  `json:"cell"`     // where the current map sends the user
	Override bool    `json:"override"` // already pinned by an override
}

// HotKeys is a router's /v1/admin/hotkeys document.
type HotKeys struct {
	WindowSeconds float64   `json:"window_seconds"`
	Total         int64     `json:"total"`
	Users         []HotUser `json:"users"`
}

// SlotRates is the router's answer on /v1/admin/slots: its request rate
// per slot (new inquiries routed by user), as a moving average.
type SlotRates struct {
	// Version is the map version the router routes with.
	Version int64 `json:"version"`
	// Slots is the number of slots of the map counted.
	Slots int `json:"slots"`
	// WindowSeconds is the moving average's time constant; SinceSeconds
	// how long the counting has run (shorter than the window, the rates
	// are averages over it).
	WindowSeconds float64 `json:"window_seconds"`
	SinceSeconds  float64 `json:"since_seconds"`
	// Total is the sum of the rates, requests per second.
	Total float64 `json:"total"`
	// Rates are [slot, requests per second] for the slots with traffic,
	// in slot order.
	Rates [][2]float64 `json:"rates"`
}

// RouterCell is one cell as a router sees it (/v1/admin/cells).
type RouterCell struct {
	Cell     string `json:"cell"`
	State    string `json:"state"`
	Intake   string `json:"intake"`
	InFlight int64  `json:"in_flight"`
	Bulkhead int64  `json:"bulkhead"`
	Breaker  string `json:"breaker"`
	// Instances are the intakes the router spreads the cell's calls over,
	// with those out of the rotation for failing.
	Instances []RouterInstance `json:"instances"`
}

// RouterInstance is one intake of a cell as a router sees it.
type RouterInstance struct {
	Intake  string `json:"intake"`
	Ejected bool   `json:"ejected"`
}

// RouterQuota is the router's answer on /v1/admin/quota: each client's
// quota as this router knows it (the routers share each client's quota
// by leases in the registry; docs/router.md).
type RouterQuota struct {
	Router string `json:"router"`
	// Routers is how many routers it counted at its last lease round,
	// itself included.
	Routers int `json:"routers"`
	// LeaseAgeSeconds is how long ago the write of its last lease was
	// sent (-1: none yet).
	LeaseAgeSeconds float64 `json:"lease_age_seconds"`
	// Even says its lease lapsed: every quota is split evenly over the
	// routers it last counted.
	Even    bool          `json:"even"`
	Clients []ClientQuota `json:"clients"`
}

// ClientQuota is one client's quota as a router knows it.
type ClientQuota struct {
	Client string  `json:"client"`
	Rate   float64 `json:"rate"`  // the client's quota, requests a second
	Burst  int     `json:"burst"` // and its burst
	// Share is the fraction of it this router holds; Held what the live
	// routers hold together (over 1: the estimate of over-admission).
	Share float64 `json:"share"`
	Held  float64 `json:"held"`
	// Demand is the requests a second asked of this router (taken or
	// not); TotalDemand of all live routers.
	Demand      float64 `json:"demand"`
	TotalDemand float64 `json:"total_demand"`
}
