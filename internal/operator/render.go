package operator

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/operator/api/v1alpha1"
)

// The names every cell's objects are made of. A cell c's StatefulSet,
// Service and disruption budget are cellkit-cell-c, its network policy
// cellkit-cell-nats-c; its pods are labelled LabelName=cell and
// LabelCell=c, and pod P of any cell is P.cellkit-cells.NAMESPACE.svc.
const (
	LabelName    = "app.kubernetes.io/name"
	LabelCell    = "cellkit.io/cell"
	LabelPartOf  = "app.kubernetes.io/part-of"
	CellsService = "cellkit-cells"
	NATSConfig   = "cellkit-nats"
	objectPrefix = "cellkit-cell-"

	portIntake     = 8081
	portAdmin      = 9081
	portNATS       = 4222
	portNATSRoute  = 6222
	portNATSHealth = 8222
)

// ObjectName is the name of cell id's StatefulSet, Service and budget.
func ObjectName(id string) string { return objectPrefix + id }

// PodName is the name of instance i of cell id: the instance's id in
// the map.
func PodName(id string, i int) string { return fmt.Sprintf("%s%s-%d", objectPrefix, id, i) }

// Endpoints are the URLs of cell id in namespace ns: the cell's own (its
// Service) and each instance's (its name under the headless Service).
type Endpoints struct {
	Intake, Admin string
	Instances     []InstanceEndpoints
}

// InstanceEndpoints are one instance's id and URLs.
type InstanceEndpoints struct{ ID, Intake, Admin string }

// EndpointsOf are the endpoints of a cell of n instances.
func EndpointsOf(ns, id string, n int) Endpoints {
	svc := fmt.Sprintf("%s.%s.svc", ObjectName(id), ns)
	e := Endpoints{Intake: fmt.Sprintf("https://%s:%d", svc, portIntake), Admin: fmt.Sprintf("https://%s:%d", svc, portAdmin)}
	for i := range n {
		host := fmt.Sprintf("%s.%s.%s.svc", PodName(id, i), CellsService, ns)
		e.Instances = append(e.Instances, InstanceEndpoints{ID: PodName(id, i),
			Intake: fmt.Sprintf("https://%s:%d", host, portIntake), Admin: fmt.Sprintf("https://%s:%d", host, portAdmin)})
	}
	return e
}

// Objects are what a cell is made of on Kubernetes.
type Objects struct {
	StatefulSet *appsv1.StatefulSet
	Service     *corev1.Service
	Budget      *policyv1.PodDisruptionBudget
	Policy      *networkingv1.NetworkPolicy
}

// Render makes cell c's objects, its pods running run (the release the
// cell runs: on a release, the operator's deployer moves it instance by
// instance; otherwise the spec's). NATSConfig is the ConfigMap holding the
// NATS nodes' nats.conf. The objects are the kustomize base's
// (deploy/kubernetes/cell) for the same cell: a test holds the two
// together, and docs/kubernetes.md lists where they differ and why.
func Render(c *v1alpha1.Cell, run control.Command, natsConfig string) Objects {
	id, ns := c.Name, c.Namespace
	sel := map[string]string{LabelName: "cell", LabelCell: id}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{LabelName: "cell", LabelCell: id}}
	}
	o := Objects{
		StatefulSet: &appsv1.StatefulSet{
			TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
			ObjectMeta: meta(ObjectName(id)),
			Spec:       statefulSetSpec(c, run, natsConfig, sel),
		},
		Service: &corev1.Service{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
			ObjectMeta: meta(ObjectName(id)),
			Spec: corev1.ServiceSpec{
				Type:     corev1.ServiceTypeClusterIP,
				Selector: sel,
				Ports: []corev1.ServicePort{
					{Name: "intake", Port: portIntake, TargetPort: intstr.FromString("intake")},
					{Name: "admin", Port: portAdmin, TargetPort: intstr.FromString("admin")},
				},
			},
		},
		Budget: &policyv1.PodDisruptionBudget{
			TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
			ObjectMeta: meta(ObjectName(id)),
			Spec: policyv1.PodDisruptionBudgetSpec{
				MaxUnavailable: ptr.To(intstr.FromInt32(maxUnavailable(c.Spec.Instances))),
				Selector:       &metav1.LabelSelector{MatchLabels: sel},
			},
		},
		Policy: &networkingv1.NetworkPolicy{
			TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
			ObjectMeta: metav1.ObjectMeta{Name: objectPrefix + "nats-" + id, Namespace: ns, Labels: map[string]string{LabelCell: id}},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: sel},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: sel}}},
					Ports: []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromInt32(portNATS))}, {Port: ptr.To(intstr.FromInt32(portNATSRoute))}},
				}},
			},
		},
	}
	return o
}

