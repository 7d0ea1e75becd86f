package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// RouterRef is a router the console asks: its name and admin base URL.
type RouterRef struct {
	ID    string
	Admin string
}

// AnnouncedRouters lists the routers announced in reg (nil: reg keeps no
// announcements), read at each collection.
func AnnouncedRouters(reg registry.Registry) func(context.Context) ([]RouterRef, error) {
	ann, ok := reg.(registry.Announcer)
	if !ok {
		return nil
	}
	return func(ctx context.Context) ([]RouterRef, error) {
		as, err := ann.Routers(ctx)
		if err != nil {
			return nil, err
		}
		refs := make([]RouterRef, len(as))
		for i, a := range as {
			refs[i] = RouterRef{ID: a.ID, Admin: strings.TrimSuffix(a.Admin, "/")}
		}
		return refs, nil
	}
}

// collector reads the registry and every process's admin API once per
// interval and keeps the newest View, the last good map and each
// process's last good figures.
type collector struct {
	cfg     Config
	reg     registry.Registry
	ctl     *control.Controller
	admin   adminclient.Client
	trust   *trust
	routers func(ctx context.Context) ([]RouterRef, error)
	log     *slog.Logger
	now     func() time.Time
	metrics *metrics

	mu      sync.Mutex
	view    *View
	encoded []byte        // view in JSON (nil: it could not be encoded)
	next    chan struct{} // closed when a newer view is published
	m       *slotmap.Map  // the last map read
	rollout *control.Rollout
	// Per process (by admin URL): the counters read last, and the last
	// good answer with its time.
	counters map[string]counters
	cells    map[string]goodCell
	rtrs     map[string]goodRouter
	changes  []Change
	seq      uint64
}

type goodCell struct {
	status *api.CellStatus
	at     time.Time
}

type goodRouter struct {
	ready *api.RouterReadiness
	hot   []api.HotUser
	at    time.Time
}

// latest is the newest view, in JSON, and a channel closed when a newer
// one is published (nil view before the first collection).
func (c *collector) latest() (*View, []byte, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.view, c.encoded, c.next
}

// currentMap is the last map read, nil before one was.
func (c *collector) currentMap() *slotmap.Map {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m
}

// run collects every interval until ctx ends. A collection that outlasts
// the interval is followed by the next at once.
func (c *collector) run(ctx context.Context) {
	for {
		start := c.now()
		c.collectOnce(ctx)
		wait := c.cfg.Interval - c.now().Sub(start)
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(wait, 0)):
		}
	}
}

// collectOnce makes one view and publishes it.
func (c *collector) collectOnce(ctx context.Context) *View {
	start := c.now()
	v := &View{At: start, Registry: RegistryView{Describe: c.reg.Describe()}, Cells: []CellCard{}, Routers: []RouterCard{}, Drains: []DrainView{}, Quotas: []ClientQuotaView{},
		Refused: []RefusedAdmin{}}

	// The registry first, on its own deadline: a slow registry must not
	// eat the cells' time (they would all look down).
	rctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	m, err := c.reg.Load(rctx)
	cancel()
	cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	c.mu.Lock()
	if err == nil {
		c.m = m
		v.Registry.OK, v.Registry.ReadAt = true, start
	} else {
		v.Registry.Error = err.Error()
		m = c.m
		if c.view != nil {
			v.Registry.ReadAt = c.view.Registry.ReadAt
		}
	}
	c.mu.Unlock()
	if m != nil {
		v.Map = summarize(m)
	}

	var wg sync.WaitGroup
	if m != nil {
		v.Cells = make([]CellCard, len(m.Cells()))
		for i, cell := range m.Cells() {
			wg.Go(func() { v.Cells[i] = c.cellCard(cctx, cell, start) })
		}
	}
	var refs []RouterRef
	if c.routers != nil {
		var err error
		if refs, err = c.routers(cctx); err != nil {
			v.RoutersError = err.Error()
		}
	}
	v.Routers = make([]RouterCard, len(refs))
	for i, r := range refs {
		wg.Go(func() { v.Routers[i] = c.routerCard(cctx, r, start) })
	}
	ro, rerr := c.ctl.Rollout(cctx)
	switch mv, err := c.ctl.Moves(cctx); {
	case err == nil:
		v.Moves = mv
	case !errors.Is(err, control.ErrNoMoves):
		v.MovesError = err.Error()
	}
	wg.Wait()
	c.vet(v)

	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case rerr == nil:
		c.rollout = ro
	case errors.Is(rerr, control.ErrNoRollout):
		c.rollout = nil
	default:
		v.RolloutError = rerr.Error()
	}
	if c.rollout != nil {
		v.Rollout = rolloutView(c.rollout, start)
	}
	v.Drains = drains(v.Cells)
	v.Quotas = quotas(v.Routers)
	c.seq++
	v.Seq = c.seq
	v.CollectSeconds = c.now().Sub(start).Seconds()
	c.noteChanges(c.view, v)
	// [] when nothing changed yet: the page takes no null.
	v.Changes = append([]Change{}, c.changes...)
	// What is left outside the cards (vet dropped theirs).
	v.Bad = dropNonFinite(v)
	c.view, c.encoded = v, c.encode(v)
	if c.next != nil {
		close(c.next)
	}
	c.next = make(chan struct{})
	c.metrics.collected(v)
	return v
}

