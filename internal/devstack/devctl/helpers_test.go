package devctl

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/cellkit/cellkit/internal/cellctl"
	"github.com/cellkit/cellkit/internal/testkit"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m, goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

// result is one cellctl run.
type result struct {
	args           []string
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("cellctl %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// cellctlRun runs cellctl in this process as the cellctl program does,
// with the local stack's extensions, and without the environment.
func cellctlRun(ctx context.Context, args ...string) result {
	var out, errw bytes.Buffer
	cli := &cellctl.CLI{Getenv: func(string) string { return "" }, Extensions: Extensions()}
	code := cli.Run(ctx, args, &out, &errw)
	return result{args: args, stdout: out.String(), stderr: errw.String(), code: code}
}

func run(args ...string) result { return cellctlRun(context.Background(), args...) }
