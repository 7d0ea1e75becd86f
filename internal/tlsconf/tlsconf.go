// Package tlsconf turns certificate files into TLS configurations for
// cellkit's listeners and clients, and keeps them current: a certificate,
// its key and a client CA are reloaded when their files change or on
// SIGHUP (internal/reload) without dropping a connection, since a
// certificate is used only in the handshakes that follow.
//
// Files are checked when loaded, and a bad one is refused with a one-line
// error that names it: unreadable, no PEM block, a key that does not match
// its certificate, a certificate expired or not yet valid. A refused
// reload keeps the configuration in use.
//
// Roles: a certificate says which part of cellkit holds it in its
// Subject's Organizational Unit (router, cell, operator; see internal/pki).
// A listener that requires client certificates may also require a role:
// the cells' intake takes only routers, their admin API only operators.
//
// Every configuration here is TLS 1.2 or newer, with Go's default cipher
// suites and curves.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/metric"
	"github.com/cellkit/cellkit/internal/reload"
)

// MinVersion is the oldest TLS version any cellkit configuration speaks.
const MinVersion = tls.VersionTLS12

// LoadKeyPair reads a certificate chain and its private key, and checks
// that they match and that the certificate is valid at now.
func LoadKeyPair(certFile, keyFile string, now time.Time) (tls.Certificate, error) {
	cpem, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("tls: certificate file: %w", err)
	}
	kpem, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("tls: key file: %w", err)
	}
	if b, _ := pem.Decode(cpem); b == nil || b.Type != "CERTIFICATE" {
		return tls.Certificate{}, fmt.Errorf("tls: certificate file %s: no PEM certificate in it", certFile)
	}
	if b, _ := pem.Decode(kpem); b == nil || !isKeyBlock(b.Type) {
		return tls.Certificate{}, fmt.Errorf("tls: key file %s: no PEM private key in it", keyFile)
	}
	pair, err := tls.X509KeyPair(cpem, kpem)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("tls: certificate file %s with key file %s: %w", certFile, keyFile, err)
	}
	leaf := pair.Leaf
	switch {
	case now.After(leaf.NotAfter):
		return tls.Certificate{}, fmt.Errorf("tls: certificate file %s: expired at %s", certFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return tls.Certificate{}, fmt.Errorf("tls: certificate file %s: not valid before %s", certFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	return pair, nil
}

func isKeyBlock(typ string) bool {
	return typ == "PRIVATE KEY" || typ == "EC PRIVATE KEY" || typ == "RSA PRIVATE KEY"
}

// LoadPool reads a file of PEM CA certificates.
func LoadPool(caFile string) (*x509.CertPool, error) {
	data, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("tls: CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("tls: CA file %s: no PEM certificate in it", caFile)
	}
	return pool, nil
}

// HasRole says whether cert names role in its Subject's OU.
func HasRole(cert *x509.Certificate, role string) bool {
	return cert != nil && slices.Contains(cert.Subject.OrganizationalUnit, role)
}

// PeerHasRole says whether the verified client certificate of a connection
// names role. False without a verified certificate.
func PeerHasRole(cs *tls.ConnectionState, role string) bool {
	return cs != nil && len(cs.VerifiedChains) > 0 && HasRole(cs.VerifiedChains[0][0], role)
}

// ServerFiles are a listener's files.
type ServerFiles struct {
	Cert, Key string // the listener's certificate chain and key (required)
	// ClientCA, if set, makes client certificates required: only clients
	// with a certificate this CA signed complete the handshake.
	ClientCA string
	// ClientRole, if set with ClientCA, also requires the client
	// certificate to name this role.
	ClientRole string
}

// Options carry the collaborators of a Server or a Client.
type Options struct {
	// What names the files in logs and metrics, e.g. "public_tls".
	What string
	// Interval spaces two looks at the files [1s].
	Interval   time.Duration
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Now is the clock that certificates are checked against. Nil: time.Now.
	Now func() time.Time
}

// withDefaults fills the nil collaborators that have a default: Now
// (time.Now). Interval is the watcher's (internal/reload fills it).
func (o Options) withDefaults() Options {
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Server is a listener's TLS configuration, current with its files.
type Server struct {
	files   ServerFiles
	opts    Options
	cur     atomic.Pointer[tls.Config]
	expiry  prometheus.Gauge
	watcher *reload.Watcher
	base    *tls.Config
	tickets tickets
}

// NewServer loads files; its error names the file at fault.
func NewServer(files ServerFiles, opts Options) (*Server, error) {
	if files.Cert == "" || files.Key == "" {
		return nil, errors.New("tls: a listener needs both a certificate and a key file")
	}
	if files.ClientRole != "" && files.ClientCA == "" {
		return nil, errors.New("tls: a client role needs a client CA file")
	}
	opts = opts.withDefaults()
	s := &Server{files: files, opts: opts, expiry: expiryGauge(opts)}
	s.base = &tls.Config{
		MinVersion: MinVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			s.rotateTickets()
			return s.cur.Load(), nil
		},
	}
	if _, err := s.tickets.rotate(opts.Now()); err != nil {
		return nil, err
	}
	if err := s.load(); err != nil {
		return nil, err
	}
	paths := []string{files.Cert, files.Key}
	if files.ClientCA != "" {
		paths = append(paths, files.ClientCA)
	}
	s.watcher = reload.New(paths, s.load, reload.Config{What: opts.What, Interval: opts.Interval},
		reload.Options{Logger: opts.Logger, Registerer: opts.Registerer})
	return s, nil
}

func (s *Server) load() error {
	pair, err := LoadKeyPair(s.files.Cert, s.files.Key, s.opts.Now())
	if err != nil {
		return err
	}
	cfg := &tls.Config{
		MinVersion:   MinVersion,
		Certificates: []tls.Certificate{pair},
		NextProtos:   []string{"http/1.1"},
	}
	if s.files.ClientCA != "" {
		pool, err := LoadPool(s.files.ClientCA)
		if err != nil {
			return err
		}
		cfg.ClientAuth, cfg.ClientCAs = tls.RequireAndVerifyClientCert, pool
		if role := s.files.ClientRole; role != "" {
			cfg.VerifyConnection = func(cs tls.ConnectionState) error {
				if !PeerHasRole(&cs, role) {
					return fmt.Errorf("tls: client certificate does not name the role %q", role)
				}
				return nil
			}
		}
	}
	s.applyTickets(cfg)
	s.cur.Store(cfg)
	s.expiry.Set(float64(pair.Leaf.NotAfter.Unix()))
	return nil
}

// Config is the configuration for the listener: each handshake takes the
// files as last loaded.
func (s *Server) Config() *tls.Config { return s.base }

// Current is the configuration as last loaded.
func (s *Server) Current() *tls.Config { return s.cur.Load() }

// Watcher reloads the files; run it (and trigger it on SIGHUP).
func (s *Server) Watcher() *reload.Watcher { return s.watcher }

// ClientFiles are a client's files.
type ClientFiles struct {
	// CA verifies the servers' certificates [the system's roots].
	CA string
	// Cert and Key, if set, are presented to servers that ask for a
	// client certificate.
	Cert, Key string
	// ServerRole, if set, requires the server's certificate to name this
	// role.
	ServerRole string
}

// Enabled says whether any file is named.
func (f ClientFiles) Enabled() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// Client is a client's TLS configuration: its certificate is current with
// its files. Its CA is read once: the configuration is copied by the
// clients that use it (net/http's Transport), and crypto/tls verifies a
// server's name only against a configuration's own ServerName, which a
// verification callback cannot see; so a new CA for the servers is taken
// at a restart (rotate by adding the new CA to the file first, see
// docs/tls-and-access.md).
type Client struct {
	files   ClientFiles
	opts    Options
	pair    atomic.Pointer[tls.Certificate]
	cfg     *tls.Config
	expiry  prometheus.Gauge
	watcher *reload.Watcher
}

// NewClient loads files; its error names the file at fault.
func NewClient(files ClientFiles, opts Options) (*Client, error) {
	if (files.Cert == "") != (files.Key == "") {
		return nil, errors.New("tls: a client certificate needs both a certificate and a key file")
	}
	opts = opts.withDefaults()
	c := &Client{files: files, opts: opts, cfg: &tls.Config{MinVersion: MinVersion}}
	if files.CA != "" {
		pool, err := LoadPool(files.CA)
		if err != nil {
			return nil, err
		}
		c.cfg.RootCAs = pool
	}
	if role := files.ServerRole; role != "" {
		c.cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !HasRole(cs.PeerCertificates[0], role) {
				return fmt.Errorf("tls: server certificate does not name the role %q", role)
			}
			return nil
		}
	}
	if files.Cert == "" {
		return c, nil
	}
	c.expiry = expiryGauge(opts)
	if err := c.load(); err != nil {
		return nil, err
	}
	c.cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return c.pair.Load(), nil
	}
	c.watcher = reload.New([]string{files.Cert, files.Key}, c.load, reload.Config{What: opts.What, Interval: opts.Interval},
		reload.Options{Logger: opts.Logger, Registerer: opts.Registerer})
	return c, nil
}

func (c *Client) load() error {
	pair, err := LoadKeyPair(c.files.Cert, c.files.Key, c.opts.Now())
	if err != nil {
		return err
	}
	c.pair.Store(&pair)
	c.expiry.Set(float64(pair.Leaf.NotAfter.Unix()))
	return nil
}

// Config is the client configuration (shared: clone it to change it).
func (c *Client) Config() *tls.Config { return c.cfg }

// Watcher reloads the client certificate; nil without one.
func (c *Client) Watcher() *reload.Watcher { return c.watcher }

func expiryGauge(opts Options) prometheus.Gauge {
	return reload.Shared(opts.Registerer, metric.GaugeVec(nil, api.MetricTLSCertificateExpiryTimestampSeconds)).WithLabelValues(opts.What)
}
