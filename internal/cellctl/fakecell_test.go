package cellctl

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/problem"
)

// fakeCell serves a cell's admin API (the JSON of internal/cell, written out
// here: cellctl does not import the cell) over a queue that empties by
// `work` messages per status call.
type fakeCell struct {
	t   *testing.T
	srv *httptest.Server

	mu         sync.Mutex
	id         string
	token      string
	high       int64
	normal     int64
	inflight   int64
	work       int64 // finished per status call
	queueErrs  int   // status calls that report a queue read error
	intake     string
	mapVersion int64
	breakers   map[string]string
	pools      map[string][2]int // agency → in use, size
	failed     []map[string]any
	dlq        int
	calls      []string       // "METHOD PATH BODY"
	statuses   int            // status calls answered
	emptyAt    int            // the status call that first reported an empty queue
	release    string         // the release id it reports ("": none)
	layout     map[string]any // its status's layout (nil: a release from before the ledger)
	cellMoves  map[string]api.CellMove
}

func newFakeCell(t *testing.T, id string) *fakeCell {
	f := &fakeCell{t: t, id: id, intake: "open",
		breakers: map[string]string{"nice": "closed", "kcb": "closed"},
		pools:    map[string][2]int{"nice": {0, 20}, "kcb": {0, 10}}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeCell) URL() string { return f.srv.URL }

func (f *fakeCell) pending() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.high + f.normal + f.inflight
}

func (f *fakeCell) called(prefix string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if strings.HasPrefix(c, prefix) {
			out = append(out, c)
		}
	}
	return out
}

func (f *fakeCell) set(fn func(f *fakeCell)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// finish takes n messages off the queue: high lane, normal lane, in flight.
func (f *fakeCell) finish(n int64) {
	for _, p := range []*int64{&f.high, &f.normal, &f.inflight} {
		d := min(n, *p)
		*p -= d
		n -= d
	}
}

func (f *fakeCell) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, strings.TrimSpace(r.Method+" "+r.URL.RequestURI()+" "+string(body)))
	if f.token != "" && r.Header.Get("Authorization") != "Bearer "+f.token {
		problem.Write(w, problem.New(http.StatusUnauthorized, problem.Unauthorized, "the admin API needs a bearer token"))
		return
	}
	write := func(v any) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
	path := r.URL.Path
	switch {
	case r.Method == http.MethodGet && path == "/v1/admin/status":
		f.statuses++
		st := f.statusDoc()
		if f.queueErrs > 0 {
			f.queueErrs--
			st["errors"] = map[string]string{"queue": "nats: timeout"}
			st["queue"] = map[string]any{"depth": nil, "messages": 0, "oldest_age_seconds": 0}
		} else if f.high+f.normal+f.inflight == 0 && f.emptyAt == 0 {
			f.emptyAt = f.statuses
		}
		write(st)
		f.finish(f.work)
	case r.Method == http.MethodPost && strings.HasPrefix(path, "/v1/admin/intake/"):
		f.intake = map[string]string{"close": "closed", "open": "open"}[strings.TrimPrefix(path, "/v1/admin/intake/")]
		write(map[string]string{"intake": f.intake})
	case r.Method == http.MethodPost && strings.HasPrefix(path, "/v1/admin/circuit/"):
		agency, action, _ := strings.Cut(strings.TrimPrefix(path, "/v1/admin/circuit/"), "/")
		if _, ok := f.breakers[agency]; !ok {
			problem.Write(w, problem.New(http.StatusNotFound, problem.UnknownAgency, `no agency "`+agency+`"`))
			return
		}
		f.breakers[agency] = map[string]string{"open": "forced_open", "close": "forced_closed", "reset": "closed"}[action]
		write(map[string]string{"agency": agency, "breaker": f.breakers[agency]})
	case r.Method == http.MethodPost && path == "/v1/admin/layout/ledger" && f.layout != nil:
		if _, ok := f.layout["ledger_since"]; !ok {
			f.layout["ledger_since"] = time.Date(2026, 12, 5, 4, 20, 15, 0, time.UTC)
		}
		write(f.layout)
	case r.Method == http.MethodGet && path == "/v1/admin/failed":
		write(map[string]any{"failed": f.failed, "count": len(f.failed)})
	case r.Method == http.MethodPost && path == "/v1/admin/failed/retry":
		var req struct {
			IDs []string `json:"ids"`
			All bool     `json:"all"`
		}
		json.Unmarshal(body, &req)
		res := map[string]any{"retried": []string{}, "skipped": map[string]string{}}
		known := map[string]bool{}
		for _, it := range f.failed {
			known[it["id"].(string)] = true
		}
		ids := req.IDs
		if req.All {
			ids = nil
			for _, it := range f.failed {
				ids = append(ids, it["id"].(string))
			}
		}
		for _, id := range ids {
			if known[id] {
				res["retried"] = append(res["retried"].([]string), id)
			} else {
				res["skipped"].(map[string]string)[id] = "unknown inquiry"
			}
		}
		write(res)
	case r.Method == http.MethodPost && path == api.PathCellMoveSize:
		write(api.MoveSize{})
	case strings.HasPrefix(path, api.PathCellMoves) && f.moves(w, r.Method, strings.TrimPrefix(path, api.PathCellMoves), body):
	default:
		problem.Write(w, problem.New(http.StatusNotFound, problem.NotFound, "no such path: "+path))
	}
}

