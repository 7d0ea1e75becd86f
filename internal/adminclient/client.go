// Package adminclient talks to the admin APIs of cells and routers: one
// call bounded in time and size, a bearer token, the answer decoded
// tolerantly (unknown fields ignored), an error that says whether the API
// answered and what its problem body said, and, over TLS, the alert a
// server sent about the client's certificate.
package adminclient

import (
	"bytes"
	"cmp"
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
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// CallTimeout bounds one call to an admin API, within the caller's own
// deadline: a hung cell must not hold up a status of every cell.
const CallTimeout = 5 * time.Second

// EnvToken is the environment variable holding the admin APIs' bearer
// token for the tools that call them (cellctl, the Terraform provider).
const EnvToken = "CELLKIT_ADMIN_TOKEN"

// MaxBody caps what is read of an admin API's answer.
const MaxBody = 8 << 20

// Client talks to cells' and routers' admin APIs. The zero value is not
// usable: HTTP must be set.
type Client struct {
	HTTP  *http.Client
	Token string // bearer token, "" for none
	// CertAsked is set when a server asked for a client certificate and
	// there was none to give (no --tls-cert); nil without TLS.
	CertAsked *atomic.Bool
	// Timeout bounds one call [CallTimeout]: longer for the steps of a
	// move, which read a slot set's whole ledger.
	Timeout time.Duration
}

// ReadToken reads a client's bearer token file: its content without
// surrounding white space, one line, not empty.
func ReadToken(path string) (string, error) {
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

// WithTLS is c speaking TLS with cfg: a copy of its HTTP client over a
// clone of its transport (or of the default one) that dials with
// AlertDialer, so that each connection keeps the alert its server sent
// (under TLS 1.3 a server refuses a client certificate after the client's
// handshake is over, and the transport may then report its own write on
// the connection closed by its read of that alert), HTTP/1.1 only. When
// cfg has no certificate to give, CertAsked notes that a server asked
// for one, since its refusal may reach us as a closed connection rather
// than as its alert. c.HTTP's CloseIdleConnections closes what it leaves
// open.
func (c Client) WithTLS(cfg *tls.Config) Client {
	hc := *c.HTTP
	tr, ok := hc.Transport.(*http.Transport)
	if !ok || tr == nil {
		tr = http.DefaultTransport.(*http.Transport)
	}
	tr = tr.Clone()
	tr.TLSClientConfig = cfg.Clone()
	if tr.TLSClientConfig.GetClientCertificate == nil && len(tr.TLSClientConfig.Certificates) == 0 {
		asked := new(atomic.Bool)
		c.CertAsked = asked
		tr.TLSClientConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			asked.Store(true)
			return &tls.Certificate{}, nil
		}
	}
	tr.ForceAttemptHTTP2 = false
	tr.DialTLSContext = AlertDialer(tr.TLSClientConfig.Clone(), tr.DialContext)
	hc.Transport = tr
	c.HTTP = &hc
	return c
}

// AlertDialer dials TLS connections that remember their server's alert
// (*alertConn), over dial (nil: a net.Dialer).
func AlertDialer(cfg *tls.Config, dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if dial == nil {
		dial = (&net.Dialer{Timeout: CallTimeout}).DialContext
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

// Error is a failed admin call: unreachable (Status 0) or an error
// answer, with the problem detail the server gave.
type Error struct {
	URL    string
	Status int
	Detail string
	Err    error
}

func (e *Error) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("%s unreachable: %v", e.URL, e.Err)
	}
	if e.Detail != "" {
		return fmt.Sprintf("%s answered %d %s: %s", e.URL, e.Status, http.StatusText(e.Status), e.Detail)
	}
	return fmt.Sprintf("%s answered %d %s", e.URL, e.Status, http.StatusText(e.Status))
}

func (e *Error) Unwrap() error { return e.Err }

// Unreachable reports whether err means the admin API did not answer at all.
func Unreachable(err error) bool {
	var ae *Error
	return errors.As(err, &ae) && ae.Status == 0
}

// Call sends one request to base+path and decodes a 2xx JSON answer into
// out (unknown fields ignored), or returns an *Error.
func (c Client) Call(ctx context.Context, method, base, path string, body, out any) error {
	data, target, status, err := c.fetch(ctx, method, base, path, body, "application/json")
	if err != nil {
		return err
	}
	if out == nil || len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return &Error{URL: target, Status: status, Detail: "answer is not the JSON expected: " + err.Error()}
	}
	return nil
}

