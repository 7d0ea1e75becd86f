package cellctl

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cellkit/cellkit/internal/tlsconf"
)

// adminCallTimeout bounds one call to an admin API, within the command's own
// deadline: a hung cell must not hold up a status of every cell.
const adminCallTimeout = 5 * time.Second

// maxAdminBody caps what cellctl reads from an admin API.
const maxAdminBody = 8 << 20

// adminClient talks to a cell's (or a router's) admin API.
type adminClient struct {
	http  *http.Client
	token string // bearer token, "" for none
	// certAsked is set when a server asked for a client certificate and
	// there was none to give (--tls-cert not set); nil without TLS.
	certAsked *atomic.Bool
}

func (x *inv) admin() adminClient {
	return adminClient{http: x.adminHTTP, token: x.adminToken, certAsked: x.certAsked}
}

// setupAdmin reads the admin APIs' token and TLS files (for every
// command, so that a bad file is one line before anything is done) and
// returns what closes the connections left idle.
func (x *inv) setupAdmin() (func(), error) {
	tok, err := x.token()
	if err != nil {
		return nil, err
	}
	x.adminToken, x.adminHTTP = tok, x.cli.httpClient()
	if !x.g.tls.Enabled() {
		return func() {}, nil
	}
	cl, err := tlsconf.NewClient(x.g.tls, tlsconf.Options{What: "admin_tls"})
	if err != nil {
		return nil, fmt.Errorf("admin APIs' TLS: %w", err)
	}
	hc := *x.adminHTTP
	tr, ok := hc.Transport.(*http.Transport)
	if !ok || tr == nil {
		tr = http.DefaultTransport.(*http.Transport)
	}
	tr = tr.Clone()
	tr.TLSClientConfig = cl.Config().Clone()
	if tr.TLSClientConfig.GetClientCertificate == nil {
		// No certificate to give: note that a server asked for one, since
		// under TLS 1.3 its refusal may reach us as a closed connection
		// rather than as its alert.
		x.certAsked = new(atomic.Bool)
		tr.TLSClientConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			x.certAsked.Store(true)
			return &tls.Certificate{}, nil
		}
	}
	// Dial TLS here, so that each connection keeps the alert its server
	// sent: under TLS 1.3 a server refuses a client certificate after the
	// client's handshake is over, and the transport may then report its
	// own write on the connection closed by its read of that alert.
	tr.ForceAttemptHTTP2 = false
	tr.DialTLSContext = alertDialer(tr.TLSClientConfig.Clone(), tr.DialContext)
	hc.Transport = tr
	x.adminHTTP = &hc
	return tr.CloseIdleConnections, nil
}

// alertDialer dials TLS connections that remember their server's alert
// (*alertConn), over dial (nil: a net.Dialer).
func alertDialer(cfg *tls.Config, dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if dial == nil {
		dial = (&net.Dialer{Timeout: adminCallTimeout}).DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c := cfg
		if c.ServerName == "" {
			c = c.Clone()
			c.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(raw, c)
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return &alertConn{Conn: tc}, nil
	}
}

// alertConn is a TLS connection that remembers the alert its server sent.
type alertConn struct {
	*tls.Conn
	alert atomic.Pointer[net.OpError]
}

func (c *alertConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	var oerr *net.OpError
	if err != nil && errors.As(err, &oerr) && oerr.Op == "remote error" {
		c.alert.CompareAndSwap(nil, oerr)
	}
	return n, err
}

// serverAlert is the alert the server of a request's connection sent, if
// any: trace it into ctx, and after the request, call the function.
func serverAlert(ctx context.Context) (context.Context, func() error) {
	var conn atomic.Pointer[alertConn]
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if ac, ok := info.Conn.(*alertConn); ok {
			conn.Store(ac)
		}
	}})
	return ctx, func() error {
		if ac := conn.Load(); ac != nil {
			if a := ac.alert.Load(); a != nil {
				return a
			}
		}
		return nil
	}
}

// token is --admin-token, or what --admin-token-file holds. When both are
// set, the one on the command line wins over the environment's
// (CELLKIT_ADMIN_TOKEN is often set in an operator's shell); both from the
// same place are a usage error.
func (x *inv) token() (string, error) {
	tok, file := x.g.adminToken, x.g.adminTokenFile
	if tok != "" && file != "" {
		switch tokGiven, fileGiven := x.given["admin-token"], x.given["admin-token-file"]; {
		case tokGiven && !fileGiven:
			file = ""
		case fileGiven && !tokGiven:
		default:
			return "", usagef("give --admin-token or --admin-token-file, not both")
		}
	}
	if file == "" {
		return tok, nil
	}
	return readToken(file)
}

// readToken reads a bearer token file: its content without surrounding
// white space, which must not be empty.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("admin token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("admin token file %s is empty", path)
	}
	if strings.ContainsAny(tok, "\r\n") {
		return "", fmt.Errorf("admin token file %s holds more than one line", path)
	}
	return tok, nil
}

// AdminError is a failed admin call: unreachable (Status 0) or an error
// answer, with the problem detail the server gave.
type AdminError struct {
	URL    string
	Status int
	Detail string
	Err    error
}

func (e *AdminError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("%s unreachable: %v", e.URL, e.Err)
	}
	if e.Detail != "" {
		return fmt.Sprintf("%s answered %d %s: %s", e.URL, e.Status, http.StatusText(e.Status), e.Detail)
	}
	return fmt.Sprintf("%s answered %d %s", e.URL, e.Status, http.StatusText(e.Status))
}

