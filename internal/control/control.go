// Package control changes the cell map in a registry: the one transaction
// every change goes through, whoever asks for it (cellctl's commands, the
// Terraform provider, the local stack and the network lab). A change is a
// planner, a function from the current map to a plan (package slotmap's
// operations); the Controller takes the registry's writer lock, plans
// against the newest map, projects the routers' measured traffic onto the
// plan, commits it with a compare-and-swap and plans again when another
// writer won the race, keeps the versions in the registry's history, and
// says what it did in a Result.
//
// The Controller writes nothing for a person to read: what an operator
// watching would want to know while a change runs (a wait for the lock, a
// plan made again, a warning that does not stop it) goes to Options.Note,
// and each plan to Change.Planned, so that a command line prints it as it
// happens and a tool records it.
package control

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// MaxReplans is how many times a change lost to a concurrent writer is
// planned again before the Controller gives up.
const MaxReplans = 3

// unlockTimeout bounds releasing the writer lock, which happens even after
// the change's context ended.
const unlockTimeout = 5 * time.Second

// DefaultTimeout bounds one operation (registry calls, lock wait, admin
// calls) when its caller sets no bound of its own.
const DefaultTimeout = 30 * time.Second

// LockNotice is how long a change waits for the writer lock before it
// says that it is waiting.
const LockNotice = time.Second

// Config is how a Controller writes.
type Config struct {
	// Holder names the writer in the registry's lock ("cellctl drain by
	// ops@host"), for whoever finds it held.
	Holder string
	// Origin, if set, is added to the change text of every map version
	// committed ("add cell c4 (terraform)"), so that the history says
	// where a change came from.
	Origin string
	// LockWait bounds the wait for the writer lock [as long as the
	// change's context allows].
	LockWait time.Duration
}

// Options carry a Controller's collaborators. The zero value is usable.
type Options struct {
	// Now stamps committed maps. Nil means time.Now.
	Now func() time.Time
	// Note receives what happens along the way. Nil means nobody listens.
	Note func(Note)
	// Traffic, if set, is the traffic measured per slot of a map of slots
	// slots (the routers'), which each plan projects onto its cells. It is
	// asked once per change; an error is a warning (the plan shows no
	// traffic), unless Abort marks it.
	Traffic func(ctx context.Context, slots int) (*slotmap.Traffic, error)
	// Moves, if set, moves the users' inquiries with every change that
	// gives users another cell (see Mover): copied and verified before
	// the map is committed, let go at the old cell after. Nil: the map
	// alone changes (tests of the map without cells).
	Moves *Mover
}

