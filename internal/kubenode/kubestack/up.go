package kubestack

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellkit/cellkit/internal/backoff"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/kubenode"
	"github.com/cellkit/cellkit/internal/operator/api/v1alpha1"
	"github.com/cellkit/cellkit/internal/pki"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

// fieldOwner is the stack's name as a server-side apply manager.
const fieldOwner = "cellkit-stack"

// Up installs the stack on the node in cfg.Node, or completes it: Consul
// started if it does not run (a new one is empty: its token, the Secret
// and the map are made again), the Secrets and the map made or kept, the
// overlay applied, and every Cell and the routers waited for.
func Up(ctx context.Context, cfg Config, opts Options) (*Stack, error) {
	rec, err := kubenode.ReadRecord(cfg.Node)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.ReadyWait)
	defer cancel()
	for _, d := range []string{dir(cfg), filepath.Join(dir(cfg), "logs")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	st, err := Read(cfg.Node)
	if err != nil {
		st = &Stack{}
	}
	if err := consul(ctx, cfg, rec, st, opts); err != nil {
		return nil, err
	}
	if err := secrets(ctx, cfg, st); err != nil {
		return nil, err
	}
	if err := st.save(cfg); err != nil {
		return nil, err
	}
	c, err := rec.Client(Scheme())
	if err != nil {
		return nil, err
	}
	if err := applyObjects(ctx, c, objects(rec.NodeIP, st)); err != nil {
		return nil, err
	}
	opts.say("stack: namespace %s, its Secrets and the consul-server Service", Namespace)
	if err := initMap(ctx, st); err != nil {
		return nil, err
	}
	if err := apply(ctx, cfg, rec); err != nil {
		return nil, err
	}
	opts.say("stack: %s applied", cfg.Overlay)
	if st.Cells, err = waitCells(ctx, c); err != nil {
		return nil, err
	}
	opts.say("stack: cells %s ready and in the map", strings.Join(st.Cells, ", "))
	if st.Router, err = waitRouters(ctx, c, st); err != nil {
		return nil, err
	}
	opts.say("stack: routers serve at %s", st.Router)
	return st, st.save(cfg)
}

