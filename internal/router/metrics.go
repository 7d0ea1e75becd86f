package router

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/apikey"
	"github.com/cellkit/cellkit/internal/guard"
	"github.com/cellkit/cellkit/internal/metric"
	"github.com/prometheus/client_golang/prometheus"
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
func newMetrics(reg prometheus.Registerer, gauges prometheus.Collector, loops func() loopCounts) *metrics {
	waits := metric.CounterFunc(reg, api.MetricRouterLoopWaits, func() float64 { return float64(loops().waits) })
	metric.CounterFunc(reg, api.MetricRouterLoopBatches, func() float64 { return float64(loops().batches) })
	for _, op := range []struct {
		name string
		n    func(loopCounts) uint64
	}{{"read", func(c loopCounts) uint64 { return c.batchedReads }}, {"write", func(c loopCounts) uint64 { return c.batchedWrites }}} {
		metric.CounterFunc(reg, api.MetricRouterLoopBatchedOps, func() float64 { return float64(op.n(loops())) },
			prometheus.Labels{api.LabelOp: op.name})
	}
	m := &metrics{
		requests: metric.CounterVec(reg, api.MetricRouterRequests),
		duration: metric.HistogramVec(reg, api.MetricRouterRequestSeconds,
			[]float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}),
		limited:       metric.CounterVec(reg, api.MetricRouterLimited),
		shed:          metric.CounterVec(reg, api.MetricRouterShed),
		panics:        metric.Counter(reg, api.MetricRouterPanics),
		deduped:       metric.Counter(reg, api.MetricRouterDeduped),
		authFail:      metric.CounterVec(reg, api.MetricRouterAuthFailures),
		upstream:      metric.CounterVec(reg, api.MetricRouterUpstreamErrors),
		misdirects:    metric.CounterVec(reg, api.MetricRouterMisdirected),
		refreshes:     metric.CounterVec(reg, api.MetricRouterMapRefreshes),
		acceptErrs:    metric.Counter(reg, api.MetricRouterAcceptErrors),
		connRefuse:    metric.CounterVec(reg, api.MetricRouterConnectionsRefused),
		peeks:         metric.Counter(reg, api.MetricRouterCellPeeks),
		evicted:       metric.Counter(reg, api.MetricRouterConnectionsEvicted),
		ejections:     metric.CounterVec(reg, api.MetricRouterInstanceEjections),
		probes:        metric.CounterVec(reg, api.MetricRouterProbes),
		shedRetried:   metric.CounterVec(reg, api.MetricRouterInstanceShedRetries),
		tlsHandshakes: metric.CounterVec(reg, api.MetricRouterTLSHandshakes),
		tlsHandshakeSeconds: metric.Histogram(reg, api.MetricRouterTLSHandshakeSeconds,
			[]float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 5}),
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
		inFlight: metric.Desc(api.MetricRouterInFlight),
		limit:    metric.Desc(api.MetricRouterBulkheadLimit),
		state:    metric.Desc(api.MetricRouterBreakerState),
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
