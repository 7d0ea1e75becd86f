// Package problem writes HTTP error answers as RFC 9457 problem details
// (application/problem+json), so that every cellkit process answers bad
// input the same way: a 4xx or 5xx status, a stable type URI, a title, a
// detail for humans and, for validation errors, the field at fault.
//
// The type URIs are a public contract: clients branch on them. They are
// defined here, once, and docs/problems.md lists each with its statuses,
// who answers it and what a client should do.
package problem

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// TypeBase prefixes every problem type URI.
const TypeBase = "https://cellkit.dev/problems/"

// The problem type URIs, for New. Keep docs/problems.md in step.
const (
	// Requests the API does not have.
	NotFound         = TypeBase + "not-found"          // 404: no such path
	MethodNotAllowed = TypeBase + "method-not-allowed" // 405, with Allow

	// Malformed requests (400 unless noted); Field names what is wrong.
	InvalidField         = TypeBase + "invalid-field"          // a body field or query parameter
	InvalidHeader        = TypeBase + "invalid-header"         // a request header
	InvalidID            = TypeBase + "invalid-id"             // a malformed inquiry id
	InvalidJSON          = TypeBase + "invalid-json"           // a body that is not the JSON expected
	InvalidBody          = TypeBase + "invalid-body"           // a body that cannot be read
	InvalidAction        = TypeBase + "invalid-action"         // an admin action not known
	InvalidConfig        = TypeBase + "invalid-config"         // a simulator config that fails validation
	InvalidHost          = TypeBase + "invalid-host"           // an HTTP/1.1 request without one valid Host
	MalformedRequest     = TypeBase + "malformed-request"      // not valid HTTP/1.1
	BodyTooLarge         = TypeBase + "body-too-large"         // 413
	HeaderTooLarge       = TypeBase + "header-too-large"       // 431
	UnsupportedMediaType = TypeBase + "unsupported-media-type" // 415: send application/json
	RequestTimeout       = TypeBase + "request-timeout"        // 408: the request came in too slowly
	ExpectationFailed    = TypeBase + "expectation-failed"     // 417: an Expect other than 100-continue

	// Who is asking.
	MissingAPIKey = TypeBase + "missing-api-key" // 401: no X-API-Key
	UnknownAPIKey = TypeBase + "unknown-api-key" // 403
	Unauthorized  = TypeBase + "unauthorized"    // 401: an admin API without a (known) bearer token or client certificate
	Forbidden     = TypeBase + "forbidden"       // 403: a caller the intake does not serve (not a router)
	LaneForbidden = TypeBase + "lane-forbidden"  // 403: a priority the API key may not send
	RateLimited   = TypeBase + "rate-limited"    // 429, with Retry-After

	// What the request names.
	UnknownInquiry       = TypeBase + "unknown-inquiry"        // 404
	UnknownAgency        = TypeBase + "unknown-agency"         // 404 (cell admin)
	IdempotencyKeyReused = TypeBase + "idempotency-key-reused" // 422: the key was used for another request
	Misdirected          = TypeBase + "misdirected"            // 421: this cell does not own the user or the inquiry
	NotReady             = TypeBase + "not-ready"              // 409: the cell is starting or stopping
	UnknownMove          = TypeBase + "unknown-move"           // 404 (cell admin): the cell is in no move of that id
	MoveConflict         = TypeBase + "move-conflict"          // 409 (cell admin): the step does not fit the move's record

	// Overload and outages (503 with Retry-After unless noted).
	Overloaded       = TypeBase + "overloaded"        // shed: retry later, not elsewhere
	IntakeClosed     = TypeBase + "intake-closed"     // the cell is draining or starting
	QueueUnavailable = TypeBase + "queue-unavailable" // the cell cannot reach its queue
	QueueFull        = TypeBase + "queue-full"        // the cell's queue is at its depth limit
	StorageFull      = TypeBase + "storage-full"      // the cell's store is at its high watermark, or failed a write
	StoreUnavailable = TypeBase + "store-unavailable" // the cell cannot read its records
	NoActiveCell     = TypeBase + "no-active-cell"    // the map has no active cell
	NoCellMap        = TypeBase + "no-cell-map"       // the router has no map yet
	MapMoving        = TypeBase + "map-moving"        // the user's slot is moving; the router has no newer map yet
	UserMoving       = TypeBase + "user-moving"       // the user's inquiries are being moved to another cell: retry after Retry-After
	CellUnavailable  = TypeBase + "cell-unavailable"  // the router cannot reach the cell
	CellTimeout      = TypeBase + "cell-timeout"      // 504: the cell did not answer in time
	OutcomeUnknown   = TypeBase + "outcome-unknown"   // 503: the cell cannot tell whether the inquiry was accepted
	Internal         = TypeBase + "internal"          // 500
)

// Details is one problem answer.
type Details struct {
	Type   string `json:"type"`            // a stable URI naming the kind of problem
	Title  string `json:"title"`           // short, the same for every instance of the type
	Status int    `json:"status"`          // the HTTP status code
	Detail string `json:"detail"`          // what went wrong this time
	Field  string `json:"field,omitempty"` // the request field at fault, for validation errors
	// Inquiry, an extension member, names the inquiry the problem is
	// about: for OutcomeUnknown, the one that may have been accepted.
	Inquiry string `json:"inquiry_id,omitempty"`
}

// New returns a problem of type typ (one of the constants above) whose
// title is the status text.
func New(status int, typ, detail string) Details {
	return Details{Type: typ, Title: http.StatusText(status), Status: status, Detail: detail}
}

// WithField names the request field at fault.
func (d Details) WithField(field string) Details {
	d.Field = field
	return d
}

// WithInquiry names the inquiry the problem is about.
func (d Details) WithInquiry(id string) Details {
	d.Inquiry = id
	return d
}

// Write sends d. The body is small and always valid JSON.
func Write(w http.ResponseWriter, d Details) {
	body, _ := json.Marshal(d)
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(d.Status)
	w.Write(append(body, '\n'))
}

// WriteRetry sends d with a Retry-After header (whole seconds, at least 1).
func WriteRetry(w http.ResponseWriter, d Details, after time.Duration) {
	secs := int((after + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
	Write(w, d)
}
