// Package backoff computes retry waits: exponential with a cap and half of
// each wait random, so that many clients failing together do not retry in
// step.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Jittered is the wait after the n-th consecutive failure (n ≥ 1): base
// doubled n-1 times, capped at max, then uniformly drawn from its upper half
// [d/2, d].
func Jittered(base, max time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	return d/2 + rand.N(d/2+1)
}

// Sleep waits d, or until ctx ends (then it returns ctx's error); a d of
// 0 or less returns at once, with ctx's error if it has ended.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
