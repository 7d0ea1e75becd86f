package router

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/apikey"
	"github.com/cellkit/cellkit/internal/guard"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// noCell labels answers given before a request was routed to a cell
// (401, 403, 429, 400, 404).
const noCell = "none"

// metrics are the router's Prometheus series (cellkit_router_*). Everything
// the request path touches is resolved once per cell, so an answer costs a
// few atomic adds and no label lookups.
type metrics struct {
	requests   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	limited    *prometheus.CounterVec
	shed       *prometheus.CounterVec
	authFail   *prometheus.CounterVec
	panics     prometheus.Counter
	deduped    prometheus.Counter
	upstream   *prometheus.CounterVec
	misdirects *prometheus.CounterVec
	refreshes  *prometheus.CounterVec
	acceptErrs prometheus.Counter
	connRefuse *prometheus.CounterVec
	evicted    prometheus.Counter
	peeks      prometheus.Counter
	loopWaits  prometheus.CounterFunc

	ejections           *prometheus.CounterVec
	probes              *prometheus.CounterVec
	shedRetried         *prometheus.CounterVec
	tlsHandshakes       *prometheus.CounterVec
	tlsHandshakeSeconds prometheus.Histogram

	mu     sync.Mutex
	byCell map[string]*cellMetrics
}

// cellMetrics are one cell's series, resolved.
type cellMetrics struct {
	m           *metrics
	cell        string
	codes       [600]atomic.Pointer[codeCounter]
	duration    prometheus.Observer
	shed        [guard.Reasons]prometheus.Counter
	timeout     prometheus.Counter
	connErr     prometheus.Counter
	misdir      prometheus.Counter
	ejections   prometheus.Counter
	probes      [5]prometheus.Counter // by checkResult
	shedRetried prometheus.Counter
}

type codeCounter struct{ prometheus.Counter }

// loopCounts are the event loops' system-call counters, summed.
type loopCounts struct{ waits, batches, batchedReads, batchedWrites uint64 }

