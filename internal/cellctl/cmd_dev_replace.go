package cellctl

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/devstack"
)

// devReplaceCommand replaces one process of a stack on this machine: a
// restart, or an upgrade to another binary or other flags.
func devReplaceCommand() *command {
	dir := "var"
	var spec devstack.Spec
	readyWithin := time.Minute
	c := &command{
		name:      "dev replace",
		argsUsage: "NAME",
		section:   secDev,
		summary:   "restart or upgrade one process of the local stack or the network lab",
		help: `Replaces the process NAME of the stack in DIR (its dev.json, or a network
lab's net.json) with --bin and --set, or as it runs (a restart), keeping its
ports, data, log and supervisor, and waits until it is ready.

A router started with --handoff-socket (the local stack's and the lab's are)
is replaced without a connection refused: the new router starts beside the
old one and takes its listening sockets over; the old one stops accepting,
answers what it has (Connection: close), and ends. A new router that does not
take over (it fails to start, or is not ready) is stopped and the old one
serves on: the command fails, saying why. Any other process is stopped
(SIGTERM, then SIGKILL after 30 s) and started again.`,
		examples: `cellctl dev replace router
cellctl dev replace router --bin ./bin/router
cellctl dev replace router --set cell-timeout=3s
cellctl dev replace --dir /tmp/lab router1`,
		minArgs: 1,
		maxArgs: 1,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&dir, "dir", dir, "`DIR` of the stack (its dev.json or net.json)")
			fs.StringVar(&spec.Bin, "bin", "", "`PATH` of the new program (default: the process's own)")
			fs.Func("set", "`NAME=VALUE`: a flag the new process sets on top of its arguments (repeat)", func(v string) error {
				spec.Set = append(spec.Set, v)
				return nil
			})
			fs.DurationVar(&readyWithin, "ready-within", readyWithin, "how long the new process has to get ready")
		},
	}
	c.run = func(ctx context.Context, x *inv, args []string) error {
		name := args[0]
		if readyWithin <= 0 {
			return usagef("--ready-within %v: want a positive duration", readyWithin)
		}
		d, err := stackDeployer(dir)
		if err != nil {
			return err
		}
		procs, err := d.Processes()
		if err != nil {
			return err
		}
		i := slices.IndexFunc(procs, func(p devstack.Process) bool { return p.Name == name })
		if i < 0 {
			names := make([]string, len(procs))
			for j, p := range procs {
				names[j] = p.Name
			}
			return usagef("no process %q in %s (it has %s)", name, d.Path, strings.Join(names, ", "))
		}
		if !spec.Empty() {
			if err := spec.Validate(programOf(procs[i])); err != nil {
				return usagef("%s", err)
			}
		}
		hc := x.cli.httpClient()
		if st, err := devstack.Read(d.Path); err == nil && st.TLS != nil {
			if hc, err = x.stackClient(st); err != nil {
				return err
			}
		}
		t0 := time.Now()
		before, child, err := d.Replace(ctx, name, spec.Apply)
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
		fmt.Fprintf(x.out, "%s %s: pid %d → %d, ready in %s\n", name, how, before.PID, child.PID, time.Since(t0).Round(10*time.Millisecond))
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

// stackDeployer is the deployer of the stack in dir: its dev.json, else
// its net.json.
func stackDeployer(dir string) (devstack.Deployer, error) {
	for _, name := range []string{devstack.StateFile, "net.json"} {
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); err == nil {
			return devstack.Deployer{Path: path, Grace: devstack.StopGrace}, nil
		}
	}
	return devstack.Deployer{}, fmt.Errorf("no stack in %s (no %s or net.json)", dir, devstack.StateFile)
}
