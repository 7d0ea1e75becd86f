package sessionpool

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/metric"
)

// Metrics exports the pools of a process, labelled by pool name (the
// agency). Gauges and counters are read from each pool's Stats at scrape
// time; the wait-time histogram is observed on every Borrow. Callers add
// labels of their own (the cell) by wrapping the registerer.
type Metrics struct {
	wait *prometheus.HistogramVec

	mu    sync.Mutex
	pools map[string]func() Stats

	size, idle, inUse, dialing, waiters *prometheus.Desc
	created, reused, broken, heartbeats *prometheus.Desc
	exhausted, dialErrors, retired      *prometheus.Desc
}

// NewMetrics builds the pool metrics (cellkit_pool_*) and registers them
// with reg (nil: none are registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		wait: metric.HistogramVec(reg, api.MetricPoolWaitSeconds,
			[]float64{0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}),
		pools:      map[string]func() Stats{},
		size:       metric.Desc(api.MetricPoolSize),
		idle:       metric.Desc(api.MetricPoolIdle),
		inUse:      metric.Desc(api.MetricPoolInUse),
		dialing:    metric.Desc(api.MetricPoolDialing),
		waiters:    metric.Desc(api.MetricPoolWaiters),
		created:    metric.Desc(api.MetricPoolCreated),
		reused:     metric.Desc(api.MetricPoolReused),
		broken:     metric.Desc(api.MetricPoolBroken),
		heartbeats: metric.Desc(api.MetricPoolHeartbeats),
		exhausted:  metric.Desc(api.MetricPoolExhausted),
		dialErrors: metric.Desc(api.MetricPoolDialErrors),
		retired:    metric.Desc(api.MetricPoolRetired),
	}
	if reg != nil {
		reg.MustRegister(m)
	}
	return m
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.size, m.idle, m.inUse, m.dialing, m.waiters, m.created, m.reused, m.broken, m.heartbeats, m.exhausted, m.dialErrors, m.retired} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	pools := make(map[string]func() Stats, len(m.pools))
	for k, v := range m.pools {
		pools[k] = v
	}
	m.mu.Unlock()
	for name, stats := range pools {
		st := stats()
		g := func(d *prometheus.Desc, v int) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), name)
		}
		c := func(d *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), name)
		}
		g(m.size, st.Size)
		g(m.idle, st.Idle)
		g(m.inUse, st.InUse)
		g(m.dialing, st.Dialing)
		g(m.waiters, st.Waiters)
		c(m.created, st.Created)
		c(m.reused, st.Reused)
		c(m.broken, st.Broken)
		c(m.heartbeats, st.Heartbeats)
		c(m.exhausted, st.Exhausted)
		c(m.dialErrors, st.DialErrors)
		c(m.retired, st.Retired)
	}
}

func (m *Metrics) add(name string, stats func() Stats) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.pools[name] = stats
	m.mu.Unlock()
	m.wait.WithLabelValues(name) // exported from the start, empty
}

func (m *Metrics) remove(name string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	delete(m.pools, name)
	m.mu.Unlock()
}

func (m *Metrics) observeWait(name string, d time.Duration) {
	if m == nil {
		return
	}
	m.wait.WithLabelValues(name).Observe(d.Seconds())
}
