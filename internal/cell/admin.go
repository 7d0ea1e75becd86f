package cell

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/httpx"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/problem"
	"github.com/cellkit/cellkit/internal/queue"
	"github.com/cellkit/cellkit/internal/store"
)

// adminHandler serves the admin API:
//
//	GET  /healthz                              alive
//	GET  /readyz                               ready to take inquiries (JSON checks)
//	GET  /metrics                              Prometheus
//	GET  /v1/admin/status                      the cell's state (JSON)
//	POST /v1/admin/circuit/{agency}/{open|close|reset}
//	POST /v1/admin/intake/{close|open}
//	GET  /v1/admin/failed[?limit=N]            failed and dead-lettered inquiries
//	POST /v1/admin/failed/retry                {"ids":[...]} or {"all":true}
//	POST /v1/admin/layout/ledger               the intake writes the ledger (never undone)
//
// With an Options.AdminGuard, all but /healthz and /readyz need a bearer
// token or a verified client certificate (401 otherwise).
func (c *Cell) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", only(http.MethodGet, func(w http.ResponseWriter, r *http.Request) {
		httpx.Indent(w, http.StatusOK, map[string]any{"alive": true, "cell": c.cfg.ID})
	}))
	mux.HandleFunc("/readyz", only(http.MethodGet, func(w http.ResponseWriter, r *http.Request) {
		ok, checks := c.readiness()
		code := http.StatusOK
		if !ok {
			code = http.StatusServiceUnavailable
		}
		httpx.Indent(w, code, map[string]any{"ready": ok, "cell": c.cfg.ID, "checks": checks})
	}))
	mux.Handle("/metrics", promhttp.HandlerFor(c.reg, promhttp.HandlerOpts{Registry: c.promReg}))
	mux.HandleFunc(api.PathCellStatus, only(http.MethodGet, func(w http.ResponseWriter, r *http.Request) {
		httpx.Indent(w, http.StatusOK, c.Status())
	}))
	mux.HandleFunc(api.PathCellCircuit+"{agency}/{action}", only(http.MethodPost, c.circuit))
	mux.HandleFunc(api.PathCellIntake+"{action}", only(http.MethodPost, c.intakeSwitch))
	mux.HandleFunc(api.PathCellFailed, only(http.MethodGet, c.listFailed))
	mux.HandleFunc(api.PathCellFailedRetry, only(http.MethodPost, c.retryFailed))
	mux.HandleFunc(api.PathCellLedger, only(http.MethodPost, c.switchLedger))
	c.moveRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		problem.Write(w, problem.New(http.StatusNotFound, problem.NotFound, "no such path: "+r.URL.Path))
	})
	if c.adminGuard == nil {
		return mux
	}
	return c.adminGuard.Handler(mux)
}

func only(method string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
			w.Header().Set("Allow", method)
			problem.Write(w, problem.New(http.StatusMethodNotAllowed, problem.MethodNotAllowed, "allowed: "+method))
			return
		}
		h(w, r)
	}
}

