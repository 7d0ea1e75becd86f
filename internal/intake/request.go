package intake

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/inquiry"
	"github.com/cellkit/cellkit/internal/problem"
)

// clientOf is the client a request names in Cellkit-Client ("" for
// none); a malformed one is answered 400.
func clientOf(w http.ResponseWriter, r *http.Request) (string, bool) {
	vs := r.Header.Values(api.HeaderClient)
	switch {
	case len(vs) == 0:
		return "", true
	case len(vs) > 1 || !api.ValidClientID(vs[0]):
		problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidHeader, api.HeaderClient+" must be one client id: 1-64 of [A-Za-z0-9._-]").WithField(api.HeaderClient))
		return "", false
	}
	return vs[0], true
}

// laneOf is the lane a request's Cellkit-Priority names ("" for none); a
// malformed one is answered 400.
func laneOf(w http.ResponseWriter, r *http.Request) (inquiry.Priority, bool) {
	vs := r.Header.Values(api.HeaderPriority)
	switch {
	case len(vs) == 0:
		return "", true
	case len(vs) == 1 && (vs[0] == string(inquiry.High) || vs[0] == string(inquiry.Normal)):
		return inquiry.Priority(vs[0]), true
	}
	problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidHeader, api.HeaderPriority+` must be one lane: "high" or "normal"`).WithField(api.HeaderPriority))
	return "", false
}

// laneName names a lane in a problem's detail ("" sheds as normal).
func laneName(lane inquiry.Priority) string {
	if lane == inquiry.High {
		return "high"
	}
	return "normal"
}

// keyReused is the problem for an Idempotency-Key sent again with another
// request.
func keyReused(id string) problem.Details {
	return problem.New(http.StatusUnprocessableEntity, problem.IdempotencyKeyReused,
		"this Idempotency-Key was used for a different request (inquiry "+id+")").WithField(api.HeaderIdemKey)
}

// readRequest checks the content type and size and decodes the body.
func (h *Handler) readRequest(w http.ResponseWriter, r *http.Request) (inquiry.Request, bool) {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if ct == "" || err != nil || (mt != "application/json" && !(strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))) {
		problem.Write(w, problem.New(http.StatusUnsupportedMediaType, problem.UnsupportedMediaType, "send application/json, not "+strconv.Quote(ct)).WithField("Content-Type"))
		return inquiry.Request{}, false
	}
	tooLarge := problem.New(http.StatusRequestEntityTooLarge, problem.BodyTooLarge, fmt.Sprintf("the body is over %d bytes", inquiry.MaxBodyBytes))
	if r.ContentLength > inquiry.MaxBodyBytes {
		problem.Write(w, tooLarge)
		return inquiry.Request{}, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, inquiry.MaxBodyBytes))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		problem.Write(w, tooLarge)
		return inquiry.Request{}, false
	}
	if err != nil {
		problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidBody, "cannot read the body: "+err.Error()))
		return inquiry.Request{}, false
	}
	req, err := inquiry.DecodeRequest(body)
	var fe *inquiry.FieldError
	switch {
	case errors.As(err, &fe):
		problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidField, fe.Error()).WithField(fe.Field))
		return inquiry.Request{}, false
	case err != nil:
		problem.Write(w, problem.New(http.StatusBadRequest, problem.InvalidJSON, err.Error()))
		return inquiry.Request{}, false
	}
	return req, true
}