// summarize is the map's header and its cells.
func summarize(m *slotmap.Map) *MapSummary {
	counts := m.SlotCounts()
	s := &MapSummary{Version: m.Version(), Change: m.Change(), Updated: m.Updated(), Slots: m.Slots(),
		Overrides: len(m.Overrides()), Agencies: m.Agencies(), Cells: []MapCell{}}
	for _, cell := range m.Cells() {
		mc := MapCell{ID: cell.ID, State: string(cell.State), Weight: cell.Weight, Slots: counts[cell.ID]}
		if m.Slots() > 0 {
			mc.UsersPct = 100 * float64(mc.Slots) / float64(m.Slots())
		}
		s.Cells = append(s.Cells, mc)
	}
	return s
}

// cellCard asks a cell's processes for their status and counters.
func (c *collector) cellCard(ctx context.Context, cell slotmap.Cell, at time.Time) CellCard {
	card := CellCard{ID: cell.ID, State: string(cell.State)}
	if len(cell.Instances) == 0 {
		one := c.process(ctx, cell.Admin, at)
		card.Admin, card.Reachable, card.Error, card.Rates = cell.Admin, one.Reachable, one.Error, one.Rates
		card.Untrusted, card.Bad = one.Untrusted, one.Bad
		if !one.Untrusted {
			card.Status, card.AsOf = c.lastCell(cell.Admin)
		}
		card.Release = one.Release
		card.Health, card.Why = cellHealth(&card, nil)
		return card
	}
	card.Instances = make([]InstanceCard, len(cell.Instances))
	var wg sync.WaitGroup
	for j, in := range cell.Instances {
		wg.Go(func() {
			ic := c.process(ctx, in.Admin, at)
			ic.ID, ic.Drained = in.ID, in.Drained
			card.Instances[j] = ic
		})
	}
	wg.Wait()
	releases := map[string]bool{}
	var down []string
	for _, ic := range card.Instances {
		card.Rates = card.Rates.add(ic.Rates)
		for _, b := range ic.Bad {
			card.Bad = append(card.Bad, ic.ID+": "+b)
		}
		card.Untrusted = card.Untrusted || ic.Untrusted
		if ic.Release != "" {
			releases[ic.Release] = true
		}
		if !ic.Reachable {
			if ic.Untrusted {
				down = append(down, ic.ID+" not asked (untrusted admin URL)")
			} else {
				down = append(down, ic.ID+" unreachable")
			}
			continue
		}
		card.Reachable = true
		s, asOf := c.lastCell(ic.Admin)
		if card.Status == nil || (s != nil && s.Ready && !card.Status.Ready) {
			card.Status, card.AsOf = s, asOf
		}
	}
	if !card.Reachable {
		// No instance answers: the last good figures of any, and the
		// errors.
		var errs []string
		for _, ic := range card.Instances {
			errs = append(errs, ic.ID+": "+ic.Error)
			if ic.Untrusted {
				continue
			}
			if s, asOf := c.lastCell(ic.Admin); s != nil && asOf.After(card.AsOf) {
				card.Status, card.AsOf = s, asOf
			}
		}
		card.Error = strings.Join(errs, "; ")
	}
	card.Mixed = len(releases) > 1
	for r := range releases {
		card.Release = r
	}
	if card.Mixed {
		card.Release = "mixed"
	}
	card.Health, card.Why = cellHealth(&card, down)
	return card
}

