package release

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	sigsyaml "sigs.k8s.io/yaml"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// kube is deploy/kubernetes.
var kube = filepath.Join(root, "deploy", "kubernetes")

// scheme knows every kind the manifests may hold; any other kind fails
// the decoding.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, policyv1.AddToScheme,
		networkingv1.AddToScheme, monitoringv1.AddToScheme, rbacv1.AddToScheme, apiextensionsv1.AddToScheme, admissionv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// objects is a rendered kustomization, decoded into the API's types.
type objects struct {
	all          []runtime.Object
	namespaces   []*corev1.Namespace
	configMaps   map[string]*corev1.ConfigMap
	services     []*corev1.Service
	deployments  []*appsv1.Deployment
	statefulSets []*appsv1.StatefulSet
	cronJobs     []*batchv1.CronJob
	pdbs         []*policyv1.PodDisruptionBudget
	policies     []*networkingv1.NetworkPolicy
	rules        []*monitoringv1.PrometheusRule
	podMonitors  []*monitoringv1.PodMonitor
	crds         []*apiextensionsv1.CustomResourceDefinition
	// cells are the Cell resources, as written: their kind is the
	// operator's, which this module does not import; `operator render`
	// reads each strictly (TestTheOperatorReadsTheOverlaysCells).
	cells []*unstructured.Unstructured
}

// render builds the kustomization in dir as `kubectl apply -k` would (files
// only from within the kustomization's root) and decodes every object
// strictly: a field the API does not know, a field given twice or a kind
// it does not know fails the test.
func render(t *testing.T, dir string) *objects {
	t.Helper()
	objs, err := build(dir)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func build(dir string) (*objects, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		return nil, err
	}
	objs, err := decodeAll(out)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return objs, nil
}

// fourCellsRendered is the overlay rendered once for every test that only
// reads it.
var fourCellsRendered = sync.OnceValues(func() (*objects, error) { return build(fourCells) })

// renderFourCells is the rendered overlay (shared: do not change it).
func renderFourCells(t *testing.T) *objects {
	t.Helper()
	objs, err := fourCellsRendered()
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func decodeAll(yml []byte) (*objects, error) {
	codec := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{Yaml: true, Strict: true})
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(yml)))
	o := &objects{configMaps: map[string]*corev1.ConfigMap{}}
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		if u, ok := cellResource(doc); ok {
			o.cells = append(o.cells, u)
			continue
		}
		obj, gvk, err := codec.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", firstLines(doc), err)
		}
		o.all = append(o.all, obj)
		switch x := obj.(type) {
		case *corev1.Namespace:
			o.namespaces = append(o.namespaces, x)
		case *corev1.ConfigMap:
			o.configMaps[x.Name] = x
		case *corev1.Service:
			o.services = append(o.services, x)
		case *appsv1.Deployment:
			o.deployments = append(o.deployments, x)
		case *appsv1.StatefulSet:
			o.statefulSets = append(o.statefulSets, x)
		case *batchv1.CronJob:
			o.cronJobs = append(o.cronJobs, x)
		case *policyv1.PodDisruptionBudget:
			o.pdbs = append(o.pdbs, x)
		case *networkingv1.NetworkPolicy:
			o.policies = append(o.policies, x)
		case *monitoringv1.PrometheusRule:
			o.rules = append(o.rules, x)
		case *monitoringv1.PodMonitor:
			o.podMonitors = append(o.podMonitors, x)
		case *apiextensionsv1.CustomResourceDefinition:
			o.crds = append(o.crds, x)
		case *corev1.ServiceAccount, *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding,
			*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding:
		default:
			return nil, fmt.Errorf("%s: a kind the checks do not know: %v", firstLines(doc), gvk)
		}
	}
	return o, nil
}

// cellResource is doc decoded, if it is a cellkit.io Cell.
func cellResource(doc []byte) (*unstructured.Unstructured, bool) {
	u := &unstructured.Unstructured{}
	if err := sigsyaml.Unmarshal(doc, &u.Object); err != nil {
		return nil, false
	}
	return u, u.GetAPIVersion() == "cellkit.io/v1alpha1" && u.GetKind() == "Cell"
}

func firstLines(doc []byte) string {
	lines := strings.SplitN(string(doc), "\n", 5)
	return strings.Join(lines[:min(4, len(lines))], " | ")
}

// workload is a pod template and what runs it.
type workload struct {
	kind, name string
	replicas   int32
	template   *corev1.PodTemplateSpec
	// podName is the name of the workload's first pod, as the
	// controller names it.
	podName string
	claims  []string // a StatefulSet's volume claim templates
}

func (o *objects) workloads() []workload {
	var ws []workload
	for _, d := range o.deployments {
		ws = append(ws, workload{"Deployment", d.Name, ptrOr(d.Spec.Replicas, 1), &d.Spec.Template, d.Name + "-5d8c7b9f4-x2k7q", nil})
	}
	for _, s := range o.statefulSets {
		w := workload{"StatefulSet", s.Name, ptrOr(s.Spec.Replicas, 1), &s.Spec.Template, s.Name + "-0", nil}
		for _, c := range s.Spec.VolumeClaimTemplates {
			w.claims = append(w.claims, c.Name)
		}
		ws = append(ws, w)
	}
	for _, c := range o.cronJobs {
		ws = append(ws, workload{"CronJob", c.Name, 1, &c.Spec.JobTemplate.Spec.Template, c.Name + "-29412360-x2k7q", nil})
	}
	return ws
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
