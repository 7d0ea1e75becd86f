// Package inquiry is the cell's domain model: what a loan pre-inquiry
// request may contain, how inquiries are named, the record the cell keeps for
// each one and how its result follows from the scores.
//
// It is pure (no I/O, no clocks): validation, ids and the scoring formulas
// are deterministic, so that tests and load checkers can predict every
// result from the request alone.
package inquiry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"

	"github.com/cellkit/cellkit/internal/api"
)

// Limits of a request.
const (
	MaxBodyBytes   = 64 << 10
	MaxProduct     = 32
	MaxAmount      = 1_000_000_000_000
	MaxCallbackURL = 2048
)

// Priority picks the work lane.
type Priority string

const (
	Normal Priority = "normal"
	High   Priority = "high"
)

// Request is the body of POST /v1/inquiries.
type Request struct {
	UserID      string   `json:"user_id"`
	Product     string   `json:"product"`
	Amount      int64    `json:"amount"`
	Priority    Priority `json:"priority"`
	CallbackURL string   `json:"callback_url,omitempty"`
}

// FieldError is a request field that is missing or invalid.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// ErrSyntax wraps a body that is not one JSON object.
var ErrSyntax = errors.New("body is not a JSON object")

// wireRequest is what the JSON may hold: amount is kept raw so that only a
// plain JSON integer is accepted (no quotes, no fraction, no exponent).
type wireRequest struct {
	UserID      *string         `json:"user_id"`
	Product     *string         `json:"product"`
	Amount      json.RawMessage `json:"amount"`
	Priority    *string         `json:"priority"`
	CallbackURL *string         `json:"callback_url"`
}

// DecodeRequest reads one JSON object and validates it. Errors are a
// *FieldError naming the field at fault, or wrap ErrSyntax.
func DecodeRequest(body []byte) (Request, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var w wireRequest
	if err := dec.Decode(&w); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return Request{}, &FieldError{Field: te.Field, Reason: "must be a " + jsonKind(te.Field)}
		}
		if f, ok := unknownField(err); ok {
			return Request{}, &FieldError{Field: f, Reason: "unknown field"}
		}
		return Request{}, fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Request{}, fmt.Errorf("%w: data after the object", ErrSyntax)
	}
	if err := checkKeys(body); err != nil {
		return Request{}, err
	}
	var r Request
	if w.UserID != nil {
		r.UserID = *w.UserID
	}
	if w.Product != nil {
		r.Product = *w.Product
	}
	if w.Priority != nil {
		r.Priority = Priority(*w.Priority)
	}
	if w.CallbackURL != nil {
		r.CallbackURL = *w.CallbackURL
	}
	if len(w.Amount) > 0 && string(w.Amount) != "null" {
		a, err := parseAmount(w.Amount)
		if err != nil {
			return Request{}, err
		}
		r.Amount = a
	}
	if err := r.Validate(); err != nil {
		return Request{}, err
	}
	return r, nil
}

func jsonKind(field string) string {
	if field == "amount" {
		return "positive integer"
	}
	return "string"
}

// checkKeys refuses what encoding/json lets through: a field name in
// another case ("USER_ID") or with escapes ("\u0075ser_id"), or a field
// given twice (json keeps the last one). Either would let two readers of one
// body see different requests: the router routes by the user_id it finds
// spelt exactly (the last, if given twice). body is known to hold one well-formed object, so a
// scan for the top-level keys is enough; it allocates nothing.
func checkKeys(body []byte) error {
	var seen [5]bool
	depth, inString, escaped, expectKey := 0, false, false, false
	keyStart := -1
	for i, c := range body {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
				if keyStart >= 0 {
					key := body[keyStart:i]
					keyStart = -1
					n := fieldIndex(key)
					switch {
					case n < 0:
						return &FieldError{Field: string(key), Reason: "unknown field (field names are exact: lower case, no escapes)"}
					case seen[n]:
						return &FieldError{Field: string(key), Reason: "given more than once"}
					}
					seen[n] = true
				}
			}
			continue
		}
		switch c {
		case '"':
			inString = true
			if depth == 1 && expectKey {
				keyStart = i + 1
				expectKey = false
			}
		case '{', '[':
			depth++
			expectKey = depth == 1 && c == '{'
		case '}', ']':
			depth--
		case ',':
			expectKey = depth == 1
		}
	}
	return nil
}

// fieldIndex is the index of key among the request's fields, or -1.
func fieldIndex(key []byte) int {
	switch string(key) {
	case "user_id":
		return 0
	case "product":
		return 1
	case "amount":
		return 2
	case "priority":
		return 3
	case "callback_url":
		return 4
	}
	return -1
}

// unknownField extracts the name from encoding/json's unknown field error.
func unknownField(err error) (string, bool) {
	const prefix = `json: unknown field "`
	s := err.Error()
	if len(s) > len(prefix)+1 && s[:len(prefix)] == prefix {
		return s[len(prefix) : len(s)-1], true
	}
	return "", false
}

func parseAmount(raw json.RawMessage) (int64, error) {
	bad := &FieldError{Field: "amount", Reason: fmt.Sprintf("must be a positive integer ≤ %d", int64(MaxAmount))}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return 0, bad
		}
	}
	a, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || a <= 0 || a > MaxAmount {
		return 0, bad
	}
	return a, nil
}

// Validate checks every field and fills the default priority.
func (r *Request) Validate() error {
	switch {
	case r.UserID == "":
		return &FieldError{Field: "user_id", Reason: "is required"}
	case !api.ValidUserID(r.UserID):
		return &FieldError{Field: "user_id", Reason: "must be 1–64 of [A-Za-z0-9_-]"}
	case r.Product == "":
		return &FieldError{Field: "product", Reason: "is required"}
	case !api.ValidProduct(r.Product):
		return &FieldError{Field: "product", Reason: "must be 1–32 of [a-z0-9_]"}
	case r.Amount == 0:
		return &FieldError{Field: "amount", Reason: "is required"}
	case r.Amount < 0 || r.Amount > MaxAmount:
		return &FieldError{Field: "amount", Reason: fmt.Sprintf("must be a positive integer ≤ %d", int64(MaxAmount))}
	}
	switch r.Priority {
	case "":
		r.Priority = Normal
	case Normal, High:
	default:
		return &FieldError{Field: "priority", Reason: `must be "normal" or "high"`}
	}
	if r.CallbackURL != "" {
		if err := checkCallback(r.CallbackURL); err != nil {
			return &FieldError{Field: "callback_url", Reason: err.Error()}
		}
	}
	return nil
}

func checkCallback(s string) error {
	if len(s) > MaxCallbackURL {
		return fmt.Errorf("longer than %d bytes", MaxCallbackURL)
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return errors.New("must be an absolute http or https URL without credentials")
	}
	return nil
}
