// Package intake is a cell's public API: POST /v1/inquiries takes an
// inquiry, GET /v1/inquiries/{id} reports it.
//
// Guarantees:
//   - 202 is answered only after the record is stored and the work message
//     acknowledged by JetStream (synced to disk); every other answer
//     accepted nothing (see package queue for the half-write rules).
//   - The same Idempotency-Key (per user) always names the same inquiry: a
//     retry gets the same id and enqueues nothing new; the key reused with
//     another body is refused with 422.
//   - Fencing: a request is taken only if this cell owns the user in the
//     newest map it knows, unless the caller's Cellkit-Map-Version is newer
//     than that map; otherwise 421 with the cell's map version.
//   - Overload (the shedder's budgets), a closed intake and an unreachable
//     NATS are answered at once with 503 and Retry-After; all but the
//     last with Cellkit-Overloaded (a refusal, not a failure).
//   - Every error is an RFC 9457 problem naming the field at fault.
//   - Only routers are served (see trust.go): a caller that is not one gets
//     403, and the headers it set are not read.
package intake

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/problem"
	"github.com/cellkit/cellkit/internal/queue"
	"github.com/cellkit/cellkit/internal/shed"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/store"
)

// Paths.
const (
	PathInquiries = "/v1/inquiries"
	prefixByID    = PathInquiries + "/"
	// PathHealth is what routers probe, on a connection of their own, to
	// find an instance that hangs: 200 while the instance answers and
	// reaches its queue, 503 (queue-unavailable) when it cannot. It reads
	// nothing from the store and is never shed.
	PathHealth = "/v1/health"
)

// Config tunes the intake. Zero values mean the defaults in brackets (see
// DefaultConfig).
type Config struct {
	// Cell is this cell's id. Required.
	Cell string
	// ClosedRetryAfter is the Retry-After of a closed intake [5s].
	ClosedRetryAfter time.Duration
	// StorageRetryAfter is the Retry-After of an intake whose store
	// refuses new work [10s].
	StorageRetryAfter time.Duration
	// Timeout bounds the handling of one request, the wait for the PubAck
	// and for a leader (LeaderWait) included [12s].
	Timeout time.Duration
	// LeaderWait is how long a new inquiry waits for the cell's streams to
	// have a leader again (a JetStream cluster electing one after losing a
	// node: 4–9 s), trying again every few hundred milliseconds, each try
	// bounded by TryTimeout, instead of failing [10s].
	LeaderWait time.Duration
	// TryTimeout bounds one try at writing the record and its message
	// [750ms]: a request sent while a stream has no leader gets no
	// answer, so the try that goes out just before the election ends waits
	// this long (with 2 s the cell's p99 through an 8.5 s election was
	// 10.1 s); a slower write is tried again as a new job, which is safe.
	TryTimeout time.Duration
	// TrustedCIDRs are the peer addresses served as routers on a
	// connection without a verified client certificate (plain HTTP, or TLS
	// without client certificates) [127.0.0.0/8, ::1/128]. An empty,
	// non-nil list trusts no address.
	TrustedCIDRs []netip.Prefix
	// RouterRole is the role a verified client certificate names to be
	// served as a router [pki.RoleRouter]; AnyRole takes every verified
	// certificate as a router's. A certificate naming PeerRole (another
	// cell) may read inquiries only.
	RouterRole string
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{ClosedRetryAfter: 5 * time.Second, StorageRetryAfter: 10 * time.Second, Timeout: 12 * time.Second,
		LeaderWait: 10 * time.Second, TryTimeout: 750 * time.Millisecond,
		TrustedCIDRs: DefaultTrustedCIDRs(), RouterRole: pki.RoleRouter}
}

