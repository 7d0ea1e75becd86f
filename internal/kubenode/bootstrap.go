package kubenode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/cellkit/cellkit/internal/backoff"
	"github.com/cellkit/cellkit/internal/devstack"
)

// fieldOwner is the cluster's own name as a server-side apply manager.
const fieldOwner = "cellkit-cluster"

// Client is a client of the cluster as its administrator, of the types
// of scheme (nil: client-go's).
func (r *Record) Client(scheme *runtime.Scheme) (client.Client, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", r.Kubeconfig)
	if err != nil {
		return nil, err
	}
	return client.New(rc, client.Options{Scheme: scheme})
}

// Adopt records p, a process another package started for the cluster in
// dir (the stack's Consul), in the cluster's record: Down stops it first.
func Adopt(dir string, p devstack.Process) error {
	rec, err := ReadRecord(dir)
	if err != nil {
		return err
	}
	rec.Procs = append(removeProc(rec.Procs, p.Name), p)
	return rec.save(dir)
}

// adminClient is the administrator's client of the node's API server,
// made once.
func (n *node) adminClient() (client.Client, error) {
	if n.admin == nil {
		c, err := (&Record{Kubeconfig: n.p.kubeconfig(idAdmin)}).Client(nil)
		if err != nil {
			return nil, err
		}
		n.admin = c
	}
	return n.admin, nil
}

// bootstrap applies the cluster's own objects: CoreDNS's permissions, the
// kube-dns Service at the DNS address the kubelet gives pods, whose one
// endpoint is CoreDNS on the node (a Service without a selector: its
// EndpointSlice is the cluster's), and the volumes (localVolumes).
func (n *node) bootstrap(ctx context.Context) error {
	c, err := n.adminClient()
	if err != nil {
		return err
	}
	docs := fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: %[1]s
rules:
  - apiGroups: [""]
    resources: [endpoints, services, pods, namespaces]
    verbs: [list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: %[1]s
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: %[1]s
subjects:
  - apiGroup: rbac.authorization.k8s.io
    kind: User
    name: %[1]s
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  clusterIP: %[2]s
  ports:
    - {name: dns, port: 53, protocol: UDP, targetPort: 53}
    - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-node
  namespace: kube-system
  labels:
    kubernetes.io/service-name: kube-dns
    endpointslice.kubernetes.io/managed-by: %[4]s
addressType: IPv4
endpoints:
  - addresses: [%[3]s]
    conditions: {ready: true}
ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
`, corednsUser, n.dnsIP, n.cfg.NodeIP, fieldOwner)
	for _, doc := range strings.Split(docs, "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return err
		}
		u := &unstructured.Unstructured{Object: obj}
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("apply %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return n.localVolumes(ctx, c)
}

// Volumes is how many local volumes the node offers.
const Volumes = 32

// volumeSize is what each local volume says it holds: the node's disk
// is shared, and a local volume's size is not enforced.
const volumeSize = "20Gi"

// localVolumes makes the node's storage: the default StorageClass "local"
// (static local volumes, bound when a pod is scheduled) and Volumes
// volumes of it, each a directory under Dir/volumes. Local volumes, unlike
// hostPath ones, get the pod's fsGroup, so the non-root cells can write
// theirs. A volume released by its claim (a cell deleted) is wiped and
// made again, as a static provisioner would.
func (n *node) localVolumes(ctx context.Context, c client.Client) error {
	sc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
		"metadata":          map[string]any{"name": "local", "annotations": map[string]any{"storageclass.kubernetes.io/is-default-class": "true"}},
		"provisioner":       "kubernetes.io/no-provisioner",
		"volumeBindingMode": "WaitForFirstConsumer",
		"reclaimPolicy":     "Retain",
	}}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(sc), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply StorageClass local: %w", err)
	}
	for i := range Volumes {
		name := fmt.Sprintf("local-%02d", i)
		dir := n.file(filepath.Join("volumes", name))
		var pv corev1.PersistentVolume
		err := c.Get(ctx, client.ObjectKey{Name: name}, &pv)
		switch {
		case err == nil && pv.Status.Phase != corev1.VolumeReleased && pv.Status.Phase != corev1.VolumeFailed:
			continue
		case err == nil:
			if err := c.Delete(ctx, &pv); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			if err := waitGoneObject(ctx, c, name); err != nil {
				return err
			}
		case !apierrors.IsNotFound(err):
			return err
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		v := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "PersistentVolume",
			"metadata": map[string]any{"name": name},
			"spec": map[string]any{
				"capacity":                      map[string]any{"storage": volumeSize},
				"accessModes":                   []any{"ReadWriteOnce"},
				"persistentVolumeReclaimPolicy": "Retain",
				"storageClassName":              "local",
				"local":                         map[string]any{"path": dir},
				"nodeAffinity": map[string]any{"required": map[string]any{"nodeSelectorTerms": []any{map[string]any{
					"matchExpressions": []any{map[string]any{"key": "kubernetes.io/hostname", "operator": "In", "values": []any{NodeName}}},
				}}}},
			},
		}}
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(v), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("apply PersistentVolume %s: %w", name, err)
		}
	}
	return nil
}

// waitGoneObject waits until the PersistentVolume name is gone.
func waitGoneObject(ctx context.Context, c client.Client, name string) error {
	for {
		var pv corev1.PersistentVolume
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &pv); apierrors.IsNotFound(err) {
			return nil
		}
		if err := backoff.Sleep(ctx, 100*time.Millisecond); err != nil {
			return fmt.Errorf("PersistentVolume %s still there: %w", name, err)
		}
	}
}

// waitDefaultServiceAccount waits until the controller manager has made
// the default namespace's service account.
func (n *node) waitDefaultServiceAccount(ctx context.Context) error {
	c, err := n.adminClient()
	if err != nil {
		return err
	}
	for {
		var sa corev1.ServiceAccount
		err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "default"}, &sa)
		if err == nil {
			return nil
		}
		if err := backoff.Sleep(ctx, 100*time.Millisecond); err != nil {
			return fmt.Errorf("no service account default/default: %w", err)
		}
	}
}

// waitNodeReady waits until the node has registered and says it is Ready
// (its runtime and network are up).
func (n *node) waitNodeReady(ctx context.Context) error {
	c, err := n.adminClient()
	if err != nil {
		return err
	}
	last := "not registered"
	for {
		var node corev1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: NodeName}, &node); err == nil {
			last = "no Ready condition"
			for _, cond := range node.Status.Conditions {
				if cond.Type == corev1.NodeReady {
					if cond.Status == corev1.ConditionTrue {
						return nil
					}
					last = fmt.Sprintf("Ready %s: %s", cond.Status, cond.Message)
				}
			}
		}
		if err := backoff.Sleep(ctx, 200*time.Millisecond); err != nil {
			return fmt.Errorf("node %s: %s (%w)", NodeName, last, err)
		}
	}
}
