package kubetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellkit/cellkit/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// widgetCRD is a namespaced resource whose schema the server enforces
// (spec.size at least 1).
const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.kubetest.cellkit.dev
spec:
  group: kubetest.cellkit.dev
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1}
`

var widgetGVK = schema.GroupVersionKind{Group: "kubetest.cellkit.dev", Version: "v1", Kind: "Widget"}

func TestCluster(t *testing.T) {
	crds := t.TempDir()
	if err := os.WriteFile(filepath.Join(crds, "widget.yaml"), []byte(widgetCRD), 0o644); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	c := Start(t, WithCRDs(crds))
	t.Logf("Start took %v", time.Since(began).Round(10*time.Millisecond))
	ctx := t.Context()

	// A watch "from now" (no resource version) on a resource nothing
	// writes: the API server serves it from its watch cache once etcd's
	// progress notifications tell it the cache is current. Before etcd 3.4.31
	// it does not ask for them, and such a watch ends with 504 "Too large
	// resource version" after 3 s (the subtest at the end).
	quiet, err := c.Client.Watch(ctx, &corev1.SecretList{}, client.InNamespace("default"))
	if err != nil {
		t.Fatalf("watch Secrets: %v", err)
	}
	defer quiet.Stop()
	quietSince := time.Now()

	t.Run("version", func(t *testing.T) {
		dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
		if err != nil {
			t.Fatal(err)
		}
		v, err := dc.ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		if v.GitVersion != "v1.37.2" {
			t.Errorf("server version %q, want v1.37.2 (scripts/install-kube.sh stamps it)", v.GitVersion)
		}
	})

	t.Run("namespace, ConfigMap and a watch", func(t *testing.T) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kubetest"}}
		if err := c.Client.Create(ctx, ns); err != nil {
			t.Fatalf("create namespace: %v", err)
		}
		var list corev1.ConfigMapList
		if err := c.Client.List(ctx, &list, client.InNamespace(ns.Name)); err != nil {
			t.Fatalf("list ConfigMaps: %v", err)
		}
		w, err := c.Client.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns.Name),
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
		if err != nil {
			t.Fatalf("watch ConfigMaps: %v", err)
		}
		defer w.Stop()

		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "settings"},
			Data:       map[string]string{"cells": "4"},
		}
		if err := c.Client.Create(ctx, cm); err != nil {
			t.Fatalf("create ConfigMap: %v", err)
		}
		if got := next(t, w, watch.Added); got.Data["cells"] != "4" {
			t.Errorf("added ConfigMap data %v, want cells=4", got.Data)
		}
		cm.Data["cells"] = "5"
		if err := c.Client.Update(ctx, cm); err != nil {
			t.Fatalf("update ConfigMap: %v", err)
		}
		if got := next(t, w, watch.Modified); got.Data["cells"] != "5" {
			t.Errorf("modified ConfigMap data %v, want cells=5", got.Data)
		}
		if err := c.Client.Delete(ctx, cm); err != nil {
			t.Fatalf("delete ConfigMap: %v", err)
		}
		next(t, w, watch.Deleted)
	})

	// What a controller reads through: an informer lists, then watches. The
	// API server refuses the streaming list (sendInitialEvents) on etcd
	// 3.4.23, which lacks RequestWatchProgress; client-go falls back to
	// list and watch (docs/testing.md).
	// A streaming list (sendInitialEvents: client-go's informers ask for it
	// first) needs the same progress notifications.
	t.Run("streaming list", func(t *testing.T) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "streamed"}}
		if err := c.Client.Create(ctx, cm); err != nil {
			t.Fatalf("create ConfigMap: %v", err)
		}
		initial := true
		w, err := c.Client.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace("default"),
			&client.ListOptions{Raw: &metav1.ListOptions{
				SendInitialEvents:    &initial,
				ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
				AllowWatchBookmarks:  true,
			}})
		if err != nil {
			t.Fatalf("watch ConfigMaps with sendInitialEvents: %v", err)
		}
		defer w.Stop()
		var names []string
		for {
			ev := nextEvent(t, w)
			switch ev.Type {
			case watch.Added:
				names = append(names, ev.Object.(*corev1.ConfigMap).Name)
				continue
			case watch.Bookmark:
				if ev.Object.(*corev1.ConfigMap).Annotations[metav1.InitialEventsAnnotationKey] != "true" {
					continue
				}
			default:
				t.Fatalf("streaming list: %s event %+v, want the ConfigMaps then the initial-events-end bookmark", ev.Type, ev.Object)
			}
			break
		}
		if !slices.Contains(names, "streamed") {
			t.Errorf("streaming list sent %v, want streamed among them", names)
		}
	})

	t.Run("a controller-runtime cache syncs and follows", func(t *testing.T) {
		informers, err := cache.New(c.Config, cache.Options{Scheme: c.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		cctx, stop := context.WithCancel(ctx)
		stopped := make(chan error, 1)
		go func() { stopped <- informers.Start(cctx) }()
		defer func() {
			stop()
			if err := <-stopped; err != nil {
				t.Errorf("cache: %v", err)
			}
		}()
		if !informers.WaitForCacheSync(cctx) {
			t.Fatal("the cache did not sync")
		}
		var seen corev1.ConfigMapList
		if err := informers.List(cctx, &seen, client.InNamespace("default")); err != nil {
			t.Fatalf("list from the cache: %v", err)
		}
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "followed"},
			Data:       map[string]string{"cells": "2"},
		}
		if err := c.Client.Create(ctx, cm); err != nil {
			t.Fatalf("create ConfigMap: %v", err)
		}
		testkit.WaitFor(t, 10*time.Second, "the cache to see the new ConfigMap", func() bool {
			var got corev1.ConfigMap
			return informers.Get(cctx, client.ObjectKeyFromObject(cm), &got) == nil && got.Data["cells"] == "2"
		})
	})

	t.Run("CRD installed and served", func(t *testing.T) {
		if len(c.CRDs) != 1 || c.CRDs[0].Name != "widgets.kubetest.cellkit.dev" {
			t.Fatalf("installed CRDs %v, want widgets.kubetest.cellkit.dev", crdNames(c.CRDs))
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := c.Client.Get(ctx, client.ObjectKey{Name: "widgets.kubetest.cellkit.dev"}, &crd); err != nil {
			t.Fatalf("get CRD: %v", err)
		}
		if !established(&crd) {
			t.Errorf("CRD conditions %+v, want Established", crd.Status.Conditions)
		}

		w := widget("default", "small", 3)
		if err := c.Client.Create(ctx, w); err != nil {
			t.Fatalf("create Widget: %v", err)
		}
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(widgetGVK)
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(w), got); err != nil {
			t.Fatalf("get Widget: %v", err)
		}
		if size, _, _ := unstructured.NestedInt64(got.Object, "spec", "size"); size != 3 {
			t.Errorf("Widget spec.size = %d, want 3", size)
		}
		// The server holds objects to the CRD's schema.
		err := c.Client.Create(ctx, widget("default", "empty", 0))
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.size") {
			t.Errorf("create Widget with spec.size 0: %v, want Invalid on spec.size", err)
		}
	})

	t.Run("a watch from now on a quiet resource", func(t *testing.T) {
		// Lets the 3 s pass in which the API server gives up on a watch
		// cache it cannot show current, to show that it does not.
		time.Sleep(time.Until(quietSince.Add(3500 * time.Millisecond)))
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "late"}}
		if err := c.Client.Create(ctx, s); err != nil {
			t.Fatalf("create Secret: %v", err)
		}
		ev := nextEvent(t, quiet)
		if got, ok := ev.Object.(*corev1.Secret); ev.Type != watch.Added || !ok || got.Name != "late" {
			t.Fatalf("watch from now: %s event %+v, want Added of Secret late", ev.Type, ev.Object)
		}
	})
}

func widget(ns, name string, size int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{"size": size},
	}}
	u.SetGroupVersionKind(widgetGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

func crdNames(crds []*apiextensionsv1.CustomResourceDefinition) []string {
	var names []string
	for _, c := range crds {
		names = append(names, c.Name)
	}
	return names
}

// next is the watch's next event, which must be of type want and carry a
// ConfigMap.
func next(t *testing.T, w watch.Interface, want watch.EventType) *corev1.ConfigMap {
	t.Helper()
	ev := nextEvent(t, w)
	cm, isCM := ev.Object.(*corev1.ConfigMap)
	if ev.Type != want || !isCM {
		t.Fatalf("watch event %s %+v, want %s of a ConfigMap", ev.Type, ev.Object, want)
	}
	return cm
}

// nextEvent is the watch's next event, within 10 s.
func nextEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch closed, want an event")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event within 10s")
	}
	return watch.Event{}
}

// TestMissingBinariesSayRunMakeTools: without any binary it needs Start
// fails (never skips: make test runs make tools first) and says what to
// run; kube-controller-manager is needed with WithControllers only.
func TestMissingBinariesSayRunMakeTools(t *testing.T) {
	for _, tc := range []struct {
		have    []string
		opts    []Option
		missing string
	}{
		{nil, nil, "kube-apiserver"},
		{[]string{"kube-apiserver"}, nil, "etcd"},
		{[]string{"etcd"}, nil, "kube-apiserver"},
		{[]string{"kube-apiserver", "etcd"}, []Option{WithControllers(StatefulSetController)}, "kube-controller-manager"},
	} {
		t.Run(fmt.Sprintf("only %v", tc.have), func(t *testing.T) {
			dir := t.TempDir()
			for _, b := range tc.have {
				writeScript(t, filepath.Join(dir, b), "exit 0")
			}
			t.Setenv(EnvAssets, dir)
			r := run(t, func(tb testing.TB) { Start(tb, tc.opts...) })
			if !strings.Contains(r.fatal, "run `make tools`") || !strings.Contains(r.fatal, tc.missing+" not found") {
				t.Errorf("Start failed with %q, want it to say %s is missing and to run `make tools`", r.fatal, tc.missing)
			}
		})
	}
}

// TestControllersByFullName: WithControllers takes controllers by the
// full names the controller manager's /healthz lists, which Start waits
// for; an alias or a pattern fails the test before anything starts.
func TestControllersByFullName(t *testing.T) {
	t.Setenv(EnvAssets, t.TempDir()) // nothing to start: the names are refused first
	for _, name := range []string{"statefulset", "*", "-statefulset-controller", "statefulset-controller,garbage-collector-controller", ""} {
		r := run(t, func(tb testing.TB) { Start(tb, WithControllers(StatefulSetController, name)) })
		if !strings.Contains(r.fatal, fmt.Sprintf("WithControllers(%q)", name)) || !strings.Contains(r.fatal, "full name") {
			t.Errorf("WithControllers(%q): Start failed with %q, want it to ask for the full name", name, r.fatal)
		}
	}
}

// TestAFailedControllerManagerShowsItsLog: a controller manager that
// exits (it knows no such controller) fails Start at once, and the failed
// test prints the tail of its log with the API server's.
func TestAFailedControllerManagerShowsItsLog(t *testing.T) {
	began := time.Now()
	r := run(t, func(tb testing.TB) { Start(tb, WithControllers("no-such-controller")) })
	if !strings.Contains(r.fatal, "start kube-controller-manager with no-such-controller") || !strings.Contains(r.fatal, "exited") {
		t.Errorf("Start failed with %q, want it to say the controller manager exited", r.fatal)
	}
	if took := time.Since(began); took > startTimeout/2 {
		t.Errorf("Start failed after %v, want it to fail once the controller manager exits, not at its timeout", took)
	}
	logs := strings.Join(r.logs, "\n")
	if !strings.Contains(logs, `\"no-such-controller\" is not in the list of known controllers`) || !strings.Contains(logs, "kube-apiserver.log") {
		t.Errorf("the failed test logged:\n%s\nwant the tail of kube-controller-manager.log and kube-apiserver.log", logs)
	}
}

