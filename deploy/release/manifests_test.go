package release

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"
)

// The overlay the checks run on, and the cells it declares.
var (
	fourCells = filepath.Join(kube, "overlays", "four-cells")
	cellIDs   = []string{"c1", "c2", "c3", "c4"}
)

// Labels the manifests select by.
const (
	nameLabel = "app.kubernetes.io/name"
	cellLabel = "cellkit.io/cell"
)

func TestEveryKustomizationRenders(t *testing.T) {
	for _, dir := range []string{"base", "cell", filepath.Join("overlays", "four-cells"), filepath.Join("overlays", "operator-cells")} {
		t.Run(dir, func(t *testing.T) {
			var o *objects
			if path := filepath.Join(kube, dir); path == fourCells {
				o = renderFourCells(t) // rendered once for every test
			} else {
				o = render(t, path)
			}
			if len(o.all) == 0 {
				t.Fatal("no objects")
			}
		})
	}
}

// TestPodsAreLockedDown: no container runs as root, escalates, keeps a
// capability or writes its root filesystem, and no pod reaches the host
// or the Kubernetes API (but the operator).
func TestPodsAreLockedDown(t *testing.T) {
	forEachInstallation(t, func(t *testing.T, o *objects) {
		for _, w := range o.workloads() {
			spec := w.template.Spec
			psc := spec.SecurityContext
			if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("%s %s: pod without the RuntimeDefault seccomp profile", w.kind, w.name)
			}
			if spec.HostNetwork || spec.HostPID || spec.HostIPC {
				t.Errorf("%s %s: shares a host namespace", w.kind, w.name)
			}
			// The operator works through the API with its own account; no
			// other pod has a use for a token.
			if token := spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken; token != (w.name == "cellkit-operator") {
				t.Errorf("%s %s: mounts a service account token: %v, want it only for the operator", w.kind, w.name, token)
			}
			for _, v := range spec.Volumes {
				if v.HostPath != nil {
					t.Errorf("%s %s: hostPath volume %s", w.kind, w.name, v.Name)
				}
				if mode, ok := unreadable(v, psc); ok {
					t.Errorf("%s %s: volume %s's files are %#o, owned by root and no fsGroup: its non-root user cannot read them", w.kind, w.name, v.Name, mode)
				}
			}
			for _, c := range containers(w.template) {
				where := fmt.Sprintf("%s %s, container %s", w.kind, w.name, c.Name)
				sc := c.SecurityContext
				if sc == nil {
					t.Errorf("%s: no security context", where)
					continue
				}
				nonRoot := sc.RunAsNonRoot
				if nonRoot == nil && psc != nil {
					nonRoot = psc.RunAsNonRoot
				}
				uid := sc.RunAsUser
				if uid == nil && psc != nil {
					uid = psc.RunAsUser
				}
				switch {
				case nonRoot == nil || !*nonRoot:
					t.Errorf("%s: runAsNonRoot not set", where)
				case uid == nil || *uid == 0:
					t.Errorf("%s: runs as uid %v", where, uid)
				}
				if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
					t.Errorf("%s: may escalate its privileges", where)
				}
				if sc.Privileged != nil && *sc.Privileged {
					t.Errorf("%s: privileged", where)
				}
				if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
					t.Errorf("%s: root filesystem writable", where)
				}
				if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
					t.Errorf("%s: capabilities %+v, want all dropped", where, sc.Capabilities)
				}
				if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
					t.Errorf("%s: no CPU and memory request or no memory limit", where)
				}
				// Go's soft limit below the container's hard one, with room
				// for what is not heap.
				for _, e := range c.Env {
					if e.Name != "GOMEMLIMIT" {
						continue
					}
					limit := float64(c.Resources.Limits.Memory().Value())
					soft, err := goMemLimit(e.Value)
					if err != nil || soft < 0.75*limit || soft > 0.95*limit {
						t.Errorf("%s: GOMEMLIMIT %q (%v) of a %.0f-byte limit, want 75–95 %% of it", where, e.Value, err, limit)
					}
				}
			}
		}
	})
}

