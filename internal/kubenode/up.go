package kubenode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/backoff"
	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/tlsconf"
)

// sysctls are what Up sets for pods and Services: forwarding, and bridged
// traffic through iptables (kube-proxy's rules see pod-to-pod Services on
// the bridge). The kubelet sets a few of its own (overcommit, panic on
// oops, the keyring's quotas): Up records those too, so that Down puts
// every one back.
var (
	sysctlsSet = map[string]string{
		"net/ipv4/ip_forward":                 "1",
		"net/bridge/bridge-nf-call-iptables":  "1",
		"net/bridge/bridge-nf-call-ip6tables": "1",
	}
	sysctlsKubelet = []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
		"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"}
)

// Up brings the cluster in cfg.Dir up, or completes it: each component
// not running is started, in order, and waited for; the images are
// imported. It returns once the node is Ready and Services resolve by
// name. A component that fails to start fails Up with the end of its
// log; what is running stays (Down removes it).
func Up(ctx context.Context, cfg Config, opts Options) (*Record, error) {
	if err := Available(cfg); err != nil {
		return nil, err
	}
	var err error
	if cfg.Bin, err = filepath.Abs(cfg.Bin); err != nil {
		return nil, err
	}
	rec, err := ReadRecord(cfg.Dir)
	if err != nil && !strings.HasPrefix(err.Error(), "no cluster") {
		return nil, err
	}
	if rec == nil {
		rec = &Record{Started: time.Now().UTC(), Sysctls: map[string]string{}}
	} else {
		// A cluster keeps its address and subnets while it lives.
		cfg.NodeIP, cfg.Run, cfg.PodCIDR, cfg.ServiceCIDR = rec.NodeIP, rec.Run, rec.PodCIDR, rec.ServiceCIDR
	}
	if !cfg.NodeIP.IsValid() {
		if cfg.NodeIP, err = defaultRouteAddr(); err != nil {
			return nil, err
		}
	}
	n := newNode(cfg)
	rec.NodeIP, rec.Run, rec.PodCIDR, rec.ServiceCIDR = cfg.NodeIP, cfg.Run, cfg.PodCIDR, cfg.ServiceCIDR
	rec.APIServer, rec.Kubeconfig, rec.DNS = n.apiserver(), n.p.kubeconfig(idAdmin), n.dnsIP
	for _, d := range []string{cfg.Dir, filepath.Join(cfg.Dir, "logs"), cfg.Run} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := writePKI(n.p, cfg.NodeIP, n.apiserver(), n.kubeIP); err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	if err := n.writeConfigs(); err != nil {
		return nil, err
	}
	if err := setSysctls(rec); err != nil {
		return nil, err
	}
	if err := rec.save(cfg.Dir); err != nil {
		return nil, err
	}
	hc, err := n.httpClient()
	if err != nil {
		return nil, err
	}
	comps, err := n.components()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.ReadyWait)
	defer cancel()
	for _, p := range comps {
		start := time.Now()
		running := recorded(rec, p)
		if running == nil {
			c, err := devstack.Start(p)
			if err != nil {
				return nil, err
			}
			running = &c.Process
			rec.Procs = append(removeProc(rec.Procs, p.Name), c.Process)
			if err := rec.save(cfg.Dir); err != nil {
				return nil, err
			}
			if err := n.waitReady(ctx, hc, c); err != nil {
				return nil, err
			}
		}
		if err := n.after(ctx, hc, p.Name, rec); err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		opts.say("%-24s pid %-7d ready in %v", p.Name, running.PID, time.Since(start).Round(10*time.Millisecond))
	}
	return rec, rec.save(cfg.Dir)
}

// recorded is the record's process of p's name if it still runs p's
// program, else nil.
func recorded(rec *Record, p devstack.Process) *devstack.Process {
	for i, q := range rec.Procs {
		if q.Name == p.Name && q.Bin == p.Bin && devstack.Alive(q.PID) {
			return &rec.Procs[i]
		}
	}
	return nil
}

func removeProc(ps []devstack.Process, name string) []devstack.Process {
	var out []devstack.Process
	for _, p := range ps {
		if p.Name != name {
			out = append(out, p)
		}
	}
	return out
}

// waitReady waits for c: its Ready URL, or for containerd its socket.
func (n *node) waitReady(ctx context.Context, hc *http.Client, c *devstack.Child) error {
	if c.Ready != "" {
		left := time.Until(deadline(ctx))
		return devstack.WaitReady(ctx, hc, left, c)
	}
	for {
		if how, ended := c.Ended(); ended {
			return fmt.Errorf("%s exited while starting (%s); last lines of %s: %s", c.Name, how, c.Log, devstack.LogTail(c.Log, 5))
		}
		if conn, err := net.DialTimeout("unix", n.sock(), time.Second); err == nil {
			conn.Close()
			return nil
		}
		if err := backoff.Sleep(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("%s: its socket %s does not answer: %w", c.Name, n.sock(), err)
		}
	}
}

func deadline(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(time.Hour)
}

// after does what follows a component's start: the cluster's own objects
// once the API server answers, the default service account (without
// which no pod of the default namespace is admitted) once the controller
// manager runs, the images once containerd answers, the node's readiness
// after the kubelet's, and names resolving after CoreDNS's.
func (n *node) after(ctx context.Context, hc *http.Client, name string, rec *Record) error {
	switch name {
	case "kube-apiserver":
		return n.bootstrap(ctx)
	case "kube-controller-manager":
		return n.waitDefaultServiceAccount(ctx)
	case "containerd":
		imported, err := n.importImages(ctx)
		rec.Images = imported
		return err
	case "kubelet":
		return n.waitNodeReady(ctx)
	case "coredns":
		return n.waitDNS(ctx)
	}
	return nil
}

