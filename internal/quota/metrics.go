package quota

import (
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/metric"
)

// View returns what the router knows of the quotas after its last
// round: what its metrics, its admin API and the console show.
func (s *Sharer) View() api.RouterQuota {
	if v := s.view.Load(); v != nil {
		return *v
	}
	return api.RouterQuota{Router: s.cfg.Router, Routers: 1, LeaseAgeSeconds: -1}
}

// publishView stores the view of the round that ends at now; s.mu is
// held.
func (s *Sharer) publishView(now time.Time) {
	v := &api.RouterQuota{Router: s.cfg.Router, Routers: s.live, LeaseAgeSeconds: -1, Even: s.even, Clients: make([]api.ClientQuota, 0, len(s.clients))}
	if !s.leaseAt.IsZero() {
		v.LeaseAgeSeconds = now.Sub(s.leaseAt).Seconds()
	}
	over := 0.0
	for id := range s.shown {
		if s.clients[id] == nil {
			s.m.share.DeleteLabelValues(id)
			delete(s.shown, id)
		}
	}
	for id, st := range s.clients {
		s.m.share.WithLabelValues(id).Set(st.held)
		s.shown[id] = true
		c := api.ClientQuota{Client: id, Rate: st.rate, Burst: st.burst, Share: st.held, Held: st.held + st.others.held,
			Demand: st.demand, TotalDemand: st.demand + st.others.demand}
		over = max(over, c.Held-1)
		v.Clients = append(v.Clients, c)
	}
	sort.Slice(v.Clients, func(i, j int) bool { return v.Clients[i].Client < v.Clients[j].Client })
	s.view.Store(v)
	s.m.over.Set(over)
}

// metrics are the sharer's, cellkit_router_quota_*.
type metrics struct {
	rounds    *prometheus.CounterVec
	badLeases prometheus.Counter
	over      prometheus.Gauge
	share     *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer, s *Sharer) *metrics {
	m := &metrics{
		rounds:    metric.CounterVec(reg, api.MetricRouterQuotaRounds),
		badLeases: metric.Counter(reg, api.MetricRouterQuotaBadLeases),
		over:      metric.Gauge(reg, api.MetricRouterQuotaOvercommitRatio),
		share:     metric.GaugeVec(reg, api.MetricRouterQuotaShare),
	}
	for _, r := range []string{"ok", "unread", "unwritten"} {
		m.rounds.WithLabelValues(r)
	}
	metric.GaugeFunc(reg, api.MetricRouterQuotaLeaseAgeSeconds, func() float64 {
		at := s.leaseNs.Load()
		if at == 0 {
			return -1
		}
		return s.now().Sub(time.Unix(0, at)).Seconds()
	})
	metric.GaugeFunc(reg, api.MetricRouterQuotaRouters, func() float64 { return float64(s.View().Routers) })
	metric.GaugeFunc(reg, api.MetricRouterQuotaEvenSplit, func() float64 {
		if s.View().Even {
			return 1
		}
		return 0
	})
	return m
}