// unreadable reports whether a Secret's or ConfigMap's files in volume v
// are kept from a non-root user by their mode: the kubelet writes them
// owned by root, in the pod's fsGroup when it has one, so the user reads
// them by the mode's "other" bits, or its group ones with an fsGroup.
func unreadable(v corev1.Volume, psc *corev1.PodSecurityContext) (int32, bool) {
	var modes []*int32
	switch {
	case v.Secret != nil:
		modes = append(modes, v.Secret.DefaultMode)
		for _, it := range v.Secret.Items {
			if it.Mode != nil {
				modes = append(modes, it.Mode)
			}
		}
	case v.ConfigMap != nil:
		modes = append(modes, v.ConfigMap.DefaultMode)
		for _, it := range v.ConfigMap.Items {
			if it.Mode != nil {
				modes = append(modes, it.Mode)
			}
		}
	default:
		return 0, false
	}
	fsGroup := psc != nil && psc.FSGroup != nil
	for _, m := range modes {
		mode := int32(0o644) // the API server's default
		if m != nil {
			mode = *m
		}
		if mode&0o004 == 0 && (mode&0o040 == 0 || !fsGroup) {
			return mode, true
		}
	}
	return 0, false
}

// TestPodSecurityRestricted: every pod passes the Pod Security Standards'
// restricted profile, by the admission plugin's own checks (the namespace
// of the overlay enforces it).
func TestPodSecurityRestricted(t *testing.T) {
	forEachInstallation(t, func(t *testing.T, o *objects) {
		eval, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
		if err != nil {
			t.Fatal(err)
		}
		lv := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
		for _, w := range o.workloads() {
			for _, r := range eval.EvaluatePod(lv, &w.template.ObjectMeta, &w.template.Spec) {
				if !r.Allowed {
					t.Errorf("%s %s: %s: %s", w.kind, w.name, r.ForbiddenReason, r.ForbiddenDetail)
				}
			}
		}
		if len(o.namespaces) != 1 || o.namespaces[0].Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
			t.Errorf("the overlay's namespace does not enforce the restricted profile")
		}
	})
}

// containers are a pod's containers, native sidecars (init containers that
// keep running) first.
func containers(tpl *corev1.PodTemplateSpec) []*corev1.Container {
	var cs []*corev1.Container
	for i := range tpl.Spec.InitContainers {
		cs = append(cs, &tpl.Spec.InitContainers[i])
	}
	for i := range tpl.Spec.Containers {
		cs = append(cs, &tpl.Spec.Containers[i])
	}
	return cs
}

