// Package httpx is the HTTP plumbing every cellkit server shares: JSON
// answers, a writer that remembers the status, and a handler that
// contains a panic.
package httpx

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/problem"
)

// JSON answers status with v as one line of JSON; Indent, indented (the
// admin documents, read by people too). Both end with a newline and give
// their Content-Length. A value that cannot be encoded is answered 500
// with a problem.
func JSON(w http.ResponseWriter, status int, v any) { write(w, status, v, false) }

// Indent is JSON, indented by two spaces.
func Indent(w http.ResponseWriter, status int, v any) { write(w, status, v, true) }

func write(w http.ResponseWriter, status int, v any, indent bool) {
	var body []byte
	var err error
	if indent {
		body, err = json.MarshalIndent(v, "", "  ")
	} else {
		body, err = json.Marshal(v)
	}
	if err != nil {
		problem.Write(w, problem.New(http.StatusInternalServerError, problem.Internal, "cannot encode the answer: "+err.Error()))
		return
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body) // a client gone away: nobody to tell
}

// StatusWriter remembers the status of the answer, for metrics and logs.
type StatusWriter struct {
	http.ResponseWriter
	code int
}

func (s *StatusWriter) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *StatusWriter) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Status is the answer's status: 200 when nothing set one.
func (s *StatusWriter) Status() int {
	if s.code == 0 {
		return http.StatusOK
	}
	return s.code
}

// Started says whether the answer has begun (a status or a byte written).
func (s *StatusWriter) Started() bool { return s.code != 0 }

// Unwrap gives http.ResponseController the writer underneath.
func (s *StatusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Contain serves h with a panic recovered: recovered is told (to log and
// count it), and the request is answered 500 with a problem, or, when the
// answer had begun, cut off as net/http does (http.ErrAbortHandler). An
// ErrAbortHandler of h's own goes on up untold.
func Contain(h http.Handler, recovered func(v any, r *http.Request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &StatusWriter{ResponseWriter: w}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			recovered(v, r)
			if sw.Started() {
				panic(http.ErrAbortHandler)
			}
			problem.Write(w, problem.New(http.StatusInternalServerError, problem.Internal, "internal error"))
		}()
		h.ServeHTTP(sw, r)
	})
}

// EchoCall serves h with the request's Cellkit-Call (api.HeaderCall), the
// router's number for the call on its connection, echoed in the answer:
// the router then knows the answer for the call's, whatever else the
// connection carried. A value that is not a decimal number the router
// could have sent (a uint64) is not echoed.
func EchoCall(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header[api.HeaderCall]; len(v) == 1 && decimal(v[0]) {
			w.Header()[api.HeaderCall] = v
		}
		h.ServeHTTP(w, r)
	})
}

func decimal(s string) bool {
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil
}
