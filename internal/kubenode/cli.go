package kubenode

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"strings"

	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/flagenv"
)

const usage = `loadtest cluster — a single-node Kubernetes on this machine (as root)

  loadtest cluster up [--dir /var/lib/cellkit-cluster] [--bin bin/kube] [--images bin/images] [--node-ip IP]
  loadtest cluster status|down [--dir /var/lib/cellkit-cluster]

'loadtest cluster up -h' lists every flag.`

// Command runs `loadtest cluster up|down|status`.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stdout, usage)
		return nil
	}
	sub := args[0]
	fs := flag.NewFlagSet("loadtest cluster "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := DefaultConfig()
	fs.StringVar(&cfg.Dir, "dir", cfg.Dir, "`DIR` keeping the cluster's record (cluster.json), certificates, data and logs")
	var images, nodeIP string
	switch sub {
	case "up":
		fs.StringVar(&cfg.Bin, "bin", cfg.Bin, "`DIR` holding etcd, the Kubernetes programs, coredns and pause.tar (make cluster-tools)")
		fs.StringVar(&images, "images", "bin/images", "`DIR` whose *.tar images are imported into containerd (make images; \"\" for none)")
		fs.StringVar(&nodeIP, "node-ip", "", "the node's `IP` (default: the address of the default route)")
		fs.StringVar(&cfg.Version, "version", "", "the images' `VERSION` (make images'): those images are also tagged "+DevTag+", as deploy/kubernetes/overlays/one-node runs them")
		fs.DurationVar(&cfg.ReadyWait, "ready-timeout", cfg.ReadyWait, "give up if the cluster is not ready within `D`")
	case "down", "status":
		fs.StringVar(&cfg.Bin, "bin", cfg.Bin, "`DIR` of the cluster's programs (kube-proxy cleans its rules)")
	default:
		return fmt.Errorf("unknown cluster command %q: up, down or status", sub)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("loadtest cluster %s: unexpected arguments %q", sub, fs.Args())
	}
	if err := flagenv.Fill(fs, "loadtest", nil); err != nil {
		return err
	}
	if nodeIP != "" {
		a, err := netip.ParseAddr(nodeIP)
		if err != nil || !a.Is4() {
			return fmt.Errorf("--node-ip %q: want an IPv4 address", nodeIP)
		}
		cfg.NodeIP = a
	}
	if images != "" {
		tars, err := filepath.Glob(filepath.Join(images, "*.tar"))
		if err != nil {
			return err
		}
		cfg.Images = tars
	}
	switch sub {
	case "up":
		rec, err := Up(ctx, cfg, Options{Progress: stderr})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "A Kubernetes node %s is up at %s (DNS %s).\n\n  export KUBECONFIG=%s\n  %s get nodes\n\nImported: %s\n",
			NodeName, rec.APIServer, rec.DNS, rec.Kubeconfig, filepath.Join(cfg.Bin, "kubectl"), strings.Join(imageNames(rec), ", "))
		return nil
	case "down":
		return Down(ctx, cfg, Options{Progress: stdout})
	}
	return status(cfg, stdout)
}

func imageNames(rec *Record) []string {
	var names []string
	for _, ns := range rec.Images {
		names = append(names, ns...)
	}
	return names
}

// status prints each recorded component, running or not, and what would
// be left on the host.
func status(cfg Config, w io.Writer) error {
	rec, err := ReadRecord(cfg.Dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "node %s at %s, since %s\n", NodeName, rec.APIServer, rec.Started.Format("2006-01-02 15:04:05 MST"))
	for _, p := range rec.Procs {
		state := "running"
		if !devstack.Alive(p.PID) {
			state = "NOT RUNNING"
		}
		fmt.Fprintf(w, "  %-24s pid %-7d %s\n", p.Name, p.PID, state)
	}
	return nil
}