// maxUnavailable is how many instances of a cell may be down at once
// and keep its JetStream quorum: one of three, two of five; a cell of one
// instance has none to keep (its budget lets a node drain evict it).
func maxUnavailable(n int32) int32 {
	if n <= 1 {
		return 1
	}
	return (n - 1) / 2
}

// streamReplicas is the cell's --replicas: its streams' copies, at most
// three.
func streamReplicas(n int32) int32 { return min(n, 3) }

// statefulSetSpec is the cell's StatefulSet: its instances started
// together (a NATS node needs the others to form the cluster before its
// pod is ready), never two on a node, updated only when the operator
// deletes a pod (OnDelete: a release goes out one instance at a time
// through the operator's deployer, with the rollout's gates).
func statefulSetSpec(c *v1alpha1.Cell, run control.Command, natsConfig string, sel map[string]string) appsv1.StatefulSetSpec {
	id, n := c.Name, c.Spec.Instances
	storage := resource.MustParse("20Gi")
	if c.Spec.Storage != nil {
		storage = *c.Spec.Storage
	}
	return appsv1.StatefulSetSpec{
		Replicas:            ptr.To(n),
		ServiceName:         CellsService,
		PodManagementPolicy: appsv1.ParallelPodManagement,
		UpdateStrategy:      appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType},
		Selector:            &metav1.LabelSelector{MatchLabels: sel},
		PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
			WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
			WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
		},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: sel},
			Spec: corev1.PodSpec{
				AutomountServiceAccountToken:  ptr.To(false),
				EnableServiceLinks:            ptr.To(false),
				TerminationGracePeriodSeconds: ptr.To[int64](60),
				SecurityContext: &corev1.PodSecurityContext{
					RunAsNonRoot:        ptr.To(true),
					RunAsUser:           ptr.To[int64](65532),
					RunAsGroup:          ptr.To[int64](65532),
					FSGroup:             ptr.To[int64](65532),
					FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
					SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				Affinity: &corev1.Affinity{PodAntiAffinity: antiAffinity(c, sel)},
				TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
					MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: corev1.ScheduleAnyway,
					LabelSelector: &metav1.LabelSelector{MatchLabels: sel},
				}},
				InitContainers: []corev1.Container{natsContainer(c)},
				Containers:     []corev1.Container{cellContainer(c, run)},
				Volumes:        volumes(c, natsConfig),
			},
		},
		VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
			ObjectMeta: metav1.ObjectMeta{Name: "data", Labels: map[string]string{LabelCell: id}},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: c.Spec.StorageClassName,
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: storage}},
			},
		}},
	}
}

// CellArgs are the cell program's arguments the operator gives, before a
// release's: its listeners on the pod's address, its store and NATS on
// the pod's volume, its tokens and certificates from the mounted Secrets.
func CellArgs(c *v1alpha1.Cell) []string {
	urls := []string{"nats://$(POD_IP):4222"}
	for i := range int(c.Spec.Instances) {
		urls = append(urls, fmt.Sprintf("nats://cellkit-cell-$(CELL)-%d.%s:%d", i, CellsService, portNATS))
	}
	return []string{
		fmt.Sprintf("--intake=$(POD_IP):%d", portIntake),
		fmt.Sprintf("--admin=$(POD_IP):%d", portAdmin),
		"--store=/data/cell",
		"--nats-url=" + strings.Join(urls, ","),
		"--nats-token-file=/etc/cellkit/nats/token",
		fmt.Sprintf("--replicas=%d", streamReplicas(c.Spec.Instances)),
		"--admin-token-file=/etc/cellkit/admin-token/tokens",
		"--tls-cert=/etc/cellkit/tls/tls.crt",
		"--tls-key=/etc/cellkit/tls/tls.key",
		"--tls-client-ca=/etc/cellkit/tls/ca.crt",
		"--admin-tls-cert=/etc/cellkit/tls/tls.crt",
		"--admin-tls-key=/etc/cellkit/tls/tls.key",
		// The routers (checking every second at most) take a stopping
		// instance out of rotation before its intake closes.
		"--shutdown-delay=3s",
	}
}

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
}

