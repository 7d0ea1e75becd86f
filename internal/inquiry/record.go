package inquiry

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"
)

// Status is where an inquiry is.
type Status string

const (
	Pending Status = "pending"
	Done    Status = "done"
	Failed  Status = "failed"
)

// ReasonInternal is the failure reason of an inquiry whose processing
// panicked (the cell's pipeline recovers it at the inquiry's boundary).
const ReasonInternal = "internal error"

// Result is what a done inquiry answers.
type Result struct {
	// Scores are the credit scores by source: each agency by name, and
	// "css" for the internal score.
	Scores  map[string]int `json:"scores"`
	RateBps int            `json:"rate_bps"` // yearly rate in basis points
	Limit   int64          `json:"limit"`    // the amount the user may borrow, ≤ the amount asked
	CoreRef string         `json:"core_ref"` // the core banking registration
}

// Record is what the cell stores for an inquiry.
type Record struct {
	ID          string   `json:"id"`
	Cell        string   `json:"cell"`
	UserID      string   `json:"user_id"`
	Product     string   `json:"product"`
	Amount      int64    `json:"amount"`
	Priority    Priority `json:"priority"`
	CallbackURL string   `json:"callback_url,omitempty"`
	// Client is the router's client (the API key's holder) that created
	// the inquiry; only it may read it through a router. Empty for an
	// inquiry taken from a caller that named none.
	Client string `json:"client,omitempty"`

	Status Status  `json:"status"`
	Result *Result `json:"result,omitempty"`
	// Reason says why a failed inquiry failed; on a pending one, the last
	// transient error.
	Reason string `json:"reason,omitempty"`
	// Scores keeps the scores already obtained by an attempt that failed
	// afterwards, so that a retry does not ask the agencies again.
	Scores map[string]int `json:"partial_scores,omitempty"`
	// Attempts counts the deliveries that ran the pipeline.
	Attempts int `json:"attempts"`
	// Dead marks a failed record that went to the dead-letter stream.
	Dead bool `json:"dead,omitempty"`
	// Crashes counts the crashes of a cell process this inquiry was in
	// flight at (internal/pipeline quarantines it at a limit).
	Crashes int `json:"crashes,omitempty"`

	// Job names the current enqueue: each message carries the job it was
	// published for, and a message whose job is not the record's is stale
	// (its enqueue was rolled back or superseded) and is dropped.
	Job string `json:"job"`
	// Fingerprint identifies the request, to refuse an Idempotency-Key
	// reused with a different body.
	Fingerprint string `json:"fingerprint,omitempty"`

	Created   time.Time  `json:"created"`
	Updated   time.Time  `json:"updated"`
	Completed *time.Time `json:"completed,omitempty"`
}

// NewRecord is the pending record of a new inquiry.
func NewRecord(id, cell string, r Request, now time.Time) Record {
	now = now.UTC()
	return Record{
		ID: id, Cell: cell, UserID: r.UserID, Product: r.Product, Amount: r.Amount,
		Priority: r.Priority, CallbackURL: r.CallbackURL,
		Status: Pending, Job: NewJob(), Fingerprint: Fingerprint(r),
		Created: now, Updated: now,
	}
}

// Fingerprint is a digest of every field of a request.
func Fingerprint(r Request) string {
	h := sha256.New()
	for _, s := range []string{r.UserID, r.Product, strconv.FormatInt(r.Amount, 10), string(r.Priority), r.CallbackURL} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// MsgID is the Nats-Msg-Id of the work message of the record's current job:
// publishing the same job twice within the duplicate window stores it once.
func (r *Record) MsgID() string { return r.ID + "." + r.Job }

// Complete marks the record done with res.
func (r *Record) Complete(res Result, now time.Time) {
	now = now.UTC()
	r.Status, r.Result, r.Reason, r.Scores = Done, &res, "", nil
	r.Updated, r.Completed = now, &now
}

// Fail marks the record failed for reason.
func (r *Record) Fail(reason string, now time.Time) {
	now = now.UTC()
	r.Status, r.Result, r.Reason = Failed, nil, reason
	r.Updated, r.Completed = now, &now
}

// Requeue makes a failed record pending again under a new job.
func (r *Record) Requeue(now time.Time) {
	r.Status, r.Result, r.Reason, r.Completed, r.Dead = Pending, nil, "", nil, false
	r.Attempts, r.Crashes, r.Job, r.Updated = 0, 0, NewJob(), now.UTC()
}

// View is the public form of a record (GET /v1/inquiries/{id}).
type View struct {
	ID          string     `json:"id"`
	Cell        string     `json:"cell"`
	Status      Status     `json:"status"`
	UserID      string     `json:"user_id"`
	Product     string     `json:"product"`
	Amount      int64      `json:"amount"`
	Priority    Priority   `json:"priority"`
	Result      *Result    `json:"result,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	Attempts    int        `json:"attempts"`
	DeadLetter  bool       `json:"dead_letter,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	CompletedAt *time.Time `json:"completed_at,omitempty"`
}

// View returns the public form.
func (r *Record) View() View {
	v := View{
		ID: r.ID, Cell: r.Cell, Status: r.Status, UserID: r.UserID, Product: r.Product,
		Amount: r.Amount, Priority: r.Priority, Result: r.Result, Attempts: r.Attempts,
		CreatedAt: r.Created, UpdatedAt: r.Updated, CompletedAt: r.Completed,
	}
	if r.Status == Failed {
		v.Reason, v.DeadLetter = r.Reason, r.Dead
	}
	return v
}
