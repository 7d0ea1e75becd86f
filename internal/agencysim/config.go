package agencysim

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// Config is the behaviour of a simulated agency. Every field can be changed
// while the server runs (SetConfig); the zero value is a well-behaved agency
// without limits: unlimited sessions, instant correct answers, no faults, no
// firewall, an unlimited line.
//
// The fault rates are fractions of all requests, drawn once per request: a
// request is reset with probability ResetRate, otherwise answered with
// garbage with probability GarbageRate, otherwise answered with an error with
// probability ErrorRate. If the rates add up to more than 1, reset wins over
// garbage, which wins over error. Every outcome waits for the Latency first.
type Config struct {
	// MaxSessions is the agency's global session limit. A connection beyond
	// it is accepted, sent one 0210 frame with CodeSessionLimit and closed.
	// Lowering it does not close existing sessions; it only refuses new ones
	// until the count is under the new limit. Zero means no limit.
	MaxSessions int
	// Latency delays every answer to a request. The zero value adds none.
	Latency Latency
	// ErrorRate is the fraction of requests answered with CodeAgencyError
	// instead of a score. Zero means never, 1 means always.
	ErrorRate float64
	// GarbageRate is the fraction of requests answered with a frame the
	// client cannot read: a non-digit length header for length-prefixed
	// framing, random bytes for fixed frames. Zero means never.
	GarbageRate float64
	// ResetRate is the fraction of requests answered by resetting the
	// connection (RST, no frame). Zero means never.
	ResetRate float64
	// IdleTimeout is a firewall in front of the agency: a session without a
	// frame in either direction for longer than this is closed without a
	// word, and the client finds out only when it next reads or writes.
	// Zero means no firewall.
	IdleTimeout time.Duration
	// BandwidthBytesPerSec limits the bytes the server writes, across all its
	// sessions, like a leased line: a frame leaves once the line has had the
	// time to carry it, in pieces of at most LineBurst(BandwidthBytesPerSec)
	// bytes. Zero means unlimited.
	BandwidthBytesPerSec int
	// Seed seeds the random source of latencies and faults, so a run can be
	// repeated (with several sessions, arrival order decides which request
	// gets which draw). Zero is a seed like any other. Changing it at run
	// time restarts the source.
	Seed int64
}

// Validate reports a Config the server cannot run with.
func (c Config) Validate() error {
	var errs []error
	if c.MaxSessions < 0 {
		errs = append(errs, fmt.Errorf("max sessions %d < 0", c.MaxSessions))
	}
	if err := c.Latency.Validate(); err != nil {
		errs = append(errs, err)
	}
	for _, r := range []struct {
		name string
		v    float64
	}{{"error rate", c.ErrorRate}, {"garbage rate", c.GarbageRate}, {"reset rate", c.ResetRate}} {
		if math.IsNaN(r.v) || r.v < 0 || r.v > 1 {
			errs = append(errs, fmt.Errorf("%s %v not in [0, 1]", r.name, r.v))
		}
	}
	if c.IdleTimeout < 0 {
		errs = append(errs, fmt.Errorf("idle timeout %v < 0", c.IdleTimeout))
	}
	if c.BandwidthBytesPerSec < 0 {
		errs = append(errs, fmt.Errorf("bandwidth %d bytes/s < 0", c.BandwidthBytesPerSec))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid config: %w", err)
	}
	return nil
}

type configJSON struct {
	MaxSessions          int          `json:"max_sessions"`
	Latency              Latency      `json:"latency"`
	ErrorRate            float64      `json:"error_rate"`
	GarbageRate          float64      `json:"garbage_rate"`
	ResetRate            float64      `json:"reset_rate"`
	IdleTimeout          jsonDuration `json:"idle_timeout"`
	BandwidthBytesPerSec int          `json:"bandwidth_bytes_per_sec"`
	Seed                 int64        `json:"seed"`
}

func (c Config) toJSON() configJSON {
	return configJSON{
		MaxSessions: c.MaxSessions, Latency: c.Latency, ErrorRate: c.ErrorRate,
		GarbageRate: c.GarbageRate, ResetRate: c.ResetRate, IdleTimeout: jsonDuration(c.IdleTimeout),
		BandwidthBytesPerSec: c.BandwidthBytesPerSec, Seed: c.Seed,
	}
}

// MarshalJSON writes snake_case fields and durations as strings like "30s".
func (c Config) MarshalJSON() ([]byte, error) { return json.Marshal(c.toJSON()) }

// UnmarshalJSON reads what MarshalJSON writes. Fields absent from the JSON
// keep their current values (decode into a zero Config to replace, into the
// current one to patch); unknown fields are an error. It does not validate.
func (c *Config) UnmarshalJSON(b []byte) error {
	v := c.toJSON()
	if err := decodeStrict(b, &v); err != nil {
		return err
	}
	*c = Config{
		MaxSessions: v.MaxSessions, Latency: v.Latency, ErrorRate: v.ErrorRate,
		GarbageRate: v.GarbageRate, ResetRate: v.ResetRate, IdleTimeout: time.Duration(v.IdleTimeout),
		BandwidthBytesPerSec: v.BandwidthBytesPerSec, Seed: v.Seed,
	}
	return nil
}
