package cellctl

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// routerWait bounds the questions to one router about its traffic.
const routerWait = 2 * time.Second

// trafficSummary says where a projection's traffic came from.
type trafficSummary struct {
	Routers []string `json:"routers"` // the routers that answered
	Total   float64  `json:"total"`   // requests per second, all slots
}

// routerURLs are the routers' admin URLs: --routers, else the routers
// announced in the registry (see registry.Announcer).
func (x *inv) routerURLs(ctx context.Context) ([]string, error) {
	if strings.TrimSpace(x.g.routers) == "" {
		reg, err := x.openRegistry()
		if err != nil {
			return nil, err
		}
		defer reg.Close()
		ann, ok := reg.(registry.Announcer)
		if !ok {
			return nil, nil
		}
		as, err := ann.Routers(ctx)
		if err != nil {
			return nil, fmt.Errorf("the routers announced in %s: %w", reg.Describe(), err)
		}
		var out []string
		for _, a := range as {
			out = append(out, strings.TrimSuffix(a.Admin, "/"))
		}
		return out, nil
	}
	var out []string
	for _, raw := range strings.Split(x.g.routers, ",") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return nil, usagef("--routers: %q: want a router's admin base URL, http(s)://HOST:PORT", raw)
		}
		out = append(out, strings.TrimSuffix(raw, "/"))
	}
	return out, nil
}

// traffic reads the per-slot request rates of every router (routerURLs;
// and their heaviest users' rates, for the users pinned by overrides) and
// adds them up for a map of slots slots. It returns nil without routers;
// a router that does not answer, or counts another slot count, is left out
// with a warning, and none answering is an error.
func (x *inv) traffic(ctx context.Context, slots int) (*slotmap.Traffic, *trafficSummary, error) {
	// Asked once per command: drain plans twice, and rebalance --by
	// traffic both plans with it and shows it.
	if m := x.measured; m != nil && m.slots == slots {
		return m.t, m.sum, m.err
	}
	t, sum, err := x.measureTraffic(ctx, slots)
	x.measured = &measured{slots: slots, t: t, sum: sum, err: err}
	return t, sum, err
}

// measured is what traffic found for a map of slots slots.
type measured struct {
	slots int
	t     *slotmap.Traffic
	sum   *trafficSummary
	err   error
}

func (x *inv) measureTraffic(ctx context.Context, slots int) (*slotmap.Traffic, *trafficSummary, error) {
	urls, err := x.routerURLs(ctx)
	if err != nil || len(urls) == 0 {
		return nil, nil, err
	}
	t := &slotmap.Traffic{Slots: make([]float64, slots), Users: map[string]float64{}}
	sum := &trafficSummary{}
	var failed []string
	for _, base := range urls {
		if err := x.routerTraffic(ctx, base, t, sum); err != nil {
			failed = append(failed, err.Error())
		}
	}
	if len(sum.Routers) == 0 {
		return nil, nil, fmt.Errorf("no router answered: %s", strings.Join(failed, "; "))
	}
	for _, f := range failed {
		x.warnf("%s: its traffic is left out", f)
	}
	return t, sum, nil
}

// routerTraffic adds one router's slot rates and hot users' rates to t. A
// router that does not answer at once is left out: the projection must not
// hold a change up.
func (x *inv) routerTraffic(ctx context.Context, base string, t *slotmap.Traffic, sum *trafficSummary) error {
	ctx, cancel := context.WithTimeout(ctx, routerWait)
	defer cancel()
	var rs api.SlotRates
	if err := x.admin().Call(ctx, http.MethodGet, base+api.PathRouterSlots, "", nil, &rs); err != nil {
		return fmt.Errorf("router %s: %v", base, err)
	}
	if rs.Slots != len(t.Slots) {
		return fmt.Errorf("router %s counts %d slots, the map has %d", base, rs.Slots, len(t.Slots))
	}
	for _, r := range rs.Rates {
		if s := int(r[0]); s >= 0 && s < len(t.Slots) && r[1] > 0 {
			t.Slots[s] += r[1]
			sum.Total += r[1]
		}
	}
	var hot api.HotKeys
	if err := x.admin().Call(ctx, http.MethodGet, base+api.PathRouterHotKeys+"?n=1000", "", nil, &hot); err == nil && hot.WindowSeconds > 0 {
		for _, u := range hot.Users {
			t.Users[u.UserID] += float64(u.Count) / hot.WindowSeconds
		}
	}
	sum.Routers = append(sum.Routers, base)
	return nil
}
