package cell

import (
	"context"

	"github.com/cellkit/cellkit/internal/slotmap"
)

// followQuotas resizes the session pools to every new map's quotas.
func (c *Cell) followQuotas(ctx context.Context) {
	for {
		select {
		case <-c.follower.Changed():
			if m := c.follower.Map(); m != nil {
				c.applyQuotas(m)
			}
		case <-ctx.Done():
			return
		}
	}
}

func (c *Cell) applyQuotas(m *slotmap.Map) {
	c.quotaMu.Lock()
	defer c.quotaMu.Unlock()
	c.checkEndpoints(m)
	for _, name := range c.names {
		q := m.Quota(c.cfg.ID, name)
		if old, ok := c.quota[name]; ok && old == q {
			continue
		}
		c.log.Info("agency session quota", "agency", name, "sessions", q, "map_version", m.Version())
		c.quota[name] = q
		if c.leaser == nil {
			c.clients[name].Resize(q)
			c.pipe.Resize(name, q)
		}
	}
	if c.leaser != nil {
		c.leaser.SetQuota(c.quota) // its rounds size the pools to this instance's leases
	}
}

// leasedSessions lets the quota leaser size an instance's session pools.
type leasedSessions struct{ c *Cell }

func (s leasedSessions) Limit(agency string, n int) int {
	cl := s.c.clients[agency]
	if cl == nil {
		return 0
	}
	cl.Resize(n)
	s.c.pipe.Resize(agency, n)
	return cl.Status().Pool.Open
}
