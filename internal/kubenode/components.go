package kubenode

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cellkit/cellkit/internal/atomicfile"
	"github.com/cellkit/cellkit/internal/devstack"
)

// The programs of bin/kube a node runs, and those of this host's packages
// (make cluster-tools installs them: Debian's containerd, runc,
// containernetworking-plugins, iptables, conntrack).
var (
	nodePrograms = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "coredns", pauseImage}
	hostPrograms = []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc", "iptables", "iptables-save", "iptables-restore", "conntrack", filepath.Join(cniBin, "bridge"), filepath.Join(cniBin, "host-local"), filepath.Join(cniBin, "loopback")}
)

const (
	// cniBin is where Debian's containernetworking-plugins are.
	cniBin = "/usr/lib/cni"
	// pauseImage is the pod sandbox's image (Kubernetes' pause, built from
	// its source by scripts/install-kube.sh), pauseRef its name.
	pauseImage = "pause.tar"
	pauseRef   = "docker.io/cellkit/pause:3.10.2"
	// corednsUser is CoreDNS's user, bound to what it reads.
	corednsUser = "cellkit:coredns"
	// The ports on the node (loopback unless said).
	etcdClientPort = 2379
	etcdPeerPort   = 2380
	apiserverPort  = 6443 // on the node's address
	kubeletPort    = 10250
	kubeletHealthz = 10248
	cmPort         = 10257
	schedulerPort  = 10259
	proxyHealthz   = 10256
	proxyMetrics   = 10249
	dnsReady       = 8181
	dnsHealth      = 10054
	dnsMetrics     = 9153
)

// lookPath finds a host program: a path as is, else in PATH (with /sbin
// and /usr/sbin, where Debian puts runc and iptables, for a root shell
// whose PATH lacks them).
func lookPath(p string) (string, error) {
	if filepath.IsAbs(p) {
		_, err := os.Stat(p)
		return p, err
	}
	if f, err := exec.LookPath(p); err == nil {
		return f, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/bin"} {
		if _, err := os.Stat(filepath.Join(d, p)); err == nil {
			return filepath.Join(d, p), nil
		}
	}
	return "", fmt.Errorf("%s: not found", p)
}

// node is a cluster being brought up: its configuration and files.
type node struct {
	cfg    Config
	p      paths
	kubeIP netip.Addr    // the kubernetes Service's cluster IP
	dnsIP  netip.Addr    // the cluster DNS Service's
	admin  client.Client // the administrator's client, once the API server answers (adminClient)
}

func newNode(cfg Config) *node {
	kubeIP := cfg.ServiceCIDR.Masked().Addr().Next()
	dnsIP := kubeIP
	for range 9 {
		dnsIP = dnsIP.Next()
	}
	return &node{cfg: cfg, p: paths{dir: cfg.Dir}, kubeIP: kubeIP, dnsIP: dnsIP}
}

func (n *node) apiserver() string {
	return fmt.Sprintf("https://%s", netip.AddrPortFrom(n.cfg.NodeIP, apiserverPort))
}
func (n *node) sock() string { return containerdSock(n.cfg.Run) }

// containerdSock is the socket of the node's containerd, whose run
// directory is run.
func containerdSock(run string) string { return filepath.Join(run, "containerd.sock") }

func (n *node) file(p string) string { return filepath.Join(n.cfg.Dir, p) }
func (n *node) podLogs() string      { return n.file("logs/pods") }
func (n *node) log(name string) string {
	return filepath.Join(n.cfg.Dir, "logs", name+".log")
}

// process is a component of the node as devstack starts it: its program,
// arguments, log and the URL that answers 200 once it is ready ("" for
// containerd, which is ready when its socket answers).
func (n *node) process(name, bin string, ready string, args ...string) devstack.Process {
	return devstack.Process{Name: name, Bin: bin, Args: args, Log: n.log(name), Ready: ready}
}

