package console

import (
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/control"
)

// View is what the console's page shows at one moment: the map's
// summary, a card per cell and per router, the rollout and the drains,
// and what changed lately. It is collected every Interval and sent to the
// page whole (GET /api/view, and the event stream).
type View struct {
	Seq uint64    `json:"seq"`
	At  time.Time `json:"at"`
	// Registry says whether the map could be read at this collection;
	// the map shown is the last one read, Map.ReadAt when.
	Registry RegistryView `json:"registry"`
	Map      *MapSummary  `json:"map"`
	Cells    []CellCard   `json:"cells"`
	Routers  []RouterCard `json:"routers"`
	// RoutersError says why the routers could not be listed.
	RoutersError string       `json:"routers_error,omitempty"`
	Rollout      *RolloutView `json:"rollout"`
	RolloutError string       `json:"rollout_error,omitempty"`
	Drains       []DrainView  `json:"drains"`
	// Moves is the record of a map change's data moves under way (nil:
	// none), MovesError why it could not be read.
	Moves      *api.MovesRecord `json:"moves"`
	MovesError string           `json:"moves_error,omitempty"`
	// Quotas are the clients whose quota is most used, over the routers
	// (at most maxQuotas, the most used first).
	Quotas  []ClientQuotaView `json:"quotas"`
	Changes []Change          `json:"changes"`
	// Refused are the admin endpoints the console did not ask, each with
	// why: an admin URL read from the map or an announcement that it does
	// not trust with its credentials (see Config.TrustedAdmin).
	Refused []RefusedAdmin `json:"refused"`
	// Bad are values outside the cards that were not finite numbers
	// (NaN, ±Inf), dropped (sent as 0) so that the view can be encoded.
	Bad []string `json:"bad,omitempty"`
	// CollectSeconds is how long the collection took.
	CollectSeconds float64 `json:"collect_seconds"`
}

// RefusedAdmin is an admin endpoint the console refused to call with its
// credentials.
type RefusedAdmin struct {
	What  string `json:"what"` // the cell, cell/instance or router it is for
	Admin string `json:"admin"`
	Why   string `json:"why"`
}

// RegistryView is the registry's state as the console last found it.
type RegistryView struct {
	Describe string `json:"describe"`
	OK       bool   `json:"ok"`
	Error    string `json:"error,omitempty"`
	// ReadAt is when the map was last read (zero: never).
	ReadAt time.Time `json:"read_at,omitzero"`
}

// MapSummary is the map's version and its cells, in the map's order (the
// page colours a cell by its position here, as GET /api/map numbers them).
type MapSummary struct {
	Version   int64          `json:"version"`
	Change    string         `json:"change"`
	Updated   time.Time      `json:"updated,omitzero"`
	Slots     int            `json:"slots"`
	Cells     []MapCell      `json:"cells"`
	Overrides int            `json:"overrides"`
	Agencies  map[string]int `json:"agencies"`
}

// MapCell is one cell as the map holds it.
type MapCell struct {
	ID       string  `json:"id"`
	State    string  `json:"state"`
	Weight   int     `json:"weight"`
	Slots    int     `json:"slots"`
	UsersPct float64 `json:"users_pct"`
}

// Health is a card's colour: ok (green), warn (amber: not ready, an open
// breaker, shedding, a stale map), down (red: unreachable) or off (grey:
// a drained cell).
type Health string

// The healths of a card.
const (
	HealthOK   Health = "ok"
	HealthWarn Health = "warn"
	HealthDown Health = "down"
	HealthOff  Health = "off"
)

// CellCard is one cell: what the map says and what its processes said.
type CellCard struct {
	ID     string `json:"id"`
	State  string `json:"state"` // the map's: active, draining, drained
	Health Health `json:"health"`
	// Why says what made the card amber or red.
	Why string `json:"why,omitempty"`
	// Admin is its admin URL in the map (a cell of one process).
	Admin string `json:"admin,omitempty"`
	// Reachable says its status was read at this collection (an error
	// answer, a 401 or a 500, is not a status: Error says what came).
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
	// Untrusted says the console did not ask it: its admin URL is not
	// one it trusts with its credentials (Error says why).
	Untrusted bool `json:"untrusted,omitempty"`
	// Bad are the values read from it that were not finite numbers
	// (NaN, ±Inf): dropped, each named with where it came from.
	Bad []string `json:"bad,omitempty"`
	// AsOf is when Status was read: at this collection, or earlier when
	// the cell did not answer now (the last good figures, with their age).
	AsOf      time.Time       `json:"as_of,omitzero"`
	Status    *api.CellStatus `json:"status,omitempty"`
	Release   string          `json:"release,omitempty"`
	Mixed     bool            `json:"mixed,omitempty"` // its instances run different releases
	Rates     Rates           `json:"rates"`
	Instances []InstanceCard  `json:"instances,omitempty"`
}

