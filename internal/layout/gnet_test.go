package layout

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cellkit/cellkit/internal/testkit"
)

// TestGnetIsUpstreamPlusTheSeries holds third_party/gnet, the tree the
// build uses, to gnet's release plus cellkit's series of patches
// (scripts/gnet-fork.sh check): a change made in the tree and not in the
// series fails here. The release comes from the Go module proxy; under
// -short only from the module cache, and the test skips when it is not
// there.
func TestGnetIsUpstreamPlusTheSeries(t *testing.T) {
	root, err := testkit.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "gnet-fork.sh"), "check")
	cmd.Env = os.Environ()
	if testing.Short() {
		cmd.Env = append(cmd.Env, "GOPROXY=off")
	}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		t.Logf("%s", out)
	case testing.Short() && errors.As(err, &exit) && exit.ExitCode() == 3:
		t.Skipf("-short downloads nothing and gnet's release is not in the module cache (make test, or scripts/gnet-fork.sh check, fetches it): %s", out)
	default:
		t.Fatalf("scripts/gnet-fork.sh check: %v\n%s", err, out)
	}
}