// components are the node's processes in the order they start (and the
// reverse of the order they stop): etcd, the control plane, containerd,
// the kubelet, kube-proxy, CoreDNS. Each is given all it needs on its
// command line or in a file written by writeConfigs.
func (n *node) components() ([]devstack.Process, error) {
	bin := func(p string) string { return filepath.Join(n.cfg.Bin, p) }
	containerd, err := lookPath("containerd")
	if err != nil {
		return nil, err
	}
	node, ca := n.cfg.NodeIP.String(), n.p.ca()
	loop := func(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }
	etcd := "http://" + loop(etcdClientPort)
	return []devstack.Process{
		n.process("etcd", bin("etcd"), etcd+"/health",
			"--name", NodeName, "--data-dir", n.file("etcd"),
			"--listen-client-urls", etcd, "--advertise-client-urls", etcd,
			"--listen-peer-urls", "http://"+loop(etcdPeerPort), "--initial-advertise-peer-urls", "http://"+loop(etcdPeerPort),
			"--initial-cluster", NodeName+"=http://"+loop(etcdPeerPort), "--log-level", "warn"),
		n.process("kube-apiserver", bin("kube-apiserver"), n.apiserver()+"/readyz",
			"--etcd-servers", etcd, "--bind-address", node, "--advertise-address", node,
			"--secure-port", fmt.Sprint(apiserverPort),
			"--tls-cert-file", n.p.apiserverCert(), "--tls-private-key-file", n.p.apiserverKey(),
			"--client-ca-file", ca, "--authorization-mode", "Node,RBAC",
			"--service-cluster-ip-range", n.cfg.ServiceCIDR.String(),
			"--service-account-issuer", "https://kubernetes.default.svc."+DNSDomain,
			"--service-account-key-file", n.p.saPub(), "--service-account-signing-key-file", n.p.saKey(),
			"--kubelet-client-certificate", n.p.cert(idAPIClient), "--kubelet-client-key", n.p.key(idAPIClient),
			"--kubelet-certificate-authority", ca, "--kubelet-preferred-address-types", "InternalIP",
			"--allow-privileged=false", "--profiling=false"),
		n.process("kube-controller-manager", bin("kube-controller-manager"), "https://"+loop(cmPort)+"/healthz",
			"--kubeconfig", n.p.kubeconfig(idCM),
			"--authentication-kubeconfig", n.p.kubeconfig(idCM), "--authorization-kubeconfig", n.p.kubeconfig(idCM),
			"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(cmPort),
			"--tls-cert-file", n.p.cert(idCM), "--tls-private-key-file", n.p.key(idCM),
			"--service-account-private-key-file", n.p.saKey(), "--root-ca-file", ca,
			"--use-service-account-credentials", "--leader-elect=false",
			"--cluster-signing-cert-file", ca, "--cluster-signing-key-file", n.p.caKey(),
			"--profiling=false"),
		n.process("kube-scheduler", bin("kube-scheduler"), "https://"+loop(schedulerPort)+"/healthz",
			"--kubeconfig", n.p.kubeconfig(idScheduler),
			"--authentication-kubeconfig", n.p.kubeconfig(idScheduler), "--authorization-kubeconfig", n.p.kubeconfig(idScheduler),
			"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(schedulerPort),
			"--tls-cert-file", n.p.cert(idScheduler), "--tls-private-key-file", n.p.key(idScheduler),
			"--leader-elect=false", "--profiling=false"),
		n.process("containerd", containerd, "", "--config", n.file("containerd/config.toml")),
		n.process("kubelet", bin("kubelet"), "http://"+loop(kubeletHealthz)+"/healthz",
			"--config", n.file("kubelet/config.yaml"), "--kubeconfig", n.p.kubeconfig(idKubelet),
			"--root-dir", n.file("kubelet/root"), "--hostname-override", NodeName, "--node-ip", node),
		n.process("kube-proxy", bin("kube-proxy"), "http://"+loop(proxyHealthz)+"/healthz",
			"--config", n.file("kube-proxy/config.yaml")),
		n.process("coredns", bin("coredns"), "http://"+loop(dnsReady)+"/ready",
			"-conf", n.file("coredns/Corefile")),
	}, nil
}

