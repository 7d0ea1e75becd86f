//go:build faults

package pipeline

import (
	"fmt"
	"hash/fnv"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// A build with the tag "faults" (`make build` makes bin/faults/cell so)
// has a pipeline that injects faults by user ID, for the poison drill and
// the crash-loop test. Never in a release build.

// release, set at link time, makes the whole build a bad release for
// the rollout drill (`make build` makes bin/faults/cell-RELEASE so, with
// -ldflags "-X github.com/cellkit/cellkit/internal/pipeline.release=NAME"):
//
//   - "failing": a fifth of the inquiries (by user) panic, and so fail;
//   - "slow": every inquiry takes 300 ms more;
//   - "crashing": the process exits when its pipeline starts (after its
//     flags are read: it still answers --version, as a release must);
//   - "unstable": it gets ready, and one user in fifty crashes it (an
//     unrecovered panic while the inquiry is in flight);
//   - "tailslow": one inquiry in fifty (every fiftieth agency call)
//     takes a second more, the rest as usual: a regression of the slowest
//     2 % alone.
var release string

// tailCalls counts the agency calls of a "tailslow" release.
var tailCalls atomic.Uint64

// faultStart runs when the pipeline starts.
func faultStart() {
	if release == "crashing" {
		fmt.Fprintln(os.Stderr, "cell: a crashing release (faults build): exiting")
		os.Exit(3)
	}
}

// faultHook runs at the start of each agency call of an inquiry for user:
//
//   - "poison-…": the call panics (recovered at the inquiry's boundary);
//   - "crash-…": the process crashes (a panic on a goroutine of its own,
//     which nothing recovers), while the inquiry is in flight;
//   - with release set, as it says.
//
// Only the first agency's call acts, so that one inquiry is one panic.
func faultHook(user, agency string) {
	if agency == firstAgency {
		switch release {
		case "failing":
			h := fnv.New32a()
			h.Write([]byte(user))
			if h.Sum32()%5 == 0 {
				panic(fmt.Sprintf("injected failure of release %q for user %s", release, user))
			}
		case "slow":
			time.Sleep(300 * time.Millisecond)
		case "tailslow":
			if tailCalls.Add(1)%50 == 0 {
				time.Sleep(time.Second)
			}
		case "unstable":
			h := fnv.New32a()
			h.Write([]byte(user))
			if h.Sum32()%50 == 0 {
				go func() { panic(fmt.Sprintf("injected crash of release %q for user %s", release, user)) }()
				time.Sleep(time.Minute) // in flight until the process dies
			}
		}
	}
	switch {
	case strings.HasPrefix(user, "poison-") && agency == firstAgency:
		panic(fmt.Sprintf("injected poison for user %s", user))
	case strings.HasPrefix(user, "crash-") && agency == firstAgency:
		go func() { panic(fmt.Sprintf("injected crash for user %s", user)) }()
		time.Sleep(time.Minute) // in flight until the process dies
	}
}

// firstAgency is the agency whose call the faults act on.
const firstAgency = "nice"
