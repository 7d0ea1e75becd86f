// Package pipeline is a cell's workers: they take inquiries from the
// cell's queue (high lane first; package queue), ask every agency and the
// internal score (CSS) concurrently, register the decision in core banking
// and write the result: on the ledger one write, which is also a failed
// inquiry's listing.
//
// Guarantees:
//   - A message is acked only after its record holds the outcome; a crash
//     at any point leaves the message for redelivery.
//   - Handling is idempotent: a redelivered inquiry that is already done or
//     failed is acked without calling anyone, a stale message (its enqueue
//     was rolled back or superseded) is dropped, and record writes are
//     compare-and-swap, so an inquiry never gets a second, different result.
//   - Agency failures (breaker open, agency error, timeout, no session)
//     fail the inquiry at once with the reason, into the failed set. An
//     agency that is down trips its breaker (see countUnreachable), so that
//     inquiries then fail in microseconds. Transient failures (core banking,
//     the store, no free place at an agency within GateWait, a permit
//     refused by the adaptive limit) are retried with backoff; after
//     MaxDeliver attempts the inquiry is failed and dead-lettered with its
//     last reason.
//   - Concurrency is bounded: Workers inquiries at a time, and per agency no
//     more calls than its session pool has sessions and its adaptive limit
//     allows (workers wait for a place at the agency's gate, up to
//     GateWait; the call itself then has StepTimeout). A slow agency thus
//     slows the pipeline down instead of failing the work it accepted; the
//     shedder turns new work away meanwhile. While an agency's gate has no
//     place at all (a cell instance holding none of its sessions), no work
//     is fetched: the other instances take it.
//   - Run stops fetching when its context ends, lets inquiries in flight
//     finish for DrainTimeout, then abandons the rest: they are nak'ed, and
//     after a restart the server redelivers them once their ack wait
//     expires (a nak is not persisted). Attempts are counted by the server's
//     delivery count, so an inquiry that crashes the process every time is
//     still dead-lettered after MaxDeliver deliveries.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/agency"
	"github.com/cellkit/cellkit/internal/breaker"
	"github.com/cellkit/cellkit/internal/queue"
)

// Inquirer asks one agency for a score; *agency.Client is one.
type Inquirer interface {
	Inquire(ctx context.Context, userKey string) (agency.Result, error)
}

// Limiter is an Inquirer with an adaptive concurrency limit: the agency's
// gate then lets no more calls through than Limit (besides the pool size).
type Limiter interface {
	Limit() int
}

// BreakerOwner is an Inquirer guarded by a circuit breaker: the pipeline
// counts an exhausted pool as a failure in it (see countUnreachable).
type BreakerOwner interface {
	Breaker() *breaker.Breaker
}

// The agency client has both optional capabilities: a renamed method must
// not switch the limit or the breaker off silently.
var (
	_ Inquirer     = (*agency.Client)(nil)
	_ Limiter      = (*agency.Client)(nil)
	_ BreakerOwner = (*agency.Client)(nil)
)

// Agency is one agency the pipeline asks.
type Agency struct {
	Name     string
	Client   Inquirer
	Sessions int // the pool size; Resize follows it
}

