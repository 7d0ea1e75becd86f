package adminclient

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"testing"

	"github.com/cellkit/cellkit/internal/celltest"
	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/testkit"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// A call sends the token, decodes a 2xx answer tolerantly, and turns an
// error answer into an *Error with the problem's detail; a server that
// does not answer is Unreachable.
func TestCall(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"type":"x","title":"Unauthorized","detail":"a bearer token is required"}`)
			return
		}
		switch r.URL.Path {
		case "/v1/admin/status":
			io.WriteString(w, `{"cell":"c1","intake":"open","queue":{"depth":{"high":2,"normal":3}},"inflight":1,"new_field":true}`)
		case "/v1/admin/intake/close", "/v1/admin/intake/open":
			if r.Method != http.MethodPost {
				w.WriteHeader(http.StatusMethodNotAllowed)
			}
		default:
			http.Error(w, strings.Repeat("not here ", 50), http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	c := Client{HTTP: srv.Client(), Token: "s3cret"}
	st, err := c.Status(t.Context(), srv.URL+"/")
	if err != nil {
		t.Fatal(err)
	}
	if st.Cell != "c1" || !st.IntakeOpen() || st.High() != 2 || st.Normal() != 3 || st.Pending() != 6 || !st.Known() {
		t.Errorf("status %+v", st)
	}
	if err := c.SetIntakes(t.Context(), slotmap.Cell{ID: "c1", Admin: srv.URL}, false); err != nil {
		t.Errorf("SetIntakes: %v", err)
	}

	var ae *Error
	_, err = Client{HTTP: srv.Client()}.Status(t.Context(), srv.URL)
	if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized || ae.Detail != "a bearer token is required" || Unreachable(err) {
		t.Errorf("without the token: %v", err)
	}
	err = c.Call(t.Context(), http.MethodGet, srv.URL, "/nowhere", nil, nil)
	if !errors.As(err, &ae) || ae.Status != http.StatusNotFound || len(ae.Detail) > 201+len("…") || !strings.HasPrefix(ae.Detail, "not here not here") {
		t.Errorf("a plain-text error: %v", err)
	}

	dead := "http://" + testkit.FreeAddr(t)
	err = c.SetIntakes(t.Context(), slotmap.Cell{ID: "c1", Instances: []slotmap.Instance{{ID: "i1", Admin: srv.URL}, {ID: "i2", Admin: dead}}}, true)
	if !Unreachable(err) || !strings.HasPrefix(err.Error(), dead+": ") || strings.Contains(err.Error(), srv.URL) {
		t.Errorf("one instance down: %v, want only it, named", err)
	}
}

// A server that asked for a client certificate when there was none may
// refuse by closing the connection (TLS 1.3) instead of with its alert:
// the hint still comes, except for a connection never made.
func TestTLSHintWhenTheServerAskedForACertificate(t *testing.T) {
	const hint = "wants an operator's client certificate"
	closed := &net.OpError{Op: "read", Net: "tcp", Err: net.ErrClosed}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	for _, tc := range []struct {
		err       error
		certAsked bool
		want      bool
	}{
		{closed, true, true},
		{closed, false, false},
		{refused, true, false},
		{io.EOF, true, true},
	} {
		if got := strings.Contains(tlsHint(tc.err, tc.certAsked).Error(), hint); got != tc.want {
			t.Errorf("tlsHint(%v, asked %v) hints %v, want %v", tc.err, tc.certAsked, got, tc.want)
		}
	}
}

// The connections AlertDialer dials record the alert a server sends about
// the client's certificate after the handshake (TLS 1.3), and a call over
// such a connection reports that alert, with the hint, whatever error the
// transport returns (it may report its own write on the connection the
// alert closed: a race no test can force).
func TestCallReportsTheServersAlert(t *testing.T) {
	const want = "remote error: tls: bad certificate (the admin API wants an operator's client certificate: --tls-cert and --tls-key)"
	certs := celltest.DevCerts(t)
	srv := certs.OperatorOnlyAdmin(t)

	router := tlsconf.ClientFiles{CA: certs.CA(), Cert: certs.Cert(pki.RoleRouter), Key: certs.Key(pki.RoleRouter)}
	cl, err := tlsconf.NewClient(router, tlsconf.Options{What: "admin_tls"})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := AlertDialer(cl.Config(), nil)(t.Context(), "tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET /v1/admin/failed HTTP/1.1\r\nHost: c1\r\n\r\n")
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("read: the server answered a router's certificate")
	}
	ac := conn.(*alertConn)
	if a := ac.alert.Load(); a == nil || a.Error() != "remote error: tls: bad certificate" {
		t.Fatalf("alert recorded: %v", a)
	}

	c := Client{HTTP: &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		httptrace.ContextClientTrace(r.Context()).GotConn(httptrace.GotConnInfo{Conn: ac})
		return nil, net.ErrClosed
	})}}
	if err := c.Call(t.Context(), http.MethodGet, srv.URL, "/v1/admin/failed", nil, nil); err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("call: %v, want the alert and the hint", err)
	}
}

// roundTripFunc is a RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
