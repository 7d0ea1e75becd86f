package kubenode_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellkit/cellkit/internal/kubenode"
	"github.com/cellkit/cellkit/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// require skips the test where a node cannot run (not root, the programs
// of make cluster-tools missing), where one already runs (make cluster
// holds the node's ports) and under -short (make check runs packages side
// by side, and the node's check that nothing is left would find another
// package's Kubernetes processes), and returns the configuration of a
// node of the test's own in dir.
func require(t *testing.T) kubenode.Config {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a Kubernetes node of this machine (make test runs it, alone)")
	}
	root, err := testkit.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cfg := kubenode.DefaultConfig()
	cfg.Bin = filepath.Join(root, "bin", "kube")
	if err := kubenode.Available(cfg); err != nil {
		t.Skipf("no Kubernetes node here: %v", err)
	}
	if rec, err := kubenode.ReadRecord(cfg.Dir); err == nil {
		t.Skipf("a cluster is up in %s (%s): make cluster-down first", cfg.Dir, rec.APIServer)
	}
	if c, err := net.DialTimeout("tcp", "127.0.0.1:2379", time.Second); err == nil {
		c.Close()
		t.Skip("something listens on etcd's port 2379")
	}
	cfg.Dir = t.TempDir()
	cfg.Run = filepath.Join("/run", "cellkit-cluster-test")
	cfg.Images = []string{filepath.Join(root, "bin", "images", "agencysim.tar")}
	if _, err := os.Stat(cfg.Images[0]); err != nil {
		t.Skipf("no image to run: %v (make images)", err)
	}
	return cfg
}

// A node made of the real parts runs a pod of the project's image behind
// a Service: reached from this host through the Service's cluster IP
// (kube-proxy), its name resolved through the cluster DNS Service (kube-
// proxy to CoreDNS), its claim bound to a local volume its group owns; a second Up is a no-op that
// finds everything running; Down leaves nothing behind.
func TestANodeRunsPodsAndLeavesNothing(t *testing.T) {
	cfg := require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	var progress strings.Builder
	t.Cleanup(func() {
		if err := kubenode.Down(context.Background(), cfg, kubenode.Options{}); err != nil {
			t.Errorf("down: %v", err)
		}
		if left := kubenode.Leftovers(cfg); len(left) > 0 {
			t.Errorf("left after Down: %v", left)
		}
	})
	start := time.Now()
	rec, err := kubenode.Up(ctx, cfg, kubenode.Options{Progress: &progress})
	if err != nil {
		t.Logf("up:\n%s", progress.String())
		t.Fatal(err)
	}
	t.Logf("up in %v:\n%s", time.Since(start).Round(time.Millisecond), progress.String())
	c, err := rec.Client(nil)
	if err != nil {
		t.Fatal(err)
	}

	// The agency simulator, as a Deployment behind a Service.
	labels := map[string]string{"app": "agencysim"}
	image := "docker.io/cellkit/agencysim:" + imageTag(t, rec)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "agencysim", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532), FSGroup: ptr.To[int64](65532)},
					Volumes:         []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}},
					Containers: []corev1.Container{{
						Name: "agencysim", Image: image, ImagePullPolicy: corev1.PullNever,
						Args:           []string{"--nice-listen=$(POD_IP):7001", "--kcb-listen=$(POD_IP):7002", "--admin-listen=$(POD_IP):9090"},
						Env:            []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(9090)}}, PeriodSeconds: 1},
						VolumeMounts:   []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
					}}},
			},
		},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "agencysim", Namespace: "default"},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "admin", Port: 80, TargetPort: intstr.FromInt32(9090)}}},
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "default"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}
	for _, o := range []client.Object{pvc, dep, svc} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 2*time.Minute, "the agencysim pod ready", func() bool {
		var d appsv1.Deployment
		return c.Get(ctx, client.ObjectKeyFromObject(dep), &d) == nil && d.Status.ReadyReplicas == 1
	})
	if err := c.Get(ctx, client.ObjectKeyFromObject(svc), svc); err != nil {
		t.Fatal(err)
	}
	// Its claim bound to a local volume of the default class, which the
	// pod's group owns.
	if err := c.Get(ctx, client.ObjectKeyFromObject(pvc), pvc); err != nil {
		t.Fatal(err)
	}
	var pv corev1.PersistentVolume
	if err := c.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, &pv); err != nil || pv.Spec.Local == nil {
		t.Fatalf("claim %s bound to %q: %v %+v", pvc.Name, pvc.Spec.VolumeName, err, pv.Spec.PersistentVolumeSource)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(pv.Spec.Local.Path, &st); err != nil || st.Gid != 65532 {
		t.Errorf("volume %s: gid %d (%v), want the pod's fsGroup 65532", pv.Spec.Local.Path, st.Gid, err)
	}

	// Its name through the cluster DNS Service, from this host.
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, netip.AddrPortFrom(rec.DNS, 53).String())
	}}
	addrs, err := r.LookupHost(ctx, "agencysim.default.svc."+kubenode.DNSDomain)
	if err != nil || len(addrs) != 1 || addrs[0] != svc.Spec.ClusterIP {
		t.Fatalf("agencysim.default.svc: %v %v, want %s", addrs, err, svc.Spec.ClusterIP)
	}
	// The pod through the Service's cluster IP, once kube-proxy has its
	// endpoint (until then the Service refuses, or, before kube-proxy has
	// the Service itself, the address is routed out of the host like any
	// other): a new connection each time, since one made before the rule
	// keeps going where it went.
	var last string
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
	if !testkit.Poll(10*time.Second, func() bool {
		resp, err := hc.Get("http://" + svc.Spec.ClusterIP + "/readyz")
		if err != nil {
			last = err.Error()
			return false
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last = fmt.Sprintf("%d %s", resp.StatusCode, body)
		return resp.StatusCode == http.StatusOK
	}) {
		t.Fatalf("agencysim through its Service %s: %s", svc.Spec.ClusterIP, last)
	}

	// A second Up finds everything running.
	progress.Reset()
	if _, err := kubenode.Up(ctx, cfg, kubenode.Options{Progress: &progress}); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(progress.String()), "\n") {
		if f := strings.Fields(l); len(f) < 3 || f[1] != "pid" || f[2] != fmt.Sprint(pidOf(rec, f[0])) {
			t.Errorf("a second Up started again: %q", l)
		}
	}
}

func pidOf(rec *kubenode.Record, name string) int {
	for _, p := range rec.Procs {
		if p.Name == name {
			return p.PID
		}
	}
	return -1
}

// imageTag is the tag the agencysim image was imported under.
func imageTag(t *testing.T, rec *kubenode.Record) string {
	t.Helper()
	for _, names := range rec.Images {
		for _, n := range names {
			if strings.Contains(n, "/agencysim:") {
				return n[strings.LastIndex(n, ":")+1:]
			}
		}
	}
	t.Fatalf("no agencysim image imported: %v", rec.Images)
	return ""
}