func (e *AdminError) Unwrap() error { return e.Err }

// unreachable reports whether err means the admin API did not answer at all.
func unreachable(err error) bool {
	var ae *AdminError
	return errors.As(err, &ae) && ae.Status == 0
}

// call sends one request to base+path and decodes a 2xx JSON answer into
// out (unknown fields ignored), or returns an *AdminError.
func (c adminClient) call(ctx context.Context, method, base, path string, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, adminCallTimeout)
	defer cancel()
	target := strings.TrimRight(base, "/") + path
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(data)
	}
	ctx, alert := serverAlert(ctx)
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return &AdminError{URL: target, Err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		if a := alert(); a != nil {
			// The server's refusal, whatever the transport saw after it.
			err = a
		}
		return &AdminError{URL: target, Err: tlsHint(err, c.certAsked != nil && c.certAsked.Load())}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAdminBody))
	if err != nil {
		return &AdminError{URL: target, Err: fmt.Errorf("read answer: %w", err)}
	}
	if resp.StatusCode/100 != 2 {
		return &AdminError{URL: target, Status: resp.StatusCode, Detail: problemDetail(data)}
	}
	if out == nil || len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return &AdminError{URL: target, Status: resp.StatusCode, Detail: "answer is not the JSON expected: " + err.Error()}
	}
	return nil
}

// tlsHint adds to a failed TLS handshake the flag that would fix it.
func tlsHint(err error, certAsked bool) error {
	var verr *tls.CertificateVerificationError
	var oerr *net.OpError
	switch {
	case errors.As(err, &verr):
		return fmt.Errorf("%w (--tls-ca names the CA of the admin APIs' certificates)", err)
	case certAsked && !(errors.As(err, &oerr) && oerr.Op == "dial"),
		errors.As(err, &oerr) && oerr.Op == "remote error" && strings.Contains(oerr.Err.Error(), "certificate"):
		// The server's alert about the client's certificate (required,
		// bad: another role, unknown CA), or, past the dial, a server that
		// asked for one when there was none to give.
		return fmt.Errorf("%w (the admin API wants an operator's client certificate: --tls-cert and --tls-key)", err)
	}
	return err
}

// problemDetail extracts the detail of an RFC 9457 problem body, or the
// start of a plain-text body.
func problemDetail(data []byte) string {
	var p struct {
		Title  string `json:"title"`
		Detail string `json:"detail"`
	}
	if json.Unmarshal(data, &p) == nil && (p.Detail != "" || p.Title != "") {
		if p.Detail != "" {
			return p.Detail
		}
		return p.Title
	}
	s := strings.Join(strings.Fields(string(data)), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// CellStatus is the answer of GET /v1/admin/status (internal/cell's Status).
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

// StoreText is the STORE column of cellctl status: the share of the
// store's filesystem in use, and whether it refuses new inquiries ("-":
// the cell's NATS is not embedded).
func (s *CellStatus) StoreText() string {
	switch st := s.Store; {
	case st == nil:
		return "-"
	case st.Failed != "":
		return fmt.Sprintf("%.0f%% FAILED", 100*st.Used)
	case st.Refusing:
		return fmt.Sprintf("%.0f%% FULL", 100*st.Used)
	default:
		return fmt.Sprintf("%.0f%%", 100*st.Used)
	}
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
	for _, k := range sortedKeys(s.Checks) {
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

func (c adminClient) status(ctx context.Context, base string) (*CellStatus, error) {
	var s CellStatus
	if err := c.call(ctx, http.MethodGet, base, "/v1/admin/status", nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// setIntake opens or closes the cell's intake.
func (c adminClient) setIntake(ctx context.Context, base string, open bool) error {
	action := "close"
	if open {
		action = "open"
	}
	return c.call(ctx, http.MethodPost, base, "/v1/admin/intake/"+action, nil, nil)
}

// circuit forces an agency breaker open or closed, or resets it; the answer
// (the breaker's state afterwards) is returned as decoded JSON.
func (c adminClient) circuit(ctx context.Context, base, agency, action string) (map[string]any, error) {
	var out map[string]any
	err := c.call(ctx, http.MethodPost, base, "/v1/admin/circuit/"+url.PathEscape(agency)+"/"+action, nil, &out)
	return out, err
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

// failed lists the cell's failed inquiries, up to limit.
func (c adminClient) failed(ctx context.Context, base string, limit int) ([]FailedInquiry, error) {
	var out struct {
		Failed []FailedInquiry `json:"failed"`
	}
	path := "/v1/admin/failed"
	if limit > 0 {
		path += "?limit=" + strconv.Itoa(limit)
	}
	if err := c.call(ctx, http.MethodGet, base, path, nil, &out); err != nil {
		return nil, err
	}
	return out.Failed, nil
}

// RetryResult is the answer of POST /v1/admin/failed/retry.
type RetryResult struct {
	Retried []string          `json:"retried"`
	Skipped map[string]string `json:"skipped,omitempty"` // id → why
}

func (c adminClient) retry(ctx context.Context, base string, ids []string, all bool) (*RetryResult, error) {
	body := map[string]any{}
	if all {
		body["all"] = true
	} else {
		body["ids"] = ids
	}
	var out RetryResult
	if err := c.call(ctx, http.MethodPost, base, "/v1/admin/failed/retry", body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
