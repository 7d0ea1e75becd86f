// Command loadtest sends open-loop load at a cellkit router (loadtest run),
// runs the chaos drills against the local stack (loadtest drill), brings
// cellkit up on a network lab of namespaces (loadtest net) and runs a
// single-node Kubernetes on this machine (loadtest cluster). Run 'loadtest
// help' for the commands.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/cellkit/cellkit/internal/drill"
	"github.com/cellkit/cellkit/internal/kubenode"
	"github.com/cellkit/cellkit/internal/kubenode/kubestack"
	"github.com/cellkit/cellkit/internal/loadtest"
	"github.com/cellkit/cellkit/internal/netlab/netstack"
)

const usage = `loadtest — open-loop load and chaos drills for cellkit

  loadtest run   --target URL --key KEY (--rate R --duration D | --steps "60:10s,200:5s")
                 [--users K] [--zipf S] [--json out.json] [--svg out.svg]
  loadtest drill kill|drain|agency-slow [--dev-json var/dev.json | --bin ./bin]
                 [--rate R] [--users K] [--cell c2] [--json out.json] [--svg out.svg]
  loadtest net up [--dir var/net] [--cells N] [--bin ./bin]   (as root: a host per process)
  loadtest net status|down [--dir var/net]
  loadtest cluster up|status|down [--dir /var/lib/cellkit-cluster]   (as root: a Kubernetes node)
  loadtest cluster stack [--dir /var/lib/cellkit-cluster]            (cellkit on it, with the operator)

'loadtest run -h', 'loadtest drill -h' and 'loadtest net up -h' list every flag. A flag not on the
command line is read from CELLKIT_LOADTEST_<FLAG>, else CELLKIT_<FLAG>.`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(stdout, usage)
		return nil
	}
	switch args[0] {
	case "run":
		return loadtest.Command(ctx, args[1:], stdout, stderr)
	case "drill":
		return drill.Command(ctx, args[1:], stdout, stderr)
	case "net":
		return netstack.Command(ctx, args[1:], stdout, stderr)
	case "cluster":
		if len(args) > 1 && args[1] == "stack" {
			return kubestack.Command(ctx, args[2:], stdout, stderr)
		}
		return kubenode.Command(ctx, args[1:], stdout, stderr)
	}
	return fmt.Errorf("unknown command %q\n%s", args[0], usage)
}
