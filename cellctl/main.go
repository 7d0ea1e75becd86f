// Command cellctl operates cellkit cells: it changes the cell map in the
// registry (printing every plan before applying it) and talks to the cells'
// admin APIs. Run 'cellctl help' for the commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	// The Mozilla roots, used only where the system has none (the images'
	// empty base): callbacks and registries on public certificates verify.
	_ "golang.org/x/crypto/x509roots/fallback"

	"github.com/cellkit/cellkit/internal/cellctl"
	"github.com/cellkit/cellkit/internal/devstack/devctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The local stack's commands and deployer (dev up, rollout --stack
	// DIR) come from the lab: the one hook by which cellctl runs them.
	cli := &cellctl.CLI{Extensions: devctl.Extensions()}
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
