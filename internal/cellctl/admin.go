package cellctl

import (
	"fmt"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

// admin is the client of the admin APIs with this command's token and
// TLS (setupAdmin).
func (x *inv) admin() adminclient.Client {
	return adminclient.Client{HTTP: x.adminHTTP, Token: x.adminToken, CertAsked: x.certAsked}
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
	c := adminclient.Client{HTTP: x.adminHTTP}.WithTLS(cl.Config())
	x.adminHTTP, x.certAsked = c.HTTP, c.CertAsked
	return x.adminHTTP.CloseIdleConnections, nil
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
	return adminclient.ReadToken(file)
}

// storeText is the STORE column of cellctl status: the share of the
// store's filesystem in use, and whether it refuses new inquiries ("-":
// the cell's NATS is not embedded).
func storeText(s *api.CellStatus) string {
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
