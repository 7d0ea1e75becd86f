package celltest

import (
	"net/http"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/tlsconf"
)

// TLSClient is an HTTP client that verifies servers by the CA and presents
// role's certificate ("" for none), through tlsconf as a program would. Its
// idle connections are closed when the test ends.
func (c Certs) TLSClient(t testing.TB, role string) *http.Client {
	t.Helper()
	files := tlsconf.ClientFiles{CA: c.CA()}
	if role != "" {
		files.Cert, files.Key = c.Cert(role), c.Key(role)
	}
	cl, err := tlsconf.NewClient(files, tlsconf.Options{What: "test"})
	if err != nil {
		t.Fatal(err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cl.Config().Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}