// newMetrics registers the router's series.
// One piece: one declaration per series, read top to bottom like the struct.
func newMetrics(reg prometheus.Registerer, gauges prometheus.Collector, loops func() loopCounts) *metrics {
	auto := promauto.With(reg)
	waits := auto.NewCounterFunc(prometheus.CounterOpts{
		Name: "cellkit_router_loop_waits_total",
		Help: "epoll_wait calls of the event loops, each a system call: a loop makes one per wake-up.",
	}, func() float64 { return float64(loops().waits) })
	auto.NewCounterFunc(prometheus.CounterOpts{
		Name: "cellkit_router_loop_batches_total",
		Help: "io_uring calls of the event loops, each a system call carrying a round's reads or its writes (two or more; one is a read or write call of its own). None where the kernel refuses io_uring.",
	}, func() float64 { return float64(loops().batches) })
	for _, op := range []struct {
		name string
		n    func(loopCounts) uint64
	}{{"read", func(c loopCounts) uint64 { return c.batchedReads }}, {"write", func(c loopCounts) uint64 { return c.batchedWrites }}} {
		auto.NewCounterFunc(prometheus.CounterOpts{
			Name:        "cellkit_router_loop_batched_ops_total",
			Help:        "Socket reads and writes the event loops made in batches (cellkit_router_loop_batches_total), by op.",
			ConstLabels: prometheus.Labels{"op": op.name},
		}, func() float64 { return float64(op.n(loops())) })
	}
	m := &metrics{
		requests: auto.NewCounterVec(prometheus.CounterOpts{
			Name: api.MetricRouterRequests,
			Help: "Answers by cell and status code (cell \"none\": answered before routing).",
		}, []string{"cell", "code"}),
		duration: auto.NewHistogramVec(prometheus.HistogramOpts{
			Name:    api.MetricRouterRequestSeconds,
			Help:    "Time from the request's arrival to its answer, by cell.",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}, []string{"cell"}),
		limited: auto.NewCounterVec(prometheus.CounterOpts{
			Name: "cellkit_router_limited_total",
			Help: "Requests refused with 429 by the client's rate limit.",
		}, []string{"client"}),
		shed: auto.NewCounterVec(prometheus.CounterOpts{
			Name: api.MetricRouterShed,
			Help: "Requests answered 503 at once by a cell's guard: reason breaker (open), bulkhead (full) or no_cell (no active cell).",
		}, []string{"cell", "reason"}),
		panics: auto.NewCounter(prometheus.CounterOpts{
			Name: "cellkit_router_panics_total",
			Help: "Panics recovered in the event loops (each closed the connection it happened on).",
		}),
		deduped: auto.NewCounter(prometheus.CounterOpts{
			Name: "cellkit_router_deduped_total",
			Help: "New inquiries answered from the same client's inquiry with the same Idempotency-Key and body still in flight at this router, not sent to the cell again.",
		}),
		authFail: auto.NewCounterVec(prometheus.CounterOpts{
			Name: "cellkit_router_auth_failures_total",
			Help: "Requests refused for a missing (401) or unknown (403) API key.",
		}, []string{"reason"}),
		upstream: auto.NewCounterVec(prometheus.CounterOpts{
			Name: "cellkit_router_upstream_errors_total",
			Help: "Calls to a cell that got no answer: kind timeout or connection.",
		}, []string{"cell", "kind"}),
		misdirects: auto.NewCounterVec(prometheus.CounterOpts{
			Name: "cellkit_router_misdirected_total",
			Help: "421 Misdirected Request answers from a cell (each refreshes the map and retries once).",
		}, []string{"cell"}),
		refreshes: auto.NewCounterVec(prometheus.CounterOpts{
			Name: "cellkit_router_map_refreshes_total",
			Help: "Registry reads forced by a 421: result newer, same or error.",
		}, []string{"result"}),
		acceptErrs: auto.NewCounter(prometheus.CounterOpts{
			Name: "cellkit_router_accept_errors_total",
			Help: "Errors accepting a client connection (EMFILE, ENFILE, ENOMEM, ENOBUFS...); each is retried after a backoff.",
		}),
		connRefuse: auto.NewCounterVec(prometheus.CounterOpts{
			Name: "cellkit_router_connections_refused_total",
			Help: "Client connections closed as soon as accepted: reason max_conns (no room, none idle to evict), per_addr (the address's cap) or draining.",
		}, []string{"reason"}),
		peeks: auto.NewCounter(prometheus.CounterOpts{
			Name: "cellkit_router_cell_peeks_total",
			Help: "System calls asking the kernel whether a cell wrote unasked bytes to a kept-alive connection before a call: once per connection to a cell that echoes Cellkit-Call, once per call to one that does not.",
		}),
		evicted: auto.NewCounter(prometheus.CounterOpts{
			Name: "cellkit_router_connections_evicted_total",
			Help: "Idle client connections closed to make room for a new one at the connection limit.",
		}),
		ejections: auto.NewCounterVec(prometheus.CounterOpts{
			Name: "cellkit_router_instance_ejections_total",
			Help: "Times an instance of a cell was taken out of the rotation: for failing calls (a cell of several instances), or for missing its health checks (any cell).",
		}, []string{"cell"}),
		probes: auto.NewCounterVec(prometheus.CounterOpts{
			Name: "cellkit_router_probes_total",
			Help: "Health checks of a cell's instances (GET /v1/health on a connection of their own), by result: ok, missed (no answer within the probe timeout), refused (no process listens), unhealthy (a 5xx: alive, cannot take work) or skipped (the router could not open a socket: its own open-file limit or memory; not held against the cell).",
		}, []string{"cell", "result"}),
		shedRetried: auto.NewCounterVec(prometheus.CounterOpts{
			Name: "cellkit_router_instance_shed_retries_total",
			Help: "Requests an instance of a cell of several shed (503, Cellkit-Overloaded) that were sent once to another of its instances.",
		}, []string{"cell"}),
		tlsHandshakes: auto.NewCounterVec(prometheus.CounterOpts{
			Name: "cellkit_router_tls_handshakes_total",
			Help: "TLS handshakes on the public listener: ok, or failed (a bad or missing certificate, a protocol error, no handshake within the read-header timeout, or stopping).",
		}, []string{"result"}),
		tlsHandshakeSeconds: auto.NewHistogram(prometheus.HistogramOpts{
			Name:    "cellkit_router_tls_handshake_seconds",
			Help:    "Time from a TLS client's connection accepted to its handshake done.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 5},
		}),
		byCell:    map[string]*cellMetrics{},
		loopWaits: waits,
	}
	if reg != nil {
		reg.MustRegister(gauges)
	}
	// Counters with a known label set are exported at 0 from the start, so
	// that rate() and increase() see their first event (a series born at 1
	// shows no increase from its first sample).
	for _, reason := range []string{"max_conns", "per_addr", "draining"} {
		m.connRefuse.WithLabelValues(reason)
	}
	for _, reason := range []string{"missing", "unknown"} {
		m.authFail.WithLabelValues(reason)
	}
	for _, result := range []string{"newer", "same", "error"} {
		m.refreshes.WithLabelValues(result)
	}
	return m
}

