// Package pki issues the certificates cellkit's processes use among
// themselves: a certificate authority, and certificates it signs for a
// role (router, cell, operator) and a set of host names and addresses.
//
// It is what `cellctl dev certs` and the tests use; a production
// installation brings certificates from its own CA, with the same rule for
// roles: a certificate's role is its Subject's Organizational Unit (see
// internal/tlsconf). Keys are ECDSA P-256: its handshakes are the cheapest
// of the common choices.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/cellkit/cellkit/internal/atomicfile"
)

// The roles a certificate can name in its Subject's OU.
const (
	RoleRouter   = "router"   // a router: presented to the cells' intake
	RoleCell     = "cell"     // a cell: its intake and admin listeners
	RoleOperator = "operator" // cellctl, Prometheus and other admin clients
)

// CA is a certificate authority: its certificate and key.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	PEM  []byte // the certificate, PEM-encoded
}

// NewCA makes a self-signed CA valid from notBefore to notAfter.
func NewCA(name string, notBefore, notAfter time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"cellkit"}},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	return &CA{Cert: cert, Key: key, PEM: pemBlock("CERTIFICATE", der)}, nil
}

// Request says what a certificate is for.
type Request struct {
	Name string // the Subject's Common Name
	Role string // the Subject's OU: RoleRouter, RoleCell, RoleOperator
	// Orgs are the Subject's Organizations (default: cellkit); Kubernetes
	// reads a client certificate's as the user's groups.
	Orgs      []string
	Hosts     []string  // DNS names and IP addresses it is valid for (servers)
	NotBefore time.Time // zero: an hour ago
	NotAfter  time.Time // zero: a year after NotBefore
}

// Issued is a certificate and its key, PEM-encoded.
type Issued struct {
	CertPEM, KeyPEM []byte
}

// Issue signs a certificate for req, usable by a server and a client.
func (ca *CA) Issue(req Request) (Issued, error) {
	if req.Name == "" {
		return Issued{}, errors.New("pki: a certificate needs a name")
	}
	if req.NotBefore.IsZero() {
		req.NotBefore = time.Now().Add(-time.Hour)
	}
	if req.NotAfter.IsZero() {
		req.NotAfter = req.NotBefore.AddDate(1, 0, 0)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Issued{}, fmt.Errorf("pki: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: req.Name, Organization: []string{"cellkit"}},
		NotBefore:    req.NotBefore,
		NotAfter:     req.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if req.Role != "" {
		tmpl.Subject.OrganizationalUnit = []string{req.Role}
	}
	if len(req.Orgs) > 0 {
		tmpl.Subject.Organization = req.Orgs
	}
	for _, h := range req.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return Issued{}, fmt.Errorf("pki: %w", err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Issued{}, fmt.Errorf("pki: %w", err)
	}
	return Issued{CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: pemBlock("EC PRIVATE KEY", kder)}, nil
}

// KeyPEM is the CA's key, PEM-encoded.
func (ca *CA) KeyPEM() []byte {
	der, err := x509.MarshalECPrivateKey(ca.Key)
	if err != nil {
		panic(err) // a P-256 key always marshals
	}
	return pemBlock("EC PRIVATE KEY", der)
}

// LoadCA reads a CA written by WriteCA.
func LoadCA(certFile, keyFile string) (*CA, error) {
	cpem, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	kpem, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	cb, _ := pem.Decode(cpem)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("pki: %s: no PEM certificate", certFile)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", certFile, err)
	}
	kb, _ := pem.Decode(kpem)
	if kb == nil {
		return nil, fmt.Errorf("pki: %s: no PEM key", keyFile)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", keyFile, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("pki: %s is not a CA certificate", certFile)
	}
	return &CA{Cert: cert, Key: key, PEM: cpem}, nil
}

// Write writes the certificate to dir/name.pem and its key to
// dir/name-key.pem (mode 0600), each atomically.
func (is Issued) Write(dir, name string) error {
	if err := atomicfile.WriteFile(filepath.Join(dir, name+".pem"), is.CertPEM, 0o644); err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, name+"-key.pem"), is.KeyPEM, 0o600)
}

// WriteCA writes the CA's certificate to dir/ca.pem and its key to
// dir/ca-key.pem (mode 0600).
func (ca *CA) Write(dir string) error {
	if err := atomicfile.WriteFile(filepath.Join(dir, "ca.pem"), ca.PEM, 0o644); err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, "ca-key.pem"), ca.KeyPEM(), 0o600)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// The files WriteDev writes in its directory: the CA and, for each role, a
// certificate and key valid for the hosts given (NAME.pem, NAME-key.pem).
const (
	DevCA       = "ca.pem"
	DevCAKey    = "ca-key.pem"
	DevRouter   = RoleRouter   // router.pem: the routers' public listener and their client certificate to the cells
	DevCell     = RoleCell     // cell.pem: the cells' intake and admin listeners
	DevOperator = RoleOperator // operator.pem: cellctl and Prometheus, to the admin listeners
)

// WriteDev writes a CA and a certificate per role into dir, for a local
// stack and tests. A CA already in dir is kept (so that certificates issued
// before still verify) and the role certificates are issued again.
func WriteDev(dir string, hosts []string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	ca, err := LoadCA(filepath.Join(dir, DevCA), filepath.Join(dir, DevCAKey))
	if errors.Is(err, os.ErrNotExist) {
		now := time.Now()
		if ca, err = NewCA("cellkit dev CA", now.Add(-time.Hour), now.AddDate(10, 0, 0)); err != nil {
			return err
		}
		err = ca.Write(dir)
	}
	if err != nil {
		return err
	}
	for _, role := range []string{DevRouter, DevCell, DevOperator} {
		is, err := ca.Issue(Request{Name: "cellkit-" + role, Role: role, Hosts: hosts})
		if err != nil {
			return err
		}
		if err := is.Write(dir, role); err != nil {
			return err
		}
	}
	return nil
}
