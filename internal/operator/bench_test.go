package operator_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/kubetest"
	"github.com/cellkit/cellkit/internal/operator"
	"github.com/cellkit/cellkit/internal/operator/api/v1alpha1"
	"github.com/cellkit/cellkit/internal/problem"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
	"github.com/cellkit/cellkit/internal/testkit"
)

// The bench: a real API server and etcd (kubetest) with the Cell CRD
// generated from the types, a registry holding the map, and the cells'
// admin APIs served by the test over real TLS, reached by their cluster
// names. There is no StatefulSet controller or kubelet here: the test
// says how many of a cell's instances are ready through its
// StatefulSet's status, as the StatefulSet controller would.

const within = 30 * time.Second

// cellAdmin is a cell's admin API as the test serves it: its release and
// queue depth, and whether its intake is open.
type cellAdmin struct {
	mu      sync.Mutex
	release string
	depth   int64
	intake  bool
	down    bool
	// starting: its intake cannot open yet (409, as a cell's that has
	// not seen the map name it).
	starting bool
}

// open says whether its intake is open.
func (c *cellAdmin) open() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.intake
}

func (c *cellAdmin) set(f func(c *cellAdmin)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c)
}

// admins serves every cell's admin API: a host of cell X's
// (cellkit-cell-X.NS.svc, cellkit-cell-X-N.cellkit-cells.NS.svc) is
// answered by cells[X].
type admins struct {
	mu    sync.Mutex
	cells map[string]*cellAdmin
	srv   *httptest.Server
	// kube and ns, when set, are where a pod's host is looked up
	// (pods_test.go): the releases' bench.
	kube client.Client
	ns   string
}

func newAdmins(t *testing.T) *admins {
	a := &admins{cells: map[string]*cellAdmin{}}
	a.srv = httptest.NewTLSServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.srv.Close)
	return a
}

// cell is the admin API of cell id (made on first use, ready, empty).
func (a *admins) cell(id string) *cellAdmin {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.cells[id]
	if !ok {
		c = &cellAdmin{release: "v1@aaaa", intake: true}
		a.cells[id] = c
	}
	return c
}

func cellOfHost(host string) string {
	name, _, _ := strings.Cut(host, ".")
	id := strings.TrimPrefix(name, "cellkit-cell-")
	if strings.Contains(host, ".cellkit-cells.") {
		id = id[:strings.LastIndexByte(id, '-')]
	}
	return id
}

func (a *admins) serve(w http.ResponseWriter, r *http.Request) {
	if a.servePod(w, r) {
		return
	}
	c := a.cell(cellOfHost(r.Host))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	switch r.URL.Path {
	case "/v1/admin/status":
		intake := "closed"
		if c.intake {
			intake = "open"
		}
		_ = json.NewEncoder(w).Encode(api.CellStatus{Cell: cellOfHost(r.Host), Release: api.Release{ID: c.release}, Intake: intake, Ready: true,
			Queue: api.QueueStatus{Depth: map[string]int64{"normal": c.depth}}, Sampled: time.Now()})
	case "/v1/admin/intake/close":
		c.intake = false
		_, _ = w.Write([]byte("{}"))
	case "/v1/admin/intake/open":
		if c.starting {
			problem.Write(w, problem.New(http.StatusConflict, problem.NotReady, "the cell is starting or stopping; its intake cannot open"))
			return
		}
		c.intake = true
		_, _ = w.Write([]byte("{}"))
	default:
		http.NotFound(w, r)
	}
}

// client is an admin client whose every connection goes to the test's
// server, checked against its certificate (issued for example.com).
func (a *admins) client() adminclient.Client {
	tr := a.srv.Client().Transport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: tr.TLSClientConfig.RootCAs, ServerName: "example.com"}
	addr := a.srv.Listener.Addr().String()
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	return adminclient.Client{HTTP: &http.Client{Transport: tr, Timeout: 5 * time.Second}}
}

// bench is a cluster, a map and the cells' admin APIs.
type bench struct {
	t      *testing.T
	kube   *kubetest.Cluster
	reg    registry.Registry
	ctl    *control.Controller
	admins *admins
	ns     string
}

func crdDir() string { return filepath.Join("..", "..", "deploy", "kubernetes", "operator", "crd") }