// readiness: NATS connected and the streams readable recently, a map
// naming this cell, at least one session per agency, the intake open.
func (c *Cell) readiness() (bool, map[string]api.Check) {
	checks := map[string]api.Check{}
	ok := true
	set := func(name string, good bool, detail string) {
		checks[name] = api.Check{OK: good, Detail: detail}
		ok = ok && good
	}
	s := c.sample.Load()
	switch {
	case c.nc.Status() != nats.CONNECTED:
		set("nats", false, "nats connection "+c.nc.Status().String())
	case s == nil:
		set("nats", false, "streams not read yet")
	case s.Err != nil:
		set("nats", false, s.Err.Error())
	case time.Since(s.At) > 5*time.Second+2*c.cfg.SampleInterval:
		set("nats", false, "streams not read for "+time.Since(s.At).Round(time.Second).String())
	default:
		set("nats", true, "")
	}
	if m := c.follower.Map(); m == nil {
		set("map", false, "no cell map yet")
	} else if _, in := m.Cell(c.cfg.ID); !in {
		set("map", false, "map version "+strconv.FormatInt(m.Version(), 10)+" does not name this cell")
	} else {
		set("map", true, "version "+strconv.FormatInt(m.Version(), 10))
	}
	for _, name := range c.names {
		st := c.clients[name].Status().Pool
		have := st.Up()
		set("agency_"+name, have > 0, strconv.Itoa(have)+" of "+strconv.Itoa(st.Size)+" sessions up")
	}
	set("intake", c.intake.IsOpen(), map[bool]string{true: "open", false: "closed"}[c.intake.IsOpen()])
	if d := c.pipe.Stalled(); d > c.cfg.StallTimeout {
		set("pipeline", false, fmt.Sprintf("%d inquiries in flight and none settled for %v (the cell exits at %v)", c.pipe.Inflight(), d.Round(time.Millisecond), c.cfg.StallTimeout+time.Second))
	} else {
		set("pipeline", true, strconv.Itoa(c.pipe.Inflight())+" in flight")
	}
	if c.disk != nil {
		st := c.disk.State()
		detail := fmt.Sprintf("%.1f%% of %d bytes in use (refuses new inquiries from %.0f%% to below %.0f%%)", 100*st.Used(), st.Size, 100*st.High, 100*st.Low)
		switch {
		case st.Failed != "":
			detail = "a write failed for lack of space; JetStream restarts once below " + fmt.Sprintf("%.0f%%", 100*st.Low) + " (" + detail + "): " + st.Failed
		case st.Over:
			detail = "above the high watermark, new inquiries refused: " + detail
		}
		set("store", st.Failed == "", detail)
	}
	return ok, checks
}

// Status reports the cell's state: the document of GET /v1/admin/status.
func (c *Cell) Status() api.CellStatus {
	ready, checks := c.readiness()
	st := api.CellStatus{
		Cell: c.cfg.ID, Instance: c.cfg.Instance, Intake: map[bool]string{true: "open", false: "closed"}[c.intake.IsOpen()],
		Ready: ready, Stopping: c.stopping.Load(), Checks: checks,
		Inflight: int64(c.pipe.Inflight()), Workers: c.pipe.Workers(),
		Agencies: map[string]api.AgencyStatus{}, NATS: c.nc.Status().String(), Release: c.release,
	}
	if c.disk != nil {
		ds := c.disk.State()
		st.Store = &api.StoreStatus{SizeBytes: ds.Size, FreeBytes: ds.Free, Used: ds.Used(), High: ds.High, Low: ds.Low,
			Refusing: c.disk.Refusing(), Failed: ds.Failed}
	}
	st.Layout = c.layoutStatus()
	fs := c.follower.Status()
	st.Map = api.MapStatus{Version: fs.Version, Registry: fs.Registry, Stale: fs.Stale, FromCache: fs.FromCache, RegistryOlder: fs.RegistryOlder}
	if m := c.follower.Map(); m != nil {
		if cell, ok := m.Cell(c.cfg.ID); ok {
			st.Map.State = string(cell.State)
		}
		st.Map.OwnedSlots = m.SlotCounts()[c.cfg.ID]
	}
	shedCfg := c.shed.Config()
	st.Queue = api.QueueStatus{DrainRate: c.shed.Rate(), ServiceSeconds: c.shed.Service().Seconds(), AgeBudgetSeconds: shedCfg.MaxAge.Seconds(), DepthLimit: shedCfg.MaxDepth,
		LaneBlind: shedCfg.LaneBlind, HighReserve: shedCfg.HighReserve, Lanes: map[string]api.LaneStatus{
			string(inquiry.High): {AgeBudgetSeconds: shedCfg.MaxAgeHigh.Seconds()}, string(inquiry.Normal): {AgeBudgetSeconds: shedCfg.MaxAge.Seconds()},
		}}
	if s := c.sample.Load(); s != nil {
		st.Sampled = s.At
		if s.Err != nil {
			st.Errors = map[string]string{"queue": s.Err.Error()}
		} else {
			st.Queue.Depth = make(map[string]int64, len(s.Depth))
			for lane, n := range s.Depth {
				st.Queue.Depth[string(lane)] = int64(n)
			}
			st.Queue.Messages = int64(s.Total)
			if !s.Oldest.IsZero() {
				st.Queue.OldestAgeSeconds = time.Since(s.Oldest).Seconds()
			}
			for lane, at := range s.OldestByLane {
				l := st.Queue.Lanes[string(lane)]
				l.OldestAgeSeconds = time.Since(at).Seconds()
				st.Queue.Lanes[string(lane)] = l
			}
			st.Failed, st.DLQ = int64(s.Failed), int64(s.Dead)
		}
	}
	gates := c.pipe.GateStats()
	c.quotaMu.Lock()
	for _, name := range c.names {
		a := c.clients[name].Status()
		st.Agencies[name] = api.AgencyStatus{Agency: a.Agency, Breaker: a.Breaker, Limit: a.Limit, Inflight: a.Inflight,
			Pool: a.Pool, Quota: c.quota[name], Waiting: gates[name][2]}
	}
	c.quotaMu.Unlock()
	return st
}