// consul starts the stack's Consul on the node's address unless it runs,
// and makes the cellkit policy's token in a new one.
func consul(ctx context.Context, cfg Config, rec *kubenode.Record, st *Stack, opts Options) error {
	if st.Consul.PID != 0 && devstack.Alive(st.Consul.PID) {
		return nil
	}
	st.ConsulRoot = secret(16)
	p := devstack.ConsulProcess(filepath.Join(cfg.Bin, "consul"), rec.NodeIP, st.ConsulRoot, filepath.Join(dir(cfg), "logs", "consul.log"))
	child, err := devstack.Start(p)
	if err != nil {
		return err
	}
	st.Consul = child.Process
	if err := kubenode.Adopt(cfg.Node, child.Process); err != nil {
		return err
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	defer hc.CloseIdleConnections()
	if err := devstack.WaitReady(ctx, hc, cfg.ReadyWait, child); err != nil {
		return err
	}
	addr := netip.AddrPortFrom(rec.NodeIP, devstack.ConsulHTTP).String()
	if err := devstack.WaitConsul(ctx, hc, addr, st.ConsulRoot, cfg.ReadyWait); err != nil {
		return err
	}
	if st.ConsulToken, err = devstack.CellkitConsulToken(addr, st.ConsulRoot); err != nil {
		return err
	}
	st.Registry = "consul://" + addr + "/cellkit"
	opts.say("stack: consul on %s", addr)
	return nil
}

// secrets makes, once, what the Secrets hold: the certificates (a CA and
// one per role, for the names the cells and routers have in the
// namespace), an API key, the admin and NATS tokens.
func secrets(ctx context.Context, cfg Config, st *Stack) error {
	certs := filepath.Join(dir(cfg), "certs")
	if _, err := os.Stat(filepath.Join(certs, pki.DevCA)); err != nil {
		hosts := []string{"*." + Namespace + ".svc", "*.cellkit-cells." + Namespace + ".svc", RouterName, "localhost", "127.0.0.1"}
		if err := pki.WriteDev(certs, hosts); err != nil {
			return err
		}
	}
	st.CA = filepath.Join(certs, pki.DevCA)
	if st.APIKey == "" {
		key, err := devstack.APIKey(ctx, filepath.Join(cfg.Bin, "router"), dir(cfg), "loadtest", true)
		if err != nil {
			return err
		}
		st.APIKey = key
	}
	if st.Tokens == nil {
		st.Tokens = map[string]string{"cellctl": secret(24), "prometheus": secret(24), "operator": secret(24)}
	}
	if st.NATSToken == "" {
		st.NATSToken, st.NATSRoutePassword = secret(24), secret(24)
	}
	return nil
}

// objects are what the stack makes beside the overlay: the namespace
// (the overlay's, so that the Secrets can go in first), the Secrets, and
// Consul's Service in namespace consul, whose one endpoint is the node.
func objects(node netip.Addr, st *Stack) []*unstructured.Unstructured {
	certs := filepath.Dir(st.CA)
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(certs, name)) // written by secrets; a missing one fails the pods, visibly
		return string(b)
	}
	keys, _ := os.ReadFile(filepath.Join(filepath.Dir(certs), "router", "keys.json"))
	secretOf := func(name string, data map[string]string) *unstructured.Unstructured {
		d := map[string]any{}
		for k, v := range data {
			d[k] = v
		}
		return obj("v1", "Secret", Namespace, name, map[string]any{"type": "Opaque", "stringData": d})
	}
	t := st.Tokens
	return []*unstructured.Unstructured{
		obj("v1", "Namespace", "", Namespace, map[string]any{"metadata": map[string]any{"name": Namespace,
			"labels": map[string]any{"pod-security.kubernetes.io/enforce": "restricted"}}}),
		obj("v1", "Namespace", "", "consul", nil),
		secretOf("cellkit-api-keys", map[string]string{"keys.json": string(keys)}),
		secretOf("cellkit-admin-token", map[string]string{"tokens": t["cellctl"] + "\n" + t["prometheus"] + "\n" + t["operator"] + "\n",
			"cellctl": t["cellctl"], "prometheus": t["prometheus"], "operator": t["operator"]}),
		secretOf("cellkit-consul", map[string]string{"token": st.ConsulToken}),
		secretOf("cellkit-nats", map[string]string{"token": st.NATSToken, "route-password": st.NATSRoutePassword}),
		secretOf("cellkit-public-tls", map[string]string{"tls.crt": read(pki.DevRouter + ".pem"), "tls.key": read(pki.DevRouter + "-key.pem")}),
		secretOf("cellkit-router-tls", map[string]string{"tls.crt": read(pki.DevRouter + ".pem"), "tls.key": read(pki.DevRouter + "-key.pem"), "ca.crt": read(pki.DevCA)}),
		secretOf("cellkit-cell-tls", map[string]string{"tls.crt": read(pki.DevCell + ".pem"), "tls.key": read(pki.DevCell + "-key.pem"), "ca.crt": read(pki.DevCA)}),
		obj("v1", "Service", "consul", "consul-server", map[string]any{"spec": map[string]any{
			"ports": []any{map[string]any{"name": "http", "port": int64(devstack.ConsulHTTP), "protocol": "TCP"}}}}),
		obj("discovery.k8s.io/v1", "EndpointSlice", "consul", "consul-server-node", map[string]any{
			"metadata":    map[string]any{"labels": map[string]any{"kubernetes.io/service-name": "consul-server", "endpointslice.kubernetes.io/managed-by": fieldOwner}},
			"addressType": "IPv4",
			"endpoints":   []any{map[string]any{"addresses": []any{node.String()}, "conditions": map[string]any{"ready": true}}},
			"ports":       []any{map[string]any{"name": "http", "port": int64(devstack.ConsulHTTP), "protocol": "TCP"}},
		}),
	}
}

// obj is an object of apiVersion and kind named name in namespace ns
// ("" for a cluster's), with the fields of rest (metadata merged).
func obj(apiVersion, kind, ns, name string, rest map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind}}
	for k, v := range rest {
		u.Object[k] = v
	}
	u.SetName(name)
	if ns != "" {
		u.SetNamespace(ns)
	}
	return u
}

