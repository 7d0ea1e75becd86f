// Package devctl is cellctl's local stack: the dev commands (dev up,
// down, status, replace, certs, supervise) and the deployer of a stack
// on this machine that rollout start, resume and rollback replace
// processes through (--stack DIR). It belongs to the lab: cellctl, a
// product package, does not import it; the cellctl program adds it
// (Extensions).
package devctl

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/cellkit/cellkit/internal/cellctl"
	"github.com/cellkit/cellkit/internal/devstack"
	"github.com/cellkit/cellkit/internal/release"
)

// secDev is the overview's heading of the dev commands.
const secDev = "Local stack"

// Extensions are the local stack's commands and deployer, for
// cellctl.CLI.Extensions.
func Extensions() cellctl.Extensions {
	return cellctl.Extensions{
		Commands: func() []*cellctl.Command {
			return []*cellctl.Command{devUpCommand(), devDownCommand(), devStatusCommand(), devReplaceCommand(), devCertsCommand(), devSuperviseCommand()}
		},
		Deployer: func(stack string) (release.Deployer, error) { return StackDeployer(stack) },
	}
}

// StackDeployer is the deployer of the stack in dir: its dev.json, else
// its net.json.
func StackDeployer(dir string) (devstack.Deployer, error) {
	for _, name := range []string{devstack.StateFile, "net.json"} {
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); err == nil {
			return devstack.Deployer{Path: path, Grace: devstack.StopGrace}, nil
		}
	}
	return devstack.Deployer{}, fmt.Errorf("no stack in %s (no %s or net.json)", dir, devstack.StateFile)
}
