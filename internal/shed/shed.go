// Package shed decides whether a cell takes new work: it sheds intake when
// the oldest pending message is older than its budget, when the queue is at
// its depth limit, or when what is queued would take longer than the budget
// to drain at the measured rate and be served (so that the oldest pending
// age stays under the budget instead of overshooting it by the backlog
// admitted before the budget ran out). It tells callers when to come back,
// from the drain rate.
//
// Shedding is lane-aware. Each lane is guaranteed a share of the
// pipeline's pace (high Config.HighReserve, normal the rest) and may use
// what the other lane leaves. Workers fetch the high lane first, so a high
// inquiry waits only for the high ones ahead of it, and a normal one for
// both lanes and for the high ones arriving meanwhile. So:
//   - a high inquiry is shed when the high lane alone would outlive its age
//     budget (Config.MaxAgeHigh), or when high inquiries are taken clearly
//     faster than their share (shareSlack) while normal ones are asked for
//     beyond theirs (reason "share"): as load rises, high ones are all
//     taken while they stay within their share;
//   - a normal inquiry plans with the pace left after high's arrival rate,
//     up to high's share, and may fill only the depth high does not keep.
//
// The share cap keeps high inquiries from starving the normal ones already
// fetched (they wait for sessions behind the high ones); Config.LaneBlind
// sheds one queue for both lanes. Why the constants are what they are:
// docs/decisions/shedding.md.
//
// It is pure and cheap on the request path: a sampler feeds it snapshots of
// the queue (Observe) and the pipeline reports what it finished (Drained);
// Admit reads them under a mutex, with no I/O. Between two snapshots the
// inquiries accepted meanwhile count towards the depth, so a burst cannot
// overshoot the depth limit.
package shed

import (
	"math"
	"sync"
	"time"

	"github.com/cellkit/cellkit/internal/inquiry"
)

// Config sets the budgets. Zero values mean the defaults in brackets (see
// DefaultConfig).
type Config struct {
	// MaxAge is the budget of the oldest pending message [60s]: past it,
	// new work would wait longer than the budget, so it is refused.
	MaxAge time.Duration
	// MaxDepth is the queue depth limit, in messages [10000].
	MaxDepth int
	// MaxRetryAfter caps the Retry-After advice [MaxAge].
	MaxRetryAfter time.Duration
	// MaxAgeHigh is the age budget of the high lane [MaxAge].
	MaxAgeHigh time.Duration
	// HighReserve is the share of the pipeline's pace guaranteed to high
	// inquiries, the rest being normal's (each lane uses what the other
	// leaves), and the share of MaxDepth the normal lane never fills
	// [0.5; 0 < HighReserve < 1].
	HighReserve float64
	// LaneBlind sheds both lanes alike, on the whole queue's age, depth and
	// wait, as cells did before lanes were told apart.
	LaneBlind bool
}

// DefaultConfig returns the defaults. MaxRetryAfter is left zero: it
// follows MaxAge.
func DefaultConfig() Config {
	return Config{MaxAge: 60 * time.Second, MaxDepth: 10_000, HighReserve: 0.5}
}

// withDefaults fills the zero fields of c.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxAge <= 0 {
		c.MaxAge = d.MaxAge
	}
	if c.MaxDepth <= 0 {
		c.MaxDepth = d.MaxDepth
	}
	if c.MaxRetryAfter <= 0 {
		c.MaxRetryAfter = c.MaxAge
	}
	if c.MaxAgeHigh <= 0 {
		c.MaxAgeHigh = c.MaxAge
	}
	if !(c.HighReserve > 0 && c.HighReserve < 1) {
		c.HighReserve = d.HighReserve
	}
	return c
}

// Options carry the shedder's collaborators. The zero value is usable.
type Options struct {
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
}

