//go:build faults

package pipeline

import (
	"fmt"
	"strings"
	"time"
)

// A build with the tag "faults" (`make build` makes bin/faults/cell so)
// has a pipeline that injects faults by user ID, for the poison drill and
// the crash-loop test. Never in a release build.

// faultHook runs at the start of each agency call of an inquiry for user:
//
//   - "poison-…": the call panics (recovered at the inquiry's boundary);
//   - "crash-…": the process crashes (a panic on a goroutine of its own,
//     which nothing recovers), while the inquiry is in flight.
//
// Only the first agency's call acts, so that one inquiry is one panic.
func faultHook(user, agency string) {
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