// Options carry the intake's collaborators.
type Options struct {
	// Queue takes the inquiries in; its store holds their records.
	// Required.
	Queue *queue.Queue
	// Shedder decides whether new work is taken. Required.
	Shedder *shed.Shedder
	// Map returns the newest cell map the cell knows (nil before the
	// first). Required.
	Map func() *slotmap.Map
	// Logger receives failures to queue and to read. Nil means none.
	Logger *slog.Logger
	// Registerer receives the intake's metrics (cellkit_cell_intake_*);
	// callers add the cell label by wrapping it. Nil means they are not
	// registered.
	Registerer prometheus.Registerer
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// Storage, if not nil, says when the cell's store refuses new work (its
	// disk near full, or a write failed): new inquiries are then answered
	// 503 storage-full, with Cellkit-Overloaded (the cell chose to refuse).
	Storage Storage
	// PeerTLS is the TLS configuration for asking other cells' intake
	// (https ones) about an inquiry after a slot move (see TrackMoves): its
	// client certificate should name PeerRole. Nil means Go's defaults (the
	// system's roots, no client certificate).
	PeerTLS *tls.Config
}

// Storage is the cell's store as intake sees it (internal/storage.Guard).
type Storage interface {
	// Refusing says that new work is refused for the store.
	Refusing() bool
	// Failing is closed when the store fails a write: a publish waiting
	// for its acknowledgement then stops waiting (a store on a full disk
	// does not answer).
	Failing() <-chan struct{}
}

// Handler serves the intake API. It starts closed: Open it once the cell
// is ready.
type Handler struct {
	cfg  Config
	q    *queue.Queue
	st   *store.Store
	shed *shed.Shedder
	disk Storage // nil: not watched
	cmap func() *slotmap.Map
	log  *slog.Logger
	now  func() time.Time
	open atomic.Bool
	m    *metrics

	moves   *Moves       // nil: keyed retries are not checked against the slot's previous cell
	peers   *http.Client // asks other cells' intake APIs
	peerTLS *tls.Config

	refusedLog atomic.Int64 // when a refused caller was last logged (Unix ns)
	leaderless atomic.Int64 // when new inquiries began waiting for a leader (Unix ns; 0: they do not)
	// The health check's ping of the work stream's leader, run in the
	// background while inquiries wait for one: its last answer (Unix ns
	// of it; negative: the leader did not answer) and whether one runs.
	pinged  atomic.Int64
	pinging atomic.Bool
}

// TrackMoves makes keyed requests for users whose slot moved here within
// MoveWindow check the previous owner first (see Moves).
func (h *Handler) TrackMoves(mv *Moves) {
	h.moves = mv
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // cells talk to each other directly
	if h.peerTLS != nil {
		tr.TLSClientConfig = h.peerTLS.Clone()
	}
	h.peers = &http.Client{Timeout: time.Second, Transport: tr}
}