// withDefaults fills the nil collaborators that have a default: Now
// (time.Now).
func (o Options) withDefaults() Options {
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Sample is one observation of the queue.
type Sample struct {
	Depth  int       // messages not yet acked
	Oldest time.Time // when the oldest of them was stored; zero if none
	At     time.Time // when the sample was taken
	// Mark is Mark() read before the queue was: inquiries accepted after
	// it may be missing from Depth, so they are added to it.
	Mark Mark
	// High is the part of Depth in the high lane; OldestHigh and
	// OldestNormal are when the oldest pending message of each lane was
	// stored (zero: none).
	High         int
	OldestHigh   time.Time
	OldestNormal time.Time
	// Capacity is the pipeline's estimate of the inquiries per second it
	// can finish now, from the calls in flight (0: no estimate). It leads
	// the measured drain rate when the agencies slow down.
	Capacity float64
	// Places is how many inquiries this instance's pipeline can have at
	// the agencies at once (0: not known). While the cell's queue holds
	// no more than its instances' places, a new inquiry waits for no
	// other: no wait is predicted, and no lane is held to its share.
	Places int
	// Instances is how many instances of the cell drain the same queue
	// (0 or 1: this process alone). The drain rate and the capacity are
	// this instance's, its share of the cell's; Depth is the cell's. The
	// pace a new inquiry waits for is the instance's times Instances.
	Instances int
	// Idle says this instance's pipeline had nothing in flight when the
	// sample was taken. Its measured pace then says nothing of how fast it
	// would take new work: it has been given none (everything was shed),
	// or what is queued is held by another instance (cut off, waiting for
	// its ack wait). No wait is predicted from it; the age and depth
	// budgets still hold. Without this, a pace that decayed while
	// everything was shed would keep everything shed.
	Idle bool
}

// Mark counts the inquiries accepted since the shedder was made, in all
// and in the high lane.
type Mark struct{ All, High uint64 }

// A Reason says why an inquiry is shed; it is the reason label of the
// intake's shed metric.
type Reason string

// The shedder's reasons.
const (
	Age   Reason = "age"   // the oldest pending inquiry of the lane is over its budget
	Depth Reason = "depth" // the queue is at its depth limit
	Wait  Reason = "wait"  // the backlog would take longer than the budget to drain
	Share Reason = "share" // high priority over its share while normal asks for the rest
)

// Decision is Admit's answer.
type Decision struct {
	OK         bool
	Reason     Reason        // when shed: why
	RetryAfter time.Duration // when shed: the time the queue needs to drain
	Age        time.Duration // age of the oldest pending message the lane waits behind
	Depth      int           // estimated depth the lane waits behind
}

// Shedder is safe for concurrent use.
type Shedder struct {
	cfg Config
	now func() time.Time

	mu       sync.Mutex
	sample   Sample
	accepted Mark    // accepted since New
	highRate float64 // high lane's accepted rate, per second (EWMA over rateWindow)
	normWant float64 // normal inquiries asked for (taken or not), per second (EWMA over rateWindow)
	offered  Mark    // Admit calls since New
	seen     Mark    // offered at the last Observe
	drained  int     // finished since the last rate update
	rate     float64 // drain rate, messages per second (EWMA over rateWindow)
	fast     float64 // the same over fastWindow
	service  float64 // recent peak service time, seconds, decaying over rateWindow
	rateAt   time.Time
}

// New returns a shedder that admits everything until the first Observe.
func New(cfg Config, opts Options) *Shedder {
	cfg, opts = cfg.withDefaults(), opts.withDefaults()
	return &Shedder{cfg: cfg, now: opts.Now}
}

// Config returns the budgets in force.
func (s *Shedder) Config() Config { return s.cfg }

// waitShare is the share of the age budget that the predicted age of a new
// inquiry may take: the margin absorbs the error of the prediction (the
// second or so a change of pace takes to show in the rates, the noise of
// the rates, calls slower than the recent peak).
const waitShare = 0.7

// rateWindow is the time constant of the drain rate's moving average, the
// one the Retry-After advice comes from; fastWindow is that of a second
// average that follows a change of pace within about a second. Admission
// takes the smaller of the two: when the agencies slow down ×10 the slow
// average would still promise the old pace for seconds while the cell
// takes in work it cannot finish within the budget; when they recover, the
// slow one holds admission back for a few seconds, which costs little
// because the faster drain empties the queue meanwhile.
const (
	rateWindow = 5 * time.Second
	fastWindow = 500 * time.Millisecond
)

// fastEvidence is how many completions the slow average must promise over
// fastWindow before the fast average is planned with. Below it, the half
// second holds too few completions to tell a slowdown from chance: at two
// inquiries a second an instance often finishes none in a second or two
// (one slow call), the fast average falls twenty-fold, and three queued
// inquiries read as a minute's wait. The slow average is then the pace,
// and at such rates the backlog a slowdown can build is small anyway.
const fastEvidence = 5

// Observe installs a new sample of the queue and updates the drain rate.
func (s *Shedder) Observe(sm Sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if dt := sm.At.Sub(s.rateAt).Seconds(); !s.rateAt.IsZero() && dt > 0 {
		s.service *= math.Exp(-dt / rateWindow.Seconds())
		high := float64(sm.Mark.High-min(s.sample.Mark.High, sm.Mark.High)) / dt
		wanted := float64((s.offered.All-s.offered.High)-(s.seen.All-s.seen.High)) / dt
		// The lanes' rates are the slow averages: with the fast one, the
		// noise of a few inquiries a sample shed high ones within their
		// share. A slowdown shows at once in the pace they are taken of.
		s.highRate = ewma(s.highRate, high, dt, rateWindow)
		s.normWant = ewma(s.normWant, wanted, dt, rateWindow)
		// The drain rate is measured only over intervals that began with
		// work queued: an idle queue drains what arrives, which says
		// nothing of what the pipeline can do, and would make a burst after
		// a quiet spell look like a backlog that never drains.
		if s.sample.Depth > 0 {
			inst := float64(s.drained) / dt
			if s.rate == 0 {
				s.rate, s.fast = inst, inst
			} else {
				// Averages over about their windows, whatever the sampling
				// period.
				s.rate = ewma(s.rate, inst, dt, rateWindow)
				s.fast = ewma(s.fast, inst, dt, fastWindow)
			}
		}
	}
	s.rateAt, s.drained, s.seen = sm.At, 0, s.offered
	s.sample = sm
}

// ewma moves avg towards inst, observed over dt seconds, with time
// constant w.
func ewma(avg, inst, dt float64, w time.Duration) float64 {
	a := 1 - math.Exp(-dt/w.Seconds())
	return a*inst + (1-a)*avg
}

// Mark returns the counts of accepted inquiries, to put in the next Sample.
func (s *Shedder) Mark() Mark {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted
}

// Drained records n messages finished by the pipeline.
func (s *Shedder) Drained(n int) {
	s.mu.Lock()
	s.drained += n
	s.mu.Unlock()
}

// Served records the service time of one finished inquiry: the time its
// slowest call took, queueing excluded. The shedder keeps the recent peak
// (decaying over rateWindow): a new inquiry waits for the backlog to drain
// and is then served itself, and the oldest pending one is the unlucky one
// with the slowest calls, so the predicted age adds the peak, not the mean.
func (s *Shedder) Served(d time.Duration) {
	s.mu.Lock()
	s.service = max(s.service, d.Seconds())
	s.mu.Unlock()
}

// Service is the recent peak service time.
func (s *Shedder) Service() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Duration(s.service * float64(time.Second))
}

