package drill

import (
	"fmt"
	"math"
	"time"

	"github.com/cellkit/cellkit/internal/loadtest"
)

// checkTail checks that the p99 of the samples in during is within factor
// of base's p99, by count rather than by comparing two p99s: "p99 ≤ L"
// means at most 1 % of the requests take longer than L, so the check
// counts the requests in during slower than L = factor × base.P99 and
// fails only when there are more than tailAllowance(n) of them — more than
// a true 1 % share could give by chance. A p99 over ~1,200 samples is the
// twelfth slowest request: one shared stall of this 2-core machine moves
// it by 30 % with nothing wrong (a ratio of two such p99s failed one
// freeze in four with the hit cell costing the others nothing), while a
// fault that slows the others puts 5–10 % of their requests over L, far
// above the allowance.
func checkTail(d *loadtest.Verdict, name string, samples []loadtest.Sample, base loadtest.Stats, baseDesc string, during loadtest.Window, factor float64) {
	limit := time.Duration(float64(base.P99) * factor)
	st := during.Stats(samples)
	slower := during.Slower(samples, limit)
	allowed := tailAllowance(st.N)
	d.Check(name, st.N > 0 && base.N > 0 && slower <= allowed,
		fmt.Sprintf("%d of %d slower than %s, p99 %s (%s %s of %d)", slower, st.N, msf(limit), msf(st.P99), baseDesc, msf(base.P99), base.N),
		fmt.Sprintf("p99 ≤ %.1f× baseline: ≤ %d over it (1 %% + 3σ)", factor, allowed))
}

// tailAllowance is how many of n requests may be slower than a bound on
// their p99 while the p99 still holds: 1 % of n and three standard
// deviations of that count (binomial, p = 0.01), so that a true p99 at the
// bound fails the check about once in a thousand runs.
func tailAllowance(n int) int {
	mean := 0.01 * float64(n)
	return int(math.Floor(mean + 3*math.Sqrt(mean*0.99)))
}
