package router

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/h1"
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
	probMissingKey = newProb(problem.New(http.StatusUnauthorized, problem.MissingAPIKey, "an X-API-Key header is required"))
	probUnknownKey = newProb(problem.New(http.StatusForbidden, problem.UnknownAPIKey, "the API key is not known"))
	probRateLimit  = newProb(problem.New(http.StatusTooManyRequests, problem.RateLimited, "the client's request rate limit is exhausted; retry after Retry-After seconds"))
	probNotFound   = newProb(problem.New(http.StatusNotFound, problem.NotFound, "no such resource: the API is POST "+api.PathInquiries+" and GET "+api.PathInquiries+"/{id}"))
	probBadInquiry = newProb(problem.New(http.StatusNotFound, problem.UnknownInquiry, "no such inquiry: the id names no known cell"))
	probBadMethod  = newProb(problem.New(http.StatusMethodNotAllowed, problem.MethodNotAllowed, "the method is not allowed on this resource"))
	probBadUser    = newProb(problem.New(http.StatusBadRequest, problem.InvalidField,
		"the body must be a JSON object whose user_id is a string of 1-64 of [A-Za-z0-9_-]").WithField("user_id"))
	probNoCell = newProb(problem.New(http.StatusServiceUnavailable, problem.NoActiveCell, "no cell is active in the cell map")).withOverloaded()
	probNoMap  = newProb(problem.New(http.StatusServiceUnavailable, problem.NoCellMap, "the router has no cell map yet"))

	probTooLarge     = newProb(problem.New(http.StatusRequestEntityTooLarge, problem.BodyTooLarge, "the request body is larger than the limit"))
	probHeaderTooBig = newProb(problem.New(http.StatusRequestHeaderFieldsTooLarge, problem.HeaderTooLarge, "the request header is larger than the limit"))
	probReadTimeout  = newProb(problem.New(http.StatusRequestTimeout, problem.RequestTimeout, "the request was not received in time"))
	probMalformed    = newProb(problem.New(http.StatusBadRequest, problem.MalformedRequest, "the request is not valid HTTP/1.1"))
	probBadHost      = newProb(problem.New(http.StatusBadRequest, problem.InvalidHost, "an HTTP/1.1 request needs one valid Host header").WithField("Host"))
	probExpectation  = newProb(problem.New(http.StatusExpectationFailed, problem.ExpectationFailed, "the only expectation the router meets is 100-continue").WithField("Expect"))
)

// cellProbs are the answers about one cell, marshalled when the cell is
// first seen.
type cellProbs struct {
	bulkhead, breaker, unavailable, short, down, timeout, misdirected prob
}

func newCellProbs(cell string) cellProbs {
	return cellProbs{
		bulkhead: newProb(problem.New(http.StatusServiceUnavailable, problem.Overloaded,
			"cell "+cell+" has too many requests in flight; retry after Retry-After seconds, not elsewhere: the user's data lives in that cell")).withOverloaded(),
		breaker: newProb(problem.New(http.StatusServiceUnavailable, problem.Overloaded,
			"cell "+cell+" is failing and its circuit is open; retry after Retry-After seconds, not elsewhere: the user's data lives in that cell")).withOverloaded(),
		unavailable: newProb(problem.New(http.StatusServiceUnavailable, problem.CellUnavailable,
			"cell "+cell+" cannot be reached; retry after Retry-After seconds, not elsewhere: the user's data lives in that cell")).withOverloaded(),
		short: newProb(problem.New(http.StatusServiceUnavailable, problem.CellUnavailable,
			"the router is short of files or memory to reach cell "+cell+"; retry after Retry-After seconds")),
		down: newProb(problem.New(http.StatusServiceUnavailable, problem.CellUnavailable,
			"cell "+cell+" does not answer the router's health checks; retry after Retry-After seconds, not elsewhere: the user's data lives in that cell")).withOverloaded(),
		timeout: newProb(problem.New(http.StatusGatewayTimeout, problem.CellTimeout,
			"cell "+cell+" did not answer in time; the request may or may not have been taken (retry with the same Idempotency-Key)")),
		misdirected: newProb(problem.New(http.StatusServiceUnavailable, problem.MapMoving,
			"cell "+cell+" no longer owns the user's slot and the router has no newer cell map yet; retry after Retry-After seconds")).withOverloaded(),
	}
}

var (
	hdrRetryAfter = []byte("Retry-After")
	hdrOverloaded = []byte(api.HeaderOverloaded)
	hdrNosniff    = []byte("X-Content-Type-Options")
	valTrue       = []byte("true")
	valNosniff    = []byte("nosniff")
	ctProblem     = []byte("application/problem+json")
)

// statusLines are "HTTP/1.1 <code> <reason>\r\n" for every code.
var statusLines = func() (l [600][]byte) {
	for code := 100; code < len(l); code++ {
		text := http.StatusText(code)
		if text == "" {
			text = "Status " + strconv.Itoa(code)
		}
		l[code] = []byte("HTTP/1.1 " + strconv.Itoa(code) + " " + text + "\r\n")
	}
	return l
}()

func appendStatus(b []byte, code int) []byte {
	if code >= 100 && code < len(statusLines) {
		return append(b, statusLines[code]...)
	}
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	return append(b, " Status\r\n"...)
}

func appendHeader(b, name, value []byte) []byte {
	b = append(b, name...)
	b = append(b, ':', ' ')
	b = append(b, value...)
	return append(b, '\r', '\n')
}

func appendHeaderInt(b, name []byte, v int64) []byte {
	b = append(b, name...)
	b = append(b, ':', ' ')
	b = strconv.AppendInt(b, v, 10)
	return append(b, '\r', '\n')
}

