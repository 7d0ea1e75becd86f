package release

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellkit/cellkit/deploy/release/images"
	"github.com/nats-io/nats-server/v2/server"
	"golang.org/x/mod/modfile"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The pod's address and namespace the checks give the downward API.
const (
	podIP     = "10.20.30.40"
	namespace = "cellkit"
)

// listens names, for each program, the flags that are listen addresses
// and the container port each must be declared as.
var listens = map[string]map[string]string{
	"router":    {"listen": "public", "admin-listen": "admin"},
	"cell":      {"intake": "intake", "admin": "admin"},
	"agencysim": {"nice-listen": "nice", "kcb-listen": "kcb", "admin-listen": "admin"},
	"operator":  {"admin-listen": "admin"},
}

// writable are the flags naming a file or directory the program writes.
var writable = []string{"store", "map-cache"}

// staticBin is where `make images` leaves the binaries it puts in the
// images.
func staticBin(t *testing.T, program string) string {
	t.Helper()
	dir := os.Getenv("CELLKIT_STATIC_BIN")
	if dir == "" {
		dir = filepath.Join(root, "bin", "static")
	}
	p, err := filepath.Abs(filepath.Join(dir, program))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%v: run make images", err)
	}
	return p
}

// report is what a cellkit program prints for --check.
type report struct {
	Program string `json:"program"`
	OK      bool   `json:"ok"`
	Error   string `json:"error"`
	Flags   map[string]struct {
		Value string `json:"value"`
		From  string `json:"from"`
	} `json:"flags"`
	Unused []string `json:"unused_variables"`
}

// check runs program with args and --check in an environment of env
// alone, and decodes its report.
func check(t *testing.T, program string, args []string, env map[string]string) report {
	t.Helper()
	key := program + "\x00" + strings.Join(args, "\x00")
	for _, k := range slices.Sorted(maps.Keys(env)) {
		key += "\x00" + k + "=" + env[k]
	}
	if r, ok := checks.Load(key); ok {
		return r.(report) // asked already: the same answer
	}
	cmd := exec.Command(staticBin(t, program), append(slices.Clone(args), "--check")...)
	cmd.Env = []string{}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var r report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil || r.Program != program {
		t.Fatalf("%s %q --check: %v, %v\nstdout: %s\nstderr: %s", program, args, runErr, err, stdout.String(), stderr.String())
	}
	if r.OK != (runErr == nil) {
		t.Errorf("%s --check: ok %v but exit %v", program, r.OK, runErr)
	}
	checks.Store(key, r)
	return r
}

// checks are the reports check has had, by program, arguments and
// environment: the tests ask some containers' questions more than once.
var checks sync.Map

// labelField is a downward API field that names a pod label.
var labelField = regexp.MustCompile(`^metadata\.labels\['([^']+)'\]$`)

// refs are Kubernetes' $(VAR) references in args and env values.
var refs = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand replaces the references of s that env defines, as the kubelet
// does; "$$" is a literal "$". It returns the names left undefined.
func expand(s string, env map[string]string) (string, []string) {
	var missing []string
	out := refs.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		name := m[2 : len(m)-1]
		if v, ok := env[name]; ok {
			return v
		}
		missing = append(missing, name)
		return m
	})
	return out, missing
}

// containerEnv is a container's environment as the kubelet makes it in
// the pod of w: literal values expanded in order, the downward API from
// the pod, ConfigMaps from the rendered objects, Secrets as placeholders.
func containerEnv(t *testing.T, o *objects, w workload, c *corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	where := fmt.Sprintf("%s %s, container %s", w.kind, w.name, c.Name)
	if len(c.EnvFrom) > 0 {
		t.Errorf("%s: envFrom hides which variables a program gets", where)
	}
	for _, e := range c.Env {
		v := e.Value
		switch src := e.ValueFrom; {
		case src == nil:
			var missing []string
			v, missing = expand(v, env)
			if len(missing) > 0 {
				t.Errorf("%s: %s refers to %q, not defined before it", where, e.Name, missing)
			}
		case src.FieldRef != nil:
			v = downward(t, w, src.FieldRef.FieldPath)
		case src.ConfigMapKeyRef != nil:
			cm := o.configMaps[src.ConfigMapKeyRef.Name]
			if cm == nil || cm.Data[src.ConfigMapKeyRef.Key] == "" {
				t.Errorf("%s: %s from ConfigMap %s key %s, which the manifests do not have", where, e.Name, src.ConfigMapKeyRef.Name, src.ConfigMapKeyRef.Key)
				continue
			}
			v = cm.Data[src.ConfigMapKeyRef.Key]
		case src.SecretKeyRef != nil:
			v = "secret-" + src.SecretKeyRef.Name + "-" + src.SecretKeyRef.Key
		case src.ResourceFieldRef != nil:
			q := c.Resources.Limits[corev1.ResourceName(strings.TrimPrefix(src.ResourceFieldRef.Resource, "limits."))]
			if q.IsZero() {
				t.Errorf("%s: %s from %s, which is not set", where, e.Name, src.ResourceFieldRef.Resource)
			}
			v = strconv.FormatInt(q.Value(), 10)
		}
		env[e.Name] = v
	}
	return env
}

