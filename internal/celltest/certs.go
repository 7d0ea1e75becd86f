package celltest

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

// Certs are a test's certificate files, made by pki.WriteDev in a
// temporary directory: a CA and a certificate per role, valid for
// localhost, 127.0.0.1 and ::1.
type Certs struct {
	Dir string
}

// DevCerts writes a fresh CA and role certificates for the test.
func DevCerts(t testing.TB) Certs {
	t.Helper()
	dir := t.TempDir()
	if err := pki.WriteDev(dir, []string{"localhost", "127.0.0.1", "::1"}); err != nil {
		t.Fatal(err)
	}
	return Certs{Dir: dir}
}

// CA is the CA certificate's file.
func (c Certs) CA() string { return filepath.Join(c.Dir, pki.DevCA) }

// Cert and Key are the files of role's certificate.
func (c Certs) Cert(role string) string { return filepath.Join(c.Dir, role+".pem") }

// Key is the key file of role's certificate.
func (c Certs) Key(role string) string { return filepath.Join(c.Dir, role+"-key.pem") }

// CAObject loads the CA with its key, to issue more certificates (expired,
// from another role).
func (c Certs) CAObject(t testing.TB) *pki.CA {
	t.Helper()
	ca, err := pki.LoadCA(c.CA(), filepath.Join(c.Dir, pki.DevCAKey))
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// OperatorOnlyAdmin is an HTTPS server with the cell's certificate that
// takes only operators' client certificates (as a cell's admin API does)
// and answers every request with an empty list of failed inquiries; its
// TLS errors are not logged.
func (c Certs) OperatorOnlyAdmin(t testing.TB) *httptest.Server {
	t.Helper()
	srvTLS, err := tlsconf.NewServer(tlsconf.ServerFiles{
		Cert: c.Cert(pki.RoleCell), Key: c.Key(pki.RoleCell), ClientCA: c.CA(), ClientRole: pki.RoleOperator,
	}, tlsconf.Options{What: "admin_tls"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"failed":[]}`)
	}))
	srv.TLS = srvTLS.Config()
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}
