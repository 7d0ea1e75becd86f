package router

import (
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/httpx"
	"github.com/cellkit/cellkit/internal/problem"
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
//	GET /v1/admin/quota      each client's quota as this router knows it
//	                         (its share, the routers' together, demands)
func (r *Router) AdminHandler(gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		httpx.Indent(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", r.serveReady)
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET "+api.PathRouterHotKeys, r.serveHotKeys)
	mux.HandleFunc("GET "+api.PathRouterCells, r.serveCells)
	mux.HandleFunc("GET "+api.PathRouterSlots, r.serveSlots)
	mux.HandleFunc("GET "+api.PathRouterQuota, r.serveQuota)
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		problem.Write(w, problem.New(http.StatusNotFound, problem.NotFound, "no such admin resource"))
	})
	return mux
}

// Readiness reports whether the router can route and how fresh its map is.
func (r *Router) Readiness() api.RouterReadiness {
	st := r.maps.Status()
	rd := api.RouterReadiness{FollowerMap: st.Version, Stale: st.Stale, MapAgeSeconds: st.Age.Seconds(),
		Registry: st.Registry, LastError: st.LastError, FromCache: st.FromCache, RegistryOlder: st.RegistryOlder,
		Release: r.release, PID: os.Getpid(), Generation: r.gen}
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
	if r.sharer != nil && rd.Ready {
		if !r.sharer.Ready() {
			rd.Ready = false
			rd.Detail = "waiting for the first quota lease (the routers share each client's quota)"
		}
	}
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
	httpx.Indent(w, code, rd)
}

// HotKeys reports the n heaviest users of the window.
func (r *Router) HotKeys(n int) api.HotKeys {
	rep := r.hot.Top(n)
	out := api.HotKeys{WindowSeconds: rep.Window.Seconds(), Total: rep.Total, Users: []api.HotUser{}}
	m := r.currentMap()
	for _, k := range rep.Keys {
		u := api.HotUser{UserID: k.Key, Count: k.Count, Error: k.Error}
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
	httpx.Indent(w, http.StatusOK, r.HotKeys(n))
}

// SlotRates reads the per-slot request rates; ok is false before the
// first map.
func (r *Router) SlotRates() (api.SlotRates, bool) {
	rs := r.slotRates.Load()
	t := r.tbl.Load()
	if rs == nil || t == nil {
		return api.SlotRates{}, false
	}
	snap := rs.Snapshot()
	return api.SlotRates{Version: t.m.Version(), Slots: snap.Slots, WindowSeconds: snap.WindowSeconds,
		SinceSeconds: snap.SinceSeconds, Total: snap.Total, Rates: snap.Rates}, true
}

func (r *Router) serveSlots(w http.ResponseWriter, _ *http.Request) {
	sr, ok := r.SlotRates()
	if !ok {
		problem.WriteRetry(w, problem.New(http.StatusServiceUnavailable, problem.NoCellMap, "the router has routed with no cell map yet"), time.Second)
		return
	}
	httpx.Indent(w, http.StatusOK, sr)
}

// Cells reports every cell of the routing table.
func (r *Router) Cells() []api.RouterCell {
	t := r.table()
	if t == nil {
		return []api.RouterCell{}
	}
	out := []api.RouterCell{}
	for _, c := range t.m.Cells() {
		cs := api.RouterCell{Cell: c.ID, State: string(c.State), Intake: c.Intake}
		if u := t.byID[c.ID]; u != nil {
			cs.InFlight, cs.Bulkhead, cs.Breaker = u.guard.InFlight(), u.guard.Limit(), u.guard.Circuit().State().String()
			now := time.Now().UnixNano()
			for _, ep := range u.eps {
				cs.Instances = append(cs.Instances, api.RouterInstance{Intake: ep.intake, Ejected: ep.ejected(now)})
			}
		}
		out = append(out, cs)
	}
	return out // sorted: Map.Cells is
}

func (r *Router) serveCells(w http.ResponseWriter, _ *http.Request) {
	httpx.Indent(w, http.StatusOK, r.Cells())
}