// TestSelectorsMeetTheirPods: every Service, disruption budget and network
// policy selects pods that exist, by ports they have.
func TestSelectorsMeetTheirPods(t *testing.T) {
	forEachInstallation(t, func(t *testing.T, o *objects) {
		for _, s := range o.services {
			pods := o.selected(labels.SelectorFromSet(s.Spec.Selector))
			if len(pods) == 0 {
				t.Errorf("Service %s selects no pod", s.Name)
			}
			for _, p := range s.Spec.Ports {
				for _, w := range pods {
					if !hasPort(w.template, p.TargetPort) {
						t.Errorf("Service %s: port %s targets %s, which %s %s does not have", s.Name, p.Name, p.TargetPort.String(), w.kind, w.name)
					}
					if sidecarOnly(w.template, p.TargetPort) {
						t.Errorf("Service %s: port %s targets a sidecar's port by name: give its number", s.Name, p.Name)
					}
				}
			}
		}
		for _, b := range o.pdbs {
			sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
			if err != nil {
				t.Fatal(err)
			}
			pods := o.selected(sel)
			if len(pods) != 1 {
				t.Errorf("PodDisruptionBudget %s selects %d workloads, want 1", b.Name, len(pods))
				continue
			}
			if b.Spec.MaxUnavailable == nil || b.Spec.MaxUnavailable.IntValue() != 1 || pods[0].replicas < 3 {
				t.Errorf("PodDisruptionBudget %s: maxUnavailable %v over %d replicas, want 1 of at least 3", b.Name, b.Spec.MaxUnavailable, pods[0].replicas)
			}
		}
		defaultDeny := false
		for _, p := range o.policies {
			sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
			if err != nil {
				t.Fatal(err)
			}
			if sel.Empty() {
				defaultDeny = defaultDeny || len(p.Spec.Ingress) == 0 && slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
				continue
			}
			pods := o.selected(sel)
			if len(pods) == 0 {
				t.Errorf("NetworkPolicy %s applies to no pod", p.Name)
			}
			for _, rule := range p.Spec.Ingress {
				for _, port := range rule.Ports {
					for _, w := range pods {
						if port.Port == nil || !hasPort(w.template, *port.Port) {
							t.Errorf("NetworkPolicy %s: port %v, which %s %s does not have", p.Name, port.Port, w.kind, w.name)
						} else if sidecarOnly(w.template, *port.Port) {
							t.Errorf("NetworkPolicy %s: port %v is a sidecar's port by name: give its number", p.Name, port.Port)
						}
					}
				}
				for _, peer := range rule.From {
					if peer.PodSelector == nil || peer.NamespaceSelector != nil {
						continue
					}
					psel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
					if err != nil {
						t.Fatal(err)
					}
					if len(o.selected(psel)) == 0 {
						t.Errorf("NetworkPolicy %s: lets in pods %v, and there are none", p.Name, psel)
					}
				}
			}
		}
		if !defaultDeny {
			t.Error("no NetworkPolicy denies ingress by default")
		}
		for _, m := range o.podMonitors {
			sel, err := metav1.LabelSelectorAsSelector(&m.Spec.Selector)
			if err != nil {
				t.Fatal(err)
			}
			pods := o.selected(sel)
			if len(pods) == 0 {
				t.Errorf("PodMonitor %s scrapes no pod", m.Name)
			}
			for _, ep := range m.Spec.PodMetricsEndpoints {
				for _, w := range pods {
					if ep.Port == nil || !hasPort(w.template, intstr.FromString(*ep.Port)) {
						t.Errorf("PodMonitor %s: port %v, which %s %s does not have", m.Name, ep.Port, w.kind, w.name)
					}
				}
			}
		}
	})
}

// TestOnlyRoutersReachIntakeAndOnlyOperatorsReachAdmin reads the network
// policies as the cluster would: who may connect to each named port.
func TestOnlyRoutersReachIntakeAndOnlyOperatorsReachAdmin(t *testing.T) {
	forEachInstallation(t, func(t *testing.T, o *objects) {
		monitoring := map[string]string{"cellkit.io/monitoring": "true"}
		allowed := map[string][]map[string]string{
			// a cell's intake: routers, and other cells reading an inquiry
			// after a slot move
			"intake": {{nameLabel: "router"}, {nameLabel: "cell"}},
			"admin":  {{nameLabel: "cellctl"}, {nameLabel: "cellkit-operator"}, monitoring},
			"nats":   {{nameLabel: "cell"}}, "nats-route": {{nameLabel: "cell"}},
			"nats-monitor": {monitoring},
			"nice":         {{nameLabel: "cell"}}, "kcb": {{nameLabel: "cell"}},
		}
		seen := map[string]bool{}
		for _, p := range o.policies {
			psel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
			if err != nil {
				t.Fatal(err)
			}
			pods := o.selected(psel)
			for _, rule := range p.Spec.Ingress {
				for _, port := range rule.Ports {
					name := portName(pods, *port.Port)
					want, guarded := allowed[name]
					if !guarded {
						if name != "public" {
							t.Errorf("NetworkPolicy %s opens port %s, which no rule of this test covers", p.Name, name)
						}
						continue
					}
					seen[name] = true
					if len(rule.From) == 0 {
						t.Errorf("NetworkPolicy %s opens port %s to anyone", p.Name, name)
					}
					for _, peer := range rule.From {
						var got map[string]string
						switch {
						case peer.IPBlock != nil:
							t.Errorf("NetworkPolicy %s: port %s open to addresses %v", p.Name, name, peer.IPBlock)
							continue
						case peer.NamespaceSelector != nil && peer.PodSelector == nil:
							got = peer.NamespaceSelector.MatchLabels
						case peer.PodSelector != nil && peer.NamespaceSelector == nil:
							got = maps.Clone(peer.PodSelector.MatchLabels)
							delete(got, cellLabel) // a cell's own pods
						}
						if !slices.ContainsFunc(want, func(w map[string]string) bool { return maps.Equal(w, got) }) {
							t.Errorf("NetworkPolicy %s lets %+v reach port %s", p.Name, peer, name)
						}
					}
				}
			}
		}
		for name := range allowed {
			if !seen[name] {
				t.Errorf("no policy opens port %s to anyone: its callers are cut off", name)
			}
		}
	})
}

