package rollout

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/gate"
)

// settleEvery is how often a bake about to begin asks the routers
// whether they route to the wave's cells again.
const settleEvery = 250 * time.Millisecond

// settle waits, before a wave of cells begins its bake, until every
// router routes to the wave's cells again: a cell of one process that
// restarts is missed by the routers' health checks, its breaker opens
// and stays open for a while after the new process is ready (5 s by the
// router's default), answering its users 503 — the restart's doing, not
// the release's, and it would fail the edge gates of a good release.
// At most ReadyWithin: a cell the routers still do not route to then is
// judged as it is (its breaker's 503s are failures). A router that
// cannot be read is not waited for (the bake's gates wait for it).
func (r *Runner) settle(ctx context.Context, pn panel) {
	if pn.router || len(pn.routers) == 0 {
		return
	}
	deadline := r.opts.Now().Add(r.cfg.ReadyWithin)
	said := false
	for {
		var open []string
		for _, u := range pn.routers {
			if mfs, err := r.opts.Admin.Metrics(ctx, u); err == nil {
				for _, c := range gate.OpenBreakers(mfs, pn.waveCells) {
					if !slices.Contains(open, c) {
						open = append(open, c)
					}
				}
			}
		}
		switch {
		case len(open) == 0:
			return
		case !r.opts.Now().Before(deadline):
			r.say("the routers' breakers of %s still open after %v: the bake begins", strings.Join(open, ", "), r.cfg.ReadyWithin)
			return
		case !said:
			r.say("waiting for the routers to route to %s again (their breakers open) before the bake begins", strings.Join(open, ", "))
			said = true
		}
		if !sleep(ctx, settleEvery) {
			return
		}
	}
}