func (c *Cell) circuit(w http.ResponseWriter, r *http.Request) {
	name, action := r.PathValue("agency"), r.PathValue("action")
	cl, ok := c.clients[name]
	if !ok {
		problem.Write(w, problem.New(http.StatusNotFound, problem.UnknownAgency, "no agency "+strconv.Quote(name)).WithField("agency"))
		return
	}
	b := cl.Breaker()
	switch action {
	case "open":
		b.ForceOpen()
	case "close":
		b.ForceClose()
	case "reset":
		b.Reset()
	default:
		problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidAction, "action must be open, close or reset").WithField("action"))
		return
	}
	c.log.Warn("circuit breaker set by operator", "agency", name, "action", action)
	httpx.Indent(w, http.StatusOK, map[string]string{"agency": name, "breaker": b.State().String()})
}

func (c *Cell) intakeSwitch(w http.ResponseWriter, r *http.Request) {
	switch r.PathValue("action") {
	case "close":
		// A drain closes the intake right after it moved the slots: catch
		// up with the registry first (bounded), so that moved users get 421
		// (the router retries them on their new cell) rather than 503.
		c.catchUpWithRegistry(r.Context(), time.Second)
		c.intake.Close()
	case "open":
		if c.stopping.Load() || !c.ready.Load() {
			problem.Write(w, problem.New(http.StatusConflict, problem.NotReady, "the cell is starting or stopping; its intake cannot open"))
			return
		}
		c.intake.Open()
	default:
		problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidAction, "action must be close or open").WithField("action"))
		return
	}
	httpx.Indent(w, http.StatusOK, map[string]string{"intake": map[bool]string{true: "open", false: "closed"}[c.intake.IsOpen()]})
}

// layoutStatus is how the cell keeps its inquiries.
func (c *Cell) layoutStatus() *api.LayoutStatus {
	l := &api.LayoutStatus{Writes: c.queue.Layout(), Knows: []string{api.LayoutRecords, api.LayoutLedger}}
	if since := c.queue.Switched(); !since.IsZero() {
		since = since.UTC()
		l.LedgerSince = &since
	}
	return l
}

// switchLedger switches the cell's intake to the ledger, once: its
// instances then write one message per inquiry accepted. Only a release
// that knows the ledger may serve the cell from then on (a rollout
// refuses a rollback past it).
func (c *Cell) switchLedger(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	since, err := c.queue.Switch(ctx)
	if err != nil {
		c.log.Warn("cannot switch the intake to the ledger", "err", err)
		problem.WriteRetry(w, problem.New(http.StatusServiceUnavailable, problem.StoreUnavailable, "cannot record the switch to the ledger now: "+err.Error()), time.Second)
		return
	}
	c.log.Info("the intake writes the ledger", "since", since)
	httpx.Indent(w, http.StatusOK, c.layoutStatus())
}