// TestCells: each cell is three instances over three nodes of its own,
// with its own Service, disruption budget and NATS policy, all scoped to
// that cell's pods alone.
func TestCells(t *testing.T) {
	checkCells(t, renderFourCells(t), cellIDs)
}

func checkCells(t *testing.T, o *objects, want []string) {
	t.Helper()
	var got []string
	for _, s := range o.statefulSets {
		cell := s.Spec.Template.Labels[cellLabel]
		got = append(got, cell)
		own := labels.SelectorFromSet(map[string]string{nameLabel: "cell", cellLabel: cell})
		if want := "cellkit-cell-" + cell; s.Name != want {
			t.Errorf("StatefulSet %s of cell %q: want the name %s (its pods' names are the instances' and NATS routes')", s.Name, cell, want)
		}
		if ptrOr(s.Spec.Replicas, 1) != 3 || s.Spec.PodManagementPolicy != "Parallel" {
			t.Errorf("StatefulSet %s: %d replicas, %s, want 3 started in parallel", s.Name, ptrOr(s.Spec.Replicas, 1), s.Spec.PodManagementPolicy)
		}
		sel, err := metav1.LabelSelectorAsSelector(s.Spec.Selector)
		if err != nil || !selectsOnly(o, sel, s.Name) {
			t.Errorf("StatefulSet %s: selector %v selects other cells' pods", s.Name, s.Spec.Selector)
		}
		aff := s.Spec.Template.Spec.Affinity
		if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
			t.Errorf("StatefulSet %s: no required anti-affinity", s.Name)
		} else {
			term := aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0]
			asel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
			if err != nil || term.TopologyKey != "kubernetes.io/hostname" || !selectsOnly(o, asel, s.Name) {
				// Selecting every cell's pods would need a node per pod.
				t.Errorf("StatefulSet %s: anti-affinity %+v, want one node per instance of this cell only", s.Name, term)
			}
		}
		if len(s.Spec.VolumeClaimTemplates) != 1 {
			t.Errorf("StatefulSet %s: %d volume claim templates, want one for JetStream and the store", s.Name, len(s.Spec.VolumeClaimTemplates))
		}
		var svc, pdb, nats bool
		for _, x := range o.services {
			if x.Name == s.Name && labels.SelectorFromSet(x.Spec.Selector).String() == own.String() {
				svc = true
			}
		}
		for _, x := range o.pdbs {
			bsel, _ := metav1.LabelSelectorAsSelector(x.Spec.Selector)
			pdb = pdb || x.Name == s.Name && bsel.String() == own.String()
		}
		for _, x := range o.policies {
			psel, _ := metav1.LabelSelectorAsSelector(&x.Spec.PodSelector)
			if x.Name != "cellkit-cell-nats-"+cell || psel.String() != own.String() {
				continue
			}
			nats = true
			for _, rule := range x.Spec.Ingress {
				for _, peer := range rule.From {
					fsel, _ := metav1.LabelSelectorAsSelector(peer.PodSelector)
					if peer.PodSelector == nil || fsel.String() != own.String() {
						t.Errorf("NetworkPolicy %s lets %+v in, want the cell's own pods only", x.Name, peer)
					}
				}
			}
		}
		if !svc || !pdb || !nats {
			t.Errorf("cell %s: own Service %v, disruption budget %v, NATS policy %v", cell, svc, pdb, nats)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("cells %q, want %q", got, want)
	}
	for _, s := range o.services {
		if s.Name == "cellkit-cells" && (s.Spec.ClusterIP != "None" || !s.Spec.PublishNotReadyAddresses) {
			t.Errorf("Service cellkit-cells: want headless, publishing pods before they are ready (the NATS nodes find each other through it)")
		}
	}
}