// process reads one cell process: its status, then its counters. A
// process whose admin URL the console does not trust is not asked.
func (c *collector) process(ctx context.Context, admin string, at time.Time) InstanceCard {
	ic := InstanceCard{Admin: admin}
	if admin == "" {
		ic.Error = "no admin address in the map"
		return ic
	}
	if ok, why := c.trust.check(admin); !ok {
		ic.Error, ic.Untrusted = why, true
		return ic
	}
	s, err := c.admin.Status(ctx, admin)
	if err != nil {
		// Not read: unreachable, too slow, or an error answer (a token
		// the cell refuses, a 500). Each is a red card saying which.
		ic.Error = err.Error()
		if ctx.Err() != nil {
			ic.Error = fmt.Sprintf("no answer within %s: %v", c.cfg.CallTimeout, err)
		}
		_, ic.AsOf = c.lastCell(admin)
		return ic
	}
	ic.Reachable, ic.Ready, ic.Release = true, s.Ready, s.Release.ID
	c.mu.Lock()
	c.cells[admin] = goodCell{status: s, at: at}
	c.mu.Unlock()
	ic.AsOf = at
	if mfs, err := c.admin.Metrics(ctx, admin); err == nil {
		ic.Rates, ic.Bad = c.rate(admin, cellCounters(mfs, at))
	}
	return ic
}

// rate turns a process's counters into rates against the ones read last,
// and names the values read that were not finite.
func (c *collector) rate(admin string, now counters) (Rates, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	before, ok := c.counters[admin]
	c.counters[admin] = now
	if !ok {
		return Rates{}, now.badValues()
	}
	r, overflow := now.ratesSince(&before)
	return r, append(now.badValues(), overflow...)
}

func (c *collector) lastCell(admin string) (*api.CellStatus, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.cells[admin]
	return g.status, g.at
}

// cellHealth is a cell card's colour and why.
func cellHealth(card *CellCard, down []string) (Health, string) {
	if card.State == string(slotmap.Drained) && !card.Reachable {
		return HealthOff, "drained"
	}
	if !card.Reachable {
		return HealthDown, card.Error
	}
	var why []string
	if len(down) > 0 {
		why = append(why, strings.Join(down, ", "))
	}
	if card.Mixed {
		why = append(why, "instances run different releases")
	}
	if s := card.Status; s != nil {
		// A cell leaving the map closes its intake: not a fault.
		leaving := card.State != string(slotmap.Active) && !s.IntakeOpen()
		if !s.Ready && !(leaving && onlyIntakeClosed(s)) {
			why = append(why, "not ready: "+s.NotReady())
		}
		for _, name := range sortedKeys(s.Agencies) {
			if b := s.Agencies[name].Breaker; b != "" && b != "closed" {
				why = append(why, name+" breaker "+b)
			}
		}
		if s.Store != nil && s.Store.Refusing {
			why = append(why, "store refusing")
		}
		if s.Map.Stale {
			why = append(why, "map stale")
		}
	}
	if card.Rates.Shed > 0 {
		why = append(why, fmt.Sprintf("shedding %.1f/s", card.Rates.Shed))
	}
	if card.Rates.Errors > 0 {
		why = append(why, fmt.Sprintf("5xx %.1f/s", card.Rates.Errors))
	}
	if len(card.Bad) > 0 {
		why = append(why, badWhy(card.Bad))
	}
	if len(why) > 0 {
		return HealthWarn, strings.Join(why, "; ")
	}
	if card.State == string(slotmap.Drained) {
		return HealthOff, "drained"
	}
	return HealthOK, ""
}

// onlyIntakeClosed says whether the intake is the only readiness check
// failing.
func onlyIntakeClosed(s *api.CellStatus) bool {
	for name, c := range s.Checks {
		if !c.OK && name != "intake" {
			return false
		}
	}
	return true
}