// InstanceCard is one instance of a cell of several processes.
type InstanceCard struct {
	ID        string    `json:"id"`
	Admin     string    `json:"admin"`
	Drained   bool      `json:"drained"`
	Reachable bool      `json:"reachable"`
	Ready     bool      `json:"ready"`
	Release   string    `json:"release,omitempty"`
	Error     string    `json:"error,omitempty"`
	Untrusted bool      `json:"untrusted,omitempty"`
	Bad       []string  `json:"bad,omitempty"`
	AsOf      time.Time `json:"as_of,omitzero"`
	Rates     Rates     `json:"rates"`
}

// Rates are per-second rates over the last collection interval, from a
// process's own counters (unknown until it was read twice).
type Rates struct {
	Known    bool    `json:"known"`
	Requests float64 `json:"requests"` // requests answered (a cell: its intake, probes left out)
	Errors   float64 `json:"errors"`   // answered 5xx but 503
	Shed     float64 `json:"shed"`     // turned away with 503 (shed, breaker, bulkhead)
	// Bad names the rates (requests, errors, shed) not known for a
	// counter that was not a finite number, now or at the read before
	// (the card's Bad says which); each is sent as 0.
	Bad []string `json:"bad,omitempty"`
}

// RouterCard is one router: its readiness document, its rates and its
// hottest users.
type RouterCard struct {
	ID        string               `json:"id"`
	Admin     string               `json:"admin"`
	Health    Health               `json:"health"`
	Why       string               `json:"why,omitempty"`
	Reachable bool                 `json:"reachable"`
	Error     string               `json:"error,omitempty"`
	Untrusted bool                 `json:"untrusted,omitempty"`
	Bad       []string             `json:"bad,omitempty"`
	AsOf      time.Time            `json:"as_of,omitzero"`
	Readiness *api.RouterReadiness `json:"readiness,omitempty"`
	Rates     Rates                `json:"rates"`
	Hot       []api.HotUser        `json:"hot,omitempty"`
	// Quota is how the router shares the clients' quotas: the routers it
	// counts, its lease's age, whether it splits them evenly (its
	// clients are in View.Quotas).
	Quota *QuotaSharing `json:"quota,omitempty"`
	// quota is what it said of each client, for View.Quotas.
	quota []api.ClientQuota
}

// QuotaSharing is a router's part in sharing the clients' quotas.
type QuotaSharing struct {
	Routers         int     `json:"routers"`
	LeaseAgeSeconds float64 `json:"lease_age_seconds"`
	Even            bool    `json:"even"`
}

// ClientQuotaView is one client's quota over the routers that answered:
// how much of it is asked for and held.
type ClientQuotaView struct {
	Client string  `json:"client"`
	Rate   float64 `json:"rate"`
	Burst  int     `json:"burst"`
	// Demand is the requests a second asked of all the routers (taken or
	// not), Use that over the rate.
	Demand float64 `json:"demand"`
	Use    float64 `json:"use"`
	// Held is the shares the routers hold together (over 1: more than the
	// quota may be admitted), Shares each router's.
	Held   float64            `json:"held"`
	Shares map[string]float64 `json:"shares"`
}

// RolloutView is the registry's rollout record, with the time left in
// the bake worked out.
type RolloutView struct {
	control.Rollout
	// BakeLeftSeconds is what is left of the bake as of its last
	// judgement less the time since (0 once over).
	BakeLeftSeconds float64 `json:"bake_left_seconds"`
}

// DrainView is a cell leaving the map, or an instance out of rotation.
type DrainView struct {
	Cell     string `json:"cell"`
	Instance string `json:"instance,omitempty"`
	State    string `json:"state"` // draining, drained, or "out of rotation" for an instance
	// Pending is the work left in the cell (queued and in flight), when
	// known; -1 when it is not.
	Pending int64  `json:"pending"`
	Intake  string `json:"intake,omitempty"`
}

// Change is one thing that changed between two collections.
type Change struct {
	At   time.Time `json:"at"`
	What string    `json:"what"` // the cell or router it is about, or "map", "rollout"
	Text string    `json:"text"`
}
