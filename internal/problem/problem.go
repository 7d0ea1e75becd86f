// Package problem writes HTTP error answers as RFC 9457 problem details
// (application/problem+json), so that every cellkit process answers bad
// input the same way: a 4xx or 5xx status, a stable type URI, a title, a
// detail for humans and, for validation errors, the field at fault.
package problem

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Details is one problem answer.
type Details struct {
	Type   string `json:"type"`            // a stable URI naming the kind of problem
	Title  string `json:"title"`           // short, the same for every instance of the type
	Status int    `json:"status"`          // the HTTP status code
	Detail string `json:"detail"`          // what went wrong this time
	Field  string `json:"field,omitempty"` // the request field at fault, for validation errors
}

// TypeBase prefixes every problem type URI.
const TypeBase = "https://cellkit.dev/problems/"

// New returns a problem of the given kind ("invalid-field", "overloaded"...)
// whose title is the status text.
func New(status int, kind, detail string) Details {
	return Details{Type: TypeBase + kind, Title: http.StatusText(status), Status: status, Detail: detail}
}

// WithField names the request field at fault.
func (d Details) WithField(field string) Details {
	d.Field = field
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
