package kubestack

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/cellkit/cellkit/internal/flagenv"
)

// Command runs `loadtest cluster stack`: the stack on the node, or what of
// it is missing; it prints how to reach it.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadtest cluster stack", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := DefaultConfig()
	fs.StringVar(&cfg.Node, "dir", cfg.Node, "the cluster's `DIR` (loadtest cluster up's); the stack keeps its files in DIR/stack")
	fs.StringVar(&cfg.Bin, "bin", cfg.Bin, "`DIR` holding consul, router and kube/kubectl (make tools, build, cluster-tools)")
	fs.StringVar(&cfg.Overlay, "overlay", cfg.Overlay, "the kustomization `DIR` applied")
	fs.DurationVar(&cfg.ReadyWait, "ready-timeout", cfg.ReadyWait, "give up if the stack is not ready within `D`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("loadtest cluster stack: unexpected arguments %q", fs.Args())
	}
	if err := flagenv.Fill(fs, "loadtest", nil); err != nil {
		return err
	}
	st, err := Up(ctx, cfg, Options{Progress: stderr})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "cellkit is up on the cluster: cells %v; routers at %s (certificate for %s, CA %s), API key %s; map in %s (tokens in %s).\n",
		st.Cells, st.Router, RouterName, st.CA, st.APIKey, st.Registry, path(cfg))
	return nil
}
