package agencysim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Dist names a latency distribution.
type Dist string

const (
	// DistNone adds no delay. The empty Dist means the same.
	DistNone Dist = "none"
	// DistFixed delays every answer by Latency.Fixed.
	DistFixed Dist = "fixed"
	// DistUniform draws delays uniformly from [Latency.Min, Latency.Max].
	DistUniform Dist = "uniform"
	// DistLogNormal draws delays from the log-normal distribution whose
	// median is Latency.P50 and whose 99th percentile is Latency.P99, the
	// long right tail real agencies show.
	DistLogNormal Dist = "lognormal"
)

// z99 is the 99th percentile of the standard normal distribution.
const z99 = 2.3263478740408408

// Latency is the delay the simulator adds before it answers a request
// (heartbeats are never delayed). The zero value adds no delay. Only the
// fields of the chosen Dist are used; the others are ignored.
type Latency struct {
	// Dist selects the distribution. Empty means DistNone.
	Dist Dist
	// Fixed is the delay of DistFixed. Zero means no delay.
	Fixed time.Duration
	// Min and Max bound DistUniform, inclusive. Min = Max is a fixed delay.
	Min, Max time.Duration
	// P50 and P99 are the median and the 99th percentile of DistLogNormal.
	// P50 must be > 0 and P99 >= P50; P99 = P50 is a fixed delay.
	P50, P99 time.Duration
}

// FixedLatency returns a Latency that always delays by d.
func FixedLatency(d time.Duration) Latency { return Latency{Dist: DistFixed, Fixed: d} }

// UniformLatency returns a Latency drawn uniformly from [lo, hi].
func UniformLatency(lo, hi time.Duration) Latency {
	return Latency{Dist: DistUniform, Min: lo, Max: hi}
}

// LogNormalLatency returns a log-normal Latency with the given median and
// 99th percentile.
func LogNormalLatency(p50, p99 time.Duration) Latency {
	return Latency{Dist: DistLogNormal, P50: p50, P99: p99}
}

// Validate reports a Latency that cannot be sampled.
func (l Latency) Validate() error {
	switch l.Dist {
	case "", DistNone:
	case DistFixed:
		if l.Fixed < 0 {
			return fmt.Errorf("fixed latency %v < 0", l.Fixed)
		}
	case DistUniform:
		if l.Min < 0 || l.Max < l.Min {
			return fmt.Errorf("uniform latency needs 0 <= min <= max, got [%v, %v]", l.Min, l.Max)
		}
	case DistLogNormal:
		if l.P50 <= 0 || l.P99 < l.P50 {
			return fmt.Errorf("log-normal latency needs 0 < p50 <= p99, got p50 %v p99 %v", l.P50, l.P99)
		}
	default:
		return fmt.Errorf("unknown latency distribution %q (want none, fixed, uniform or lognormal)", l.Dist)
	}
	return nil
}

// Sample draws one delay using r. It is a pure function of l and r's state;
// an invalid Latency samples as zero.
func (l Latency) Sample(r *rand.Rand) time.Duration {
	switch l.Dist {
	case DistFixed:
		return max(l.Fixed, 0)
	case DistUniform:
		if l.Min < 0 || l.Max < l.Min {
			return 0
		}
		return l.Min + time.Duration(r.Int64N(int64(l.Max-l.Min)+1))
	case DistLogNormal:
		if l.P50 <= 0 || l.P99 < l.P50 {
			return 0
		}
		mu, sigma := l.logNormalParams()
		x := math.Exp(mu + sigma*r.NormFloat64())
		if x >= math.MaxInt64 {
			return time.Duration(math.MaxInt64)
		}
		return time.Duration(x)
	default:
		return 0
	}
}

// logNormalParams derives mu and sigma of ln(delay in ns) from P50 and P99:
// P50 = e^mu and P99 = e^(mu + z99*sigma).
func (l Latency) logNormalParams() (mu, sigma float64) {
	mu = math.Log(float64(l.P50))
	sigma = math.Log(float64(l.P99)/float64(l.P50)) / z99
	return mu, sigma
}

// Scaled returns l with every duration multiplied by f, the shape of the
// distribution unchanged: Scaled(10) is "the agency got ten times slower".
func (l Latency) Scaled(f float64) Latency {
	scale := func(d time.Duration) time.Duration {
		v := float64(d) * f
		if v >= math.MaxInt64 {
			return time.Duration(math.MaxInt64)
		}
		return time.Duration(v)
	}
	l.Fixed, l.Min, l.Max, l.P50, l.P99 = scale(l.Fixed), scale(l.Min), scale(l.Max), scale(l.P50), scale(l.P99)
	return l
}

// String describes l briefly, for logs.
func (l Latency) String() string {
	switch l.Dist {
	case DistFixed:
		return fmt.Sprintf("fixed %v", l.Fixed)
	case DistUniform:
		return fmt.Sprintf("uniform [%v, %v]", l.Min, l.Max)
	case DistLogNormal:
		return fmt.Sprintf("lognormal p50 %v p99 %v", l.P50, l.P99)
	default:
		return "none"
	}
}

type latencyJSON struct {
	Dist  Dist         `json:"dist,omitempty"`
	Fixed jsonDuration `json:"fixed,omitempty"`
	Min   jsonDuration `json:"min,omitempty"`
	Max   jsonDuration `json:"max,omitempty"`
	P50   jsonDuration `json:"p50,omitempty"`
	P99   jsonDuration `json:"p99,omitempty"`
}

// MarshalJSON writes durations as strings such as "500ms".
func (l Latency) MarshalJSON() ([]byte, error) {
	return json.Marshal(latencyJSON{
		Dist: l.Dist, Fixed: jsonDuration(l.Fixed), Min: jsonDuration(l.Min),
		Max: jsonDuration(l.Max), P50: jsonDuration(l.P50), P99: jsonDuration(l.P99),
	})
}

// UnmarshalJSON reads durations as strings such as "500ms". Fields absent
// from the JSON keep their current values; unknown fields are an error.
func (l *Latency) UnmarshalJSON(b []byte) error {
	v := latencyJSON{
		Dist: l.Dist, Fixed: jsonDuration(l.Fixed), Min: jsonDuration(l.Min),
		Max: jsonDuration(l.Max), P50: jsonDuration(l.P50), P99: jsonDuration(l.P99),
	}
	if err := decodeStrict(b, &v); err != nil {
		return fmt.Errorf("latency: %w", err)
	}
	*l = Latency{
		Dist: v.Dist, Fixed: time.Duration(v.Fixed), Min: time.Duration(v.Min),
		Max: time.Duration(v.Max), P50: time.Duration(v.P50), P99: time.Duration(v.P99),
	}
	return nil
}

// jsonDuration is a time.Duration written in JSON as a string like "1.5s".
type jsonDuration time.Duration

func (d jsonDuration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

func (d *jsonDuration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration %s must be a string like \"500ms\"", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = jsonDuration(v)
	return nil
}

// decodeStrict decodes one JSON value into v, refusing unknown fields and
// trailing data.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data after the JSON value")
	}
	return nil
}