// New builds the handler.
func New(cfg Config, opts Options) (*Handler, error) {
	switch {
	case cfg.Cell == "":
		return nil, errors.New("intake: cell id is required")
	case opts.Queue == nil || opts.Shedder == nil || opts.Map == nil:
		return nil, errors.New("intake: a queue, a shedder and a map source are required")
	}
	d := DefaultConfig()
	if cfg.ClosedRetryAfter <= 0 {
		cfg.ClosedRetryAfter = d.ClosedRetryAfter
	}
	if cfg.StorageRetryAfter <= 0 {
		cfg.StorageRetryAfter = d.StorageRetryAfter
	}
	if cfg.LeaderWait <= 0 {
		cfg.LeaderWait = d.LeaderWait
	}
	if cfg.TryTimeout <= 0 {
		cfg.TryTimeout = d.TryTimeout
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = d.Timeout
	}
	if cfg.TrustedCIDRs == nil {
		cfg.TrustedCIDRs = d.TrustedCIDRs
	}
	if cfg.RouterRole == "" {
		cfg.RouterRole = d.RouterRole
	}
	h := &Handler{
		cfg: cfg, q: opts.Queue, st: opts.Queue.Store(), shed: opts.Shedder, disk: opts.Storage, cmap: opts.Map,
		log: opts.Logger, now: opts.Now, m: newMetrics(opts.Registerer), peerTLS: opts.PeerTLS,
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.now == nil {
		h.now = time.Now
	}
	return h, nil
}

// Open lets new inquiries in.
func (h *Handler) Open() { h.setOpen(true) }

// Close turns new inquiries away with 503 (status reads still work).
func (h *Handler) Close() { h.setOpen(false) }

func (h *Handler) setOpen(v bool) {
	if h.open.Swap(v) != v {
		h.log.Info("intake " + map[bool]string{true: "opened", false: "closed"}[v])
	}
	h.m.open.Set(map[bool]float64{true: 1, false: 0}[v])
}

// IsOpen reports whether new inquiries are let in.
func (h *Handler) IsOpen() bool { return h.open.Load() }

// ServeHTTP routes the intake API.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	began := h.now()
	rw := &statusWriter{ResponseWriter: w}
	rw.Header().Set(api.HeaderCell, h.cfg.Cell)
	route := "other"
	switch {
	case r.URL.Path == PathInquiries:
		route = "post"
	case strings.HasPrefix(r.URL.Path, prefixByID):
		route = "get"
	case r.URL.Path == PathHealth:
		route = "health"
	}
	read := (route == "get" || route == "health") && (r.Method == http.MethodGet || r.Method == http.MethodHead)
	switch who, why := h.callerOf(r); {
	case who == untrusted:
		h.refuse(rw, r, why)
	case who == fromPeerCell && !read:
		h.refuse(rw, r, "its certificate is another cell's, which may only read inquiries")
	case route == "post":
		if r.Method != http.MethodPost {
			methodNotAllowed(rw, http.MethodPost)
			break
		}
		h.post(rw, r)
	case route == "get":
		if !read {
			methodNotAllowed(rw, "GET, HEAD")
			break
		}
		h.get(rw, r, strings.TrimPrefix(r.URL.Path, prefixByID))
	case route == "health":
		if !read {
			methodNotAllowed(rw, "GET, HEAD")
			break
		}
		h.health(rw)
	default:
		problem.Write(rw, problem.New(http.StatusNotFound, problem.NotFound, "no such path: "+r.URL.Path))
	}
	h.m.requests.WithLabelValues(route, strconv.Itoa(rw.status())).Inc()
	h.m.seconds.WithLabelValues(route).Observe(h.now().Sub(began).Seconds())
}

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	problem.Write(w, problem.New(http.StatusMethodNotAllowed, problem.MethodNotAllowed, "allowed: "+allow))
}

// Accepted is the 202 body.
type Accepted struct {
	ID        string         `json:"id"`
	Cell      string         `json:"cell"`
	Status    inquiry.Status `json:"status"`
	StatusURL string         `json:"status_url"`
}

func (h *Handler) shedNow(w http.ResponseWriter, reason shed.Reason, detail string, after time.Duration) {
	h.m.shed.WithLabelValues(string(reason)).Inc()
	// Cellkit-Overloaded tells a router that the cell chose to refuse:
	// not a failure of the instance. A queue it cannot reach is one: the
	// router takes the instance out of rotation (the others of the cell
	// may reach theirs) and counts it toward the cell's breaker.
	if reason != shedNATS {
		w.Header().Set(api.HeaderOverloaded, "true")
	}
	problem.WriteRetry(w, problem.New(http.StatusServiceUnavailable, reasonKind[reason], detail), after)
}

// The intake's own reasons to turn an inquiry away with 503, beside the
// shedder's.
const (
	shedClosed  shed.Reason = "closed"  // the intake is closed, or has no map yet
	shedNATS    shed.Reason = "nats"    // the queue cannot be reached
	shedFull    shed.Reason = "full"    // the work stream is at its limit
	shedStorage shed.Reason = "storage" // the store is near full or failed a write
)

// reasonKind is the problem type of each reason to shed (and the label
// values of the shed metric).
var reasonKind = map[shed.Reason]string{
	shedClosed: problem.IntakeClosed, shed.Age: problem.Overloaded, shed.Depth: problem.Overloaded, shed.Wait: problem.Overloaded, shed.Share: problem.Overloaded,
	shedNATS: problem.QueueUnavailable, shedFull: problem.QueueFull, shedStorage: problem.StorageFull,
}