// withDefaults fills the nil collaborators that have a default: Now
// (time.Now).
func (o Options) withDefaults() Options {
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Note is a message from a change under way: a note (waiting for the
// lock, planning again) or a warning (something that did not stop it).
type Note struct {
	Warning bool
	Text    string
}

// Planner plans a change against the current map.
type Planner func(m *slotmap.Map) (*slotmap.Plan, error)

// Change is one change asked of the Controller.
type Change struct {
	// Plan plans it.
	Plan Planner
	// DryRun plans it and commits nothing (no lock is taken).
	DryRun bool
	// Planned, if set, sees each plan made, before it is committed (or,
	// in a dry run, instead): a plan made again after a lost race is
	// seen again.
	Planned func(p *slotmap.Plan)
	// Done, if set, sees the result of a change that ended without an
	// error, before the writer lock is released.
	Done func(*Result)
}

// Result is what a change did.
type Result struct {
	// Moves are the change's data moves and what each did.
	Moves []api.MoveProgress
	// Plan is the last plan made.
	Plan     *slotmap.Plan
	DryRun   bool
	Applied  bool
	NoChange bool
	// Version is the map version in the registry afterwards (the one
	// planned against, when nothing was committed).
	Version int64
	// Replans is how many times the change was planned again.
	Replans int
}

// Controller changes the map of one registry. It is safe for concurrent
// use; its changes exclude each other through the registry's lock.
type Controller struct {
	reg  registry.Registry
	cfg  Config
	opts Options
	hist History
}

// New builds a Controller writing reg (which the caller keeps and closes).
func New(reg registry.Registry, cfg Config, opts Options) *Controller {
	opts = opts.withDefaults()
	return &Controller{reg: reg, cfg: cfg, opts: opts, hist: HistoryFor(reg)}
}

// Registry is the registry the Controller writes.
func (c *Controller) Registry() registry.Registry { return c.reg }

// History is the registry's history of map versions, nil when its kind of
// registry has none.
func (c *Controller) History() History { return c.hist }

// Holder is who this controller writes as (a rollout's holder).
func (c *Controller) Holder() string { return c.cfg.Holder }

func (c *Controller) note(warning bool, format string, args ...any) {
	if c.opts.Note != nil {
		c.opts.Note(Note{Warning: warning, Text: fmt.Sprintf(format, args...)})
	}
}

// RefusedError is a change the planner refused: nothing was written.
type RefusedError struct {
	Err error
	// Version is the map version it was planned against.
	Version int64
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("refused: %s; the map is unchanged (version %d)", InvalidReason(e.Err), e.Version)
}

func (e *RefusedError) Unwrap() error { return e.Err }

// InvalidReason strips the "plan OP: invalid cell map: " prefixes off a
// planner error: the operator knows what they asked for.
func InvalidReason(err error) string {
	msg := err.Error()
	prefix := slotmap.ErrInvalid.Error() + ": "
	if i := strings.LastIndex(msg, prefix); i >= 0 {
		return msg[i+len(prefix):]
	}
	return msg
}

// Refuse wraps a planner error into a RefusedError if it is one (an
// invalid change of m), else returns it as it is.
func Refuse(err error, m *slotmap.Map) error {
	if errors.Is(err, slotmap.ErrInvalid) {
		return &RefusedError{Err: err, Version: m.Version()}
	}
	return err
}

// abortError marks an error of Options.Traffic that ends the change.
type abortError struct{ err error }

func (e abortError) Error() string { return e.err.Error() }
func (e abortError) Unwrap() error { return e.err }

// Abort marks an error of Options.Traffic as one that ends the change (a
// malformed list of routers: the operator's typo), not a warning.
func Abort(err error) error { return abortError{err} }

// Explain says what a failed registry call means for whoever asked: no
// map yet, a lock held too long, an invalid map, no answer in time.
func Explain(reg registry.Registry, err error) error {
	var locked *registry.LockedError
	switch {
	case errors.Is(err, registry.ErrNoMap):
		return fmt.Errorf("registry %s holds no map yet: create one with 'cellctl init'", reg.Describe())
	case errors.As(err, &locked):
		return fmt.Errorf("gave up waiting for the writer lock of %s: %v; nothing changed (wait for that run to finish, or raise --lock-wait or --timeout)", reg.Describe(), err)
	case errors.Is(err, slotmap.ErrInvalid):
		return fmt.Errorf("registry %s holds an invalid map, which cellctl will not overwrite: %v", reg.Describe(), err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("registry %s did not answer in time (--timeout): %v; is it up and reachable from here?", reg.Describe(), err)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("interrupted while talking to registry %s", reg.Describe())
	}
	return fmt.Errorf("registry %s cannot be reached: %v; check that it is up and that --registry or %s names it", reg.Describe(), err, registry.EnvRegistry)
}

// Load reads the current map, its errors explained.
func (c *Controller) Load(ctx context.Context) (*slotmap.Map, error) {
	m, err := c.reg.Load(ctx)
	if err != nil {
		return nil, Explain(c.reg, err)
	}
	return m, nil
}

// lock takes the writer lock; release must be called.
func (c *Controller) lock(ctx context.Context) (lock registry.Lock, release func(), err error) {
	if c.cfg.LockWait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.LockWait)
		defer cancel()
	}
	// A short first try, so that a wait for another writer is announced
	// rather than silent.
	tctx, cancel := context.WithTimeout(ctx, LockNotice)
	lock, err = c.reg.Lock(tctx, c.cfg.Holder)
	cancel()
	var locked *registry.LockedError
	if errors.As(err, &locked) && ctx.Err() == nil {
		by := locked.Holder.String()
		if by == "" {
			by = "another writer"
		}
		c.note(false, "Waiting for the writer lock of %s, held by %s ...", c.reg.Describe(), by)
		lock, err = c.reg.Lock(ctx, c.cfg.Holder)
	}
	if err != nil {
		return nil, nil, Explain(c.reg, err)
	}
	release = func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
		defer cancel()
		if err := lock.Unlock(uctx); err != nil {
			c.note(true, "release the writer lock of %s: %v", c.reg.Describe(), err)
		}
	}
	return lock, release, nil
}

// Lock takes the registry's writer lock for a write that is not a plan
// (init, which replaces the map whole); release must be called.
func (c *Controller) Lock(ctx context.Context) (lock registry.Lock, release func(), err error) {
	return c.lock(ctx)
}

// Noted is m with the Controller's origin added to its change text, and
// stamped now: the map to commit.
func (c *Controller) Noted(m *slotmap.Map) *slotmap.Map { return c.noted(m).Stamped(c.opts.Now()) }

// Keep saves m in the history, if the registry has one (a failure is a
// warning): for a write that is not a plan.
func (c *Controller) Keep(ctx context.Context, m *slotmap.Map) { c.keep(ctx, m) }

