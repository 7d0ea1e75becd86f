// Package quota shares each client's rate limit among the routers, so
// that a client's quota (its rate and burst in the keys file) holds across
// all of them, with no network call on the request path.
//
// Each router keeps a token bucket per client (internal/apikey) that
// holds a share of the client's quota: a fraction of its rate, refilled
// locally, and the same fraction of its burst. Every Round a Sharer
// publishes the router's lease in the registry (Doc: per client, the
// share it holds, the requests it was asked, its tokens) and reads the
// others'. From the routers' demands every router computes the same fair
// split (fair): each router its demand and an even part of what the
// client leaves unused; past the limit, the limit in proportion to the
// demands. A router lowers its share at once; it raises it only as far
// as the shares the others last published leave free, and only once its
// own lease saying so is written. So the shares sum to at most the whole
// quota, up to what two routers raising in the same round from reads a
// round apart disagree on.
//
// Leases: a router counts on the shares of its last written lease for
// Lease after it sent that write. Past that (it cannot reach the
// registry), it falls back to an even split over the routers it last
// counted: while it is cut off and the others have dropped it, a client
// may get up to 1 + 1/n of its quota. The others drop a router whose
// lease did not change for Lease+Grace by their own clocks, so no clocks
// need to agree. A router started cold holds nothing until its first
// lease is written; a router that stops stops refilling its buckets and
// withdraws its lease; a router that hands over to a successor passes its
// shares, tokens and demands on (State, Resume).
package quota

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/apikey"
)

// Board is where the leases live: the registry the router follows
// (registry.LeaseBoard).
type Board interface {
	PutLease(ctx context.Context, id string, data []byte) error
	Leases(ctx context.Context) (map[string][]byte, error)
	DropLease(ctx context.Context, id string) error
}

// Buckets are the router's token buckets, one per client of its keys
// (*apikey.Limits, or the router's current one).
type Buckets interface {
	Usage() []apikey.Usage
	SetShares([]apikey.Share)
	SetTokens(client string, fraction float64)
}

// Config tunes a Sharer. Zero values mean the defaults in brackets.
type Config struct {
	// Router is this router's id, the key of its lease (required).
	Router string
	// Round spaces two lease rounds [500ms]: a client's traffic that
	// moves between routers is followed within about two.
	Round time.Duration
	// Lease is how long the router counts on the shares of its last
	// written lease [5s]; at least two rounds. Shorter, a blip of the
	// registry splits the quotas evenly sooner; longer, a dead router's
	// shares come back later. Every router must use the same Lease and
	// Grace.
	Lease time.Duration
	// Grace is how much longer than Lease the others wait for a router's
	// lease to change before they drop it [2s].
	Grace time.Duration
	// DemandWindow is how fast a client's demand at this router decays
	// once it is asked less [1s]; it rises at once. Longer, a router that
	// lost a client's traffic to another keeps its share for longer.
	DemandWindow time.Duration
	// ColdRouters is how many routers a router that never reached the
	// registry splits the quotas evenly over once its Lease has passed
	// [1]: the number of routers that usually serve.
	ColdRouters int
}

// DefaultConfig returns the defaults in brackets above.
func DefaultConfig() Config {
	return Config{Round: 500 * time.Millisecond, Lease: 5 * time.Second, Grace: 2 * time.Second,
		DemandWindow: time.Second, ColdRouters: 1}
}

// withDefaults fills the zero fields of c from DefaultConfig, field by
// field, and raises Lease to two rounds.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Round <= 0 {
		c.Round = d.Round
	}
	if c.Lease <= 0 {
		c.Lease = d.Lease
	}
	c.Lease = max(c.Lease, 2*c.Round)
	if c.Grace <= 0 {
		c.Grace = d.Grace
	}
	if c.DemandWindow <= 0 {
		c.DemandWindow = d.DemandWindow
	}
	if c.ColdRouters < 1 {
		c.ColdRouters = d.ColdRouters
	}
	return c
}