func (h *Handler) post(w http.ResponseWriter, r *http.Request) {
	if !h.IsOpen() {
		// A closed intake is usually a drain: a user this cell no longer
		// owns gets 421, so that the router refreshes its map and retries on
		// the new owner instead of failing the user; only users it still
		// owns get the 503.
		req, ok := h.readRequest(w, r)
		if !ok {
			return
		}
		if m := h.cmap(); m != nil {
			if owner := m.Lookup(req.UserID).Cell; owner != "" && owner != h.cfg.Cell && !h.fence(w, r, req.UserID) {
				return
			}
		}
		h.shedNow(w, shedClosed, "cell "+h.cfg.Cell+" is not taking new inquiries (draining or starting)", h.cfg.ClosedRetryAfter)
		return
	}
	lane, ok := laneOf(w, r)
	if !ok {
		return
	}
	if h.disk != nil && h.disk.Refusing() {
		h.shedNow(w, shedStorage, "cell "+h.cfg.Cell+" is not taking new inquiries: its store is near full (queued ones go on)", h.cfg.StorageRetryAfter)
		return
	}
	if d := h.shed.Admit(lane); !d.OK {
		h.m.laneShed.WithLabelValues(laneName(lane)).Inc()
		h.shedNow(w, d.Reason, fmt.Sprintf("cell %s is overloaded: oldest pending %s inquiry %s old, %d queued ahead", h.cfg.Cell, laneName(lane), d.Age.Round(time.Millisecond), d.Depth), d.RetryAfter)
		return
	}
	if h.q.Conn().Status() != nats.CONNECTED {
		h.shedNow(w, shedNATS, "cell "+h.cfg.Cell+" cannot reach its queue", h.shed.RetryAfter())
		return
	}
	req, ok := h.readRequest(w, r)
	if !ok {
		return
	}
	if lane != "" {
		req.Priority = lane // the router's decision, from its client's policy
	}
	idemKey := r.Header.Get(api.HeaderIdemKey)
	if _, set := r.Header[http.CanonicalHeaderKey(api.HeaderIdemKey)]; set && !api.ValidIdempotencyKey(idemKey) {
		problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidHeader, "Idempotency-Key must be 1–255 printable ASCII characters").WithField(api.HeaderIdemKey))
		return
	}
	client, ok := clientOf(w, r)
	if !ok {
		return
	}
	if !h.fence(w, r, req.UserID) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	if h.disk != nil {
		failing := h.disk.Failing()
		go func() {
			select {
			case <-failing:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	if idemKey != "" && h.moves != nil {
		if prev, ok := h.moves.Previous(req.UserID, h.cmap().SlotOf(req.UserID), h.now()); ok {
			// The user's slot came from another cell lately: a retry of a
			// request that cell accepted must get that inquiry back, not a
			// second one. If that cell cannot be asked, availability wins
			// and the request is taken here (logged).
			rec, found, err := h.askPrevious(ctx, prev, client, req.UserID, idemKey, inquiry.Fingerprint(req))
			switch {
			case errors.Is(err, errKeyReused):
				problem.Write(w, keyReused(rec.ID))
				return
			case found:
				w.Header().Set("Location", rec.StatusURL)
				w.Header().Set("Idempotent-Replayed", "true")
				writeJSON(w, http.StatusAccepted, rec)
				return
			case err != nil:
				h.log.Warn("cannot ask the slot's previous cell about an idempotency key; accepting here", "previous", prev, "err", err)
			}
		}
	}
	id := inquiry.NewID(h.cfg.Cell)
	if idemKey != "" {
		id = inquiry.KeyID(h.cfg.Cell, client, req.UserID, idemKey)
	}
	rec := inquiry.NewRecord(id, h.cfg.Cell, req, h.now())
	rec.Client = client
	deadline := h.now().Add(h.cfg.LeaderWait)
	got, err := h.enqueue(ctx, deadline, &rec)
	if errors.Is(err, store.ErrExists) {
		h.replay(ctx, deadline, w, rec)
		return
	}
	if err != nil {
		h.enqueueFailed(w, rec.ID, err)
		return
	}
	h.taken(got.Priority)
	h.accepted(w, got, false)
}

func (h *Handler) enqueueFailed(w http.ResponseWriter, id string, err error) {
	if h.disk != nil && h.disk.Refusing() {
		h.log.Warn("inquiry not accepted: the store refuses new work", "id", id, "err", err)
		h.shedNow(w, shedStorage, "cell "+h.cfg.Cell+" could not store the inquiry: its store is near full or failed a write; nothing was accepted", h.cfg.StorageRetryAfter)
		return
	}
	if errors.Is(err, queue.ErrFull) {
		h.shedNow(w, shedFull, "cell "+h.cfg.Cell+" queue is full", h.shed.RetryAfter())
		return
	}
	h.log.Warn("inquiry not accepted", "id", id, "err", err)
	h.shedNow(w, shedNATS, "cell "+h.cfg.Cell+" could not queue the inquiry; nothing was accepted", h.shed.RetryAfter())
}

// taken counts a new inquiry accepted into lane.
func (h *Handler) taken(lane inquiry.Priority) {
	h.shed.Accepted(lane)
	h.m.laneTaken.WithLabelValues(laneName(lane)).Inc()
}

func (h *Handler) accepted(w http.ResponseWriter, rec inquiry.Record, replayed bool) {
	body := Accepted{ID: rec.ID, Cell: h.cfg.Cell, Status: rec.Status, StatusURL: prefixByID + rec.ID}
	w.Header().Set("Location", body.StatusURL)
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, http.StatusAccepted, body)
}

// readRequest checks the content type and size and decodes the body.
func (h *Handler) readRequest(w http.ResponseWriter, r *http.Request) (inquiry.Request, bool) {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if ct == "" || err != nil || (mt != "application/json" && !(strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))) {
		problem.Write(w, problem.New(http.StatusUnsupportedMediaType, problem.UnsupportedMediaType, "send application/json, not "+strconv.Quote(ct)).WithField("Content-Type"))
		return inquiry.Request{}, false
	}
	tooLarge := problem.New(http.StatusRequestEntityTooLarge, problem.BodyTooLarge, fmt.Sprintf("the body is over %d bytes", inquiry.MaxBodyBytes))
	if r.ContentLength > inquiry.MaxBodyBytes {
		problem.Write(w, tooLarge)
		return inquiry.Request{}, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, inquiry.MaxBodyBytes))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		problem.Write(w, tooLarge)
		return inquiry.Request{}, false
	}
	if err != nil {
		problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidBody, "cannot read the body: "+err.Error()))
		return inquiry.Request{}, false
	}
	req, err := inquiry.DecodeRequest(body)
	var fe *inquiry.FieldError
	switch {
	case errors.As(err, &fe):
		problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidField, fe.Error()).WithField(fe.Field))
		return inquiry.Request{}, false
	case err != nil:
		problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidJSON, err.Error()))
		return inquiry.Request{}, false
	}
	return req, true
}

