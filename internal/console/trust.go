package console

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// trust decides which admin endpoints the console calls with its
// credentials (the admin token, a client certificate): those configured
// (Config.TrustedAdmin), and, when the admin client verifies https
// against the cluster's CA and nothing else (Config.TrustCA), any https
// one. An admin URL read from shared state — a cell's or an instance's in
// the map, a router's announcement — is whatever whoever can write there
// wrote: an endpoint the console does not trust is not called at all, and
// its card says why.
type trust struct {
	origins map[string]bool
	ca      bool
}

func newTrust(cfg Config) (*trust, error) {
	t := &trust{origins: map[string]bool{}, ca: cfg.TrustCA}
	for _, raw := range cfg.TrustedAdmin {
		o, err := origin(raw)
		if err != nil {
			return nil, fmt.Errorf("console: trusted admin endpoint %q: %w", raw, err)
		}
		t.origins[o] = true
	}
	return t, nil
}

// origin is the endpoint a request to raw reaches: its scheme, host (lower
// case) and port (the scheme's when none is given).
func origin(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", errors.New("not an http or https URL")
	}
	if u.User != nil {
		return "", errors.New("a URL with a user name")
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		return "", errors.New("no host")
	}
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return u.Scheme + "://" + net.JoinHostPort(strings.ToLower(host), port), nil
}

// check says whether the console may call admin with its credentials,
// and if not, why.
func (t *trust) check(admin string) (ok bool, why string) {
	o, err := origin(admin)
	if err != nil {
		return false, fmt.Sprintf("not asked: its admin URL %.200q is not one the console calls (%v)", admin, err)
	}
	switch {
	case t.origins[o]:
		return true, ""
	case strings.HasPrefix(o, "https://") && t.ca:
		return true, ""
	case strings.HasPrefix(o, "https://"):
		return false, "not asked: " + o + " is https without the cluster's CA to verify it against (cellctl --tls-ca), " +
			"and not a trusted admin endpoint (--trust-admin)"
	default:
		return false, "not asked: " + o + " is plain http and not a trusted admin endpoint (--trust-admin): " +
			"the console sends its credentials only to endpoints it trusts"
	}
}

// guardRedirects makes hc follow a redirect only to an endpoint the
// console trusts (the client would send the token along to the same host
// on another port or scheme); hc's own policy applies after.
func (t *trust) guardRedirects(hc *http.Client) *http.Client {
	c := *hc
	next := hc.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if ok, why := t.check(req.URL.String()); !ok {
			return fmt.Errorf("redirected to %s, not followed: %s", req.URL.Redacted(), why)
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &c
}