// downward is a pod field as the downward API gives it.
func downward(t *testing.T, w workload, field string) string {
	t.Helper()
	switch field {
	case "metadata.name":
		return w.podName
	case "metadata.namespace":
		return namespace
	case "status.podIP":
		return podIP
	}
	if m := labelField.FindStringSubmatch(field); m != nil {
		v, ok := w.template.Labels[m[1]]
		if !ok {
			t.Errorf("%s %s: the downward API's %s: the pod has no such label", w.kind, w.name, field)
		}
		return v
	}
	t.Errorf("%s %s: downward API field %s is not one the checks know", w.kind, w.name, field)
	return ""
}

// expandArgs is the container's arguments as the kubelet passes them.
func expandArgs(t *testing.T, where string, args []string, env map[string]string) []string {
	t.Helper()
	var out []string
	for _, a := range args {
		x, missing := expand(a, env)
		if len(missing) > 0 {
			t.Errorf("%s: argument %q refers to %q, which the container's environment does not define", where, a, missing)
		}
		out = append(out, x)
	}
	return out
}

// TestProgramsAcceptTheirArguments runs every cellkit container's binary
// (the one in its image) with the container's arguments and environment
// and --check: the program itself says whether it would start, and what
// each flag came to. Then the ports, probes and files of the container are
// held to those values.
func TestProgramsAcceptTheirArguments(t *testing.T) {
	// Each program runs in a container of one installation or the other.
	checked := map[string]bool{}
	forEachInstallation(t, func(t *testing.T, o *objects) {
		defaults := map[string]report{} // by program and command: the same for every container
		for _, w := range o.workloads() {
			for _, c := range containers(w.template) {
				program, ok := cellkitProgram(c.Image)
				if !ok {
					continue
				}
				where := fmt.Sprintf("%s %s, container %s", w.kind, w.name, c.Name)
				if len(c.Command) > 0 {
					t.Errorf("%s: command %q replaces the image's entrypoint", where, c.Command)
				}
				env := containerEnv(t, o, w, c)
				args := expandArgs(t, where, c.Args, env)
				r := check(t, program, args, env)
				checked[program] = true
				if !r.OK {
					t.Errorf("%s: %s refuses its arguments: %s", where, program, r.Error)
				}
				if len(r.Unused) > 0 {
					t.Errorf("%s: variables %q set no flag of %s", where, r.Unused, program)
				}
				// The grace period covers the program's own stop.
				var stop time.Duration
				for _, f := range []string{"shutdown-delay", "shutdown-timeout", "drain-timeout"} {
					if v, ok := r.Flags[f]; ok {
						d, err := time.ParseDuration(v.Value)
						if err != nil {
							t.Fatalf("%s: --%s %q: %v", where, f, v.Value, err)
						}
						stop += d
					}
				}
				if grace := ptrOr(w.template.Spec.TerminationGracePeriodSeconds, 30); time.Duration(grace)*time.Second <= stop {
					t.Errorf("%s: terminationGracePeriodSeconds %d, not more than the program's stop (%v)", where, grace, stop)
				}
				cmd := commandOf(args)
				key := strings.Join(append([]string{program}, cmd...), " ")
				if _, ok := defaults[key]; !ok {
					defaults[key] = check(t, program, cmd, nil)
				}
				checkPorts(t, where, program, c, r, defaults[key])
				checkFiles(t, o, where, w, c, r)
			}
		}
	})
	for _, p := range images.Programs {
		if !checked[p.Name] {
			t.Errorf("no container runs %s", p.Name)
		}
	}
}

// commandOf keeps cellctl's command words (the arguments before the first
// flag), for the defaults of that command.
func commandOf(args []string) []string {
	i := slices.IndexFunc(args, func(a string) bool { return strings.HasPrefix(a, "-") })
	if i < 0 {
		return args
	}
	return args[:i]
}

