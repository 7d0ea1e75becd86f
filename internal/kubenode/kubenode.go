// Package kubenode runs a single-node Kubernetes cluster on this machine
// from parts the project installs itself (make cluster): etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy and
// the kubelet built from the Go module proxy into bin/kube, Debian's
// containerd, runc and CNI plugins, and CoreDNS, each a process of this
// host. Pods are real containers: the kubelet asks containerd, which runs
// them with runc in network namespaces on the CNI bridge.
//
// Up starts what is not running and waits until the node is Ready, DNS
// answers for Services and the images given are in containerd; Down stops
// everything, unmounts, removes the network namespaces, the bridge and its
// links, the iptables rules and the cgroups the cluster made, and says
// what, if anything, it could not remove (Leftovers). The cluster's record
// is cluster.json in Config.Dir.
//
// Lab plane: the drills on Kubernetes run on it; nothing in the product
// imports it.
package kubenode

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/cellkit/cellkit/internal/atomicfile"
	"github.com/cellkit/cellkit/internal/devstack"
)

// Config is where the cluster lives and what it is made of.
type Config struct {
	// Dir holds the cluster's record, certificates, configurations,
	// etcd's data, containerd's root, the kubelet's root and the logs.
	Dir string
	// Run holds what must not outlive the machine: sockets, containerd's
	// state, the pods' network namespaces.
	Run string
	// Bin holds etcd, the Kubernetes programs, coredns and pause.tar
	// (scripts/install-kube.sh --node).
	Bin string
	// Images are image tarballs (docker-archive) imported into containerd
	// on every Up: the project's images (make images).
	Images []string
	// Version is the project's images' tag (make images' VERSION): each
	// image imported under it is also tagged DevTag, the tag
	// deploy/kubernetes/overlays/one-node names ("" for none).
	Version string
	// NodeIP is the node's address: the API server's, the kubelet's and
	// the DNS server's (zero: the address of the default route's link).
	NodeIP netip.Addr
	// PodCIDR is the pods' subnet on the CNI bridge; ServiceCIDR the
	// Services' cluster IPs (the API server takes the first, DNS the
	// tenth).
	PodCIDR, ServiceCIDR netip.Prefix
	// ReadyWait bounds Up.
	ReadyWait time.Duration
}

// DefaultConfig is a cluster in /var/lib/cellkit-cluster.
func DefaultConfig() Config {
	return Config{
		Dir:         "/var/lib/cellkit-cluster",
		Run:         "/run/cellkit-cluster",
		Bin:         "bin/kube",
		PodCIDR:     netip.MustParsePrefix("10.244.0.0/24"),
		ServiceCIDR: netip.MustParsePrefix("10.96.0.0/16"),
		ReadyWait:   3 * time.Minute,
	}
}

// The node's fixed names: its Node object, the CNI network and bridge, the
// cluster's DNS domain.
const (
	NodeName   = "cellkit-node"
	Network    = "cellkit"
	Bridge     = "ckcni0"
	DNSDomain  = "cluster.local"
	recordFile = "cluster.json"
	// DevTag is the tag the one-node overlay runs the project's images
	// at: Up moves it to the images of Config.Version.
	DevTag = "dev"
)

// Record is what Up wrote in Dir/cluster.json: the processes it started
// and what it changed on the host, for Down.
type Record struct {
	NodeIP      netip.Addr          `json:"nodeIP"`
	Run         string              `json:"run"`
	Kubeconfig  string              `json:"kubeconfig"` // the administrator's
	APIServer   string              `json:"apiServer"`  // https://NODE-IP:6443
	DNS         netip.Addr          `json:"dns"`        // the cluster DNS Service's IP
	Procs       []devstack.Process  `json:"procs"`
	Sysctls     map[string]string   `json:"sysctls,omitempty"` // the values before Up set them
	Started     time.Time           `json:"started"`
	Images      map[string][]string `json:"images,omitempty"` // tarball -> names imported
	PodCIDR     netip.Prefix        `json:"podCIDR"`
	ServiceCIDR netip.Prefix        `json:"serviceCIDR"`
}

// ReadRecord reads the record of the cluster in dir.
func ReadRecord(dir string) (*Record, error) {
	b, err := os.ReadFile(filepath.Join(dir, recordFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no cluster in %s", dir)
	}
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, recordFile), err)
	}
	return &r, nil
}

func (r *Record) save(dir string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, recordFile), append(b, '\n'), 0o644)
}

// Options are Up's and Down's collaborators.
type Options struct {
	// Progress, if set, gets a line per step.
	Progress io.Writer
}

func (o Options) say(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", args...)
	}
}

// Available says why a cluster cannot run here (nil when it can): root,
// the programs, the kernel's bridge filter.
func Available(cfg Config) error {
	if os.Geteuid() != 0 {
		return errors.New("a cluster needs root (containers, network namespaces, iptables)")
	}
	var missing []string
	for _, p := range nodePrograms {
		if _, err := os.Stat(filepath.Join(cfg.Bin, p)); err != nil {
			missing = append(missing, filepath.Join(cfg.Bin, p))
		}
	}
	for _, p := range hostPrograms {
		if _, err := lookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %v: run make cluster-tools", missing)
	}
	if _, err := os.Stat("/proc/sys/net/bridge/bridge-nf-call-iptables"); err != nil {
		return errors.New("the kernel has no bridge netfilter (br_netfilter): Services would not reach pods on the same bridge")
	}
	return nil
}
