package kubenode

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/cellkit/cellkit/internal/atomicfile"
	"github.com/cellkit/cellkit/internal/pki"
)

// identity is a client of the API server (a kubeconfig of its own) and,
// where it serves, a server: its certificate's names and groups.
type identity struct {
	file  string   // pki/FILE.pem, kubeconfig/FILE.yaml
	user  string   // the certificate's Common Name: the user
	group []string // its Organizations: the user's groups
	serve bool     // it serves HTTPS on the node (its certificate names the node)
}

// The cluster's identities. The users and groups are those Kubernetes'
// bootstrap RBAC policy binds (system:kube-controller-manager,
// system:kube-scheduler, system:kube-proxy, the Node authorizer's
// system:node:NAME in system:nodes); the administrator and the API
// server's client to the kubelet are system:masters; CoreDNS gets the
// ClusterRole bootstrap.go applies.
var (
	idAdmin     = identity{file: "admin", user: "cellkit-admin", group: []string{"system:masters"}}
	idAPIClient = identity{file: "apiserver-kubelet-client", user: "kube-apiserver-kubelet-client", group: []string{"system:masters"}}
	idCM        = identity{file: "kube-controller-manager", user: "system:kube-controller-manager", serve: true}
	idScheduler = identity{file: "kube-scheduler", user: "system:kube-scheduler", serve: true}
	idKubelet   = identity{file: "kubelet", user: "system:node:" + NodeName, group: []string{"system:nodes"}, serve: true}
	idProxy     = identity{file: "kube-proxy", user: "system:kube-proxy"}
	idCoreDNS   = identity{file: "coredns", user: corednsUser}
	identities  = []identity{idAdmin, idAPIClient, idCM, idScheduler, idKubelet, idProxy, idCoreDNS}
)

// paths are the files of the cluster's certificates and kubeconfigs.
type paths struct{ dir string }

func (p paths) pki(name string) string  { return filepath.Join(p.dir, "pki", name) }
func (p paths) cert(id identity) string { return p.pki(id.file + ".pem") }
func (p paths) key(id identity) string  { return p.pki(id.file + "-key.pem") }
func (p paths) kubeconfig(id identity) string {
	return filepath.Join(p.dir, "kubeconfig", id.file+".yaml")
}
func (p paths) ca() string            { return p.pki(pki.DevCA) }
func (p paths) caKey() string         { return p.pki(pki.DevCAKey) }
func (p paths) apiserverCert() string { return p.pki("apiserver.pem") }
func (p paths) apiserverKey() string  { return p.pki("apiserver-key.pem") }
func (p paths) saKey() string         { return p.pki("service-account-key.pem") }
func (p paths) saPub() string         { return p.pki("service-account.pub") }

// writePKI writes the cluster's CA, the API server's serving certificate,
// each identity's certificate and kubeconfig, and the service accounts'
// signing key, unless the CA is already there (a cluster's certificates
// do not change while it lives; Down removes them).
func writePKI(p paths, nodeIP netip.Addr, apiserver string, kubeIP netip.Addr) error {
	if _, err := os.Stat(p.ca()); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, d := range []string{filepath.Dir(p.ca()), filepath.Dir(p.kubeconfig(idAdmin))} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	now := time.Now()
	ca, err := pki.NewCA("cellkit-cluster", now.Add(-time.Hour), now.AddDate(10, 0, 0))
	if err != nil {
		return err
	}
	node := nodeIP.String()
	is, err := ca.Issue(pki.Request{Name: "kube-apiserver", Hosts: []string{
		node, kubeIP.String(), "127.0.0.1", "localhost", NodeName,
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + DNSDomain,
	}})
	if err != nil {
		return err
	}
	if err := writeIssued(is, p.apiserverCert(), p.apiserverKey()); err != nil {
		return err
	}
	for _, id := range identities {
		req := pki.Request{Name: id.user, Orgs: id.group}
		if id.serve {
			req.Hosts = []string{node, "127.0.0.1", "localhost", NodeName}
		}
		is, err := ca.Issue(req)
		if err != nil {
			return err
		}
		if err := writeIssued(is, p.cert(id), p.key(id)); err != nil {
			return err
		}
		if err := writeKubeconfig(p, id, apiserver); err != nil {
			return err
		}
	}
	if err := writeServiceAccountKey(p); err != nil {
		return err
	}
	// The CA last: its presence says the rest is there.
	if err := atomicfile.WriteFile(p.caKey(), ca.KeyPEM(), 0o600); err != nil {
		return err
	}
	return atomicfile.WriteFile(p.ca(), ca.PEM, 0o644)
}

func writeIssued(is pki.Issued, cert, key string) error {
	if err := atomicfile.WriteFile(cert, is.CertPEM, 0o644); err != nil {
		return err
	}
	return atomicfile.WriteFile(key, is.KeyPEM, 0o600)
}

// writeKubeconfig writes id's kubeconfig: the API server, the CA, id's
// certificate, each by its path.
func writeKubeconfig(p paths, id identity, apiserver string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[Network] = &clientcmdapi.Cluster{Server: apiserver, CertificateAuthority: p.ca()}
	cfg.AuthInfos[id.user] = &clientcmdapi.AuthInfo{ClientCertificate: p.cert(id), ClientKey: p.key(id)}
	cfg.Contexts[Network] = &clientcmdapi.Context{Cluster: Network, AuthInfo: id.user}
	cfg.CurrentContext = Network
	return clientcmd.WriteToFile(*cfg, p.kubeconfig(id))
}

// writeServiceAccountKey writes the key the API server signs service
// account tokens with, and its public half, which it and the controller
// manager verify them with.
func writeServiceAccountKey(p paths) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(p.saKey(), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(p.saPub(), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		return fmt.Errorf("service account key: %w", err)
	}
	return nil
}
