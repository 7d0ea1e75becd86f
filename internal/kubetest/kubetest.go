// Package kubetest runs a real Kubernetes control plane for a test: etcd and
// kube-apiserver, started by controller-runtime's envtest, the way
// Kubernetes controllers are tested, and, with WithControllers, the
// kube-controller-manager controllers a test names (the StatefulSet
// controller, the garbage collector). There is no kubelet or scheduler:
// objects are stored, validated, defaulted and watched as in a cluster, but
// no pod runs; a test plays the kubelet with MarkPodReady and
// MarkPodsReady. No other built-in controller acts (a namespace deleted
// stays Terminating).
//
// Start returns once the API server answers, the default namespace exists
// and the CustomResourceDefinitions of WithCRDs are established. etcd and
// the API server listen on free loopback ports (testkit.FreeAddr), keep
// their data, certificates and logs in the test's temp dir, are stopped by
// t.Cleanup, and the tail of their logs is printed when the test fails.
// Start takes ~3.5 s on the 2-core test machine (measured 3.0 to 4.3 s,
// warm: the binaries built, the test compiled), most of it the API
// server's own start; WithControllers adds ~0.3 s.
//
// The binaries are kube-apiserver, etcd and (for WithControllers)
// kube-controller-manager in $CELLKIT_KUBE_ASSETS, or in bin/kube next to
// the module's go.mod (`make tools` builds them there:
// scripts/install-kube.sh). etcd must be 3.4.31, 3.5.13 or newer: with an
// older one the API server cannot keep its watch cache current, and watches
// from now and streaming lists fail (TestCluster shows both).
package kubetest

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/cellkit/cellkit/internal/testkit"
)

// EnvAssets names the environment variable that overrides the directory
// holding kube-apiserver, etcd and kube-controller-manager.
const EnvAssets = "CELLKIT_KUBE_ASSETS"

// Binaries are the programs Start always runs, looked for in the assets
// directory; WithControllers adds ControllerManager.
var Binaries = []string{"kube-apiserver", "etcd"}

// ControllerManager is the program WithControllers runs.
const ControllerManager = "kube-controller-manager"

const (
	// startTimeout bounds each of etcd and the API server: the API server
	// alone starts in ~3 s here, more while other test binaries load both
	// cores.
	startTimeout = time.Minute
	stopTimeout  = 20 * time.Second
	// logTail is how many lines of each log a failed test prints.
	logTail = 60
)

// Option changes how a cluster is started.
type Option func(*settings)

type settings struct {
	crdDirs     []string
	scheme      *runtime.Scheme
	controllers []string
}

// WithCRDs installs the CustomResourceDefinitions found in the YAML or JSON
// files of each path (a directory or a file); Start fails the test when a
// path is missing or a definition is not established in time.
func WithCRDs(paths ...string) Option {
	return func(s *settings) { s.crdDirs = append(s.crdDirs, paths...) }
}

// WithScheme gives Cluster.Client the types it knows (the caller's own API
// types added to it). Without it the client knows client-go's built-in
// types and apiextensions/v1.
func WithScheme(scheme *runtime.Scheme) Option {
	return func(s *settings) { s.scheme = scheme }
}

// Cluster is a running control plane.
type Cluster struct {
	// Config reaches the API server as an administrator (user admin in
	// system:masters). Callers that change it take a copy (rest.CopyConfig).
	Config *rest.Config
	// Client is a controller-runtime client on Config with the scheme of
	// WithScheme; it can watch.
	Client client.WithWatch
	// Scheme is the scheme Client was built with.
	Scheme *runtime.Scheme
	// CRDs are the definitions WithCRDs installed, as the server has them.
	CRDs []*apiextensionsv1.CustomResourceDefinition
	// Dir holds etcd's data, the API server's certificates, the logs and,
	// with WithControllers, the controller manager's kubeconfig.
	Dir string

	logs []*os.File // the processes' logs, closed and tailed by Start's first cleanup
}

