// Package api holds the documents of cellkit's wire contracts, in one
// place for the programs that write them and those that read them.
package api

import (
	"maps"
	"slices"
	"strings"
	"time"
)

// CellStatus is the answer of GET /v1/admin/status (internal/cell's Status), as
// its readers (cellctl, the Terraform provider, the drains) decode it.
// Decoding is tolerant: unknown fields are ignored and missing ones stay
// zero.
type CellStatus struct {
	Cell     string `json:"cell"`
	Intake   string `json:"intake"` // "open" or "closed"
	Ready    bool   `json:"ready"`
	Stopping bool   `json:"stopping"`
	Map      struct {
		Version    int64  `json:"version"`
		State      string `json:"state"`
		OwnedSlots int    `json:"owned_slots"`
		Stale      bool   `json:"stale"`
	} `json:"map"`
	Queue struct {
		// Depth is the messages not yet acked per lane ("high", "normal"),
		// in flight included.
		Depth            map[string]int64 `json:"depth"`
		Messages         int64            `json:"messages"`
		OldestAgeSeconds float64          `json:"oldest_age_seconds"`
	} `json:"queue"`
	Inflight int64                   `json:"inflight"`
	Agencies map[string]AgencyStatus `json:"agencies"`
	Failed   int64                   `json:"failed"`
	DLQ      int64                   `json:"dlq"`
	// Sampled is when the cell last read its queue; Errors says why a read
	// failed (the queue figures are then unknown, not zero).
	Sampled time.Time         `json:"sampled"`
	Errors  map[string]string `json:"errors,omitempty"`
	Checks  map[string]struct {
		OK     bool   `json:"ok"`
		Detail string `json:"detail"`
	} `json:"checks"`
	// Store is the store's filesystem (a cell on the embedded NATS).
	Store *struct {
		SizeBytes int64   `json:"size_bytes"`
		FreeBytes int64   `json:"free_bytes"`
		Used      float64 `json:"used"`
		High      float64 `json:"high_watermark"`
		Refusing  bool    `json:"refusing"`
		Failed    string  `json:"failed"`
	} `json:"store,omitempty"`
}

// AgencyStatus is one agency link of a cell.
type AgencyStatus struct {
	Breaker string `json:"breaker"`
	Quota   int    `json:"quota"`
	Pool    struct {
		Size    int `json:"size"`
		InUse   int `json:"in_use"`
		Idle    int `json:"idle"`
		Waiters int `json:"waiters"`
	} `json:"pool"`
}

// High and Normal are the depths of the two lanes.
func (s *CellStatus) High() int64   { return s.Queue.Depth["high"] }
func (s *CellStatus) Normal() int64 { return s.Queue.Depth["normal"] }

// Pending is the work a drain waits for: queued in either lane (which
// counts delivered but unacked messages) plus in flight.
func (s *CellStatus) Pending() int64 {
	var n int64
	for _, d := range s.Queue.Depth {
		n += d
	}
	return n + s.Inflight
}

// Known reports whether the queue figures are real: the cell read its queue
// without error.
func (s *CellStatus) Known() bool { return len(s.Errors) == 0 }

// IntakeOpen reports whether the cell takes new inquiries.
func (s *CellStatus) IntakeOpen() bool { return s.Intake == "open" }

// NotReady lists the failing readiness checks: "nats: ...; intake: closed".
func (s *CellStatus) NotReady() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(s.Checks)) {
		if c := s.Checks[k]; !c.OK {
			parts = append(parts, k+": "+c.Detail)
		}
	}
	return strings.Join(parts, "; ")
}

// OldestPending is the age of the oldest queued message.
func (s *CellStatus) OldestPending() time.Duration {
	return time.Duration(s.Queue.OldestAgeSeconds * float64(time.Second))
}

// FailedInquiry is one entry of GET /v1/admin/failed.
type FailedInquiry struct {
	ID       string    `json:"id"`
	UserID   string    `json:"user_id"`
	Set      string    `json:"set"` // "failed" (error stream) or "dead" (DLQ)
	Reason   string    `json:"reason"`
	Attempts int       `json:"attempts"`
	At       time.Time `json:"at"`
}

// RetryResult is the answer of POST /v1/admin/failed/retry.
type RetryResult struct {
	Retried []string          `json:"retried"`
	Skipped map[string]string `json:"skipped,omitempty"` // id → why
}