func secretEnv(name, secret, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key}}}
}

func configEnv(name, cm, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: cm}, Key: key}}}
}

// lockedDown is every container's security context: no privilege, no
// capability, a read-only root.
func lockedDown() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// natsResources are the JetStream node's resources: the spec's, or
// requests cpu 250m and memory 256Mi, limit memory 1Gi.
func natsResources(c *v1alpha1.Cell) corev1.ResourceRequirements {
	if c.Spec.NATSResources != nil {
		return *c.Spec.NATSResources
	}
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
	}
}

// antiAffinity keeps the cell's instances (sel) on nodes of their own:
// required, or preferred as the spec says.
func antiAffinity(c *v1alpha1.Cell, sel map[string]string) *corev1.PodAntiAffinity {
	term := corev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname", LabelSelector: &metav1.LabelSelector{MatchLabels: sel}}
	if c.Spec.AntiAffinity == v1alpha1.AntiAffinityPreferred {
		return &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 100, PodAffinityTerm: term}}}
	}
	return &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term}}
}

// cellResources are the cell container's resources: the spec's, or
// requests of 500m and 512Mi with a 1Gi memory limit.
func cellResources(c *v1alpha1.Cell) corev1.ResourceRequirements {
	if c.Spec.Resources != nil {
		return *c.Spec.Resources
	}
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
	}
}

// goMemLimit is 90 % of a memory limit (room for what is not Go heap),
// rounded down to 8 MiB; "" without a limit.
func goMemLimit(r corev1.ResourceRequirements) string {
	l, ok := r.Limits[corev1.ResourceMemory]
	if !ok {
		return ""
	}
	return fmt.Sprintf("%dMiB", l.Value()*9/10>>23<<3)
}

func cellContainer(c *v1alpha1.Cell, run control.Command) corev1.Container {
	s := c.Spec.Secrets
	res := cellResources(c)
	env := []corev1.EnvVar{
		fieldEnv("POD_IP", "status.podIP"),
		fieldEnv("CELL", "metadata.labels['"+LabelCell+"']"),
		{Name: "CELLKIT_CELL_CELL", Value: "$(CELL)"},
		fieldEnv("CELLKIT_CELL_INSTANCE", "metadata.name"),
		configEnv("CELLKIT_CELL_REGISTRY", c.Spec.Settings, "registry"),
		configEnv("CELLKIT_CELL_AGENCY", c.Spec.Settings, "agencies"),
		secretEnv("CONSUL_HTTP_TOKEN", s.Consul, "token"),
	}
	if m := goMemLimit(res); m != "" {
		env = append(env, corev1.EnvVar{Name: "GOMEMLIMIT", Value: m})
	}
	probe := func(path string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("admin"), Scheme: corev1.URISchemeHTTPS}},
			PeriodSeconds: period, FailureThreshold: failures,
		}
	}
	return corev1.Container{
		Name:  "cell",
		Image: run.Image,
		Args:  run.Args,
		Env:   env,
		Ports: []corev1.ContainerPort{{Name: "intake", ContainerPort: portIntake}, {Name: "admin", ContainerPort: portAdmin}},
		// Starting includes forming or joining the cell's JetStream
		// cluster and an election: up to its start timeout.
		StartupProbe:    probe("/healthz", 2, 90),
		ReadinessProbe:  probe("/readyz", 5, 2),
		LivenessProbe:   probe("/healthz", 10, 3),
		Resources:       res,
		SecurityContext: lockedDown(),
		VolumeMounts: []corev1.VolumeMount{
			{Name: "data", MountPath: "/data"},
			{Name: "nats-token", MountPath: "/etc/cellkit/nats", ReadOnly: true},
			{Name: "admin-token", MountPath: "/etc/cellkit/admin-token", ReadOnly: true},
			{Name: "tls", MountPath: "/etc/cellkit/tls", ReadOnly: true},
		},
	}
}

