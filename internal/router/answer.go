package router

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/cellkit/cellkit/internal/problem"
)

// prob is a problem answer marshalled once (the request path answers
// refusals without allocating).
type prob struct {
	status     int
	body       []byte
	overloaded bool // add Cellkit-Overloaded: true (do not retry elsewhere)
}

func newProb(d problem.Details) prob {
	body, _ := json.Marshal(d)
	return prob{status: d.Status, body: append(body, '\n')}
}

func (p prob) withOverloaded() prob { p.overloaded = true; return p }

// The answers that name no cell.
var (
	probMissingKey = newProb(problem.New(http.StatusUnauthorized, "missing-api-key", "an X-API-Key header is required"))
	probUnknownKey = newProb(problem.New(http.StatusForbidden, "unknown-api-key", "the API key is not known"))
	probRateLimit  = newProb(problem.New(http.StatusTooManyRequests, "rate-limited", "the client's request rate limit is exhausted; retry after Retry-After seconds"))
	probNotFound   = newProb(problem.New(http.StatusNotFound, "not-found", "no such resource: the API is POST /v1/inquiries and GET /v1/inquiries/{id}"))
	probBadInquiry = newProb(problem.New(http.StatusNotFound, "unknown-inquiry", "no such inquiry: the id names no known cell"))
	probBadMethod  = newProb(problem.New(http.StatusMethodNotAllowed, "method-not-allowed", "the method is not allowed on this resource"))
	probBadUser    = newProb(problem.New(http.StatusBadRequest, "invalid-field",
		"the body must be a JSON object whose user_id is a string of 1-64 of [A-Za-z0-9_-]").WithField("user_id"))
	probNoCell = newProb(problem.New(http.StatusServiceUnavailable, "no-active-cell", "no cell is active in the cell map")).withOverloaded()
	probNoMap  = newProb(problem.New(http.StatusServiceUnavailable, "no-cell-map", "the router has no cell map yet"))

	probTooLarge     = newProb(problem.New(http.StatusRequestEntityTooLarge, "body-too-large", "the request body is larger than the limit"))
	probHeaderTooBig = newProb(problem.New(http.StatusRequestHeaderFieldsTooLarge, "header-too-large", "the request header is larger than the limit"))
	probReadTimeout  = newProb(problem.New(http.StatusRequestTimeout, "request-timeout", "the request was not received in time"))
	probMalformed    = newProb(problem.New(http.StatusBadRequest, "malformed-request", "the request is not valid HTTP/1.1"))
)

// cellProbs are the answers about one cell, marshalled when the cell is
// first seen.
type cellProbs struct {
	bulkhead, breaker, unavailable, timeout, misdirected prob
}

func newCellProbs(cell string) cellProbs {
	return cellProbs{
		bulkhead: newProb(problem.New(http.StatusServiceUnavailable, "overloaded",
			"cell "+cell+" has too many requests in flight; retry after Retry-After seconds, not elsewhere: the user's data lives in that cell")).withOverloaded(),
		breaker: newProb(problem.New(http.StatusServiceUnavailable, "overloaded",
			"cell "+cell+" is failing and its circuit is open; retry after Retry-After seconds, not elsewhere: the user's data lives in that cell")).withOverloaded(),
		unavailable: newProb(problem.New(http.StatusServiceUnavailable, "cell-unavailable",
			"cell "+cell+" cannot be reached; retry after Retry-After seconds, not elsewhere: the user's data lives in that cell")).withOverloaded(),
		timeout: newProb(problem.New(http.StatusGatewayTimeout, "cell-timeout",
			"cell "+cell+" did not answer in time; the request may or may not have been taken (retry with the same Idempotency-Key)")),
		misdirected: newProb(problem.New(http.StatusServiceUnavailable, "map-moving",
			"cell "+cell+" no longer owns the user's slot and the router has no newer cell map yet; retry after Retry-After seconds")).withOverloaded(),
	}
}

var (
	hdrRetryAfter = []byte("Retry-After")
	hdrOverloaded = []byte("Cellkit-Overloaded")
	hdrNosniff    = []byte("X-Content-Type-Options")
	valTrue       = []byte("true")
	valNosniff    = []byte("nosniff")
	ctProblem     = []byte("application/problem+json")
)

// write replaces whatever response was started with p, as problem.Write
// does for net/http: the same headers and body.
func (p prob) write(resp *fasthttp.Response) {
	resp.Reset()
	resp.SetStatusCode(p.status)
	resp.Header.SetContentTypeBytes(ctProblem)
	resp.Header.SetBytesKV(hdrNosniff, valNosniff)
	if p.overloaded {
		resp.Header.SetBytesKV(hdrOverloaded, valTrue)
	}
	resp.SetBodyRaw(p.body)
}

// writeRetry is write with Retry-After in whole seconds, at least 1, as
// problem.WriteRetry does.
func (p prob) writeRetry(resp *fasthttp.Response, after time.Duration) {
	p.write(resp)
	secs := int64((after + time.Second - 1) / time.Second)
	var b [20]byte
	resp.Header.SetBytesKV(hdrRetryAfter, strconv.AppendInt(b[:0], max(secs, 1), 10))
}

// serverError answers a request fasthttp could not read.
func serverError(ctx *fasthttp.RequestCtx, err error) prob {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return probTooLarge
	case errors.As(err, &small):
		return probHeaderTooBig
	case errors.Is(err, fasthttp.ErrTimeout), errors.As(err, &ne) && ne.Timeout():
		return probReadTimeout
	}
	return probMalformed
}