// Options carry a Sharer's collaborators.
type Options struct {
	Board   Board   // required
	Buckets Buckets // required
	Logger  *slog.Logger
	// Registerer takes the sharer's metrics (cellkit_router_quota_*).
	Registerer prometheus.Registerer
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
}

// withDefaults fills the nil collaborators that have a default: Logger
// (none) and Now (time.Now).
func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Sharer keeps the router's leases. Run drives it.
type Sharer struct {
	cfg     Config
	board   Board
	buckets Buckets
	log     *slog.Logger
	now     func() time.Time
	m       *metrics

	mu      sync.Mutex
	seq     uint64
	clients map[string]*clientState
	peers   map[string]*peer
	live    int       // routers counted at the last read, this one included
	reached bool      // a read has succeeded
	leaseAt time.Time // when the write of the last lease was sent
	started time.Time
	last    time.Time       // the last round
	even    bool            // the lease lapsed: the shares are the even split
	shown   map[string]bool // clients with a share metric

	view    atomic.Pointer[api.RouterQuota] // the last round's, for readers
	leaseNs atomic.Int64                    // leaseAt, for the metrics
	ready   atomic.Bool                     // split evenly without a lease
}

// clientState is what the sharer knows of one client.
type clientState struct {
	rate   float64 // the client's quota, from the keys in use
	burst  int
	demand float64 // requests a second asked of this router
	held   float64 // the share held: published, and in the bucket
	tokens float64 // the bucket's, a fraction of the burst
	others othersView
}

// othersView is what the live routers' leases say of a client.
type othersView struct {
	demand, held, tokens float64
}

// peer is another router's lease as last read.
type peer struct {
	doc     Doc
	changed time.Time // when its Seq was last seen to change (this clock)
}

// New returns a Sharer; it holds no lease until Run.
func New(cfg Config, opts Options) (*Sharer, error) {
	cfg, opts = cfg.withDefaults(), opts.withDefaults()
	if cfg.Router == "" {
		return nil, errNoRouter
	}
	log := opts.Logger
	now := opts.Now
	s := &Sharer{
		cfg: cfg, board: opts.Board, buckets: opts.Buckets, log: log, now: now,
		clients: map[string]*clientState{}, peers: map[string]*peer{}, live: 1, shown: map[string]bool{},
		seq: uint64(now().UnixNano()), // a restarted router's first lease differs from its last
	}
	s.m = newMetrics(opts.Registerer, s)
	return s, nil
}

// Run holds the router's lease every Round until ctx ends; then, unless
// handedOver says a successor took the buckets over, it withdraws the
// lease. Either way its buckets stop refilling: the router spends at
// most the tokens it holds while its last requests drain.
func (s *Sharer) Run(ctx context.Context, handedOver func() bool) error {
	s.mu.Lock()
	if s.started.IsZero() {
		s.started = s.now()
	}
	s.mu.Unlock()
	t := time.NewTicker(s.cfg.Round)
	defer t.Stop()
	for {
		s.Round(ctx)
		select {
		case <-ctx.Done():
			s.stop(handedOver != nil && handedOver())
			return nil
		case <-t.C:
		}
	}
}

// Ready says whether the router holds shares: its first lease is
// written (or taken over), or its lease time passed without one and it
// split every quota evenly.
func (s *Sharer) Ready() bool { return s.leaseNs.Load() != 0 || s.ready.Load() }

// WaitReady returns once Ready, or with ctx's error.
func (s *Sharer) WaitReady(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Round / 10)
	defer t.Stop()
	for !s.Ready() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// stop stops refilling the buckets and, unless the lease is a
// successor's now, withdraws it.
func (s *Sharer) stop(handedOver bool) {
	s.mu.Lock()
	shares := make([]apikey.Share, 0, len(s.clients))
	for id, st := range s.clients {
		shares = append(shares, apikey.Share{Client: id, Rate: 0, Burst: st.held, Others: st.others.tokens})
	}
	s.mu.Unlock()
	s.buckets.SetShares(shares)
	if handedOver {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Round)
	defer cancel()
	if err := s.board.DropLease(ctx, s.cfg.Router); err != nil {
		s.log.Warn("cannot withdraw the quota lease: the others drop it once it stops changing", "err", err)
	}
}