func newBench(t *testing.T, opts ...kubetest.Option) *bench {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver: skipped with -short (make check)")
	}
	scheme, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	kube := kubetest.Start(t, append([]kubetest.Option{kubetest.WithCRDs(crdDir()), kubetest.WithScheme(scheme)}, opts...)...)
	reg, err := registry.NewFile(registry.FileConfig{Path: filepath.Join(t.TempDir(), "map.json")}, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	b := &bench{t: t, kube: kube, reg: reg, admins: newAdmins(t), ns: "default"}
	b.ctl = control.New(reg, control.Config{Holder: "cellkit-operator (test)"}, control.Options{})
	m, err := slotmap.New(64, map[string]int{"nice": 80})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.ctl.Init(context.Background(), control.InitChange{Map: m}); err != nil {
		t.Fatal(err)
	}
	return b
}

// start runs an operator against the bench until the test ends; it
// returns what stops it sooner.
func (b *bench) start(cfg operator.ManagerConfig, ctl *control.Controller) (stop func()) {
	return b.startWith(cfg, ctl, nil)
}

// startWith is start with the operator's releaser too (rel not nil).
func (b *bench) startWith(cfg operator.ManagerConfig, ctl *control.Controller, rel *operator.ReleaseConfig) (stop func()) {
	t := b.t
	mgr, err := operator.NewManager(b.kube.Config, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := operator.New(operator.Config{DrainStep: 500 * time.Millisecond, Recheck: 2 * time.Second}, operator.Options{
		Client: mgr.GetClient(), Control: ctl, Admin: b.admins.client(), Events: mgr.GetEventRecorder("cellkit-operator"), Log: testkit.Logger()})
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if rel != nil {
		if err := mgr.Add(r.Releaser(*rel)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("operator: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// newCell is a Cell of the bench's namespace with the API server's
// defaults to come.
func (b *bench) newCell(id string, mut ...func(*v1alpha1.Cell)) *v1alpha1.Cell {
	c := &v1alpha1.Cell{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: b.ns}, Spec: v1alpha1.CellSpec{Image: "registry.example.com/cellkit/cell:0.1.0"}}
	for _, f := range mut {
		f(c)
	}
	return c
}

func (b *bench) create(c *v1alpha1.Cell) {
	b.t.Helper()
	if err := b.kube.Client.Create(context.Background(), c); err != nil {
		b.t.Fatalf("create cell %s: %v", c.Name, err)
	}
}

// get is cell id as the API server has it (nil: gone).
func (b *bench) get(id string) *v1alpha1.Cell {
	c := &v1alpha1.Cell{}
	if err := b.kube.Client.Get(context.Background(), types.NamespacedName{Namespace: b.ns, Name: id}, c); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil
		}
		b.t.Fatalf("get cell %s: %v", id, err)
	}
	return c
}

// update changes cell id's spec, again on a conflict.
func (b *bench) update(id string, f func(*v1alpha1.Cell)) {
	b.t.Helper()
	testkit.WaitFor(b.t, within, "cell "+id+" updated", func() bool {
		c := b.get(id)
		f(c)
		return b.kube.Client.Update(context.Background(), c) == nil
	})
}

// setReady plays the StatefulSet controller: cell id's instances, ready
// of them ready, at its StatefulSet's generation.
func (b *bench) setReady(id string, ready int32) {
	b.t.Helper()
	testkit.WaitFor(b.t, within, "the StatefulSet of "+id+" ready", func() bool {
		sts := &appsv1.StatefulSet{}
		if err := b.kube.Client.Get(context.Background(), types.NamespacedName{Namespace: b.ns, Name: operator.ObjectName(id)}, sts); err != nil {
			return false
		}
		sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, Replicas: *sts.Spec.Replicas, ReadyReplicas: ready,
			AvailableReplicas: ready, CurrentReplicas: *sts.Spec.Replicas, UpdatedReplicas: *sts.Spec.Replicas}
		return b.kube.Client.Status().Update(context.Background(), sts) == nil
	})
}

// mapCell is cell id in the map (ok false: not there).
func (b *bench) mapCell(id string) (slotmap.Cell, bool, *slotmap.Map) {
	m, err := b.ctl.Load(context.Background())
	if err != nil {
		b.t.Fatal(err)
	}
	c, ok := m.Cell(id)
	return c, ok, m
}

// waitCondition waits until cell id's condition typ has status and
// reason (reason "": any).
func (b *bench) waitCondition(id, typ string, status metav1.ConditionStatus, reason string) *v1alpha1.Cell {
	b.t.Helper()
	var c *v1alpha1.Cell
	if !testkit.Poll(within, func() bool {
		c = b.get(id)
		if c == nil {
			return false
		}
		for _, cd := range c.Status.Conditions {
			if cd.Type == typ && cd.Status == status && (reason == "" || cd.Reason == reason) {
				return true
			}
		}
		return false
	}) {
		b.t.Fatalf("cell %s: no condition %s=%s (%s); status %+v", id, typ, status, reason, c)
	}
	return c
}