// writeConfigs writes the files the components read: containerd's
// configuration, the CNI network, the kubelet's and kube-proxy's
// configurations and CoreDNS's Corefile.
func (n *node) writeConfigs() error {
	files := map[string]string{
		"containerd/config.toml":                n.containerdConfig(),
		"cni/net.d/10-" + Network + ".conflist": n.cniConfig(),
		"kubelet/config.yaml":                   n.kubeletConfig(),
		"kube-proxy/config.yaml":                n.proxyConfig(),
		"coredns/Corefile":                      n.corefile(),
	}
	for name, body := range files {
		path := n.file(name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := atomicfile.WriteFile(path, []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// containerdConfig: containerd's root under Dir and its state, socket,
// runc's state and the pods' network namespaces under Run (so that Down
// finds every mount and file it made under two directories), runc through the v2 shim with cgroupfs
// (the host has no systemd), the CNI plugins of Debian's package with the
// network writeConfigs writes, and the pause image the project imports
// (there is no registry to pull one from). Containers' OOM score
// adjustments are kept at containerd's own or above: this host refuses a
// lower one even to root (runc would fail every pod sandbox, whose
// adjustment is -998).
func (n *node) containerdConfig() string {
	return fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = %q

[plugins."io.containerd.internal.v1.opt"]
  path = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  netns_mounts_under_state_dir = true
  enable_selinux = false
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %q
`, n.file("containerd/root"), filepath.Join(n.cfg.Run, "containerd"), n.sock(), n.file("containerd/opt"),
		pauseRef, cniBin, n.file("cni/net.d"), filepath.Join(n.cfg.Run, "runc"))
}

// cniConfig is the pods' network: a bridge with the node as their
// gateway, addresses from PodCIDR (host-local, its leases under Dir),
// traffic leaving the node masqueraded, and hairpin so that a pod reaches
// itself through a Service.
func (n *node) cniConfig() string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %q
      }
    }
  ]
}
`, Network, Bridge, n.cfg.PodCIDR.String(), n.file("cni/ipam"))
}

// kubeletConfig: cgroup v1 through cgroupfs (this kernel's hierarchy is
// v1, which kubelets from 1.35 refuse unless failCgroupV1 is false),
// authentication by the cluster's CA and the API server's webhook, no
// image garbage collection (an image collected here cannot be pulled
// again: there is no registry), eviction only at the edge of the disk,
// the containers' logs with the node's (the kubelet's links to them in
// /var/log/containers, a fixed place, go with Down).
func (n *node) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %s
authorization:
  mode: Webhook
tlsCertFile: %s
tlsPrivateKeyFile: %s
cgroupDriver: cgroupfs
failCgroupV1: false
containerRuntimeEndpoint: unix://%s
clusterDNS: [%s]
clusterDomain: %s
resolvConf: /etc/resolv.conf
podLogsDir: %s
failSwapOn: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%%
  nodefs.inodesFree: 1%%
  imagefs.available: 1%%
serializeImagePulls: false
maxPods: 110
`, n.cfg.NodeIP, kubeletPort, kubeletHealthz, n.p.ca(), n.p.cert(idKubelet), n.p.key(idKubelet),
		n.sock(), n.dnsIP, DNSDomain, n.podLogs())
}

// proxyConfig: Services by iptables, without touching the conntrack
// table's size or timeouts, and without node ports on loopback (which
// would set route_localnet on every interface).
func (n *node) proxyConfig() string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %s
mode: iptables
clusterCIDR: %s
hostnameOverride: %s
healthzBindAddress: 127.0.0.1:%d
metricsBindAddress: 127.0.0.1:%d
iptables:
  localhostNodePorts: false
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, n.p.kubeconfig(idProxy), n.cfg.PodCIDR, NodeName, proxyHealthz, proxyMetrics)
}

// corefile: the cluster's names from the API server, the rest forwarded
// to this host's resolvers, on the node's address (the kube-dns Service's
// endpoint).
func (n *node) corefile() string {
	return strings.TrimLeft(fmt.Sprintf(`
.:53 {
    bind %s
    errors
    health 127.0.0.1:%d
    ready 127.0.0.1:%d
    prometheus 127.0.0.1:%d
    kubernetes %s in-addr.arpa ip6.arpa {
        kubeconfig %s
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }
    forward . /etc/resolv.conf
    cache 5
    loop
}
`, n.cfg.NodeIP, dnsHealth, dnsReady, dnsMetrics, DNSDomain, n.p.kubeconfig(idCoreDNS)), "\n")
}
