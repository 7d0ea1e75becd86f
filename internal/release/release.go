// Package release is what a release is and who puts one out: a Spec (a
// binary or an image in place of a process's, and flags set on top of its
// arguments) and the Deployer that replaces a process with another
// command. The rollout (internal/rollout) drives a release through any
// Deployer: the local stack's and the network lab's (internal/devstack)
// and a cluster's are the same to it.
package release

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/control"
)

// Spec is a release: another binary (a stack of processes on hosts) or
// image (Kubernetes) in place of a process's, and flags set on top of its
// arguments. Bin and Image are never both set.
type Spec struct {
	Bin   string `json:"bin,omitempty"`
	Image string `json:"image,omitempty"`
	// Set are "name=value", given to the program as --name=value after
	// its own arguments: for a flag given once the last one wins, so the
	// value is replaced; a repeatable flag (--agency) gets one more.
	Set []string `json:"set,omitempty"`
}

// Empty says whether the spec changes nothing.
func (s Spec) Empty() bool { return s.Bin == "" && s.Image == "" && len(s.Set) == 0 }

// Validate refuses a spec that changes nothing, names both a binary and
// an image, names a binary that is missing or is not program (its
// --version must answer "PROGRAM VERSION..."), names an image that is no
// image reference (ValidImage), or sets a flag not as name=value.
func (s Spec) Validate(program string) error {
	switch {
	case s.Empty():
		return errors.New("a release needs a binary, an image or a flag to set")
	case s.Bin != "" && s.Image != "":
		return fmt.Errorf("a release is a binary or an image, not both (binary %s, image %s)", s.Bin, s.Image)
	case s.Bin != "":
		if err := validBinary(s.Bin, program); err != nil {
			return err
		}
	case s.Image != "":
		if err := ValidImage(s.Image); err != nil {
			return err
		}
	}
	for _, kv := range s.Set {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" || strings.HasPrefix(name, "-") {
			return fmt.Errorf("flag %q: want name=value", kv)
		}
	}
	return nil
}

// Apply is c as s runs it. A binary's release (a stack of processes on
// hosts) runs s's binary in place of c's, with c's arguments — its ports,
// data and names — and then --name=value for each of s's flags. An
// image's release (Kubernetes) is the image and its settings exactly: the
// platform gives the process its own arguments, which are not the
// release's, so c's arguments are the settings it ran and s's replace
// them (a setting left out of s is gone). The other of binary and image is
// cleared (a command runs one of them), and so is the release c
// reported: the command has not run yet.
func (s Spec) Apply(c control.Command) control.Command {
	out := control.Command{Bin: c.Bin, Image: c.Image, Args: slices.Clone(c.Args)}
	switch {
	case s.Bin != "":
		out.Bin, out.Image = s.Bin, ""
	case s.Image != "":
		out.Bin, out.Image, out.Args = "", s.Image, nil
	}
	for _, kv := range s.Set {
		out.Args = append(out.Args, "--"+kv)
	}
	return out
}

// Settings are a command's arguments as the name=value settings they
// set: the inverse of an image release's Apply (an argument not of the
// form --name=value is left out).
func Settings(args []string) []string {
	var out []string
	for _, a := range args {
		if kv, ok := strings.CutPrefix(a, "--"); ok && strings.Contains(kv, "=") {
			out = append(out, kv)
		}
	}
	return out
}

// validBinary refuses a path that is not an executable file answering
// bin --version, within seconds, with program and a version, as every
// cellkit program does.
func validBinary(bin, program string) error {
	fi, err := os.Stat(bin)
	if err != nil {
		return fmt.Errorf("binary: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("binary %s is not an executable file", bin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return fmt.Errorf("binary %s does not report its version (%s --version: %v)", bin, bin, err)
	}
	f := strings.Fields(string(out))
	switch {
	case len(f) < 2:
		return fmt.Errorf("binary %s does not report its version (%s --version said %q)", bin, bin, strings.TrimSpace(string(out)))
	case f[0] != program:
		return fmt.Errorf("binary %s is %s, not %s (its --version: %q)", bin, f[0], program, strings.TrimSpace(string(out)))
	}
	return nil
}

// Process is one process a deployer can replace.
type Process struct {
	Name     string // the deployer's name for it (the local stack: "c1-i1", "router"; Kubernetes: the pod's name)
	Router   bool
	Cell     string          // a cell's process: its cell id
	Instance string          // its instance id ("" for a cell of one process)
	Ready    string          // its readiness URL (a router's admin API's /readyz), "" if none
	Run      control.Command // what it runs now (Bin or Image, Args); Release empty
}

// Deployer replaces a process, by name, with another command and returns
// what it ran before. Readiness is the caller's to wait for.
//
// Processes lists the processes in the deployer's order: a cell's
// instances are replaced in that order (Kubernetes lists a StatefulSet's
// highest ordinal first, as it updates them).
type Deployer interface {
	Processes(ctx context.Context) ([]Process, error)
	Replace(ctx context.Context, name string, run control.Command) (before control.Command, err error)
}