// Config tunes the pipeline. Zero values mean the defaults in brackets (see
// DefaultConfig).
type Config struct {
	// Workers is how many inquiries are processed at once [64].
	Workers int
	// StepTimeout bounds each agency call (after its place at the gate),
	// and each of CSS and core banking [3s].
	StepTimeout time.Duration
	// GateWait bounds the wait for a place at an agency's gate; past it the
	// attempt is retried with backoff [30s]. The cell sets it to its age
	// budget: an inquiry that waited that long is past its budget anyway.
	GateWait time.Duration
	// MaxDeliver is the number of attempts before an inquiry that keeps
	// failing transiently is dead-lettered [5].
	MaxDeliver int
	// Backoff is the wait before attempt n+1 after a transient failure of
	// attempt n (the last value repeats) [1s 5s 15s 30s].
	Backoff []time.Duration
	// DrainTimeout is how long Run lets inquiries in flight finish after
	// its context ends [20s].
	DrainTimeout time.Duration
	// IdlePoll is how often empty lanes are polled for redeliveries; new
	// messages wake the workers at once [250ms].
	IdlePoll time.Duration
	// CallbackTimeout bounds one callback POST [2s].
	CallbackTimeout time.Duration
	// CallbackAttempts is how many times a callback is tried: connection
	// errors, timeouts, 5xx and 429 are retried after up to 1s, 2s, 4s...
	// (the upper half of each wait drawn at random); other failures are
	// final. Callbacks are best effort
	// (the client can always poll the status URL): those still waiting
	// when the pipeline stops are dropped [4].
	CallbackAttempts int
	// CallbackAllow lists the prefixes callbacks may connect to although
	// they are internal; any other loopback, private, link-local (cloud
	// metadata), unspecified, multicast or CGNAT address is refused when
	// dialled, IPv4-mapped forms included [none].
	CallbackAllow []netip.Prefix
	// QuarantineAfter is the number of crashes of the process an inquiry
	// may be in flight at before it is quarantined (see Crashed) [2].
	QuarantineAfter int
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Workers: 64, StepTimeout: 3 * time.Second, GateWait: 30 * time.Second, MaxDeliver: 5,
		Backoff:      []time.Duration{time.Second, 5 * time.Second, 15 * time.Second, 30 * time.Second},
		DrainTimeout: 20 * time.Second, IdlePoll: 250 * time.Millisecond,
		CallbackTimeout: 2 * time.Second, CallbackAttempts: 4, QuarantineAfter: 2,
	}
}

// withDefaults fills the zero fields of c.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Workers <= 0 {
		c.Workers = d.Workers
	}
	if c.StepTimeout <= 0 {
		c.StepTimeout = d.StepTimeout
	}
	if c.GateWait <= 0 {
		c.GateWait = d.GateWait
	}
	if c.MaxDeliver <= 0 {
		c.MaxDeliver = d.MaxDeliver
	}
	if len(c.Backoff) == 0 {
		c.Backoff = d.Backoff
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = d.DrainTimeout
	}
	if c.IdlePoll <= 0 {
		c.IdlePoll = d.IdlePoll
	}
	if c.CallbackTimeout <= 0 {
		c.CallbackTimeout = d.CallbackTimeout
	}
	if c.CallbackAttempts <= 0 {
		c.CallbackAttempts = d.CallbackAttempts
	}
	if c.QuarantineAfter <= 0 {
		c.QuarantineAfter = d.QuarantineAfter
	}
	return c
}

// Options carry the pipeline's collaborators.
type Options struct {
	// Queue is the cell's work queue; its store holds the records.
	// Required.
	Queue *queue.Queue
	// Agencies are the agencies every inquiry asks.
	Agencies []Agency
	// Logger receives one line per event that matters. Nil means none.
	Logger *slog.Logger
	// Registerer receives the pipeline's metrics (cellkit_cell_*); callers
	// add the cell label by wrapping it. Nil means they are not registered.
	Registerer prometheus.Registerer
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// Drained is called once per message settled (acked with an outcome),
	// for the shedder's drain rate, with the message's service time: its
	// slowest call (agency or CSS, the wait for a place at the gate not
	// included) plus core banking. May be nil.
	Drained func(service time.Duration)
	// CSS and Core default to LocalCSS and LocalCore without latency.
	CSS  CSS
	Core CoreBanking
	// Journal records the inquiries in flight, for the next start to know
	// them after a crash (see Crashed). Nil means none.
	Journal Journal
	// Paused, if not nil, holds the fetching of new work while it returns
	// true: the cell's store cannot be written (a full disk), and work
	// fetched then would spend its attempts on writes that fail. Work in
	// flight goes on.
	Paused func() bool
	// Held, if not nil, holds the attempts of a user whose inquiries are
	// being moved out of the cell (internal/move's fence): a delivery of
	// theirs waits, its worker's place given back, until the user is let
	// go (then it is worked) or the inquiry is handed over (then it is
	// stale). Attempts under way go on.
	Held func(user string) bool
}

// withDefaults fills the nil collaborators: Logger (none), Now
// (time.Now), Drained (nothing), CSS and Core (local, without latency),
// Journal (none), Paused and Held (never).
func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Drained == nil {
		o.Drained = func(time.Duration) {}
	}
	if o.CSS == nil {
		o.CSS = LocalCSS{}
	}
	if o.Core == nil {
		o.Core = LocalCore{}
	}
	if o.Journal == nil {
		o.Journal = noJournal{}
	}
	if o.Paused == nil {
		o.Paused = func() bool { return false }
	}
	if o.Held == nil {
		o.Held = func(string) bool { return false }
	}
	return o
}