// imageName is an image reference without its tag or digest.
func imageName(ref string) string {
	name, _, _ := strings.Cut(ref, "@")
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name = name[:i]
	}
	return name
}

// imageTag is an image reference's tag ("" without).
func imageTag(ref string) string {
	return strings.TrimPrefix(strings.TrimPrefix(strings.Split(ref, "@")[0], imageName(ref)), ":")
}

// cellkitProgram names the program of one of cellkit's images
// ([REGISTRY/]cellkit/PROGRAM:TAG, PROGRAM one of images.Programs: not
// the others' programs it builds images of, such as cellkit/nats).
func cellkitProgram(ref string) (string, bool) {
	parts := strings.Split(imageName(ref), "/")
	if len(parts) < 2 || parts[len(parts)-2] != "cellkit" {
		return "", false
	}
	_, ok := images.LookupProgram(parts[len(parts)-1])
	return parts[len(parts)-1], ok
}

// checkPorts holds the container's ports and probes to the addresses the
// program will listen on: each listen flag a declared port of the program's
// default number, on the pod's address (never a wildcard), and the probes
// on the admin port, by TLS when the admin listener has a certificate.
func checkPorts(t *testing.T, where, program string, c *corev1.Container, r, defaults report) {
	t.Helper()
	declared := map[string]int32{}
	for _, p := range c.Ports {
		declared[p.Name] = p.ContainerPort
	}
	for flag, portName := range listens[program] {
		host, port, err := net.SplitHostPort(r.Flags[flag].Value)
		_, defPort, derr := net.SplitHostPort(defaults.Flags[flag].Value)
		if err != nil || derr != nil {
			t.Errorf("%s: --%s %q (default %q): %v %v", where, flag, r.Flags[flag].Value, defaults.Flags[flag].Value, err, derr)
			continue
		}
		if host != podIP {
			t.Errorf("%s: --%s listens on %q, want the pod's address", where, flag, host)
		}
		if port != defPort {
			t.Errorf("%s: --%s port %s, want the program's default %s", where, flag, port, defPort)
		}
		if got, ok := declared[portName]; !ok || strconv.Itoa(int(got)) != port {
			t.Errorf("%s: --%s listens on port %s, declared port %q is %d", where, flag, port, portName, got)
		}
		delete(declared, portName)
	}
	if len(declared) > 0 {
		t.Errorf("%s: ports %v declared that no flag of %s listens on", where, declared, program)
	}
	if !slices.Contains(slices.Collect(maps.Values(listens[program])), "admin") {
		if c.ReadinessProbe != nil || c.LivenessProbe != nil || c.StartupProbe != nil {
			t.Errorf("%s: probes on a program that serves none", where)
		}
		return
	}
	scheme := corev1.URISchemeHTTP
	if r.Flags["admin-tls-cert"].Value != "" {
		scheme = corev1.URISchemeHTTPS
	}
	for _, p := range []struct {
		kind, path string
		probe      *corev1.Probe
	}{{"readiness", "/readyz", c.ReadinessProbe}, {"liveness", "/healthz", c.LivenessProbe}, {"startup", "/healthz", c.StartupProbe}} {
		if p.probe == nil {
			if p.kind != "startup" {
				t.Errorf("%s: no %s probe", where, p.kind)
			}
			continue
		}
		g := p.probe.HTTPGet
		if g == nil || g.Path != p.path || g.Port != intstr.FromString("admin") || g.Scheme != scheme && !(g.Scheme == "" && scheme == corev1.URISchemeHTTP) {
			t.Errorf("%s: %s probe %+v, want GET %s on port admin by %s", where, p.kind, g, p.path, scheme)
		}
	}
}

// checkFiles: every absolute path a flag names is on a volume mounted in
// the container (the image has nothing else), a Secret's or ConfigMap's
// key that exists, and the paths the program writes are on a writable
// volume.
func checkFiles(t *testing.T, o *objects, where string, w workload, c *corev1.Container, r report) {
	t.Helper()
	for flag, s := range r.Flags {
		for _, p := range strings.Split(s.Value, ",") {
			if !strings.HasPrefix(p, "/") {
				continue
			}
			m, v, rel := mountOf(w, c, p)
			switch {
			case m == nil:
				t.Errorf("%s: --%s %s is on no volume", where, flag, p)
			case slices.Contains(writable, flag) && (m.ReadOnly || v.EmptyDir == nil && v.PersistentVolumeClaim == nil && !isClaim(w, m.Name)):
				t.Errorf("%s: --%s %s is written, and volume %s is not writable", where, flag, p, m.Name)
			case v.Secret != nil:
				if !slices.ContainsFunc(v.Secret.Items, func(it corev1.KeyToPath) bool { return it.Path == rel }) {
					t.Errorf("%s: --%s %s: Secret %s gives no file %s", where, flag, p, v.Secret.SecretName, rel)
				}
			case v.ConfigMap != nil:
				if i := slices.IndexFunc(v.ConfigMap.Items, func(it corev1.KeyToPath) bool { return it.Path == rel }); i < 0 || o.configMaps[v.ConfigMap.Name] == nil {
					t.Errorf("%s: --%s %s: ConfigMap %s gives no file %s", where, flag, p, v.ConfigMap.Name, rel)
				}
			}
		}
	}
}

