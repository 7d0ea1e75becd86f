package kubetest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/testkit"
)

// Controllers of kube-controller-manager, named as its --controllers flag
// and `kube-controller-manager --help` name them, for WithControllers.
const (
	// StatefulSetController makes a StatefulSet's pods from its template,
	// remakes a deleted pod at the template's current revision (OnDelete) and
	// computes the StatefulSet's status from its pods.
	StatefulSetController = "statefulset-controller"
	// GarbageCollector deletes the objects whose owners are gone
	// (ownerReferences), and the dependents of an owner deleted in the
	// foreground before the owner itself.
	GarbageCollector = "garbage-collector-controller"
)

// WithControllers runs kube-controller-manager against the cluster with
// only the named controllers (StatefulSetController, GarbageCollector or
// any other of `kube-controller-manager --help`, by its full name ending in
// -controller, not an alias nor a pattern: Start fails the test at once
// otherwise). Start returns once the controller manager serves and has built
// each of them (its /healthz lists them); it runs with the administrator's
// credentials (a kubeconfig in Cluster.Dir), without leader election or a
// cloud provider, and stops before the API server. The garbage collector
// knows the resources served when it starts, the CRDs of WithCRDs among
// them; a resource added later is watched after its next discovery, within
// 30 s. It adds ~0.3 s to Start on the 2-core test machine (measured warm:
// 3.5 to 4.0 s with it, 3.2 to 3.7 s without).
func WithControllers(names ...string) Option {
	return func(s *settings) { s.controllers = append(s.controllers, names...) }
}

const (
	// controllerManagerCert is where the controller manager writes the
	// self-signed certificate of its secure port, in its --cert-dir.
	controllerManagerCert = "kube-controller-manager.crt"
	healthPoll            = 50 * time.Millisecond
)

// checkControllers fails the test unless each of names is the full name of
// a controller, which the controller manager's /healthz lists once it has
// built it (an alias or a pattern would enable controllers that Start
// could not wait for).
func checkControllers(t testing.TB, names []string) {
	t.Helper()
	for _, n := range names {
		if !strings.HasSuffix(n, "-controller") || strings.ContainsAny(n, "*, ") || strings.HasPrefix(n, "-") {
			t.Fatalf("kubetest: WithControllers(%q): name each controller to run by its full name, as `kube-controller-manager --help` lists them (statefulset-controller)", n)
		}
	}
}

// startControllerManager runs the controller manager at bin with the named
// controllers against the API server kubeconfig reaches, registers its stop
// with t.Cleanup (before the API server's: cleanups run last first) and
// waits until it has built every controller.
func (c *Cluster) startControllerManager(t testing.TB, bin string, kubeconfig []byte, names []string) {
	t.Helper()
	config := filepath.Join(c.Dir, "kubeconfig")
	if err := os.WriteFile(config, kubeconfig, 0o600); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	certDir := filepath.Join(c.Dir, ControllerManager)
	if err := os.Mkdir(certDir, 0o700); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	addr := testkit.FreeAddr(t)
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	log := c.openLog(t, ControllerManager+".log")
	cmd := exec.Command(bin,
		"--kubeconfig="+config,
		"--controllers="+strings.Join(names, ","),
		"--leader-elect=false",
		// The controllers act as the administrator, as envtest's clients do:
		// no service accounts to make and no tokens to mint.
		"--use-service-account-credentials=false",
		// The API server is the test's alone: envtest's client rate, not a
		// production controller manager's 20 requests a second.
		"--kube-api-qps=1000", "--kube-api-burst=2000",
		"--bind-address="+host, "--secure-port="+port, "--cert-dir="+certDir,
		"--v=2",
	)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("kubetest: run %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // how it ended is in its log, which a failed test prints
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM) // it has exited if this fails
		select {
		case <-exited:
		case <-time.After(stopTimeout):
			t.Errorf("kubetest: %s ignored SIGTERM for %v, killing it", ControllerManager, stopTimeout)
			_ = cmd.Process.Kill() // as above
			<-exited
		}
	})
	if err := waitControllers(addr, filepath.Join(certDir, controllerManagerCert), names, exited); err != nil {
		t.Fatalf("kubetest: start %s with %s: %v", ControllerManager, strings.Join(names, ", "), err)
	}
}

// waitControllers polls the controller manager's /healthz until it passes
// with a check for each controller of names (it adds them once it has built
// them all), until it exits or startTimeout has passed.
func waitControllers(addr, certFile string, names []string, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	var last error
	for {
		if last = healthy(ctx, addr, certFile, names); last == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("it exited (its log says why)")
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v: %w", startTimeout, last)
		case <-time.After(healthPoll):
		}
	}
}

// healthy says why the controller manager at addr is not ready yet, or nil.
// Its secure port's certificate is its own, self-signed in certFile.
func healthy(ctx context.Context, addr, certFile string, names []string) error {
	pem, err := os.ReadFile(certFile)
	if err != nil {
		return fmt.Errorf("no serving certificate yet: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return fmt.Errorf("no certificate in %s yet", certFile)
	}
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		DisableKeepAlives: true, // one request per poll; no idle connection outlives the test
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/healthz?verbose", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/healthz answered %s: %s", resp.Status, body)
	}
	for _, n := range names {
		if !strings.Contains(string(body), "[+]"+n+" ok") {
			return fmt.Errorf("/healthz has no passing check for %s (not built yet, or not its full name): %s", n, body)
		}
	}
	return nil
}