// Pipeline is a cell's set of workers. Create it with New, run it with Run.
type Pipeline struct {
	cfg      Config
	q        *queue.Queue
	agencies []Agency
	gates    map[string]*gate
	css      CSS
	core     CoreBanking
	log      *slog.Logger
	now      func() time.Time
	drained  func(time.Duration)
	m        *metrics
	notify   *notifierQueue
	inflight atomic.Int64
	progress atomic.Int64 // unix ns: the last message settled, or work begun after none was in flight
	journal  Journal
	paused   func() bool
	held     func(user string) bool
	// attempting holds each attempt under way: inquiry id → user.
	attempting sync.Map
	suspects   chan struct{} // held by the suspect running: one at a time
}

// New builds a pipeline over opts.Queue with opts.Agencies.
func New(cfg Config, opts Options) (*Pipeline, error) {
	if opts.Queue == nil {
		return nil, errors.New("pipeline: no queue")
	}
	cfg, opts = cfg.withDefaults(), opts.withDefaults()
	names := make([]string, len(opts.Agencies))
	for i, a := range opts.Agencies {
		names[i] = a.Name
	}
	m := newMetrics(opts.Registerer, names)
	p := &Pipeline{
		cfg: cfg, q: opts.Queue, agencies: opts.Agencies, gates: map[string]*gate{},
		css: opts.CSS, core: opts.Core, log: opts.Logger, now: opts.Now, drained: opts.Drained, m: m,
		journal: opts.Journal, paused: opts.Paused, held: opts.Held, suspects: make(chan struct{}, 1),
	}
	for _, a := range opts.Agencies {
		var limit func() int
		if l, ok := a.Client.(Limiter); ok {
			limit = l.Limit
		}
		p.gates[a.Name] = newGate(a.Sessions, limit)
	}
	p.notify = newNotifier(m, p.log, notifierConfig{
		timeout: cfg.CallbackTimeout, attempts: cfg.CallbackAttempts, allow: cfg.CallbackAllow,
	})
	return p, nil
}

// Resize follows an agency's session quota.
func (p *Pipeline) Resize(agencyName string, sessions int) {
	if g, ok := p.gates[agencyName]; ok {
		g.resize(sessions)
	}
}

// Inflight is the number of inquiries being processed.
func (p *Pipeline) Inflight() int { return int(p.inflight.Load()) }

// Attempting is how many attempts under way are of users match chooses.
func (p *Pipeline) Attempting(match func(user string) bool) int {
	n := 0
	p.attempting.Range(func(_, user any) bool {
		if match(user.(string)) {
			n++
		}
		return true
	})
	return n
}

// Stalled reports how long the pipeline has had work in flight and settled
// none of it (0 when it has none in flight, or settled some since). Every
// attempt ends within its bounds (the gate wait, the step timeouts), so a
// pipeline with work in flight that settles nothing for long is stuck: a
// deadlock, a step that ignores its deadline.
func (p *Pipeline) Stalled() time.Duration {
	if p.inflight.Load() == 0 {
		return 0
	}
	return max(p.now().Sub(time.Unix(0, p.progress.Load())), 0)
}

// Workers is the configured worker count.
func (p *Pipeline) Workers() int { return p.cfg.Workers }

// Run processes inquiries until ctx ends, then drains (see the package
// doc). It returns nil after a clean stop. One piece: the fetch loop and
// the drain after it share the workers' wait group and the in-flight
// count; split, the drain would have to be handed what the loop holds.
func (p *Pipeline) Run(ctx context.Context) error {
	faultStart()
	workCtx, abandon := context.WithCancel(context.WithoutCancel(ctx))
	defer abandon()
	notifyCtx, stopNotify := context.WithCancel(context.WithoutCancel(ctx))
	p.notify.run(notifyCtx, 4)
	defer func() { stopNotify(); p.notify.wait() }()

	bell := make(chan struct{}, 1)
	ring := func(*nats.Msg) {
		select {
		case bell <- struct{}{}:
		default:
		}
	}
	nc := p.q.Conn()
	var subs []*nats.Subscription
	for _, subject := range p.q.WorkSubjects() {
		sub, err := nc.Subscribe(subject, ring)
		if err != nil {
			return fmt.Errorf("subscribe to new work: %w", err)
		}
		subs = append(subs, sub)
	}
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe() // the connection is ending with the run anyway
		}
	}()

	slots := make(chan struct{}, p.cfg.Workers)
	var wg sync.WaitGroup
	idle := time.NewTimer(p.cfg.IdlePoll)
	defer idle.Stop()