// TestAFailedStartShowsTheLogs: an API server that cannot start fails the
// test, and the failed test prints the tail of its log.
func TestAFailedStartShowsTheLogs(t *testing.T) {
	assets := assetsDir(t)
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(assets, "etcd"), filepath.Join(dir, "etcd")); err != nil {
		t.Fatal(err)
	}
	// envtest reads the flags from --help before it starts the server.
	writeScript(t, filepath.Join(dir, "kube-apiserver"),
		`case "$1" in --help) echo "      --secure-port int"; exit 0;; esac
echo "E0101 kube-apiserver: cannot reach the moon" >&2
exit 1`)
	t.Setenv(EnvAssets, dir)
	r := run(t, func(tb testing.TB) { Start(tb) })
	if !strings.Contains(r.fatal, "start etcd and kube-apiserver") {
		t.Errorf("Start failed with %q, want it to say the start failed", r.fatal)
	}
	logs := strings.Join(r.logs, "\n")
	if !strings.Contains(logs, "cannot reach the moon") || !strings.Contains(logs, "etcd.log") {
		t.Errorf("the failed test logged:\n%s\nwant the tail of kube-apiserver.log and etcd.log", logs)
	}
}

func TestTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte("a\nb\nc\nd\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for n, want := range map[int]string{1: "d", 2: "c\nd", 4: "a\nb\nc\nd", 9: "a\nb\nc\nd"} {
		if got := tail(path, n); got != want {
			t.Errorf("tail(%d) = %q, want %q", n, got, want)
		}
	}
	if got := tail(filepath.Join(t.TempDir(), "none"), 3); !strings.Contains(got, "no log") {
		t.Errorf("tail of a missing file = %q, want it to say there is no log", got)
	}
}

func writeScript(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// recorder is a testing.TB that records what a helper logs and how it
// fails, and runs its cleanups when the helper returns or fails; the rest
// (TempDir, Setenv) is the real test's.
type recorder struct {
	testing.TB
	mu       sync.Mutex
	logs     []string
	fatal    string
	failed   bool
	cleanups []func()
}

// run calls fn with a recorder, then its cleanups, as the testing package
// would for a test.
func run(t *testing.T, fn func(testing.TB)) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			for i := len(r.cleanups) - 1; i >= 0; i-- {
				r.cleanups[i]()
			}
		}()
		fn(r)
	}()
	<-done
	return r
}

func (r *recorder) Helper() {}

func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }

func (r *recorder) Logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}

func (r *recorder) Errorf(format string, args ...any) {
	r.Logf(format, args...)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.fatal, r.failed = fmt.Sprintf(format, args...), true
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recorder) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }

func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}