// mountOf finds the mount under which path p lies, its volume (a zero one
// for a StatefulSet's claim) and p relative to it.
func mountOf(w workload, c *corev1.Container, p string) (*corev1.VolumeMount, *corev1.Volume, string) {
	var best *corev1.VolumeMount
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		if (p == m.MountPath || strings.HasPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/")) && (best == nil || len(m.MountPath) > len(best.MountPath)) {
			best = m
		}
	}
	if best == nil {
		return nil, nil, ""
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(p, best.MountPath), "/")
	for i := range w.template.Spec.Volumes {
		if v := &w.template.Spec.Volumes[i]; v.Name == best.Name {
			return best, v, rel
		}
	}
	return best, &corev1.Volume{Name: best.Name}, rel
}

// isClaim reports whether name is one of w's volume claim templates (a
// StatefulSet's per-pod volume).
func isClaim(w workload, name string) bool { return slices.Contains(w.claims, name) }

// TestNATSNodes: the node beside each cell instance runs the nats-server
// version the cells are built and tested with, and its configuration, read
// by that nats-server's own parser in the container's environment, forms
// the cell's cluster of three over the pods of that cell, on the ports
// declared, with its store on the pod's volume; the cell connects to it
// with the token the node requires.
func TestNATSNodes(t *testing.T) {
	o := renderFourCells(t)
	version := natsVersion(t)
	if server.VERSION != version {
		t.Fatalf("this module's nats-server is %s, the cells' %s: keep them equal", server.VERSION, version)
	}
	nodes := 0
	for _, s := range o.statefulSets {
		w := workloadOf(o, s.Name)
		cell := s.Spec.Template.Labels[cellLabel]
		var natsC, cellC *corev1.Container
		for _, c := range containers(w.template) {
			if p, _ := cellkitProgram(c.Image); p == "cell" {
				cellC = c
			} else if imageName(c.Image) == "nats" {
				natsC = c
			}
		}
		if natsC == nil || cellC == nil {
			t.Fatalf("StatefulSet %s: no nats or no cell container", s.Name)
		}
		nodes++
		if tag := imageTag(natsC.Image); tag != version {
			t.Errorf("StatefulSet %s: image %s, want nats:%s (the nats-server of go.mod)", s.Name, natsC.Image, version)
		}
		if natsC.RestartPolicy == nil || *natsC.RestartPolicy != corev1.ContainerRestartPolicyAlways || natsC.StartupProbe == nil {
			t.Errorf("StatefulSet %s: the nats container is not a native sidecar with a startup probe: the cell would start before its node", s.Name)
		}
		env := containerEnv(t, o, w, natsC)
		args := expandArgs(t, s.Name, natsC.Args, env)
		if len(args) != 1 || !strings.HasPrefix(args[0], "--config=") {
			t.Fatalf("StatefulSet %s: nats args %q, want --config=FILE", s.Name, args)
		}
		confPath := strings.TrimPrefix(args[0], "--config=")
		m, v, rel := mountOf(w, natsC, confPath)
		if m == nil || v.ConfigMap == nil || o.configMaps[v.ConfigMap.Name] == nil {
			t.Fatalf("StatefulSet %s: %s on no ConfigMap", s.Name, confPath)
		}
		i := slices.IndexFunc(v.ConfigMap.Items, func(it corev1.KeyToPath) bool { return it.Path == rel })
		if i < 0 {
			t.Fatalf("StatefulSet %s: ConfigMap %s gives no %s", s.Name, v.ConfigMap.Name, rel)
		}
		conf := filepath.Join(t.TempDir(), "nats.conf")
		if err := os.WriteFile(conf, []byte(o.configMaps[v.ConfigMap.Name].Data[v.ConfigMap.Items[i].Key]), 0o600); err != nil {
			t.Fatal(err)
		}
		for k, val := range env {
			t.Setenv(k, val)
		}
		opts, err := server.ProcessConfigFile(conf)
		if err != nil {
			t.Fatalf("StatefulSet %s: nats-server %s reads its configuration: %v", s.Name, version, err)
		}
		ports := map[string]int{}
		for _, p := range natsC.Ports {
			ports[p.Name] = int(p.ContainerPort)
		}
		if opts.Host != podIP || opts.Port != ports["nats"] || opts.Cluster.Host != podIP || opts.Cluster.Port != ports["nats-route"] ||
			opts.HTTPHost != podIP || opts.HTTPPort != ports["nats-monitor"] {
			t.Errorf("StatefulSet %s: nats listens on %s:%d, routes %s:%d, monitoring %s:%d; declared %v", s.Name,
				opts.Host, opts.Port, opts.Cluster.Host, opts.Cluster.Port, opts.HTTPHost, opts.HTTPPort, ports)
		}
		if !opts.JetStream || opts.Cluster.Name != "cell-"+cell || opts.ServerName != w.podName {
			t.Errorf("StatefulSet %s: JetStream %v, cluster %q, server %q", s.Name, opts.JetStream, opts.Cluster.Name, opts.ServerName)
		}
		if m, _, _ := mountOf(w, natsC, opts.StoreDir); m == nil || !isClaim(w, m.Name) {
			t.Errorf("StatefulSet %s: JetStream store %s is not on the pod's volume", s.Name, opts.StoreDir)
		}
		var hosts []string
		for _, u := range opts.Routes {
			hosts = append(hosts, u.Host)
			if u.User == nil {
				t.Errorf("StatefulSet %s: route %s without credentials", s.Name, u.Redacted())
			}
		}
		var want []string
		for i := range ptrOr(s.Spec.Replicas, 1) {
			want = append(want, fmt.Sprintf("%s-%d.%s:%d", s.Name, i, s.Spec.ServiceName, ports["nats-route"]))
		}
		if !slices.Equal(hosts, want) {
			t.Errorf("StatefulSet %s: routes to %q, want the cell's pods %q", s.Name, hosts, want)
		}
		// The cell: its own node first, then its cell's nodes, with the token.
		cenv := containerEnv(t, o, w, cellC)
		r := check(t, "cell", expandArgs(t, s.Name, cellC.Args, cenv), cenv)
		urls := strings.Split(r.Flags["nats-url"].Value, ",")
		wantURLs := []string{fmt.Sprintf("nats://%s:%d", podIP, ports["nats"])}
		for i := range ptrOr(s.Spec.Replicas, 1) {
			wantURLs = append(wantURLs, fmt.Sprintf("nats://%s-%d.%s:%d", s.Name, i, s.Spec.ServiceName, ports["nats"]))
		}
		if !slices.Equal(urls, wantURLs) {
			t.Errorf("StatefulSet %s: --nats-url %q, want %q", s.Name, urls, wantURLs)
		}
		if n, _ := strconv.Atoi(r.Flags["replicas"].Value); n != len(want) {
			t.Errorf("StatefulSet %s: --replicas %d over %d nodes", s.Name, n, len(want))
		}
		if tm, tv, trel := mountOf(w, cellC, r.Flags["nats-token-file"].Value); tm == nil || tv.Secret == nil ||
			"secret-"+tv.Secret.SecretName+"-"+keyOf(tv.Secret.Items, trel) != opts.Authorization {
			t.Errorf("StatefulSet %s: the cell's --nats-token-file is not the token its node requires", s.Name)
		}
		if r.Flags["cell"].Value != cell || r.Flags["instance"].Value != w.podName {
			t.Errorf("StatefulSet %s: cell %q instance %q, want %q and the pod's name", s.Name, r.Flags["cell"].Value, r.Flags["instance"].Value, cell)
		}
	}
	if nodes != len(cellIDs) {
		t.Errorf("%d cells with NATS nodes, want %d", nodes, len(cellIDs))
	}
}

func keyOf(items []corev1.KeyToPath, path string) string {
	for _, it := range items {
		if it.Path == path {
			return it.Key
		}
	}
	return ""
}

func workloadOf(o *objects, name string) workload {
	for _, w := range o.workloads() {
		if w.name == name {
			return w
		}
	}
	panic("no workload " + name)
}

// natsVersion is the nats-server version of the main module's go.mod,
// without its "v".
func natsVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range f.Require {
		if r.Mod.Path == "github.com/nats-io/nats-server/v2" {
			return strings.TrimPrefix(r.Mod.Version, "v")
		}
	}
	t.Fatal("go.mod requires no nats-server")
	return ""
}