// importImages imports the pause image and cfg.Images into containerd's
// k8s.io namespace (the CRI's), each of cfg.Version also as DevTag,
// returning the names each tarball gave.
func (n *node) importImages(ctx context.Context) (map[string][]string, error) {
	out := map[string][]string{}
	for _, tar := range append([]string{filepath.Join(n.cfg.Bin, pauseImage)}, n.cfg.Images...) {
		b, err := ctr(ctx, n.sock(), "images", "import", "--no-unpack=false", tar)
		if err != nil {
			return out, fmt.Errorf("import %s: %v: %s", tar, err, strings.TrimSpace(string(b)))
		}
		for _, l := range strings.Split(string(b), "\n") {
			// ctr prints "unpacking NAME (sha256:...)...done".
			f := strings.Fields(l)
			if len(f) < 2 || f[0] != "unpacking" {
				continue
			}
			out[tar] = append(out[tar], f[1])
			if v := n.cfg.Version; v != "" && strings.HasSuffix(f[1], ":"+v) {
				dev := strings.TrimSuffix(f[1], v) + DevTag
				if b, err := ctr(ctx, n.sock(), "images", "tag", "--force", f[1], dev); err != nil {
					return out, fmt.Errorf("tag %s as %s: %v: %s", f[1], dev, err, strings.TrimSpace(string(b)))
				}
				out[tar] = append(out[tar], dev)
			}
		}
	}
	if v := n.cfg.Version; v != "" && !tagged(out, ":"+DevTag) {
		return out, fmt.Errorf("no image of version %s among %v: make images (VERSION %s), or give the version they were built with", v, n.cfg.Images, v)
	}
	return out, nil
}

// ctr runs containerd's ctr against the node's containerd at sock, in
// the CRI's namespace (k8s.io), and returns what it printed.
func ctr(ctx context.Context, sock string, args ...string) ([]byte, error) {
	bin, err := lookPath("ctr")
	if err != nil {
		return nil, err
	}
	return exec.CommandContext(ctx, bin, append([]string{"--address", sock, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
}

// Ctr runs ctr against the node's containerd, in the CRI's namespace:
// a drill kills a container's task with it (kubelet sees a container
// die, not a pod deleted). An error carries what ctr printed.
func (r *Record) Ctr(ctx context.Context, args ...string) (string, error) {
	b, err := ctr(ctx, containerdSock(r.Run), args...)
	if err != nil {
		return string(b), fmt.Errorf("ctr %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(b)))
	}
	return string(b), nil
}

// Image is the name the node imported the tarball named file (its base
// name, such as cell-failing.tar) under, first of its names; ok false if
// it imported none such.
func (r *Record) Image(file string) (name string, ok bool) {
	for tar, names := range r.Images {
		if filepath.Base(tar) == file && len(names) > 0 {
			return names[0], true
		}
	}
	return "", false
}

// tagged says whether a name of imported ends with suffix.
func tagged(imported map[string][]string, suffix string) bool {
	for _, names := range imported {
		for _, name := range names {
			if strings.HasSuffix(name, suffix) {
				return true
			}
		}
	}
	return false
}

// httpClient trusts the cluster's CA and presents the administrator's
// certificate: it reads every component's health endpoint.
func (n *node) httpClient() (*http.Client, error) {
	pool, err := tlsconf.LoadPool(n.p.ca())
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(n.p.cert(idAdmin), n.p.key(idAdmin))
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}, nil
}

// waitDNS waits until the cluster DNS, asked at the node's address,
// resolves the kubernetes Service's name to its cluster IP.
func (n *node) waitDNS(ctx context.Context) error {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, netip.AddrPortFrom(n.cfg.NodeIP, 53).String())
	}}
	name := "kubernetes.default.svc." + DNSDomain
	var last error
	for {
		addrs, err := r.LookupHost(ctx, name)
		if err == nil {
			for _, a := range addrs {
				if a == n.kubeIP.String() {
					return nil
				}
			}
			err = fmt.Errorf("%s is %v, want %s", name, addrs, n.kubeIP)
		}
		last = err
		if err := backoff.Sleep(ctx, 100*time.Millisecond); err != nil {
			return fmt.Errorf("DNS: %v (%w)", last, err)
		}
	}
}

// setSysctls sets sysctlsSet, recording first (once per cluster) the
// values before, with the kubelet's.
func setSysctls(rec *Record) error {
	if rec.Sysctls == nil {
		rec.Sysctls = map[string]string{}
	}
	names := append([]string{}, sysctlsKubelet...)
	for k := range sysctlsSet {
		names = append(names, k)
	}
	for _, k := range names {
		if _, ok := rec.Sysctls[k]; ok {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			continue // not on this kernel: nothing to put back
		}
		rec.Sysctls[k] = strings.TrimSpace(string(b))
	}
	for k, v := range sysctlsSet {
		if err := writeSysctl(k, v); err != nil {
			return err
		}
	}
	return nil
}

func writeSysctl(k, v string) error {
	if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", strings.ReplaceAll(k, "/", "."), v, err)
	}
	return nil
}

// defaultRouteAddr is the IPv4 address this host sends from on its
// default route.
func defaultRouteAddr() (netip.Addr, error) {
	out, err := exec.Command("ip", "-4", "route", "get", "8.8.8.8").Output()
	if err == nil {
		f := strings.Fields(string(out))
		for i := range f {
			if f[i] == "src" && i+1 < len(f) {
				if a, err := netip.ParseAddr(f[i+1]); err == nil {
					return a, nil
				}
			}
		}
	}
	return netip.Addr{}, errors.New("no address on a default route: give the node's with --node-ip")
}
