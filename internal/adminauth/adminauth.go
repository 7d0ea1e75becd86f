// Package adminauth guards a process's admin API: health and readiness
// stay open to probes, everything else (metrics, the admin resources,
// pprof) needs a bearer token from a token file or a verified client
// certificate (mutual TLS).
//
// The token file holds one token per line; blank lines and lines starting
// with '#' are ignored. Only the tokens' SHA-256 digests are kept, and a
// presented token's digest is compared with each of them in constant time
// (crypto/subtle). The file is reloaded when it changes or on SIGHUP
// (internal/reload): a token added works from the next request, a token
// removed fails from the next request, and a broken file is refused with
// the tokens loaded before kept.
//
// An admin API with neither is open, which is safe only on a loopback
// address: CheckListen says so, for a program to refuse to start.
package adminauth

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/metric"
	"github.com/cellkit/cellkit/internal/problem"
	"github.com/cellkit/cellkit/internal/reload"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

// Config says how requests to the admin API authenticate. The zero value
// guards nothing: every request is let in.
type Config struct {
	// TokenFile holds the bearer tokens (see the package comment); empty:
	// no tokens.
	TokenFile string
	// ClientCerts says the listener verifies client certificates (its TLS
	// configuration has a client CA): a request over a connection with a
	// verified client certificate is let in without a token.
	ClientCerts bool
	// ClientRole, if set, is the role (Subject OU, see internal/pki) such
	// a certificate must name to be let in; the handshake usually refuses
	// other roles already.
	ClientRole string
	// Open are the paths served without authentication [/healthz, /readyz].
	Open []string
	// Interval spaces two looks at the token file [1s].
	Interval time.Duration
}

// DefaultOpen are the paths every probe may read.
var DefaultOpen = []string{"/healthz", "/readyz"}

// DefaultConfig returns the defaults in brackets above.
func DefaultConfig() Config {
	return Config{Open: DefaultOpen, Interval: reload.DefaultConfig().Interval}
}

// withDefaults fills the zero fields of c from DefaultConfig, field by
// field (a nil Open too; an empty one opens no path).
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Open == nil {
		c.Open = d.Open
	}
	if c.Interval <= 0 {
		c.Interval = d.Interval
	}
	return c
}

// Options carry a Guard's collaborators.
type Options struct {
	// Logger hears of token file reloads. Nil: none.
	Logger *slog.Logger
	// Registerer receives cellkit_admin_auth_failures_total{reason} and
	// the token file's reload metrics. Nil: not registered.
	Registerer prometheus.Registerer
}

// Guard authenticates admin requests. Handler wraps an admin handler with it.
type Guard struct {
	cfg     Config
	tokens  atomic.Pointer[[]digest]
	watcher *reload.Watcher
	missing prometheus.Counter
	wrong   prometheus.Counter
}

type digest = [sha256.Size]byte

// New returns a guard; with a token file, it loads it (the error names the
// file) and makes a watcher for it.
func New(cfg Config, opts Options) (*Guard, error) {
	cfg = cfg.withDefaults()
	fails := metric.CounterVec(opts.Registerer, api.MetricAdminAuthFailures)
	g := &Guard{cfg: cfg, missing: fails.WithLabelValues("missing"), wrong: fails.WithLabelValues("wrong")}
	if cfg.TokenFile == "" {
		return g, nil
	}
	load := func() error {
		ds, err := LoadTokens(cfg.TokenFile)
		if err != nil {
			return err
		}
		g.tokens.Store(&ds)
		return nil
	}
	if err := load(); err != nil {
		return nil, err
	}
	g.watcher = reload.New([]string{cfg.TokenFile}, load, reload.Config{What: "admin_tokens", Interval: cfg.Interval},
		reload.Options{Logger: opts.Logger, Registerer: opts.Registerer})
	return g, nil
}

// Enabled says whether the guard authenticates anything: without a token
// file or client certificates, every request is let in.
func (g *Guard) Enabled() bool { return g.cfg.TokenFile != "" || g.cfg.ClientCerts }

// Watcher reloads the token file; run it (and trigger it on SIGHUP). Nil
// without a token file.
func (g *Guard) Watcher() *reload.Watcher { return g.watcher }

// Handler serves next to the requests the guard lets in, and answers the
// others 401 with a problem and WWW-Authenticate: Bearer. Not Enabled:
// next itself.
func (g *Guard) Handler(next http.Handler) http.Handler {
	if !g.Enabled() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slices.Contains(g.cfg.Open, r.URL.Path) || g.certified(r) {
			next.ServeHTTP(w, r)
			return
		}
		token, ok := bearer(r.Header.Get("Authorization"))
		switch {
		case !ok:
			g.missing.Inc()
			w.Header().Set("WWW-Authenticate", `Bearer realm="cellkit-admin"`)
			problem.Write(w, problem.New(http.StatusUnauthorized, problem.Unauthorized, g.needs()))
		case !g.known(token):
			g.wrong.Inc()
			w.Header().Set("WWW-Authenticate", `Bearer realm="cellkit-admin", error="invalid_token"`)
			problem.Write(w, problem.New(http.StatusUnauthorized, problem.Unauthorized, "the bearer token is not one of the admin API's tokens"))
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// needs says what a refused request lacks.
func (g *Guard) needs() string {
	if g.cfg.TokenFile == "" {
		return "the admin API needs a client certificate"
	}
	return "the admin API needs Authorization: Bearer TOKEN"
}

// certified: the request came over a connection with a verified client
// certificate (of the role, if one is required).
func (g *Guard) certified(r *http.Request) bool {
	if !g.cfg.ClientCerts || r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		return false
	}
	return g.cfg.ClientRole == "" || tlsconf.PeerHasRole(r.TLS, g.cfg.ClientRole)
}

// known compares token's digest with every token's, in constant time.
func (g *Guard) known(token string) bool {
	ds := g.tokens.Load()
	if ds == nil {
		return false
	}
	d := sha256.Sum256([]byte(token))
	match := 0
	for i := range *ds {
		match |= subtle.ConstantTimeCompare(d[:], (*ds)[i][:])
	}
	return match == 1
}

// bearer is the token of an "Authorization: Bearer TOKEN" value (the
// scheme in any case).
func bearer(v string) (string, bool) {
	scheme, token, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// LoadTokens reads a token file and returns its tokens' digests. A file
// without a token, or with a token that cannot be sent in a header, is an
// error that names the file.
func LoadTokens(path string) ([]digest, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("admin token file: %w", err)
	}
	var ds []digest
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.ContainsFunc(line, func(c rune) bool { return c <= ' ' || c >= 0x7f }) {
			return nil, fmt.Errorf("admin token file %s: line %d: a token is printable ASCII without spaces", path, n)
		}
		ds = append(ds, sha256.Sum256([]byte(line)))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("admin token file %s: %w", path, err)
	}
	if len(ds) == 0 {
		return nil, fmt.Errorf("admin token file %s: no token in it", path)
	}
	return ds, nil
}

// ErrOpen is CheckListen's error.
var ErrOpen = errors.New("the admin API would be open to other hosts without authentication")

// CheckListen refuses an unauthenticated admin API on an address other
// hosts can reach: anything but a loopback address (see Loopback).
func CheckListen(addr string, authenticated bool) error {
	if authenticated || Loopback(addr) {
		return nil
	}
	return fmt.Errorf("%s is not a loopback address and %w", addr, ErrOpen)
}

// Loopback says whether a listen address (host:port) takes connections
// from this host only: localhost or a loopback IP. An empty host (all
// interfaces), an unspecified IP, any other IP and any other host name
// (which may resolve to anything) are not.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