// Round is one lease round: this router's demands measured, the others'
// leases read, the shares split, the lease written, the buckets set.
// Run calls it every Round; a test may call it alone.
//
// It is one piece because the order of its steps is the invariant: a
// share goes down in the bucket before the lease saying so is written,
// and up only after.
func (s *Sharer) Round(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.started.IsZero() {
		s.started = now
	}
	dt := s.cfg.Round
	if !s.last.IsZero() && now.After(s.last) {
		dt = now.Sub(s.last)
	}
	s.last = now
	defer func() { s.publishView(s.now()) }()

	// This router's demand per client, from the requests since the last
	// round; clients gone from the keys are forgotten.
	usage := s.buckets.Usage()
	seen := make(map[string]bool, len(usage))
	for _, u := range usage {
		id := u.Client.ID
		seen[id] = true
		st := s.clients[id]
		if st == nil {
			st = &clientState{held: s.coldShare()}
			s.clients[id] = st
		}
		st.rate, st.burst, st.tokens = u.Client.Rate, u.Client.Burst, u.Tokens
		inst := float64(u.Asked) / dt.Seconds()
		a := 1 - math.Exp(-dt.Seconds()/s.cfg.DemandWindow.Seconds())
		st.demand = max(inst, a*inst+(1-a)*st.demand)
	}
	for id := range s.clients {
		if !seen[id] {
			delete(s.clients, id)
		}
	}

	rctx, cancel := context.WithTimeout(ctx, s.cfg.Round)
	defer cancel()
	docs, err := s.board.Leases(rctx)
	read := err == nil
	if read {
		s.observe(rctx, docs, now)
	} else {
		s.m.rounds.WithLabelValues("unread").Inc()
		s.log.Warn("cannot read the routers' quota leases: shares held as they are", "err", err)
	}

	// The split: lower at once, raise within what the others leave.
	next := make(map[string]float64, len(s.clients))
	var lower []apikey.Share
	for id, st := range s.clients {
		want := st.held
		if read {
			st.others = s.othersOf(id)
			want = fair(st.rate, st.demand, st.others.demand, s.live)
			if want > st.held {
				want = max(st.held, min(want, 1-st.others.held))
			}
			want = clamp01(want)
		}
		next[id] = want
		if want < st.held {
			st.held = want
			lower = append(lower, s.shareOf(id, st))
		}
	}
	s.buckets.SetShares(lower)

	// The lease, then what it allows.
	s.seq++
	doc := Doc{Router: s.cfg.Router, Seq: s.seq, Live: s.live, Clients: map[string]Entry{}}
	for id, st := range s.clients {
		if e := (Entry{Demand: st.demand, Share: clamp01(next[id]), Tokens: clamp01(min(st.tokens, next[id]))}); !omit(e, s.live) {
			doc.Clients[id] = e
		}
	}
	data, err := json.Marshal(doc)
	if err == nil {
		sent := s.now()
		if err = s.board.PutLease(rctx, s.cfg.Router, data); err == nil {
			s.leaseAt, s.even = sent, false
			s.leaseNs.Store(sent.UnixNano())
		}
	}
	if err != nil {
		s.m.rounds.WithLabelValues("unwritten").Inc()
		s.log.Warn("cannot write the router's quota lease: shares held until it lapses", "err", err,
			"lapses_in", max(s.cfg.Lease-now.Sub(s.leaseAt), 0))
	} else if read {
		s.m.rounds.WithLabelValues("ok").Inc()
	}
	var set []apikey.Share
	switch {
	case err == nil:
		for id, st := range s.clients {
			if next[id] > st.held {
				st.held = next[id]
				set = append(set, s.shareOf(id, st))
			}
		}
	case s.lapsed(now) && !s.even:
		// Static stability: cut off for a whole lease, the router falls
		// back to the even split over the routers it last counted.
		s.even = true
		s.ready.Store(true)
		even := s.coldShare()
		s.log.Warn("the quota lease lapsed: each client's quota split evenly", "routers", max(1, int(math.Round(1/even))))
		for id, st := range s.clients {
			st.held = even
			set = append(set, s.shareOf(id, st))
		}
	}
	s.buckets.SetShares(set)
}