// Accepted records one inquiry taken into lane.
func (s *Shedder) Accepted(lane inquiry.Priority) {
	s.mu.Lock()
	s.accepted.All++
	if lane == inquiry.High {
		s.accepted.High++
	}
	s.mu.Unlock()
}

// Rate is the drain rate in messages per second.
func (s *Shedder) Rate() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rate
}

// recentLocked is the drain over the last half second where that rests
// on enough completions (see fastEvidence), else over the last five.
func (s *Shedder) recentLocked() float64 {
	if s.rate*fastWindow.Seconds() >= fastEvidence {
		return s.fast
	}
	return s.rate
}

// pace is the drain rate admission plans with: the least of the two
// averages of the measured rate (the fast one only where it rests on
// enough completions) and the pipeline's capacity estimate.
func (s *Shedder) paceLocked() float64 {
	p := min(s.rate, s.recentLocked())
	if c := s.sample.Capacity; c > 0 {
		p = min(p, c)
	}
	return p * s.instancesLocked()
}

func (s *Shedder) instancesLocked() float64 { return float64(max(1, s.sample.Instances)) }

// Admit decides on one new inquiry of lane (a lane other than High is
// Normal).
func (s *Shedder) Admit(lane inquiry.Priority) Decision {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.offered.All++
	if lane == inquiry.High {
		s.offered.High++
	}
	if s.cfg.LaneBlind {
		return s.decideLocked(s.depthLocked(), s.cfg.MaxDepth, s.sample.Oldest, s.cfg.MaxAge, s.paceLocked(), now)
	}
	// The lanes' shares are of what the pipeline can do: the recent drain
	// (it follows a slowdown within a second), or the agencies' capacity
	// where that is more (below saturation the drain rate measures what
	// arrived, not what could be done). Not the pace, the least of them:
	// the capacity estimate errs low, and high was shed within its share
	// when it was measured against it.
	can := max(s.recentLocked(), s.sample.Capacity, 1e-9)
	high, normal := min(s.highRate/can, 1), min(s.normWant/can, 1)
	if lane == inquiry.High {
		// Workers fetch the high lane first: a high inquiry waits for
		// the high ones ahead of it only, at the whole pace. But high
		// takes no more than its share while normal inquiries ask for
		// the rest (asked for, taken or not: what normal is taken at
		// depends on what high leaves).
		if share := 1 - min(normal, 1-s.cfg.HighReserve); s.queuedLocked() && s.rate > 0 && high > shareSlack*share {
			d := Decision{Reason: Share, Depth: s.highDepthLocked(), RetryAfter: s.retryAfterLocked(s.depthLocked())}
			if !s.sample.OldestHigh.IsZero() {
				d.Age = max(now.Sub(s.sample.OldestHigh), 0)
			}
			return d
		}
		return s.decideLocked(s.highDepthLocked(), s.cfg.MaxDepth, s.sample.OldestHigh, s.cfg.MaxAgeHigh, s.paceLocked(), now)
	}
	// A normal inquiry waits for both lanes, and high ones arriving
	// meanwhile go first: it plans with the pace left after high's rate,
	// up to high's share, and may fill only the depth high does not keep.
	pace := s.paceLocked() * (1 - min(high, s.cfg.HighReserve))
	depthLimit := int(float64(s.cfg.MaxDepth) * (1 - s.cfg.HighReserve))
	return s.decideLocked(s.depthLocked(), depthLimit, s.sample.OldestNormal, s.cfg.MaxAge, pace, now)
}