// Metrics reads a process's /metrics (Prometheus's text format).
func (c Client) Metrics(ctx context.Context, base string) (map[string]*dto.MetricFamily, error) {
	data, target, status, err := c.fetch(ctx, http.MethodGet, base, "/metrics", nil, "text/plain")
	if err != nil {
		return nil, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(data))
	if err != nil {
		return nil, &Error{URL: target, Status: status, Detail: "answer is not Prometheus's text format: " + err.Error()}
	}
	return mfs, nil
}

// fetch sends one request to base+path and returns a 2xx answer's body
// and its status, or an *Error (also for a body over MaxBody).
func (c Client) fetch(ctx context.Context, method, base, path string, body any, accept string) ([]byte, string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(c.Timeout, CallTimeout))
	defer cancel()
	target := strings.TrimRight(base, "/") + path
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, target, 0, err
		}
		rd = bytes.NewReader(data)
	}
	ctx, alert := serverAlert(ctx)
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, target, 0, &Error{URL: target, Err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", accept)
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		if a := alert(); a != nil {
			// The server's refusal, whatever the transport saw after it.
			err = a
		}
		return nil, target, 0, &Error{URL: target, Err: tlsHint(err, c.CertAsked != nil && c.CertAsked.Load())}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody+1))
	if err != nil {
		return nil, target, 0, &Error{URL: target, Err: fmt.Errorf("read answer: %w", err)}
	}
	if len(data) > MaxBody {
		// Cut short, the end of a scrape would still parse: its last
		// value read as another number, its last series missing.
		return nil, target, resp.StatusCode, &Error{URL: target, Status: resp.StatusCode, Detail: fmt.Sprintf("the answer is over %d bytes: not read", MaxBody)}
	}
	if resp.StatusCode/100 != 2 {
		return nil, target, 0, &Error{URL: target, Status: resp.StatusCode, Detail: problemDetail(data)}
	}
	return data, target, resp.StatusCode, nil
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