// fence answers 421 unless this cell owns the user in its newest map or
// the caller's map is newer.
func (h *Handler) fence(w http.ResponseWriter, r *http.Request, user string) bool {
	m := h.cmap()
	if m == nil {
		h.shedNow(w, shedClosed, "cell "+h.cfg.Cell+" has no cell map yet", h.cfg.ClosedRetryAfter)
		return false
	}
	var theirs int64
	if v := r.Header.Get(api.HeaderMapVersion); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidHeader, api.HeaderMapVersion+" must be a positive integer").WithField(api.HeaderMapVersion))
			return false
		}
		theirs = n
	}
	if v := r.Header.Get(api.HeaderSlot); v != "" {
		if n, err := strconv.Atoi(v); err != nil || n < 0 || n >= m.Slots() {
			problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidHeader, fmt.Sprintf("%s must be a slot in [0, %d)", api.HeaderSlot, m.Slots())).WithField(api.HeaderSlot))
			return false
		}
	}
	if theirs > m.Version() {
		return true // the caller knows a newer map than ours
	}
	route := m.Lookup(user)
	if route.Cell == h.cfg.Cell {
		return true
	}
	h.m.misdirected.Inc()
	w.Header().Set(api.HeaderMapVersion, strconv.FormatInt(m.Version(), 10))
	owner := route.Cell
	if owner == "" {
		owner = "no active cell"
	}
	problem.Write(w, problem.New(http.StatusMisdirectedRequest, problem.Misdirected,
		fmt.Sprintf("cell %s does not own slot %d in map version %d (owner: %s); refresh the map", h.cfg.Cell, route.Slot, m.Version(), owner)).WithField(api.HeaderMapVersion))
	return false
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request, id string) {
	cell, ok := inquiry.CellOf(id)
	if !ok {
		problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidID, "malformed inquiry id "+strconv.Quote(id)).WithField("id"))
		return
	}
	if cell != h.cfg.Cell {
		problem.Write(w, problem.New(http.StatusMisdirectedRequest, problem.Misdirected, "inquiry "+id+" belongs to cell "+cell+", not "+h.cfg.Cell).WithField("id"))
		return
	}
	client, ok := clientOf(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	rec, _, err := h.st.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && client != "" && rec.Client != "" && rec.Client != client {
		// Another client's inquiry is answered as one that does not
		// exist: its existence is not the reader's to learn.
		problem.Write(w, problem.New(http.StatusNotFound, problem.UnknownInquiry, "no inquiry "+id))
		return
	}
	if err != nil {
		h.log.Warn("cannot read inquiry", "id", id, "err", err)
		problem.WriteRetry(w, problem.New(http.StatusServiceUnavailable, problem.StoreUnavailable, "cannot read the inquiry now"), time.Second)
		return
	}
	if fp := r.Header.Get(headerFingerprint); fp != "" && fp != rec.Fingerprint {
		// A cell that gained the user's slot asks on behalf of a keyed
		// retry (see askPrevious): the key was used for another request.
		problem.Write(w, keyReused(rec.ID))
		return
	}
	writeJSON(w, http.StatusOK, rec.View())
}

