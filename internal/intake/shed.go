package intake

import (
	"net/http"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/problem"
	"github.com/cellkit/cellkit/internal/shed"
)

func (h *Handler) shedNow(w http.ResponseWriter, reason shed.Reason, detail string, after time.Duration) {
	h.m.shed.WithLabelValues(string(reason)).Inc()
	// Cellkit-Overloaded tells a router that the cell chose to refuse:
	// not a failure of the instance. A queue it cannot reach is one: the
	// router takes the instance out of rotation (the others of the cell
	// may reach theirs) and counts it toward the cell's breaker.
	if reason != shedNATS {
		w.Header().Set(api.HeaderOverloaded, "true")
	}
	problem.WriteRetry(w, problem.New(http.StatusServiceUnavailable, reasonKind[reason], detail), after)
}

// The intake's own reasons to turn an inquiry away with 503, beside the
// shedder's.
const (
	shedClosed  shed.Reason = "closed"  // the intake is closed, or has no map yet
	shedNATS    shed.Reason = "nats"    // the queue cannot be reached
	shedFull    shed.Reason = "full"    // the queue is at its depth limit
	shedStorage shed.Reason = "storage" // the store is near full or failed a write
	shedMoving  shed.Reason = "moving"  // the user's inquiries are being moved to another cell
)

// reasonKind is the problem type of each reason to shed (and the label
// values of the shed metric).
var reasonKind = map[shed.Reason]string{
	shedClosed: problem.IntakeClosed, shed.Age: problem.Overloaded, shed.Depth: problem.Overloaded, shed.Wait: problem.Overloaded, shed.Share: problem.Overloaded,
	shedNATS: problem.QueueUnavailable, shedFull: problem.QueueFull, shedStorage: problem.StorageFull, shedMoving: problem.UserMoving,
}