// natsContainer is the cell's JetStream node: a native sidecar (an init
// container that keeps running), started and past its startup probe
// before the cell, stopped after it; its routes name every instance.
func natsContainer(c *v1alpha1.Cell) corev1.Container {
	s := c.Spec.Secrets
	env := []corev1.EnvVar{
		fieldEnv("POD_NAME", "metadata.name"),
		fieldEnv("POD_IP", "status.podIP"),
		fieldEnv("CELL", "metadata.labels['"+LabelCell+"']"),
		{Name: "NATS_LISTEN", Value: fmt.Sprintf("$(POD_IP):%d", portNATS)},
		{Name: "NATS_ROUTE_LISTEN", Value: fmt.Sprintf("$(POD_IP):%d", portNATSRoute)},
		{Name: "NATS_MONITOR", Value: fmt.Sprintf("$(POD_IP):%d", portNATSHealth)},
		{Name: "NATS_CLUSTER", Value: "cell-$(CELL)"},
		secretEnv("NATS_TOKEN", s.NATS, "token"),
		secretEnv("NATS_ROUTE_PASSWORD", s.NATS, "route-password"),
	}
	routes := make([]string, 0, c.Spec.Instances)
	for i := range int(c.Spec.Instances) {
		routes = append(routes, fmt.Sprintf("nats-route://route:$(NATS_ROUTE_PASSWORD)@cellkit-cell-$(CELL)-%d.%s:%d", i, CellsService, portNATSRoute))
	}
	// One variable holding the list: nats.conf's routes are $NATS_ROUTES,
	// which the NATS parser reads as the array it holds.
	env = append(env, corev1.EnvVar{Name: "NATS_ROUTES", Value: "[" + strings.Join(routes, ", ") + "]"})
	res := natsResources(c)
	if m := goMemLimit(res); m != "" {
		env = append(env, corev1.EnvVar{Name: "GOMEMLIMIT", Value: m})
	}
	probe := func(period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz?js-enabled-only=true", Port: intstr.FromString("nats-monitor")}},
			PeriodSeconds: period, FailureThreshold: failures,
		}
	}
	return corev1.Container{
		Name:          "nats",
		Image:         c.Spec.NATSImage,
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Args:          []string{"--config=/etc/nats/nats.conf"},
		Env:           env,
		Ports: []corev1.ContainerPort{
			{Name: "nats", ContainerPort: portNATS}, {Name: "nats-route", ContainerPort: portNATSRoute}, {Name: "nats-monitor", ContainerPort: portNATSHealth},
		},
		StartupProbe:    probe(2, 30),
		LivenessProbe:   probe(10, 3),
		Resources:       res,
		SecurityContext: lockedDown(),
		VolumeMounts: []corev1.VolumeMount{
			{Name: "data", MountPath: "/data"},
			{Name: "nats-conf", MountPath: "/etc/nats", ReadOnly: true},
		},
	}
}

func volumes(c *v1alpha1.Cell, natsConfig string) []corev1.Volume {
	s := c.Spec.Secrets
	secret := func(name, secretName string, keys ...string) corev1.Volume {
		items := make([]corev1.KeyToPath, len(keys))
		for i, k := range keys {
			items[i] = corev1.KeyToPath{Key: k, Path: k}
		}
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: secretName, DefaultMode: ptr.To[int32](0o440), Items: items}}}
	}
	return []corev1.Volume{
		{Name: "nats-conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: natsConfig},
			Items:                []corev1.KeyToPath{{Key: "nats.conf", Path: "nats.conf"}},
		}}},
		secret("nats-token", s.NATS, "token"),
		secret("admin-token", s.AdminToken, "tokens"),
		secret("tls", s.TLS, "ca.crt", "tls.crt", "tls.key"),
	}
}