// shareSlack is how far over its share high must be taken before it is
// shed for it: the pace it is a share of follows a slowdown within a
// second, and so dips with the noise of a few inquiries a sample.
const shareSlack = 1.3

// decideLocked admits unless the lane's oldest pending message is over
// maxAge, depth reached depthLimit, or depth would take longer than most of
// maxAge to drain at pace (and the new inquiry must then be served).
func (s *Shedder) decideLocked(depth, depthLimit int, oldest time.Time, maxAge time.Duration, pace float64, now time.Time) Decision {
	d := Decision{OK: true, Depth: depth}
	if !oldest.IsZero() {
		d.Age = max(now.Sub(oldest), 0)
	}
	switch {
	case d.Age > maxAge:
		d.OK, d.Reason = false, Age
	case d.Depth >= depthLimit:
		d.OK, d.Reason = false, Depth
	case s.queuedLocked() && s.rate > 0 && float64(d.Depth)/pace+s.service > waitShare*maxAge.Seconds():
		// Not over budget yet, but a new inquiry would be: what is queued
		// takes longer than (most of) the budget to drain at the current
		// pace (see rateWindow), and then the new one must be served.
		d.OK, d.Reason = false, Wait
	default:
		return d
	}
	d.RetryAfter = s.retryAfterLocked(s.depthLocked())
	return d
}

// queuedLocked says whether new work would wait for other work: the
// instance has work in flight (an idle one's pace says nothing) and the
// cell's queue holds more than its instances can have at the agencies at
// once (when that is known). At a few inquiries a second the measured
// pace is the noise of a few completions; with everything queued in
// flight, no backlog stands before a new inquiry whatever it reads.
func (s *Shedder) queuedLocked() bool {
	if s.sample.Idle {
		return false
	}
	return s.sample.Places <= 0 || s.depthLocked() > s.sample.Places*max(1, s.sample.Instances)
}

// RetryAfter is the advice for a caller turned away now for any reason: the
// time the queue needs to drain at the current rate, within [1s,
// MaxRetryAfter].
func (s *Shedder) RetryAfter() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.retryAfterLocked(s.depthLocked())
}

// depthLocked estimates the depth now: the sample plus what was accepted
// after its mark (which may count a few twice: an overestimate is safe).
func (s *Shedder) depthLocked() int {
	return s.sample.Depth + int(s.accepted.All-min(s.sample.Mark.All, s.accepted.All))
}

// highDepthLocked is depthLocked for the high lane.
func (s *Shedder) highDepthLocked() int {
	return s.sample.High + int(s.accepted.High-min(s.sample.Mark.High, s.accepted.High))
}

func (s *Shedder) retryAfterLocked(depth int) time.Duration {
	if s.rate <= 0 {
		if depth == 0 {
			return time.Second
		}
		return s.cfg.MaxRetryAfter
	}
	d := time.Duration(float64(depth) / (s.rate * s.instancesLocked()) * float64(time.Second))
	return min(max(d, time.Second), s.cfg.MaxRetryAfter)
}
