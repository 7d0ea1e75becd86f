package devctl

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/cellctl"
	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/release"
)

// devReplaceCommand replaces one process of a stack on this machine: a
// restart, or an upgrade to another binary or other flags.
func devReplaceCommand() *cellctl.Command {
	dir := "var"
	var spec release.Spec
	readyWithin := time.Minute
	c := &cellctl.Command{
		Name:      "dev replace",
		ArgsUsage: "NAME",
		Section:   secDev,
		Summary:   "restart or upgrade one process of the local stack or the network lab",
		Help: `Replaces the process NAME of the stack in DIR (its dev.json, or a network
lab's net.json) with --bin and --set, or as it runs (a restart), keeping its
ports, data, log and supervisor, and waits until it is ready.

A router started with --handoff-socket (the local stack's and the lab's are)
is replaced without a connection refused: the new router starts beside the
old one and takes its listening sockets over; the old one stops accepting,
answers what it has (Connection: close), and ends. A new router that does not
take over (it fails to start, or is not ready) is stopped and the old one
serves on: the command fails, saying why. Any other process is stopped
(SIGTERM, then SIGKILL after 30 s) and started again.`,
		Examples: `cellctl dev replace router
cellctl dev replace router --bin ./bin/router
cellctl dev replace router --set cell-timeout=3s
cellctl dev replace --dir /tmp/lab router1`,
		MinArgs: 1,
		MaxArgs: 1,
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&dir, "dir", dir, "`DIR` of the stack (its dev.json or net.json)")
			fs.StringVar(&spec.Bin, "bin", "", "`PATH` of the new program (default: the process's own)")
			fs.Func("set", "`NAME=VALUE`: a flag the new process sets on top of its arguments (repeat)", func(v string) error {
				spec.Set = append(spec.Set, v)
				return nil
			})
			fs.DurationVar(&readyWithin, "ready-within", readyWithin, "how long the new process has to get ready")
		},
	}
	c.Run = func(ctx context.Context, in *cellctl.Invocation, args []string) error {
		name := args[0]
		if readyWithin <= 0 {
			return cellctl.Usagef("--ready-within %v: want a positive duration", readyWithin)
		}
		d, err := StackDeployer(dir)
		if err != nil {
			return err
		}
		procs, err := d.Recorded()
		if err != nil {
			return err
		}
		i := slices.IndexFunc(procs, func(p devstack.Process) bool { return p.Name == name })
		if i < 0 {
			names := make([]string, len(procs))
			for j, p := range procs {
				names[j] = p.Name
			}
			return cellctl.Usagef("no process %q in %s (it has %s)", name, d.Path, strings.Join(names, ", "))
		}
		if !spec.Empty() {
			if err := spec.Validate(programOf(procs[i])); err != nil {
				return cellctl.Usagef("%s", err)
			}
		}
		hc := in.HTTP()
		if st, err := devstack.Read(d.Path); err == nil && st.TLS != nil {
			if hc, err = stackClient(in, st); err != nil {
				return err
			}
		}
		t0 := time.Now()
		before, child, err := d.ReplaceProcess(ctx, name, devstack.AsRelease(spec))
		if err != nil {
			return err
		}
		how := "stopped and started"
		if devstack.HandsOver(before) {
			how = "handed over its sockets"
		}
		if err := devstack.WaitReady(ctx, hc, readyWithin, child); err != nil {
			return fmt.Errorf("%s %s, and the new process is not ready: %w", name, how, err)
		}
		fmt.Fprintf(in.Stdout(), "%s %s: pid %d → %d, ready in %s\n", name, how, before.PID, child.PID, time.Since(t0).Round(10*time.Millisecond))
		return nil
	}
	return c
}

// programOf is the program a stack's process runs: router, cell, or its
// binary's name.
func programOf(p devstack.Process) string {
	switch {
	case devstack.IsRouter(p.Name):
		return "router"
	case strings.HasPrefix(filepath.Base(p.Bin), "cell"):
		return "cell"
	}
	return filepath.Base(p.Bin)
}
