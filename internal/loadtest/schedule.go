package loadtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Step is a constant request rate held for a duration.
type Step struct {
	Rate float64       // requests per second
	For  time.Duration // how long
}

// ParseSteps reads "60:10s,200:5s": 60 requests/s for 10 s, then 200/s for 5 s.
func ParseSteps(s string) ([]Step, error) {
	var steps []Step
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		r, d, ok := strings.Cut(part, ":")
		if !ok {
			return nil, fmt.Errorf("step %q: want RATE:DURATION such as 60:10s", part)
		}
		rate, err := strconv.ParseFloat(r, 64)
		if err != nil || rate < 0 || math.IsInf(rate, 0) || math.IsNaN(rate) {
			return nil, fmt.Errorf("step %q: rate must be a number ≥ 0", part)
		}
		dur, err := time.ParseDuration(d)
		if err != nil || dur <= 0 {
			return nil, fmt.Errorf("step %q: duration must be positive, such as 10s", part)
		}
		steps = append(steps, Step{Rate: rate, For: dur})
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("no steps in %q", s)
	}
	return steps, nil
}

// Total is the sum of the steps' durations.
func Total(steps []Step) time.Duration {
	var t time.Duration
	for _, s := range steps {
		t += s.For
	}
	return t
}

// Schedule returns the intended send time of every request, as offsets from
// the start: evenly spaced within each step. The count is bounded by the
// steps, so a run always ends.
func Schedule(steps []Step) []time.Duration {
	var out []time.Duration
	var base time.Duration
	for _, s := range steps {
		if s.Rate > 0 {
			n := int(math.Round(s.Rate * s.For.Seconds()))
			gap := float64(time.Second) / s.Rate
			for i := range n {
				out = append(out, base+time.Duration(float64(i)*gap))
			}
		}
		base += s.For
	}
	return out
}

// Users picks the user of each request: uniform over K users, or Zipf(s)
// over K users (user 1 the most frequent) when s > 0.
type Users struct {
	k   int
	cdf []float64 // Zipf only
	rng *rand.Rand
}

// NewUsers builds a picker; seed makes the sequence reproducible.
func NewUsers(k int, zipfS float64, seed uint64) (*Users, error) {
	if k < 1 {
		return nil, fmt.Errorf("users must be ≥ 1, not %d", k)
	}
	if zipfS < 0 {
		return nil, fmt.Errorf("zipf exponent must be ≥ 0, not %g", zipfS)
	}
	u := &Users{k: k, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	if zipfS > 0 {
		u.cdf = make([]float64, k)
		sum := 0.0
		for i := range k {
			sum += 1 / math.Pow(float64(i+1), zipfS)
			u.cdf[i] = sum
		}
		for i := range u.cdf {
			u.cdf[i] /= sum
		}
	}
	return u, nil
}

// Next returns a user index in [0, K). Not safe for concurrent use.
func (u *Users) Next() int {
	if u.cdf == nil {
		return u.rng.IntN(u.k)
	}
	x := u.rng.Float64()
	i := sort.SearchFloat64s(u.cdf, x)
	return min(i, u.k-1)
}

// UserID names user i.
func UserID(i int) string { return "lt-u" + strconv.Itoa(i) }