// maxList caps the failed inquiries listed or retried at once.
const maxList = 10_000

func (c *Cell) listFailed(w http.ResponseWriter, r *http.Request) {
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > maxList {
			problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidField, "limit must be in [1, 10000]").WithField("limit"))
			return
		}
		limit = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	list, err := c.queue.Failed(ctx, limit)
	if err != nil {
		problem.WriteRetry(w, problem.New(http.StatusServiceUnavailable, problem.QueueUnavailable, err.Error()), time.Second)
		return
	}
	if list == nil {
		list = []queue.Failure{}
	}
	httpx.Indent(w, http.StatusOK, map[string]any{"failed": list, "count": len(list)})
}

// RetryRequest is the body of POST /v1/admin/failed/retry.
type RetryRequest struct {
	IDs []string `json:"ids"`
	All bool     `json:"all"`
}

// RetryResult says what a retry did.
type RetryResult struct {
	Retried []string          `json:"retried"`
	Skipped map[string]string `json:"skipped"` // id → why
}

func (c *Cell) retryFailed(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, inquiry.MaxBodyBytes*16))
	var req RetryRequest
	if err == nil {
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		err = dec.Decode(&req)
	}
	if err != nil || (req.All == (len(req.IDs) > 0)) {
		problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidJSON, `send {"ids":["..."]} or {"all":true}`).WithField("ids"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
	defer cancel()
	ids := req.IDs
	if req.All {
		list, err := c.queue.Failed(ctx, maxList)
		if err != nil {
			problem.WriteRetry(w, problem.New(http.StatusServiceUnavailable, problem.QueueUnavailable, err.Error()), time.Second)
			return
		}
		for _, f := range list {
			ids = append(ids, f.ID)
		}
	}
	res := RetryResult{Retried: []string{}, Skipped: map[string]string{}}
	for _, id := range ids {
		// An id of another cell's naming may be here: its user's
		// inquiries moved here with the user.
		if _, ok := inquiry.CellOf(id); !ok {
			res.Skipped[id] = "not an inquiry id"
			continue
		}
		if rec, _, err := c.queue.Get(ctx, id); err == nil {
			if c.mover.Fenced(rec.UserID) {
				res.Skipped[id] = "its user's inquiries are being moved to another cell: retry it there once the move is done"
				continue
			}
			// Re-queued in a cell that no longer serves its user, it
			// would wait for work that never comes (a drained cell has
			// no sessions): a change left it here.
			if owner := c.follower.Map().Lookup(rec.UserID).Cell; owner != c.cfg.ID {
				res.Skipped[id] = fmt.Sprintf("its user is served by cell %q now; a map change left this inquiry here (--leave-data): it moves there, to be retried there, when this cell is marked drained or removed", owner)
				continue
			}
		}
		err := c.queue.Retry(ctx, id)
		switch {
		case err == nil:
			res.Retried = append(res.Retried, id)
		case errors.Is(err, store.ErrNotFound):
			res.Skipped[id] = "unknown inquiry"
		default:
			res.Skipped[id] = err.Error()
		}
	}
	if len(res.Retried) > 0 {
		c.log.Info("failed inquiries re-enqueued", "count", len(res.Retried), "skipped", len(res.Skipped))
	}
	httpx.Indent(w, http.StatusOK, res)
}

// catchUpWithRegistry reads the registry's map (within max) and has the
// follower take it if it is newer than its own, without waiting for the
// watch to bring it.
func (c *Cell) catchUpWithRegistry(ctx context.Context, max time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, max)
	defer cancel()
	if cur, err := c.registry.Load(ctx); err == nil {
		c.follower.Offer(cur)
	}
}
