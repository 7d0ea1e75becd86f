package cellctl

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// maxReplans is how many times a change lost to a concurrent writer is
// planned again before cellctl gives up.
const maxReplans = 3

// unlockTimeout bounds releasing the writer lock, which happens even after
// the command's context ended.
const unlockTimeout = 5 * time.Second

// lockNotice is how long a command waits for the writer lock before it says
// that it is waiting.
const lockNotice = time.Second

// refusedError is a change the planner refused: nothing was written.
type refusedError struct {
	err     error
	version int64
}

func (e refusedError) Error() string {
	return fmt.Sprintf("refused: %s; the map is unchanged (version %d)", invalidReason(e.err), e.version)
}

func (e refusedError) Unwrap() error { return e.err }

// invalidReason strips the "plan OP: invalid cell map: " prefixes off a
// planner error: the operator knows what they asked for.
func invalidReason(err error) string {
	msg := err.Error()
	prefix := slotmap.ErrInvalid.Error() + ": "
	if i := strings.LastIndex(msg, prefix); i >= 0 {
		return msg[i+len(prefix):]
	}
	return msg
}

// refuse wraps a planner error into a refusal if it is one.
func refuse(err error, m *slotmap.Map) error {
	if errors.Is(err, slotmap.ErrInvalid) {
		return refusedError{err: err, version: m.Version()}
	}
	return err
}

// applyResult is what a map change did, for --json.
type applyResult struct {
	Plan     *planJSON `json:"plan,omitempty"`
	DryRun   bool      `json:"dry_run"`
	Applied  bool      `json:"applied"`
	NoChange bool      `json:"no_change"`
	// Version is the map version in the registry afterwards.
	Version int64 `json:"version"`
	Replans int   `json:"replans"`
}

// planner plans a change against the current map.
type planner func(m *slotmap.Map) (*slotmap.Plan, error)

// lockRegistry takes the writer lock; release must be called.
func (x *inv) lockRegistry(ctx context.Context, reg registry.Registry) (lock registry.Lock, release func(), err error) {
	who := x.cli.holder(x.cmd.name)
	if x.g.lockWait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, x.g.lockWait)
		defer cancel()
	}
	// A short first try, so that a wait for another writer is announced
	// rather than silent.
	tctx, cancel := context.WithTimeout(ctx, lockNotice)
	lock, err = reg.Lock(tctx, who)
	cancel()
	var locked *registry.LockedError
	if errors.As(err, &locked) && ctx.Err() == nil {
		by := locked.Holder.String()
		if by == "" {
			by = "another writer"
		}
		x.notef("Waiting for the writer lock of %s, held by %s ...", reg.Describe(), by)
		lock, err = reg.Lock(ctx, who)
	}
	if err != nil {
		return nil, nil, registryError(reg, err)
	}
	release = func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
		defer cancel()
		if err := lock.Unlock(uctx); err != nil {
			x.warnf("release the writer lock of %s: %v", reg.Describe(), err)
		}
	}
	return lock, release, nil
}

// apply plans a change, prints the plan (unless --json) and, unless this is
// a dry run, commits it with a compare-and-swap under the writer lock. A
// lost race is planned again against the new map, up to maxReplans times.
func (x *inv) apply(ctx context.Context, reg registry.Registry, plan planner) (*applyResult, error) {
	dry := x.cmd.dryRun
	res := &applyResult{DryRun: dry}
	var lock registry.Lock
	if !dry {
		l, release, err := x.lockRegistry(ctx, reg)
		if err != nil {
			return nil, err
		}
		defer release()
		lock = l
	}
	hist := historyFor(reg)
	var tr *slotmap.Traffic
	var trSum *trafficSummary
	for attempt := 0; ; attempt++ {
		cur, err := x.load(ctx, reg)
		if err != nil {
			return nil, err
		}
		if attempt == 0 {
			// The projection is for the operator's eyes: routers that
			// cannot be asked never stand in the way of a change.
			var bad usageError
			if tr, trSum, err = x.traffic(ctx, cur.Slots()); errors.As(err, &bad) {
				return nil, err // a malformed --routers: the operator's typo
			} else if err != nil {
				x.warnf("the plan shows no measured traffic: %v", err)
			}
		}
		p, err := plan(cur)
		if err != nil {
			return nil, refuse(err, cur)
		}
		if tr != nil {
			if err := p.Project(*tr); err != nil {
				x.warnf("project the routers' traffic: %v", err)
			}
		}
		pj := toPlanJSON(p)
		pj.Traffic = trSum
		res.Plan, res.Version, res.Replans = &pj, cur.Version(), attempt
		if p.NoChange() {
			res.NoChange = true
			if !x.g.json {
				fmt.Fprintf(x.out, "Nothing to change: %s leaves map version %d as it is.\n", p.Op, cur.Version())
			}
			return res, nil
		}
		if !x.g.json {
			writePlan(x.out, p)
		}
		if dry {
			if !x.g.json {
				fmt.Fprintf(x.out, "\nDry run: nothing applied.\n")
			}
			return res, nil
		}
		select {
		case <-lock.Lost():
			return nil, fmt.Errorf("lost the writer lock of %s before committing; nothing applied (map still version %d)", reg.Describe(), cur.Version())
		default:
		}
		if hist != nil {
			// The version planned against, in case another tool wrote it.
			if err := hist.save(ctx, cur); err != nil {
				x.warnf("keep version %d in the history %s: %v", cur.Version(), hist.describe(), err)
			}
		}
		next := x.cli.noted(p.After).Stamped(x.cli.now())
		err = reg.CompareAndSwap(ctx, cur.Version(), next)
		if errors.Is(err, registry.ErrConflict) {
			if attempt < maxReplans {
				x.notef("The map changed while this plan was made (%v): planning again (%d of %d).", err, attempt+1, maxReplans)
				continue
			}
			return nil, fmt.Errorf("the map kept changing under this command (%d re-plans); nothing applied: %v", maxReplans, err)
		}
		if err != nil {
			if errors.Is(err, slotmap.ErrInvalid) {
				return nil, refuse(err, cur)
			}
			return nil, fmt.Errorf("commit to registry %s failed: %v; the map is either still version %d or now %d: check with 'cellctl map show'",
				reg.Describe(), err, cur.Version(), next.Version())
		}
		res.Applied, res.Version = true, next.Version()
		if hist != nil {
			if err := hist.save(ctx, next); err != nil {
				x.warnf("keep version %d in the history %s: %v", next.Version(), hist.describe(), err)
			}
		}
		if !x.g.json {
			fmt.Fprintf(x.out, "\nApplied: map version %d (%s).\n", next.Version(), p.Op)
		}
		return res, nil
	}
}

// applyAndReport is apply for commands whose whole output is the change.
func (x *inv) applyAndReport(ctx context.Context, plan planner) error {
	reg, err := x.openRegistry()
	if err != nil {
		return err
	}
	defer reg.Close()
	res, err := x.apply(ctx, reg, plan)
	if err != nil {
		return err
	}
	if x.g.json {
		return writeJSON(x.out, res)
	}
	return nil
}