fetching:
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			break fetching
		}
		free := 1
	grab:
		for free < p.cfg.Workers {
			select {
			case slots <- struct{}{}:
				free++
			default:
				break grab
			}
		}
		var msgs []*queue.Delivery
		if !p.shut() && !p.paused() {
			msgs = p.fetch(free)
		}
		for _, m := range msgs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				free := sync.OnceFunc(func() { <-slots })
				defer free()
				p.handle(workCtx, m, free)
			}()
		}
		for range free - len(msgs) {
			<-slots
		}
		if len(msgs) == 0 {
			idle.Reset(p.cfg.IdlePoll)
			select {
			case <-bell:
			case <-idle.C:
			case <-ctx.Done():
				break fetching
			}
		}
	}

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	if n := p.Inflight(); n > 0 {
		p.log.Info("pipeline draining", "inflight", n, "timeout", p.cfg.DrainTimeout)
	}
	t := time.NewTimer(p.cfg.DrainTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		p.log.Warn("drain timeout: leaving unfinished inquiries for redelivery", "inflight", p.Inflight())
		abandon()
		select {
		case <-done:
		case <-time.After(abandonWait):
			// A step that ignores its context (a deadlock): Run cannot
			// wait for it. Its inquiries are redelivered after their ack
			// wait; the caller keeps its journal, so that the next start
			// counts them as in flight at a crash.
			return fmt.Errorf("pipeline: %d inquiries did not stop within %v of being abandoned", p.Inflight(), abandonWait)
		}
	}
	return nil
}

// abandonWait is how long Run waits for the inquiries it abandoned at the
// drain timeout (their context is cancelled: every step returns at once
// unless it is stuck).
const abandonWait = 5 * time.Second

// shut reports whether an agency's gate has no place at all: this
// instance holds none of its sessions (a cell instance whose share is 0,
// or that stopped counting on its leases). Work fetched then could not
// start; it is left in the queue for the instances that can, instead of
// being held here until the gate wait runs out.
func (p *Pipeline) shut() bool {
	for _, g := range p.gates {
		g.mu.Lock()
		zero := g.size == 0
		g.mu.Unlock()
		if zero {
			return true
		}
	}
	return false
}

// fetch takes up to n deliveries, high lane first, without waiting.
func (p *Pipeline) fetch(n int) []*queue.Delivery {
	var out []*queue.Delivery
	for _, lane := range queue.Lanes {
		if len(out) >= n {
			break
		}
		got, err := p.q.Fetch(lane, n-len(out))
		if err != nil {
			p.log.Debug("fetch", "lane", lane, "err", err)
		}
		out = append(out, got...)
	}
	return out
}

// Capacity estimates the inquiries per second the agencies can take now:
// the least of their gates' capacities (see gate.capacity); 0 while no
// call has been made.
func (p *Pipeline) Capacity() float64 {
	now := p.now()
	out := 0.0
	for _, g := range p.gates {
		if c := g.capacity(now); c > 0 && (out == 0 || c < out) {
			out = c
		}
	}
	return out
}

// Places is how many inquiries the pipeline can have at the agencies at
// once: the least of its gates' places (0 without agencies). Below that
// many in flight, a new inquiry waits for no other.
func (p *Pipeline) Places() int {
	out := 0
	for _, g := range p.gates {
		if n, _, _ := g.stats(); out == 0 || n < out {
			out = n
		}
	}
	return out
}

// GateStats reports, per agency, the places, holders and waiters of its
// gate.
func (p *Pipeline) GateStats() map[string][3]int {
	out := map[string][3]int{}
	for name, g := range p.gates {
		s, h, w := g.stats()
		out[name] = [3]int{s, h, w}
	}
	return out
}