// Start starts etcd and kube-apiserver, then the controller manager of
// WithControllers, and registers their shutdown with t.Cleanup (the
// controller manager first). It fails the test, saying to run `make tools`,
// when a binary it needs is missing.
func Start(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	var s settings
	for _, o := range opts {
		o(&s)
	}
	if s.scheme == nil {
		s.scheme = DefaultScheme(t)
	}
	binaries := Binaries
	if len(s.controllers) > 0 {
		checkControllers(t, s.controllers)
		binaries = append(slices.Clone(binaries), ControllerManager)
	}
	assets := assetsDir(t, binaries...)
	setLoggerOnce()

	c := &Cluster{Dir: t.TempDir(), Scheme: s.scheme}
	etcdLog := c.openLog(t, "etcd.log")
	apiLog := c.openLog(t, "kube-apiserver.log")
	// Registered first so that it runs last: the processes have stopped and
	// written everything when the logs are read.
	t.Cleanup(func() {
		for _, f := range c.logs {
			_ = f.Close() // written by the child, which has exited; nothing of ours buffered
			if t.Failed() {
				t.Logf("kubetest: last %d lines of %s:\n%s", logTail, filepath.Base(f.Name()), tail(f.Name(), logTail))
			}
		}
	})

	env := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		Scheme:                   s.scheme,
		CRDDirectoryPaths:        s.crdDirs,
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: startTimeout,
		ControlPlaneStopTimeout:  stopTimeout,
	}
	env.ControlPlane.Etcd = newEtcd(t, filepath.Join(c.Dir, "etcd"), etcdLog)
	api := env.ControlPlane.GetAPIServer()
	api.CertDir = filepath.Join(c.Dir, "apiserver")
	api.SecureServing.ListenAddr = listenAddr(t)
	// The address the server publishes for itself is its own, not the
	// machine's first interface (a machine or namespace with loopback alone
	// has none). The endpoint reconciler refuses a loopback address; it
	// keeps the kubernetes Service's endpoints, which nothing here reads.
	api.Configure().Set("advertise-address", "127.0.0.1")
	api.Configure().Set("endpoint-reconciler-type", "none")
	api.Out, api.Err = apiLog, apiLog
	if err := os.Mkdir(api.CertDir, 0o700); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("kubetest: stop the control plane: %v", err)
		}
	})

	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("kubetest: start etcd and kube-apiserver from %s: %v", assets, err)
	}
	c.Config, c.CRDs = cfg, env.CRDs
	if c.Client, err = client.NewWithWatch(cfg, client.Options{Scheme: s.scheme}); err != nil {
		t.Fatalf("kubetest: client: %v", err)
	}
	if len(s.controllers) > 0 {
		c.startControllerManager(t, filepath.Join(assets, ControllerManager), env.KubeConfig, s.controllers)
	}
	return c
}

// DefaultScheme is the scheme Start gives the client without WithScheme:
// client-go's built-in types and apiextensions/v1. Callers add their own
// types to it and pass it to WithScheme.
func DefaultScheme(t testing.TB) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatalf("kubetest: scheme: %v", err)
	}
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatalf("kubetest: scheme: %v", err)
	}
	return s
}

// newEtcd is the etcd envtest starts: its client and peer URLs on ports of
// testkit.FreeAddr (envtest's own choice is in the ephemeral range, which
// any client connection may take meanwhile), its data in dataDir.
func newEtcd(t testing.TB, dataDir string, log *os.File) *envtest.Etcd {
	t.Helper()
	if err := os.Mkdir(dataDir, 0o700); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	e := &envtest.Etcd{
		URL:     &url.URL{Scheme: "http", Host: testkit.FreeAddr(t)},
		DataDir: dataDir,
		Out:     log,
		Err:     log,
	}
	e.Configure().Set("listen-peer-urls", "http://"+testkit.FreeAddr(t))
	return e
}

// listenAddr is a free loopback address for the API server.
func listenAddr(t testing.TB) envtest.ListenAddr {
	t.Helper()
	host, port, err := net.SplitHostPort(testkit.FreeAddr(t))
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	return envtest.ListenAddr{Address: host, Port: port}
}

func (c *Cluster) openLog(t testing.TB, name string) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(c.Dir, name))
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	c.logs = append(c.logs, f)
	return f
}

var loggerOnce sync.Once

// setLoggerOnce gives controller-runtime testkit's logger (silent unless
// $CELLKIT_TEST_LOG is set). Without one it prints a warning and a stack
// after 30 s. A test that wants another calls ctrllog.SetLogger after Start.
func setLoggerOnce() {
	loggerOnce.Do(func() {
		ctrllog.SetLogger(logr.FromSlogHandler(testkit.Logger().Handler()))
	})
}

// assetsDir finds the directory holding the binaries (Binaries unless
// named), or fails the test saying how to build them.
func assetsDir(t testing.TB, binaries ...string) string {
	t.Helper()
	if len(binaries) == 0 {
		binaries = Binaries
	}
	dir := os.Getenv(EnvAssets)
	if dir == "" {
		root, err := testkit.ModuleRoot()
		if err != nil {
			t.Fatalf("kubetest: %s not found: %v: run `make tools` or set %s", strings.Join(binaries, ", "), err, EnvAssets)
		}
		dir = filepath.Join(root, "bin", "kube")
	}
	for _, b := range binaries {
		path := filepath.Join(dir, b)
		if fi, err := os.Stat(path); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			t.Fatalf("kubetest: %s not found at %s: run `make tools` (scripts/install-kube.sh)", b, path)
		}
	}
	return dir
}

// tail is the last n lines of the file at path, or why it cannot be read.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	b = bytes.TrimRight(b, "\n")
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			if n--; n == 0 {
				return string(b[i+1:])
			}
		}
	}
	return string(b)
}
