package sessionpool

import (
	"github.com/cellkit/cellkit/internal/api"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
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
	desc := func(m api.MetricSpec) *prometheus.Desc {
		return prometheus.NewDesc(m.Name, m.Help, m.Labels, nil)
	}
	m := &Metrics{
		wait: promauto.With(reg).NewHistogramVec(prometheus.HistogramOpts{
			Name:    api.MetricPoolWaitSeconds.Name,
			Help:    api.MetricPoolWaitSeconds.Help,
			Buckets: []float64{0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
		}, api.MetricPoolWaitSeconds.Labels),
		pools:      map[string]func() Stats{},
		size:       desc(api.MetricPoolSize),
		idle:       desc(api.MetricPoolIdle),
		inUse:      desc(api.MetricPoolInUse),
		dialing:    desc(api.MetricPoolDialing),
		waiters:    desc(api.MetricPoolWaiters),
		created:    desc(api.MetricPoolCreated),
		reused:     desc(api.MetricPoolReused),
		broken:     desc(api.MetricPoolBroken),
		heartbeats: desc(api.MetricPoolHeartbeats),
		exhausted:  desc(api.MetricPoolExhausted),
		dialErrors: desc(api.MetricPoolDialErrors),
		retired:    desc(api.MetricPoolRetired),
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
