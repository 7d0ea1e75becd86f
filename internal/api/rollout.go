package api

import (
	"encoding/json"
	"time"
)

// RolloutDocument is the name of the rollout's record beside the map
// (registry.DocumentFor): written by cellctl rollout, read by the routers
// for their rollout metrics.
const RolloutDocument = "rollout"

// RolloutStates are the states a rollout's record can be in (the
// control package's RolloutState values).
var RolloutStates = []string{"running", "paused", "halted", "rolled_back", "aborted", "done"}

// RolloutHead is what a reader other than cellctl takes from a rollout's
// record: which rollout, where it stands, when it last moved.
type RolloutHead struct {
	ID      string            `json:"id"`
	State   string            `json:"state"`
	Wave    int               `json:"wave"` // the wave in progress, from 0 (len(Waves) when all are out)
	Waves   []json.RawMessage `json:"waves"`
	Updated time.Time         `json:"updated"`
}
