//go:build faults

package intake

import (
	"github.com/cellkit/cellkit/internal/api"
	"net/http"
	"os"
	"syscall"
)

// A build with the tag "faults" (`make build` makes bin/faults/cell so)
// has an intake that kills its process at a point of an acceptance, for
// the test of a kill at every point: a request with the header
// Cellkit-Fault: kill-accept-<point> is killed (SIGKILL, nothing runs
// after it) at that point. Never in a release build.

// faultHeader names the point a request's acceptance is killed at.
const faultHeader = api.HeaderFault

// faultAccept kills the process at point if r asks for it.
func faultAccept(point string, r *http.Request) {
	if r.Header.Get(faultHeader) == "kill-accept-"+point {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // until the signal lands
	}
}
