package loadtest

import (
	"net/http"
	"slices"
	"time"
)

// Window selects samples by intended send time and user.
type Window struct {
	From, To time.Duration    // [From, To)
	Users    func(u int) bool // nil: every user
	// AnsweredBy, if set, also leaves out the samples whose answer (or
	// failure) came at or after it: those still in flight at a moment.
	AnsweredBy time.Duration
}

// Stats are the outcomes of a set of samples.
type Stats struct {
	N, OK, Errors, Timeouts int
	Status                  map[string]int
	P50, P99                time.Duration
	NoRetryAfter            int // 503s without Retry-After
	// Fenced are the errors that were a move's fence (503 user-moving:
	// the user's last messages were being copied to its new cell), and
	// FencedNoRetryAfter those of them without Retry-After.
	Fenced, FencedNoRetryAfter int
}

// holds tells whether s is in the window.
func (w Window) holds(s Sample) bool {
	return s.At >= w.From && s.At < w.To && (w.Users == nil || w.Users(s.User)) &&
		(w.AnsweredBy <= 0 || s.At+s.Latency < w.AnsweredBy)
}

// Stats sums up the samples in the window.
func (w Window) Stats(samples []Sample) Stats {
	st := Stats{Status: map[string]int{}}
	var lat []time.Duration
	for _, s := range samples {
		if !w.holds(s) {
			continue
		}
		st.N++
		st.Status[StatusKey(s)]++
		lat = append(lat, s.Latency)
		switch {
		case s.OK():
			st.OK++
		case s.Err == "timeout":
			st.Timeouts++
			st.Errors++
		default:
			st.Errors++
		}
		if s.Status == http.StatusServiceUnavailable && !s.RetryAfter {
			st.NoRetryAfter++
		}
		if s.Fenced() {
			st.Fenced++
			if !s.RetryAfter {
				st.FencedNoRetryAfter++
			}
		}
	}
	slices.Sort(lat)
	st.P50, st.P99 = quantile(lat, 0.50), quantile(lat, 0.99)
	return st
}

// Slower counts the samples in the window whose latency is over limit.
func (w Window) Slower(samples []Sample, limit time.Duration) int {
	n := 0
	for _, s := range samples {
		if !w.holds(s) {
			continue
		}
		if s.Latency > limit {
			n++
		}
	}
	return n
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// UserCells maps each user to the cell that answered it in [from, to).
func UserCells(samples []Sample, from, to time.Duration) map[int]string {
	m := map[int]string{}
	for _, s := range samples {
		if s.At >= from && s.At < to && s.Cell != "" {
			m[s.User] = s.Cell
		}
	}
	return m
}