// selectsOnly reports whether sel selects the pods of the workload named
// name and of no other.
func selectsOnly(o *objects, sel labels.Selector, name string) bool {
	pods := o.selected(sel)
	return len(pods) == 1 && pods[0].name == name
}

func (o *objects) selected(sel labels.Selector) []workload {
	var ws []workload
	for _, w := range o.workloads() {
		if sel.Matches(labels.Set(w.template.Labels)) {
			ws = append(ws, w)
		}
	}
	return ws
}

// portName is the name the pods declare port p under (p itself if named,
// or if they declare it under none).
func portName(pods []workload, p intstr.IntOrString) string {
	if p.Type == intstr.String {
		return p.StrVal
	}
	for _, w := range pods {
		for _, c := range containers(w.template) {
			for _, cp := range c.Ports {
				if cp.ContainerPort == p.IntVal && cp.Name != "" {
					return cp.Name
				}
			}
		}
	}
	return p.String()
}

// sidecarOnly reports whether named port p is declared by init containers
// (native sidecars) only: some network plugins, and Kubernetes before
// 1.32 for Services, resolve the names of regular containers' ports only.
func sidecarOnly(tpl *corev1.PodTemplateSpec, p intstr.IntOrString) bool {
	if p.Type != intstr.String {
		return false
	}
	for _, c := range tpl.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == p.StrVal {
				return false
			}
		}
	}
	return hasPort(tpl, p)
}

func hasPort(tpl *corev1.PodTemplateSpec, p intstr.IntOrString) bool {
	for _, c := range containers(tpl) {
		for _, cp := range c.Ports {
			if p.Type == intstr.String && cp.Name == p.StrVal || p.Type == intstr.Int && cp.ContainerPort == p.IntVal {
				return true
			}
		}
	}
	return false
}

// TestSecretsAreDocumented: every Secret the manifests read, and every key
// of it, is in docs/kubernetes.md's table of Secrets, which says how to
// make it.
func TestSecretsAreDocumented(t *testing.T) {
	forEachInstallation(t, func(t *testing.T, o *objects) {
		doc, err := os.ReadFile(filepath.Join(root, "docs", "kubernetes.md"))
		if err != nil {
			t.Fatal(err)
		}
		rows := map[string][]string{}
		row := regexp.MustCompile("(?m)^\\| `(cellkit-[a-z-]+)` \\| ([^|]+)\\|")
		for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
			for _, k := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(m[2], -1) {
				rows[m[1]] = append(rows[m[1]], k[1])
			}
		}
		used := map[string]map[string]bool{}
		use := func(name, key string) {
			if used[name] == nil {
				used[name] = map[string]bool{}
			}
			used[name][key] = true
		}
		for _, w := range o.workloads() {
			for _, v := range w.template.Spec.Volumes {
				if v.Secret == nil {
					continue
				}
				if len(v.Secret.Items) == 0 {
					t.Errorf("%s %s: Secret %s mounted whole; name its keys", w.kind, w.name, v.Secret.SecretName)
				}
				for _, it := range v.Secret.Items {
					use(v.Secret.SecretName, it.Key)
				}
			}
			for _, c := range containers(w.template) {
				for _, e := range c.Env {
					if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
						use(e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key)
					}
				}
			}
		}
		for _, m := range o.podMonitors {
			for _, ep := range m.Spec.PodMetricsEndpoints {
				if ep.Authorization != nil && ep.Authorization.Credentials != nil {
					use(ep.Authorization.Credentials.Name, ep.Authorization.Credentials.Key)
				}
				if ep.TLSConfig != nil && ep.TLSConfig.CA.Secret != nil {
					use(ep.TLSConfig.CA.Secret.Name, ep.TLSConfig.CA.Secret.Key)
				}
			}
		}
		if len(used) == 0 {
			t.Fatal("no Secret used")
		}
		for name, keys := range used {
			for key := range keys {
				if !slices.Contains(rows[name], key) {
					t.Errorf("Secret %s, key %s: not in docs/kubernetes.md's table of Secrets (a row \"| `%s` | `%s` ... |\")", name, key, name, key)
				}
			}
		}
		for name := range rows {
			if used[name] == nil {
				t.Errorf("docs/kubernetes.md documents Secret %s, which no manifest uses", name)
			}
		}
	})
}

