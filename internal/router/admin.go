package router

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cellkit/cellkit/internal/problem"
	"github.com/cellkit/cellkit/internal/slotrate"
)

// AdminHandler serves the admin listener:
//
//	GET /healthz             the process is up
//	GET /readyz              200 once the router has a cell map (the detail
//	                         says whether it is stale), 503 before, and 503
//	                         once it has failed beyond repair (see Failure)
//	GET /metrics             Prometheus metrics from gatherer
//	GET /v1/admin/hotkeys    top users of the last minute (?n=20, at most 1000)
//	GET /v1/admin/cells      each cell's endpoint, guard and breaker state
func (r *Router) AdminHandler(gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", r.serveReady)
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /v1/admin/hotkeys", r.serveHotKeys)
	mux.HandleFunc("GET /v1/admin/cells", r.serveCells)
	mux.HandleFunc("GET /v1/admin/slots", r.serveSlots)
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		problem.Write(w, problem.New(http.StatusNotFound, problem.NotFound, "no such admin resource"))
	})
	return mux
}

// Readiness is the /readyz document.
type Readiness struct {
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
}

// Readiness reports whether the router can route and how fresh its map is.
func (r *Router) Readiness() Readiness {
	st := r.maps.Status()
	rd := Readiness{FollowerMap: st.Version, Stale: st.Stale, MapAgeSeconds: st.Age.Seconds(),
		Registry: st.Registry, LastError: st.LastError, FromCache: st.FromCache, RegistryOlder: st.RegistryOlder}
	m := r.currentMap()
	switch {
	case m == nil:
		rd.Detail = "no cell map yet"
	case st.Stale:
		rd.Ready, rd.MapVersion = true, m.Version()
		rd.Detail = "routing with the last good cell map; the registry has not confirmed it for " + strconv.FormatFloat(st.Age.Seconds(), 'f', 0, 64) + "s (stale)"
	default:
		rd.Ready, rd.MapVersion = true, m.Version()
		rd.Detail = "routing with a current cell map"
	}
	rd.RefreshedAfter421 = m != nil && m.Version() > st.Version
	if r.stopping.Load() {
		rd.Ready = false
		rd.Detail = "stopping: serving on until the load balancers have taken it out of rotation"
	}
	if err := r.eng.failure(); err != nil {
		rd.Ready, rd.Failure = false, err.Error()
		rd.Detail = "the router cannot go on serving and is ending: " + err.Error()
	}
	return rd
}

// Stopping makes readiness fail while the router goes on serving: the
// start of a graceful stop, so that load balancers and endpoint lists
// stop sending new connections before the listener closes (Shutdown).
func (r *Router) Stopping() { r.stopping.Store(true) }

func (r *Router) serveReady(w http.ResponseWriter, _ *http.Request) {
	rd := r.Readiness()
	code := http.StatusOK
	if !rd.Ready {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, rd)
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

// HotKeys is the /v1/admin/hotkeys document.
type HotKeys struct {
	WindowSeconds float64   `json:"window_seconds"`
	Total         int64     `json:"total"`
	Users         []HotUser `json:"users"`
}

// HotKeys reports the n heaviest users of the window.
func (r *Router) HotKeys(n int) HotKeys {
	rep := r.hot.Top(n)
	out := HotKeys{WindowSeconds: rep.Window.Seconds(), Total: rep.Total, Users: []HotUser{}}
	m := r.currentMap()
	for _, k := range rep.Keys {
		u := HotUser{UserID: k.Key, Count: k.Count, Error: k.Error}
		if rep.Total > 0 {
			u.Share = float64(k.Count) / float64(rep.Total)
		}
		if m != nil {
			rt := m.Lookup(k.Key)
			u.Slot, u.Cell, u.Override = rt.Slot, rt.Cell, rt.Override
		}
		out.Users = append(out.Users, u)
	}
	return out
}

func (r *Router) serveHotKeys(w http.ResponseWriter, req *http.Request) {
	n := 20
	if s := req.URL.Query().Get("n"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > 1000 {
			problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidField, "n must be 1-1000").WithField("n"))
			return
		}
		n = v
	}
	writeJSON(w, http.StatusOK, r.HotKeys(n))
}

// SlotRates is the router's answer on /v1/admin/slots: its request rate
// per slot (new inquiries routed by user), as a moving average.
type SlotRates struct {
	// Version is the map version the router routes with.
	Version int64 `json:"version"`
	slotrate.Snapshot
}

// SlotRates reads the per-slot request rates; ok is false before the
// first map.
func (r *Router) SlotRates() (SlotRates, bool) {
	rs := r.slotRates.Load()
	t := r.tbl.Load()
	if rs == nil || t == nil {
		return SlotRates{}, false
	}
	return SlotRates{Version: t.m.Version(), Snapshot: rs.Snapshot()}, true
}

func (r *Router) serveSlots(w http.ResponseWriter, _ *http.Request) {
	sr, ok := r.SlotRates()
	if !ok {
		problem.WriteRetry(w, problem.New(http.StatusServiceUnavailable, problem.NoCellMap, "the router has routed with no cell map yet"), time.Second)
		return
	}
	writeJSON(w, http.StatusOK, sr)
}

// CellStatus is one cell as the router sees it.
type CellStatus struct {
	Cell     string `json:"cell"`
	State    string `json:"state"`
	Intake   string `json:"intake"`
	InFlight int64  `json:"in_flight"`
	Bulkhead int64  `json:"bulkhead"`
	Breaker  string `json:"breaker"`
	// Instances are the intakes the router spreads the cell's calls over,
	// with those out of the rotation for failing.
	Instances []InstanceStatus `json:"instances"`
}

// InstanceStatus is one intake of a cell as the router sees it.
type InstanceStatus struct {
	Intake  string `json:"intake"`
	Ejected bool   `json:"ejected"`
}

// Cells reports every cell of the routing table.
func (r *Router) Cells() []CellStatus {
	t := r.table()
	if t == nil {
		return []CellStatus{}
	}
	out := []CellStatus{}
	for _, c := range t.m.Cells() {
		cs := CellStatus{Cell: c.ID, State: string(c.State), Intake: c.Intake}
		if u := t.byID[c.ID]; u != nil {
			cs.InFlight, cs.Bulkhead, cs.Breaker = u.guard.inFlight.Load(), u.guard.limit, u.guard.br.State().String()
			now := time.Now().UnixNano()
			for _, ep := range u.eps {
				cs.Instances = append(cs.Instances, InstanceStatus{Intake: ep.intake, Ejected: ep.ejected(now)})
			}
		}
		out = append(out, cs)
	}
	return out // sorted: Map.Cells is
}

func (r *Router) serveCells(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, r.Cells())
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		problem.Write(w, problem.New(http.StatusInternalServerError, problem.Internal, err.Error()))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(body, '\n'))
}