// routerCard asks a router for its readiness, counters and hot users,
// if the console trusts its admin URL.
func (c *collector) routerCard(ctx context.Context, r RouterRef, at time.Time) RouterCard {
	card := RouterCard{ID: r.ID, Admin: r.Admin}
	if ok, why := c.trust.check(r.Admin); !ok {
		card.Error, card.Untrusted, card.Health, card.Why = why, true, HealthDown, why
		return card
	}
	ready, err := c.admin.RouterReadiness(ctx, r.Admin)
	var ae *adminclient.Error
	switch {
	case err == nil:
		card.Reachable = true
	case errors.As(err, &ae) && ae.Status != 0:
		// Not ready: it answered, with why.
		card.Reachable, card.Error = true, err.Error()
	default:
		card.Error = err.Error()
	}
	var hot api.HotKeys
	if card.Reachable {
		if mfs, err := c.admin.Metrics(ctx, r.Admin); err == nil {
			card.Rates, card.Bad = c.rate(r.Admin, routerCounters(mfs, at))
		}
		if err := c.admin.Call(ctx, "GET", r.Admin, api.PathRouterHotKeys, nil, &hot); err == nil {
			card.Hot = hot.Users[:min(len(hot.Users), 5)]
		}
		var q api.RouterQuota
		if err := c.admin.Call(ctx, "GET", r.Admin, api.PathRouterQuota, nil, &q); err == nil {
			card.Quota = &QuotaSharing{Routers: q.Routers, LeaseAgeSeconds: q.LeaseAgeSeconds, Even: q.Even}
			card.quota = q.Clients
		}
	}
	c.mu.Lock()
	if ready != nil {
		c.rtrs[r.Admin] = goodRouter{ready: ready, hot: card.Hot, at: at}
	}
	g := c.rtrs[r.Admin]
	c.mu.Unlock()
	card.Readiness, card.AsOf = g.ready, g.at
	if card.Hot == nil {
		card.Hot = g.hot
	}
	switch {
	case !card.Reachable:
		card.Health, card.Why = HealthDown, card.Error
	case ready == nil:
		card.Health, card.Why = HealthWarn, "not ready: "+card.Error
	case ready.Stale:
		card.Health, card.Why = HealthWarn, "map stale"
	case card.Rates.Errors > 0:
		card.Health, card.Why = HealthWarn, fmt.Sprintf("5xx %.1f/s", card.Rates.Errors)
	case len(card.Bad) > 0:
		card.Health, card.Why = HealthWarn, badWhy(card.Bad)
	default:
		card.Health = HealthOK
	}
	return card
}

// maxQuotas bounds the clients the view shows.
const maxQuotas = 20

// quotas sums what the routers said of each client's quota: the most
// used first, at most maxQuotas.
func quotas(routers []RouterCard) []ClientQuotaView {
	by := map[string]*ClientQuotaView{}
	for _, r := range routers {
		for _, q := range r.quota {
			v := by[q.Client]
			if v == nil {
				v = &ClientQuotaView{Client: q.Client, Rate: q.Rate, Burst: q.Burst, Shares: map[string]float64{}}
				by[q.Client] = v
			}
			v.Demand += q.Demand
			v.Held += q.Share
			v.Shares[r.ID] = q.Share
		}
	}
	out := make([]ClientQuotaView, 0, len(by))
	for _, v := range by {
		if v.Rate > 0 {
			v.Use = v.Demand / v.Rate
		}
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b ClientQuotaView) int {
		if c := cmp.Compare(b.Use, a.Use); c != 0 {
			return c
		}
		return strings.Compare(a.Client, b.Client)
	})
	return out[:min(len(out), maxQuotas)]
}

// rolloutView is the record with the bake's time left at now.
func rolloutView(r *control.Rollout, now time.Time) *RolloutView {
	rv := &RolloutView{Rollout: *r}
	if b := r.Bake; b != nil && r.State == control.RolloutRunning && b.Decision != "fail" {
		rv.BakeLeftSeconds = max(0, (b.Left() - now.Sub(b.Judged)).Seconds())
	}
	return rv
}

// drains are the cells leaving the map and the instances out of
// rotation.
func drains(cards []CellCard) []DrainView {
	out := []DrainView{}
	for _, c := range cards {
		if c.State == string(slotmap.Draining) || c.State == string(slotmap.Drained) {
			d := DrainView{Cell: c.ID, State: c.State, Pending: -1}
			if c.Status != nil && c.Reachable {
				if c.Status.Known() {
					d.Pending = c.Status.Pending()
				}
				d.Intake = c.Status.Intake
			}
			out = append(out, d)
		}
		for _, in := range c.Instances {
			if in.Drained {
				out = append(out, DrainView{Cell: c.ID, Instance: in.ID, State: "out of rotation", Pending: -1})
			}
		}
	}
	return out
}
