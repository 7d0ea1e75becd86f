package rollout

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/control"
)

// Layouts: a release that knows the ledger still writes the records
// layout on a cell that has data in it, until the cell is switched
// (docs/decisions/one-write-intake.md). A rollout that is done — every
// instance of its cells on its release, every wave baked — switches
// each of its cells whose instances all know the ledger; from then on
// only such a release may serve the cell, and a rollout that would put
// one that does not know it on a switched cell halts, and is rolled
// back, before the process serves.

// switchLayouts switches to the ledger each cell of ro's waves whose
// processes all know it, saying what it did and why not for a cell it
// could not: a cell not switched stays on the records layout, which
// every release reads.
func (r *Runner) switchLayouts(ctx context.Context, ro *control.Rollout) {
	m, err := r.opts.Control.Load(ctx)
	if err != nil {
		r.say("the cells' layouts not switched: the map cannot be read: %v", err)
		return
	}
	for _, w := range ro.Waves {
		for _, id := range w.Cells {
			c, ok := m.Cell(id)
			if !ok {
				continue
			}
			since, unaware, err := r.opts.Admin.Layouts(ctx, c)
			switch {
			case err != nil:
				r.say("%s not switched to the ledger: %v", id, err)
			case len(unaware) > 0:
				r.say("%s not switched to the ledger: %s on a release that does not know it", id, strings.Join(unaware, ", "))
			case !since.IsZero():
			default:
				l, err := r.opts.Admin.SwitchToLedger(ctx, c.Admins()[0])
				if err != nil {
					r.say("%s not switched to the ledger: %v", id, err)
					continue
				}
				r.say("%s writes the ledger from %s", id, l.LedgerSince.Format(time.RFC3339))
			}
		}
	}
}

// ledgerSince is when cell p.unit writes the ledger from, as its
// processes say (zero: not switched, or none says).
func (r *Runner) ledgerSince(ctx context.Context, p proc) time.Time {
	m, err := r.opts.Control.Load(ctx)
	if err != nil {
		return time.Time{}
	}
	c, ok := m.Cell(p.unit)
	if !ok {
		return time.Time{}
	}
	var since time.Time
	for _, a := range c.Admins() {
		if st, err := r.opts.Admin.Status(ctx, a); err == nil && st.Layout != nil && st.Layout.LedgerSince != nil {
			since = *st.Layout.LedgerSince
		}
	}
	return since
}

// knowsLedger refuses p, a cell's process just replaced and ready, when
// its release does not know the ledger and its cell writes it since
// since (read before the replacement) or as its other processes say.
func (r *Runner) knowsLedger(ctx context.Context, p proc, since time.Time) error {
	st, err := r.opts.Admin.Status(ctx, p.admin)
	if err != nil {
		return err
	}
	if st.Layout != nil {
		return nil
	}
	if since.IsZero() {
		since = r.ledgerSince(ctx, p)
	}
	if since.IsZero() {
		return nil
	}
	return haltError{fmt.Sprintf("%s runs %s, which does not know the ledger that %s writes since %s: a release from before the ledger cannot read what the cell holds",
		p.name(), orDash(st.Release.ID), p.unit, since.Format(time.RFC3339))}
}
