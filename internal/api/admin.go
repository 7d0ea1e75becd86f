// Package api holds the documents of cellkit's wire contracts, in one
// place for the programs that write them and those that read them.
package api

import (
	"maps"
	"slices"
	"strings"
	"time"
)

// CellStatus is the answer of GET /v1/admin/status: written by the cell,
// read by cellctl, the Terraform provider, the drains and the drills.
// Readers decode it tolerantly: unknown fields are ignored and missing ones
// stay zero.
type CellStatus struct {
	Cell string `json:"cell"`
	// Instance is the instance's id in a cell of several ("" for a cell
	// that is one process).
	Instance string                  `json:"instance,omitempty"`
	Release  Release                 `json:"release"`
	Intake   string                  `json:"intake"` // "open" or "closed"
	Ready    bool                    `json:"ready"`
	Stopping bool                    `json:"stopping"`
	Map      MapStatus               `json:"map"`
	Queue    QueueStatus             `json:"queue"`
	Inflight int64                   `json:"inflight"`
	Workers  int                     `json:"workers"`
	Agencies map[string]AgencyStatus `json:"agencies"`
	Failed   int64                   `json:"failed"`
	DLQ      int64                   `json:"dlq"`
	NATS     string                  `json:"nats"` // the NATS connection's state
	// Sampled is when the cell last read its queue; Errors says why a read
	// failed (the queue figures are then unknown, not zero).
	Sampled time.Time         `json:"sampled"`
	Errors  map[string]string `json:"errors,omitempty"`
	Checks  map[string]Check  `json:"checks"`
	// Store is the store's filesystem (a cell on the embedded NATS only).
	Store *StoreStatus `json:"store,omitempty"`
	// Layout is how the cell keeps its inquiries. Absent: a release that
	// knows only the records layout.
	Layout *LayoutStatus `json:"layout,omitempty"`
}

// The layouts a cell keeps its inquiries in (docs/decisions/one-write-intake.md).
const (
	LayoutLedger  = "ledger"
	LayoutRecords = "records"
)

// LayoutStatus is how a cell keeps its inquiries.
type LayoutStatus struct {
	// Writes is the layout its intake writes now.
	Writes string `json:"writes"`
	// LedgerSince is when its intake writes the ledger from (absent: not
	// switched); once set, never undone.
	LedgerSince *time.Time `json:"ledger_since,omitempty"`
	// Knows are the layouts the instance's release reads and works.
	Knows []string `json:"knows"`
}

// PathCellLedger switches a cell's intake to the ledger (POST, admin API).
const PathCellLedger = "/v1/admin/layout/ledger"

// Check is one readiness check, as /readyz and the status show it.
type Check struct {
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// MapStatus is the cell's view of the map.
type MapStatus struct {
	Version    int64  `json:"version"`
	State      string `json:"state,omitempty"`
	OwnedSlots int    `json:"owned_slots"`
	Registry   string `json:"registry"`
	Stale      bool   `json:"stale"`
	FromCache  bool   `json:"from_cache"`
	// RegistryOlder: the registry holds an older map than the one in use
	// (rebuilt behind the cache); its version.
	RegistryOlder int64 `json:"registry_older,omitempty"`
}

// QueueStatus is the work queue's state.
type QueueStatus struct {
	// Depth is the messages not yet acked per lane ("high", "normal"),
	// in flight included.
	Depth            map[string]int64 `json:"depth"`
	Messages         int64            `json:"messages"`
	OldestAgeSeconds float64          `json:"oldest_age_seconds"`
	DrainRate        float64          `json:"drain_rate"`
	ServiceSeconds   float64          `json:"service_seconds"` // recent peak service time of one inquiry
	AgeBudgetSeconds float64          `json:"age_budget_seconds"`
	DepthLimit       int              `json:"depth_limit"`
	// Lanes are the age of each lane's oldest pending inquiry and its
	// budget; LaneBlind says the cell sheds both lanes on the whole queue.
	Lanes     map[string]LaneStatus `json:"lanes"`
	LaneBlind bool                  `json:"lane_blind,omitempty"`
	// HighReserve is the share of the pace guaranteed to the high lane.
	HighReserve float64 `json:"high_reserve"`
}

// LaneStatus is one lane of the work queue.
type LaneStatus struct {
	OldestAgeSeconds float64 `json:"oldest_age_seconds"`
	AgeBudgetSeconds float64 `json:"age_budget_seconds"`
}

// AgencyStatus is one agency link of a cell: its breaker, adaptive limit,
// session pool and quota.
type AgencyStatus struct {
	Agency   string    `json:"agency"`
	Breaker  string    `json:"breaker"`
	Limit    int       `json:"limit"`
	Inflight int       `json:"inflight"`
	Pool     PoolStats `json:"pool"`
	Quota    int       `json:"quota"`
	Waiting  int       `json:"waiting"` // workers waiting for a session
}

// PoolStats is an agency's session pool (internal/sessionpool's Stats).
type PoolStats struct {
	Size       int    `json:"size"`        // target number of sessions
	Open       int    `json:"open"`        // sessions that exist: idle, in use, being checked or closed
	Idle       int    `json:"idle"`        // ready to lend
	InUse      int    `json:"in_use"`      // lent out
	Checking   int    `json:"checking"`    // idle, out for a heartbeat
	Dialing    int    `json:"dialing"`     // being established
	Waiters    int    `json:"waiters"`     // borrowers waiting
	Created    uint64 `json:"created"`     // sessions established
	Reused     uint64 `json:"reused"`      // borrows of a session that served before
	Borrows    uint64 `json:"borrows"`     // successful borrows
	Exhausted  uint64 `json:"exhausted"`   // borrows that hit the deadline
	Broken     uint64 `json:"broken"`      // sessions closed because they broke
	Heartbeats uint64 `json:"heartbeats"`  // heartbeats sent
	DialErrors uint64 `json:"dial_errors"` // failed dials
	Retired    uint64 `json:"retired"`     // sessions closed for age or shrinking
}

// Up is the number of sessions established and not known broken: idle, lent
// out, or out for a heartbeat. A quiet pool heartbeats all its sessions at
// once, so counting only the idle and lent ones would read it as down for
// the length of a heartbeat.
func (s PoolStats) Up() int { return s.Idle + s.InUse + s.Checking }

// StoreStatus is the store's filesystem and its watermarks.
type StoreStatus struct {
	SizeBytes int64   `json:"size_bytes"`
	FreeBytes int64   `json:"free_bytes"`
	Used      float64 `json:"used"` // share in use, 0–1
	High      float64 `json:"high_watermark"`
	Low       float64 `json:"low_watermark"`
	Refusing  bool    `json:"refusing"`         // new inquiries refused for the store
	Failed    string  `json:"failed,omitempty"` // why a write failed, until the store is open again
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