// TestImagesArePinned: every image is cellkit's, tagged by the overlay,
// or one pinned by version.
func TestImagesArePinned(t *testing.T) {
	forEachInstallation(t, func(t *testing.T, o *objects) {
		for _, w := range o.workloads() {
			for _, c := range containers(w.template) {
				if tag := imageTag(c.Image); tag == "" || tag == "latest" {
					t.Errorf("%s %s, container %s: image %q has no version", w.kind, w.name, c.Name, c.Image)
				}
				if p, ok := cellkitProgram(c.Image); ok && p != c.Name {
					t.Errorf("%s %s: container %s runs %s", w.kind, w.name, c.Name, c.Image)
				}
			}
		}
	})
}

// copyDeploy copies deploy/kubernetes and deploy/observability into a
// temporary directory and returns the copy's deploy/kubernetes.
func copyDeploy(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "deploy")
	for _, sub := range []string{"kubernetes", "observability"} {
		if err := os.CopyFS(filepath.Join(dst, sub), os.DirFS(filepath.Join(root, "deploy", sub))); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dst, "kubernetes")
}

func edit(t *testing.T, path string, f func(string) string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	changed := f(string(data))
	if changed == string(data) {
		t.Fatalf("%s: the edit changed nothing", path)
	}
	if err := os.WriteFile(path, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestAddACell follows docs/kubernetes.md's "Add a cell": copy a cell's
// kustomization, write the new id for the old, list it in the overlay.
func TestAddACell(t *testing.T) {
	k := copyDeploy(t)
	overlay := filepath.Join(k, "overlays", "four-cells")
	c5 := filepath.Join(overlay, "cells", "c5")
	if err := os.CopyFS(c5, os.DirFS(filepath.Join(overlay, "cells", "c4"))); err != nil {
		t.Fatal(err)
	}
	edit(t, filepath.Join(c5, "kustomization.yaml"), func(s string) string { return strings.ReplaceAll(s, "c4", "c5") })
	edit(t, filepath.Join(overlay, "kustomization.yaml"), func(s string) string {
		return strings.Replace(s, "  - cells/c4\n", "  - cells/c4\n  - cells/c5\n", 1)
	})
	o := render(t, overlay)
	checkCells(t, o, append(slices.Clone(cellIDs), "c5"))
}

// TestCanaryCell follows docs/kubernetes.md's "Upgrade": a cell's own
// kustomization names a new version, and only that cell runs it.
func TestCanaryCell(t *testing.T) {
	k := copyDeploy(t)
	overlay := filepath.Join(k, "overlays", "four-cells")
	edit(t, filepath.Join(overlay, "cells", "c1", "kustomization.yaml"), func(s string) string {
		return s + "images:\n  - name: cellkit/cell\n    newName: registry.example.com/cellkit/cell\n    newTag: 0.2.0\n"
	})
	o := render(t, overlay)
	for _, s := range o.statefulSets {
		want := "registry.example.com/cellkit/cell:0.1.0"
		if s.Name == "cellkit-cell-c1" {
			want = "registry.example.com/cellkit/cell:0.2.0"
		}
		for _, c := range s.Spec.Template.Spec.Containers {
			if c.Image != want {
				t.Errorf("StatefulSet %s runs %s, want %s", s.Name, c.Image, want)
			}
		}
	}
}

// goMemLimit parses a GOMEMLIMIT value as the runtime does: bytes, with an
// optional B, KiB, MiB, GiB or TiB suffix.
func goMemLimit(v string) (float64, error) {
	for _, u := range []struct {
		suffix string
		mult   float64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}, {"", 1}} {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			f, err := strconv.ParseFloat(n, 64)
			return f * u.mult, err
		}
	}
	return 0, fmt.Errorf("GOMEMLIMIT %q", v)
}