// moves answers a data move's steps as a cell whose store holds none of
// the moving users' inquiries (the fake's queue is counters, not
// inquiries): it records its part, exports and digests nothing, hands
// nothing over. False: not a move's path.
func (f *fakeCell) moves(w http.ResponseWriter, method, rest string, body []byte) bool {
	write := func(v any) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
	id, action, _ := strings.Cut(rest, "/")
	if f.cellMoves == nil {
		f.cellMoves = map[string]api.CellMove{}
	}
	cm, known := f.cellMoves[id]
	switch {
	case method == http.MethodPut && action == "":
		if err := json.Unmarshal(body, &cm); err != nil {
			problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidJSON, err.Error()))
			return true
		}
		f.cellMoves[id] = cm
		write(cm)
	case !known:
		problem.Write(w, problem.New(http.StatusNotFound, problem.UnknownMove, "no move "+id))
	case method == http.MethodGet && action == "":
		write(cm)
	case method == http.MethodDelete && action == "":
		delete(f.cellMoves, id)
		w.WriteHeader(http.StatusNoContent)
	case action == api.MoveExport:
		write(api.MovePage{Messages: []api.MovedMessage{}, Done: true})
	case action == api.MoveImport:
		write(map[string]int{"imported": 0})
	case action == api.MoveDigestOf:
		write(api.MoveDigest{Slots: map[int]api.SlotDigest{}})
	case action == api.MoveHand || action == api.MoveActivate:
		write(map[string]int{"handed": 0, "activated": 0})
	case action == api.MoveDiscard:
		write(map[string]bool{"discarded": true})
	default:
		return false
	}
	return true
}

// statusDoc is GET /v1/admin/status as internal/cell answers it.
func (f *fakeCell) statusDoc() map[string]any {
	agencies := map[string]any{}
	for a, p := range f.pools {
		agencies[a] = map[string]any{
			"agency": a, "breaker": f.breakers[a], "limit": p[1], "inflight": p[0],
			"pool":  map[string]any{"size": p[1], "open": p[1], "idle": p[1] - p[0], "in_use": p[0], "dialing": 0, "waiters": 0, "created": p[1]},
			"quota": p[1], "waiting": 0,
		}
	}
	ready := f.intake == "open" && f.breakers["kcb"] == "closed"
	checks := map[string]any{
		"nats":   map[string]any{"ok": true},
		"intake": map[string]any{"ok": f.intake == "open", "detail": f.intake},
		"map":    map[string]any{"ok": true, "detail": "version"},
	}
	oldest := 0.0
	if f.high+f.normal > 0 {
		oldest = 0.929
	}
	return map[string]any{
		"cell": f.id, "intake": f.intake, "ready": ready, "stopping": false,
		"release":  map[string]any{"id": f.release},
		"map":      map[string]any{"version": f.mapVersion, "state": "active", "owned_slots": 0, "registry": "x", "stale": false},
		"queue":    map[string]any{"depth": map[string]int64{"high": f.high, "normal": f.normal}, "messages": f.high + f.normal, "oldest_age_seconds": oldest, "drain_rate": 3.5, "age_budget_seconds": 60, "depth_limit": 10000},
		"inflight": f.inflight, "workers": 8, "agencies": agencies,
		"failed": len(f.failed), "dlq": f.dlq, "nats": "CONNECTED",
		"sampled": time.Now().UTC(), "checks": checks,
		"a_field_from_the_future": map[string]int{"x": 1},
		"layout":                  f.layout,
	}
}