var (
	hdrContentType   = []byte("Content-Type")
	hdrContentLength = []byte("Content-Length")
	hdrDate          = []byte("Date")
	hdrConnection    = []byte("Connection")
	valClose         = []byte("close")
	valKeepAlive     = []byte("keep-alive")
)

// problemAnswer is p as a whole answer to cl's request, as problem.Write
// and problem.WriteRetry make it for net/http (Retry-After in whole
// seconds, at least 1, when retry > 0), with the headers every answer
// carries.
func (lp *loop) problemAnswer(b []byte, cl *client, p *prob, retry time.Duration, allow []byte) []byte {
	b = appendStatus(b, p.status)
	b = appendHeader(b, hdrContentType, ctProblem)
	b = appendHeader(b, hdrNosniff, valNosniff)
	if p.overloaded {
		b = appendHeader(b, hdrOverloaded, valTrue)
	}
	if retry > 0 {
		b = appendHeaderInt(b, hdrRetryAfter, wholeSeconds(retry))
	}
	if allow != nil {
		b = appendHeader(b, hdrAllow, allow)
	}
	b = lp.common(b, cl, int64(len(p.body)), true)
	if string(cl.head.Method) != "HEAD" {
		b = append(b, p.body...)
	}
	return b
}

// wholeSeconds is d as the delay-seconds of Retry-After and
// X-RateLimit-Reset: rounded up, at least 1.
func wholeSeconds(d time.Duration) int64 {
	return max(int64((d+time.Second-1)/time.Second), 1)
}

// proxyAnswer is a cell's answer to cl's request: its status and header
// fields but the hop-by-hop ones and those the router sets, then the
// router's, then the body.
func (lp *loop) proxyAnswer(b []byte, cl *client, resp *h1.Response, body []byte) []byte {
	b = appendStatus(b, resp.Status)
	hasDate := false
	for i := range resp.Fields {
		f := &resp.Fields[i]
		if nameIn(f.Name, skippedInAnswer) {
			continue
		}
		if !hasDate && h1.EqualFold(f.Name, "date") {
			hasDate = true
		}
		b = appendHeader(b, f.Name, f.Value)
	}
	n := int64(len(body))
	if string(cl.head.Method) == "HEAD" {
		n = resp.ContentLength
		body = nil
	}
	if resp.Status == 204 || resp.Status == 304 || resp.Status < 200 {
		n, body = -1, nil
	}
	b = lp.common(b, cl, n, !hasDate)
	return append(b, body...)
}

// skippedInAnswer are a cell's header fields that stay out of the answer
// to the client: hop-by-hop fields, the framing (the router sets its own),
// and the fields the router owns.
var skippedInAnswer = []string{
	"connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization",
	"te", "trailer", "upgrade", "transfer-encoding", "content-length",
	"x-request-id", "cellkit-cell", "cellkit-call", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset",
}

var hdrRLReset = []byte("X-RateLimit-Reset")

// common appends the fields every answer carries and ends the head:
// X-Request-Id, the client's rate limit, the cell, the length (n < 0:
// none), Date, and Connection when it differs from the default.
//
// The rate-limit fields describe one quota, the client's token bucket:
// X-RateLimit-Limit its capacity (the burst: the most requests at once),
// X-RateLimit-Remaining the whole tokens left after this request (0 to
// the limit), X-RateLimit-Reset the seconds until the bucket is full
// again, or, with none left, until the next token, the same moment as a
// 429's Retry-After (apikey.Verdict).
func (lp *loop) common(b []byte, cl *client, n int64, date bool) []byte {
	ex := &cl.ex
	b = appendHeader(b, hdrRequestID, ex.rid)
	if ex.client != nil {
		b = appendHeader(b, hdrRLLimit, ex.client.LimitText())
		b = appendHeaderInt(b, hdrRLRemain, int64(ex.v.Remaining))
		b = appendHeaderInt(b, hdrRLReset, wholeSeconds(ex.v.Reset))
	}
	if ex.cell != "" {
		b = append(b, hdrCell...)
		b = append(b, ':', ' ')
		b = append(b, ex.cell...)
		b = append(b, '\r', '\n')
	}
	if n >= 0 {
		b = appendHeaderInt(b, hdrContentLength, n)
	}
	if date {
		if d := lp.e.date.Load(); d != nil {
			b = appendHeader(b, hdrDate, *d)
		}
	}
	switch {
	case cl.close || lp.drainCloses(cl):
		cl.close = true // done closes it after this answer
		b = appendHeader(b, hdrConnection, valClose)
	case cl.head.KeepAlive10:
		b = appendHeader(b, hdrConnection, valKeepAlive)
	}
	return append(b, '\r', '\n')
}

// answerUnread writes p as the answer to a request that was not read
// whole, saying the connection closes after it.
func (lp *loop) answerUnread(cl *client, p *prob) {
	cl.t.stop()
	cl.ex = exchange{cm: lp.e.r.noCell}
	cl.ex.rid = lp.e.r.newRequestID(&cl.ex.ridBuf)
	cl.close = true
	lp.out = lp.problemAnswer(lp.out[:0], cl, p, 0, nil)
	_, _ = cl.c.Write(lp.out)
	lp.e.r.noCell.answered(p.status, 0)
}

// continue100 says 100 Continue to an HTTP/1.1 client that waits for it
// before sending its body (an HTTP/1.0 client never gets one: RFC 9110
// §10.1.1).
func (lp *loop) continue100(cl *client) {
	if cl.head.ExpectContinue && cl.head.Minor == 1 && !cl.sent100 {
		cl.sent100 = true
		_, _ = cl.c.Write(continue100)
	}
}

var continue100 = []byte("HTTP/1.1 100 Continue\r\n\r\n")