func applyObjects(ctx context.Context, c client.Client, objs []*unstructured.Unstructured) error {
	for _, u := range objs {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("apply %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}

// initMap makes the map with the agencies' limits if the registry has
// none (cellctl init); the operator provisions the cells.
func initMap(ctx context.Context, st *Stack) error {
	reg, err := registry.Open(registry.Config{URL: st.Registry, Token: st.ConsulToken}, registry.Options{})
	if err != nil {
		return err
	}
	defer reg.Close()
	const origin = "loadtest cluster stack"
	ctl := control.New(reg, control.Config{Holder: control.Holder(origin), Origin: origin}, control.Options{})
	return ctl.Ensure(ctx, control.EnsureChange{Agencies: devstack.Agencies})
}

// apply applies the overlay with kubectl as its administrator: once for
// the Cell resource's definition, then, once the API server serves it,
// again for the Cells.
func apply(ctx context.Context, cfg Config, rec *kubenode.Record) error {
	kubectl := filepath.Join(cfg.Bin, "kube", "kubectl")
	run := func(args ...string) error {
		cmd := exec.CommandContext(ctx, kubectl, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+rec.Kubeconfig)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	// The first apply fails on the Cells, whose kind is not served yet.
	_ = run("apply", "--server-side", "--field-manager", fieldOwner, "-k", cfg.Overlay)
	if err := run("wait", "--for", "condition=established", "--timeout", "60s", "crd/cells.cellkit.io"); err != nil {
		return err
	}
	return run("apply", "--server-side", "--field-manager", fieldOwner, "-k", cfg.Overlay)
}

// waitCells waits until every Cell of the namespace is Ready and in the
// map, and returns their names.
func waitCells(ctx context.Context, c client.Client) ([]string, error) {
	last := "no Cell"
	for {
		var cells v1alpha1.CellList
		if err := c.List(ctx, &cells, client.InNamespace(Namespace)); err == nil {
			var names, waiting []string
			for _, cell := range cells.Items {
				names = append(names, cell.Name)
				if !conditionTrue(cell, v1alpha1.ConditionReady) || !conditionTrue(cell, v1alpha1.ConditionInMap) {
					waiting = append(waiting, fmt.Sprintf("%s %s (%s)", cell.Name, cell.Status.Phase, cell.Status.Ready))
				}
			}
			if len(names) > 0 && len(waiting) == 0 {
				return names, nil
			}
			if len(waiting) > 0 {
				last = strings.Join(waiting, ", ")
			}
		}
		if err := backoff.Sleep(ctx, time.Second); err != nil {
			return nil, fmt.Errorf("cells not ready: %s (%w)", last, err)
		}
	}
}

// Scheme is client-go's types and the Cell's: a client of the stack's
// cluster reads and writes both.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s) // adding known types to a new scheme does not fail
	_ = v1alpha1.AddToScheme(s)
	return s
}

// probeRouter reports whether the routers answer HTTPS at url with the
// certificate of RouterName: any HTTP answer (without an API key, a
// refusal) says they serve.
func probeRouter(ctx context.Context, url, ca string) error {
	hc, err := routerClient(ca)
	if err != nil {
		return err
	}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// routerClient is a client of the routers' Service from this host: it
// trusts the stack's CA and asks for RouterName.
func routerClient(ca string) (*http.Client, error) {
	pool, err := tlsconf.LoadPool(ca)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, ServerName: RouterName, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}, nil
}

func conditionTrue(c v1alpha1.Cell, typ string) bool {
	for _, cond := range c.Status.Conditions {
		if cond.Type == typ {
			return cond.Status == "True"
		}
	}
	return false
}

// waitRouters waits until the routers' Deployment is available and their
// Service answers /healthz from this host, and returns its URL.
func waitRouters(ctx context.Context, c client.Client, st *Stack) (string, error) {
	last := "no Deployment cellkit-router"
	for {
		var d appsv1.Deployment
		var svc corev1.Service
		if err := c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: "cellkit-router"}, &d); err == nil {
			last = fmt.Sprintf("%d of %d routers available", d.Status.AvailableReplicas, ptrOr(d.Spec.Replicas, 1))
			if d.Status.AvailableReplicas == ptrOr(d.Spec.Replicas, 1) && c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: "cellkit-router"}, &svc) == nil {
				url := "https://" + svc.Spec.ClusterIP
				err := probeRouter(ctx, url, st.CA)
				if err == nil {
					return url, nil
				}
				last = err.Error()
			}
		}
		if err := backoff.Sleep(ctx, time.Second); err != nil {
			return "", fmt.Errorf("routers: %s (%w)", last, err)
		}
	}
}

func ptrOr(p *int32, v int32) int32 {
	if p == nil {
		return v
	}
	return *p
}