// addClients exports the rate-limit counter of every client of k at 0.
func (m *metrics) addClients(k *apikey.Keys) {
	if k == nil {
		return
	}
	for _, c := range k.Clients() {
		m.limited.WithLabelValues(c.ID)
	}
}

// addTLS exports the TLS handshake counters at 0 (a router with TLS on
// its public listener).
func (m *metrics) addTLS() {
	for _, result := range []string{"ok", "failed"} {
		m.tlsHandshakes.WithLabelValues(result)
	}
}

// errorCodes are the 5xx codes exported at 0 for every cell: the router's
// own answers for a cell that fails (502, 503, 504) and a cell's (500,
// 503), which the error-budget rules count from the first one.
var errorCodes = []int{500, 502, 503, 504}

// cell returns the resolved series of a cell, creating them once.
func (m *metrics) cell(id string) *cellMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cm, ok := m.byCell[id]; ok {
		return cm
	}
	cm := &cellMetrics{
		m:         m,
		cell:      id,
		duration:  m.duration.WithLabelValues(id),
		timeout:   m.upstream.WithLabelValues(id, "timeout"),
		connErr:   m.upstream.WithLabelValues(id, "connection"),
		misdir:    m.misdirects.WithLabelValues(id),
		ejections: m.ejections.WithLabelValues(id), shedRetried: m.shedRetried.WithLabelValues(id),
		probes: [5]prometheus.Counter{m.probes.WithLabelValues(id, "ok"), m.probes.WithLabelValues(id, "missed"),
			m.probes.WithLabelValues(id, "refused"), m.probes.WithLabelValues(id, "unhealthy"), m.probes.WithLabelValues(id, "skipped")},
	}
	for r := range guard.Reasons {
		cm.shed[r] = m.shed.WithLabelValues(id, r.String())
	}
	for _, code := range errorCodes {
		cm.codes[code].Store(&codeCounter{m.requests.WithLabelValues(id, strconv.Itoa(code))})
	}
	m.byCell[id] = cm
	return cm
}

// probed counts one health check of one of the cell's instances.
func (cm *cellMetrics) probed(v checkResult) { cm.probes[v].Inc() }

// answered records one answer.
func (cm *cellMetrics) answered(code int, seconds float64) {
	if code < 0 || code >= len(cm.codes) {
		code = 0
	}
	c := cm.codes[code].Load()
	if c == nil {
		c = &codeCounter{cm.m.requests.WithLabelValues(cm.cell, strconv.Itoa(code))}
		if !cm.codes[code].CompareAndSwap(nil, c) {
			c = cm.codes[code].Load()
		}
	}
	c.Inc()
	cm.duration.Observe(seconds)
}

// guardGauges exports every guard's state at scrape time: in flight,
// bulkhead size and breaker state per cell.
type guardGauges struct {
	guards   func() []*guard.Guard
	inFlight *prometheus.Desc
	limit    *prometheus.Desc
	state    *prometheus.Desc
}

func newGuardGauges(guards func() []*guard.Guard) *guardGauges {
	return &guardGauges{
		guards:   guards,
		inFlight: prometheus.NewDesc("cellkit_router_in_flight", "Requests being proxied to the cell.", []string{"cell"}, nil),
		limit:    prometheus.NewDesc("cellkit_router_bulkhead_limit", "Most requests the router proxies to the cell at once.", []string{"cell"}, nil),
		state: prometheus.NewDesc(api.MetricRouterBreakerState,
			"The cell's circuit breaker: 0 closed, 1 open, 2 half-open, 3 forced open, 4 forced closed.", []string{"cell"}, nil),
	}
}

func (g *guardGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.inFlight
	ch <- g.limit
	ch <- g.state
}

func (g *guardGauges) Collect(ch chan<- prometheus.Metric) {
	for _, gd := range g.guards() {
		ch <- prometheus.MustNewConstMetric(g.inFlight, prometheus.GaugeValue, float64(gd.InFlight()), gd.Cell)
		ch <- prometheus.MustNewConstMetric(g.limit, prometheus.GaugeValue, float64(gd.Limit()), gd.Cell)
		ch <- prometheus.MustNewConstMetric(g.state, prometheus.GaugeValue, float64(gd.Circuit().State()), gd.Cell)
	}
}