// Status is a cell's GET /v1/admin/status.
func (c Client) Status(ctx context.Context, base string) (*api.CellStatus, error) {
	var s api.CellStatus
	if err := c.Call(ctx, http.MethodGet, base, api.PathCellStatus, nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// RouterReadiness is a router's GET /readyz when it is ready; one that is
// not answers 503, an *Error whose Detail says why.
func (c Client) RouterReadiness(ctx context.Context, base string) (*api.RouterReadiness, error) {
	var r api.RouterReadiness
	if err := c.Call(ctx, http.MethodGet, base, "/readyz", nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// SetIntake opens or closes the cell's intake.
func (c Client) SetIntake(ctx context.Context, base string, open bool) error {
	action := "close"
	if open {
		action = "open"
	}
	return c.Call(ctx, http.MethodPost, base, api.PathCellIntake+action, nil, nil)
}

// Circuit forces an agency breaker open or closed, or resets it; the answer
// (the breaker's state afterwards) is returned as decoded JSON.
func (c Client) Circuit(ctx context.Context, base, agency, action string) (map[string]any, error) {
	var out map[string]any
	err := c.Call(ctx, http.MethodPost, base, api.PathCellCircuit+url.PathEscape(agency)+"/"+action, nil, &out)
	return out, err
}

// Failed lists the cell's failed inquiries, up to limit.
func (c Client) Failed(ctx context.Context, base string, limit int) ([]api.FailedInquiry, error) {
	var out struct {
		Failed []api.FailedInquiry `json:"failed"`
	}
	path := api.PathCellFailed
	if limit > 0 {
		path += "?limit=" + strconv.Itoa(limit)
	}
	if err := c.Call(ctx, http.MethodGet, base, path, nil, &out); err != nil {
		return nil, err
	}
	return out.Failed, nil
}

// Retry asks a cell to retry failed inquiries: ids, or all of them.
func (c Client) Retry(ctx context.Context, base string, ids []string, all bool) (*api.RetryResult, error) {
	body := map[string]any{}
	if all {
		body["all"] = true
	} else {
		body["ids"] = ids
	}
	var out api.RetryResult
	if err := c.Call(ctx, http.MethodPost, base, api.PathCellFailedRetry, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SwitchToLedger switches the cell's intake to the ledger (once, never
// undone); the answer is its layout afterwards.
func (c Client) SwitchToLedger(ctx context.Context, base string) (*api.LayoutStatus, error) {
	var out api.LayoutStatus
	if err := c.Call(ctx, http.MethodPost, base, api.PathCellLedger, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Layouts reads how cell keeps its inquiries from every process of it:
// since is when its intake writes the ledger from (zero: not switched,
// as far as the processes that answered say), and unaware names the
// processes whose release does not know the ledger. A process that does
// not answer is an error: nothing can be said of it.
func (c Client) Layouts(ctx context.Context, cell slotmap.Cell) (since time.Time, unaware []string, err error) {
	for _, a := range cell.Admins() {
		st, err := c.Status(ctx, a)
		if err != nil {
			return time.Time{}, nil, fmt.Errorf("%s: %w", a, err)
		}
		switch l := st.Layout; {
		case l == nil || !slices.Contains(l.Knows, api.LayoutLedger):
			unaware = append(unaware, cmp.Or(st.Instance, st.Cell))
		case l.LedgerSince != nil:
			since = *l.LedgerSince
		}
	}
	return since, unaware, nil
}

// SetIntakes opens or closes the intake of every process of cell (its
// instances', or its own): the errors of those that failed, joined, each
// named by its admin URL when the cell has instances.
func (c Client) SetIntakes(ctx context.Context, cell slotmap.Cell, open bool) error {
	var errs []error
	for _, a := range cell.Admins() {
		if err := c.SetIntake(ctx, a, open); err != nil {
			if len(cell.Instances) > 0 {
				err = fmt.Errorf("%s: %w", a, err)
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// The steps of a cell's part in a move (internal/cell's admin API of
// moves; docs/decisions/moving-users-data.md).

// PutMove records a cell's part in a move (or its fence) and returns the
// cell's record.
func (c Client) PutMove(ctx context.Context, base string, cm api.CellMove) (*api.CellMove, error) {
	var out api.CellMove
	if err := c.Call(ctx, http.MethodPut, base, api.PathCellMoves+cm.Spec.ID, cm, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Move reads a cell's record of move id, with the attempts of its users
// the process that answered has under way.
func (c Client) Move(ctx context.Context, base, id string) (*api.CellMove, error) {
	var out api.CellMove
	if err := c.Call(ctx, http.MethodGet, base, api.PathCellMoves+id, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteMove forgets a cell's part in move id.
func (c Client) DeleteMove(ctx context.Context, base, id string) error {
	return c.Call(ctx, http.MethodDelete, base, api.PathCellMoves+id, nil, nil)
}

// ExportMove reads a page of a source's messages of move id after
// MoveSize asks the cell at base what spec would carry out of it.
func (c Client) MoveSize(ctx context.Context, base string, spec api.MoveSpec) (*api.MoveSize, error) {
	var out api.MoveSize
	if err := c.Call(ctx, http.MethodPost, base, api.PathCellMoveSize, spec, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// sequence after, in slots (nil: all the move's).
func (c Client) ExportMove(ctx context.Context, base, id string, after uint64, limit int, slots []int) (*api.MovePage, error) {
	q := url.Values{"after": {strconv.FormatUint(after, 10)}, "limit": {strconv.Itoa(limit)}}
	if slots != nil {
		parts := make([]string, len(slots))
		for i, s := range slots {
			parts[i] = strconv.Itoa(s)
		}
		q.Set("slots", strings.Join(parts, ","))
	}
	var out api.MovePage
	if err := c.Call(ctx, http.MethodGet, base, api.PathCellMoves+id+"/"+api.MoveExport+"?"+q.Encode(), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ImportMove writes a page into a destination.
func (c Client) ImportMove(ctx context.Context, base, id string, page *api.MovePage) error {
	return c.Call(ctx, http.MethodPost, base, api.PathCellMoves+id+"/"+api.MoveImport, page, nil)
}

// DigestMove reads a cell's digest of move id's users' messages written
// after horizon.
func (c Client) DigestMove(ctx context.Context, base, id string, horizon time.Time) (*api.MoveDigest, error) {
	var out api.MoveDigest
	q := url.Values{"horizon": {horizon.UTC().Format(time.RFC3339Nano)}}
	if err := c.Call(ctx, http.MethodGet, base, api.PathCellMoves+id+"/"+api.MoveDigestOf+"?"+q.Encode(), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// MoveStep runs one of a move's steps that answer a count (hand,
// activate) or nothing (discard, with slots: only those).
func (c Client) MoveStep(ctx context.Context, base, id, action string, slots []int) (int, error) {
	var out map[string]any
	var body any
	if action == api.MoveDiscard {
		body = map[string][]int{"slots": slots}
	}
	if err := c.Call(ctx, http.MethodPost, base, api.PathCellMoves+id+"/"+action, body, &out); err != nil {
		return 0, err
	}
	n, _ := out[map[string]string{api.MoveHand: "handed", api.MoveActivate: "activated"}[action]].(float64)
	return int(n), nil
}
