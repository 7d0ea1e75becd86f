// Package intake is a cell's public API: POST /v1/inquiries takes an
// inquiry, GET /v1/inquiries/{id} reports it.
//
// Guarantees:
//   - 202 is answered only after the record is stored and the work message
//     acknowledged by JetStream (synced to disk). When the cell cannot
//     tell whether an inquiry was accepted (a write whose answer never
//     came, a rollback that failed) the answer is 503 outcome-unknown
//     naming the inquiry, and the instance settles it (Settle); every
//     other answer accepted nothing (see package queue for the half-write
//     rules).
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
	"crypto/tls"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/httpx"
	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/problem"
	"github.com/cellkit/cellkit/internal/queue"
	"github.com/cellkit/cellkit/internal/shed"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// prefixByID begins the path of one inquiry.
const prefixByID = api.PathInquiries + "/"

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

// withDefaults fills the zero fields of c from DefaultConfig, field by
// field (a nil TrustedCIDRs too; an empty one trusts none).
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.ClosedRetryAfter <= 0 {
		c.ClosedRetryAfter = d.ClosedRetryAfter
	}
	if c.StorageRetryAfter <= 0 {
		c.StorageRetryAfter = d.StorageRetryAfter
	}
	if c.LeaderWait <= 0 {
		c.LeaderWait = d.LeaderWait
	}
	if c.TryTimeout <= 0 {
		c.TryTimeout = d.TryTimeout
	}
	if c.Timeout <= 0 {
		c.Timeout = d.Timeout
	}
	if c.TrustedCIDRs == nil {
		c.TrustedCIDRs = d.TrustedCIDRs
	}
	if c.RouterRole == "" {
		c.RouterRole = d.RouterRole
	}
	return c
}

// withDefaults fills the nil collaborators: Logger (none) and Now.
func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
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
	// (https ones) for an inquiry whose user's data is not here (see
	// getElsewhere): its client certificate should name PeerRole. Nil means Go's defaults (the
	// system's roots, no client certificate).
	PeerTLS *tls.Config
	// Moving, if not nil, says that a user's inquiries are being moved
	// out of this cell (internal/move's fence): the user's new inquiries
	// are answered 503 user-moving, with Cellkit-Overloaded.
	Moving func(user string) bool
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
	cfg     Config
	q       *queue.Queue
	shed    *shed.Shedder
	disk    Storage // nil: not watched
	cmap    func() *slotmap.Map
	moving  func(user string) bool // nil: no user is
	log     *slog.Logger
	now     func() time.Time
	open    atomic.Bool
	leaving atomic.Bool // stopping: the health check fails (Leaving)
	m       *metrics

	peers *http.Client // asks other cells' intake APIs (getElsewhere)

	refusedLog atomic.Int64 // when a refused caller was last logged (Unix ns)
	leaderless atomic.Int64 // when new inquiries began waiting for a leader (Unix ns; 0: they do not)
	// The health check's ping of the ledger's leader, run in the
	// background while inquiries wait for one: its last answer (Unix ns
	// of it; negative: the leader did not answer) and whether one runs.
	pinged  atomic.Int64
	pinging atomic.Bool

	doubts doubts // the inquiries of unknown outcome to settle (see Settle)
}

// New builds the handler.
func New(cfg Config, opts Options) (*Handler, error) {
	switch {
	case cfg.Cell == "":
		return nil, errors.New("intake: cell id is required")
	case opts.Queue == nil || opts.Shedder == nil || opts.Map == nil:
		return nil, errors.New("intake: a queue, a shedder and a map source are required")
	}
	cfg, opts = cfg.withDefaults(), opts.withDefaults()
	h := &Handler{
		cfg: cfg, q: opts.Queue, shed: opts.Shedder, disk: opts.Storage, cmap: opts.Map, moving: opts.Moving,
		log: opts.Logger, now: opts.Now, m: newMetrics(opts.Registerer), peers: peerClient(opts.PeerTLS),
		doubts: doubts{since: map[string]time.Time{}},
	}
	return h, nil
}

// Open lets new inquiries in.
func (h *Handler) Open() { h.setOpen(true) }

// Close turns new inquiries away with 503 (status reads still work).
func (h *Handler) Close() { h.setOpen(false) }

// Leaving makes the health check fail (503 not-ready) while the intake
// serves on: the instance is stopping, and the routers take it out of
// rotation before it closes.
func (h *Handler) Leaving() { h.leaving.Store(true) }

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
	rw := &httpx.StatusWriter{ResponseWriter: w}
	rw.Header().Set(api.HeaderCell, h.cfg.Cell)
	route := "other"
	switch {
	case r.URL.Path == api.PathInquiries:
		route = "post"
	case strings.HasPrefix(r.URL.Path, prefixByID):
		route = "get"
	case r.URL.Path == api.PathHealth:
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
	h.m.requests.WithLabelValues(route, strconv.Itoa(rw.Status())).Inc()
	h.m.seconds.WithLabelValues(route).Observe(h.now().Sub(began).Seconds())
}

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	problem.Write(w, problem.New(http.StatusMethodNotAllowed, problem.MethodNotAllowed, "allowed: "+allow))
}

// peerClient asks other cells' intake APIs, directly (no proxy), with
// tlsConf (nil: Go's defaults), each request within a second.
func peerClient(tlsConf *tls.Config) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // cells talk to each other directly
	if tlsConf != nil {
		tr.TLSClientConfig = tlsConf.Clone()
	}
	return &http.Client{Timeout: time.Second, Transport: tr}
}