// noted marks a map about to be committed with the tool it came from.
func (c *Controller) noted(m *slotmap.Map) *slotmap.Map {
	if c.cfg.Origin == "" {
		return m
	}
	return m.WithChange(m.Change() + " (" + c.cfg.Origin + ")")
}

// Apply plans ch against the newest map and, unless it is a dry run,
// commits it with a compare-and-swap under the writer lock. A lost race is
// planned again against the new map, up to MaxReplans times. A plan the
// planner refuses is a *RefusedError; a plan that changes nothing is a
// Result with NoChange.
func (c *Controller) Apply(ctx context.Context, ch Change) (*Result, error) {
	res := &Result{DryRun: ch.DryRun}
	var lock registry.Lock
	if !ch.DryRun {
		l, release, err := c.lock(ctx)
		if err != nil {
			return nil, err
		}
		defer release()
		lock = l
	}
	if !ch.DryRun && c.opts.Moves != nil {
		if err := c.ResumeMoves(ctx); err != nil {
			return nil, err
		}
	}
	var tr *slotmap.Traffic
	for attempt := 0; ; attempt++ {
		cur, err := c.Load(ctx)
		if err != nil {
			return nil, err
		}
		if attempt == 0 && c.opts.Traffic != nil {
			// The projection is for the operator's eyes: routers that
			// cannot be asked never stand in the way of a change.
			var abort abortError
			if tr, err = c.opts.Traffic(ctx, cur.Slots()); errors.As(err, &abort) {
				return nil, abort.err
			} else if err != nil {
				c.note(true, "the plan shows no measured traffic: %v", err)
			}
		}
		p, err := ch.Plan(cur)
		if err != nil {
			return nil, Refuse(err, cur)
		}
		if tr != nil {
			if err := p.Project(*tr); err != nil {
				c.note(true, "project the routers' traffic: %v", err)
			}
		}
		res.Plan, res.Version, res.Replans = p, cur.Version(), attempt
		res.NoChange = p.NoChange()
		if ch.Planned != nil {
			ch.Planned(p)
		}
		if res.NoChange || ch.DryRun {
			return c.done(ch, res), nil
		}
		select {
		case <-lock.Lost():
			return nil, fmt.Errorf("lost the writer lock of %s before committing; nothing applied (map still version %d)", c.reg.Describe(), cur.Version())
		default:
		}
		// The version planned against, in case another tool wrote it.
		c.keep(ctx, cur)
		next := c.Noted(p.After)
		moves, err := c.prepareMoves(ctx, cur, p, next)
		if err != nil {
			return nil, err
		}
		err = c.reg.CompareAndSwap(ctx, cur.Version(), next)
		if err != nil && moves != nil {
			// Not committed: the moves are called off.
			if aerr := c.abortMoves(context.WithoutCancel(ctx), cur, moves); aerr != nil {
				c.note(true, "call the data moves off: %v ('cellctl move resume' finishes it)", aerr)
			}
		}
		if errors.Is(err, registry.ErrConflict) {
			if attempt < MaxReplans {
				c.note(false, "The map changed while this plan was made (%v): planning again (%d of %d).", err, attempt+1, MaxReplans)
				continue
			}
			return nil, fmt.Errorf("the map kept changing under this command (%d re-plans); nothing applied: %v", MaxReplans, err)
		}
		if err != nil {
			if errors.Is(err, slotmap.ErrInvalid) {
				return nil, Refuse(err, cur)
			}
			return nil, fmt.Errorf("commit to registry %s failed: %v; the map is either still version %d or now %d: check with 'cellctl map show'",
				c.reg.Describe(), err, cur.Version(), next.Version())
		}
		res.Applied, res.Version = true, next.Version()
		c.keep(ctx, next)
		if moves != nil {
			res.Moves = moves.Moves
			if err := c.finishMoves(ctx, next, moves); err != nil {
				c.note(true, "version %d is committed; finishing its data moves: %v ('cellctl move resume' finishes them)", next.Version(), err)
			}
			res.Moves = moves.Moves
		}
		return c.done(ch, res), nil
	}
}

func (c *Controller) done(ch Change, res *Result) *Result {
	if ch.Done != nil {
		ch.Done(res)
	}
	return res
}

// keep saves m in the history, if the registry has one; a failure is a
// warning.
func (c *Controller) keep(ctx context.Context, m *slotmap.Map) {
	if c.hist == nil {
		return
	}
	if err := c.hist.Save(ctx, m); err != nil {
		c.note(true, "keep version %d in the history %s: %v", m.Version(), c.hist.Describe(), err)
	}
}

// Holder names a writer in the registry's lock: "WHAT by USER@HOST".
func Holder(what string) string {
	who := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		who = u.Username
	}
	if who == "" {
		who = "unknown"
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s by %s@%s", what, who, host)
}