// clientOf is the client a request names in Cellkit-Client ("" for
// none); a malformed one is answered 400.
func clientOf(w http.ResponseWriter, r *http.Request) (string, bool) {
	vs := r.Header.Values(api.HeaderClient)
	switch {
	case len(vs) == 0:
		return "", true
	case len(vs) > 1 || !api.ValidClientID(vs[0]):
		problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidHeader, api.HeaderClient+" must be one client id: 1-64 of [A-Za-z0-9._-]").WithField(api.HeaderClient))
		return "", false
	}
	return vs[0], true
}

// laneOf is the lane a request's Cellkit-Priority names ("" for none); a
// malformed one is answered 400.
func laneOf(w http.ResponseWriter, r *http.Request) (inquiry.Priority, bool) {
	vs := r.Header.Values(api.HeaderPriority)
	switch {
	case len(vs) == 0:
		return "", true
	case len(vs) == 1 && (vs[0] == string(inquiry.High) || vs[0] == string(inquiry.Normal)):
		return inquiry.Priority(vs[0]), true
	}
	problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidHeader, api.HeaderPriority+` must be one lane: "high" or "normal"`).WithField(api.HeaderPriority))
	return "", false
}

// laneName names a lane in a problem's detail ("" sheds as normal).
func laneName(lane inquiry.Priority) string {
	if lane == inquiry.High {
		return "high"
	}
	return "normal"
}

// headerFingerprint carries a request's fingerprint when a cell asks the
// slot's previous owner for the inquiry of an Idempotency-Key.
const headerFingerprint = "Cellkit-Fingerprint"

// keyReused is the problem for an Idempotency-Key sent again with another
// request.
func keyReused(id string) problem.Details {
	return problem.New(http.StatusUnprocessableEntity, problem.IdempotencyKeyReused,
		"this Idempotency-Key was used for a different request (inquiry "+id+")").WithField(api.HeaderIdemKey)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

// statusWriter remembers the status for metrics.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) status() int {
	if s.code == 0 {
		return http.StatusOK
	}
	return s.code
}