// coldShare is the share a router holds without a lease: nothing before
// its Lease has passed since it started, then the even split over the
// routers it last counted (or ColdRouters, never having read any).
func (s *Sharer) coldShare() float64 {
	if !s.lapsed(s.now()) {
		return 0
	}
	if s.reached {
		return 1 / float64(s.live)
	}
	return 1 / float64(s.cfg.ColdRouters)
}

// lapsed says whether the last lease (or, with none, the start) is
// older than Lease.
func (s *Sharer) lapsed(now time.Time) bool {
	since := s.leaseAt
	if since.IsZero() {
		since = s.started
	}
	return now.Sub(since) >= s.cfg.Lease
}

// shareOf is st as a bucket's share.
func (s *Sharer) shareOf(id string, st *clientState) apikey.Share {
	return apikey.Share{Client: id, Rate: st.held, Burst: st.held, Others: st.others.tokens}
}

// observe takes the leases read at now: a router is live while its
// lease changed within Lease+Grace; one withdrawn is gone at once.
func (s *Sharer) observe(ctx context.Context, docs map[string][]byte, now time.Time) {
	s.reached = true
	for id := range s.peers {
		if _, ok := docs[id]; !ok {
			delete(s.peers, id)
		}
	}
	for id, data := range docs {
		if id == s.cfg.Router {
			continue
		}
		d, err := decodeDoc(id, data)
		if err != nil {
			// Its last believed lease stands until it lapses: a router is
			// not dropped, and its share taken, for a lease it garbled.
			s.m.badLeases.Inc()
			s.log.Warn("a router's quota lease is not believed", "router", id, "err", err)
			continue
		}
		p := s.peers[id]
		if p == nil || p.doc.Seq != d.Seq {
			p = &peer{changed: now}
			s.peers[id] = p
		}
		p.doc = d
	}
	s.live = 1
	for id, p := range s.peers {
		switch age := now.Sub(p.changed); {
		case age < s.cfg.Lease+s.cfg.Grace:
			s.live++
		case age > forgetAfter:
			// Long dead: its lease is removed so that the board does not
			// keep every router that ever ran.
			if err := s.board.DropLease(ctx, id); err == nil {
				delete(s.peers, id)
			}
		}
	}
}

// forgetAfter is how long a lease must not have changed before a router
// removes it from the board.
const forgetAfter = 10 * time.Minute

// othersOf sums what the live routers' leases say of client.
func (s *Sharer) othersOf(client string) othersView {
	var o othersView
	now := s.last
	for _, p := range s.peers {
		if now.Sub(p.changed) >= s.cfg.Lease+s.cfg.Grace {
			continue
		}
		e := p.doc.entry(client)
		o.demand += e.Demand
		o.held += e.Share
		o.tokens += e.Tokens
	}
	return o
}

// fair is the share of a client of quota limit (requests a second) that
// a router asked mine of it, others the rest, is due among live
// routers: when the demands fit the limit, its demand and an even part of
// what is left (a router not asked keeps a part, for a client that moves
// to it); past the limit, the limit in proportion to the demands.
func fair(limit, mine, others float64, live int) float64 {
	n := float64(max(live, 1))
	d := mine + others
	switch {
	case !(limit > 0):
		return 0
	case d <= 0:
		return 1 / n
	case d <= limit:
		return (mine + (limit-d)/n) / limit
	default:
		return mine / d
	}
}

func clamp01(f float64) float64 {
	if !(f > 0) {
		return 0
	}
	return min(f, 1)
}
