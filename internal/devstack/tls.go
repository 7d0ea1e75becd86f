package devstack

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

// TLS names the certificate files of a stack that runs on TLS (`cellctl
// dev up --tls`): the CA that signed every certificate of the stack, and
// the operator's certificate, which the cells' admin listeners require.
type TLS struct {
	Dir  string `json:"dir"`  // where pki.WriteDev wrote them
	CA   string `json:"ca"`   // the CA's certificate
	Cert string `json:"cert"` // the operator's certificate
	Key  string `json:"key"`  // and its key
}

// DevTLS names the files pki.WriteDev writes in dir.
func DevTLS(dir string) *TLS {
	return &TLS{Dir: dir, CA: filepath.Join(dir, pki.DevCA),
		Cert: filepath.Join(dir, pki.DevOperator+".pem"), Key: filepath.Join(dir, pki.DevOperator+"-key.pem")}
}

// DevFiles are every file pki.WriteDev writes in dir: the CA, then each
// role's certificate and key.
func DevFiles(dir string) []string {
	files := []string{filepath.Join(dir, pki.DevCA), filepath.Join(dir, pki.DevCAKey)}
	for _, role := range []string{pki.DevRouter, pki.DevCell, pki.DevOperator} {
		files = append(files, filepath.Join(dir, role+".pem"), filepath.Join(dir, role+"-key.pem"))
	}
	return files
}

// DevHosts are the names and addresses the dev certificates are valid for
// unless told otherwise.
var DevHosts = []string{"localhost", "127.0.0.1", "::1"}

// EnsureDevCerts keeps the dev certificates in dir if they are all there
// and load (so that certificates made with other hosts are kept), else
// writes them with pki.WriteDev for hosts (a CA already there is kept). It
// says whether it wrote them.
func EnsureDevCerts(dir string, hosts []string) (bool, error) {
	complete := true
	for _, f := range DevFiles(dir) {
		if _, err := os.Stat(f); err != nil {
			complete = false
		}
	}
	if complete {
		pair := func(role string) (string, string) {
			return filepath.Join(dir, role+".pem"), filepath.Join(dir, role+"-key.pem")
		}
		ok := true
		for _, role := range []string{pki.DevRouter, pki.DevCell, pki.DevOperator} {
			c, k := pair(role)
			// A day of validity left, or they are made again.
			if _, err := tlsconf.LoadKeyPair(c, k, time.Now().Add(24*time.Hour)); err != nil {
				ok = false
			}
		}
		if ok {
			return false, nil
		}
	}
	if err := pki.WriteDev(dir, hosts); err != nil {
		return false, fmt.Errorf("dev certificates in %s: %w", dir, err)
	}
	return true, nil
}

// Client is an HTTP client for the stack's processes: https verified by
// the CA, the operator's certificate presented to listeners that ask for
// one. A nil TLS is a plain client.
func (t *TLS) Client(timeout time.Duration) (*http.Client, error) {
	if t == nil {
		return &http.Client{Timeout: timeout}, nil
	}
	cl, err := tlsconf.NewClient(tlsconf.ClientFiles{CA: t.CA, Cert: t.Cert, Key: t.Key}, tlsconf.Options{What: "dev_stack"})
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cl.Config().Clone()
	return &http.Client{Transport: tr, Timeout: timeout}, nil
}
