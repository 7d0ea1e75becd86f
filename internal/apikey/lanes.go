package apikey

import (
	"errors"
	"fmt"
)

// Lanes is which lanes a client may use and its default, as the values
// of the Cellkit-Priority header the cell gets.
type Lanes struct {
	high, normal bool
	def          string // "high" or "normal"
}

// Allowed names the lanes for a message: "normal", "high" or "high, normal".
func (p *Lanes) Allowed() string {
	switch {
	case p.high && p.normal:
		return "high, normal"
	case p.high:
		return "high"
	}
	return "normal"
}

var (
	laneHigh   = []byte("high")
	laneNormal = []byte("normal")
)

// parseLanes checks an entry's lanes and default.
func parseLanes(lanes []string, def string) (Lanes, error) {
	var p Lanes
	if lanes == nil {
		lanes = []string{"normal"}
	}
	if len(lanes) == 0 {
		return p, errors.New(`lanes must name at least one of "high" and "normal"`)
	}
	for _, l := range lanes {
		switch {
		case l == "high" && !p.high:
			p.high = true
		case l == "normal" && !p.normal:
			p.normal = true
		default:
			return p, fmt.Errorf(`lanes: %q: want "high" or "normal", each at most once`, l)
		}
	}
	switch {
	case def == "" && p.normal, def == "normal" && p.normal:
		p.def = "normal"
	case def == "" && p.high, def == "high" && p.high:
		p.def = "high"
	default:
		return p, fmt.Errorf("default_lane %q must be one of its lanes (%s)", def, p.Allowed())
	}
	return p, nil
}

// Lane is the lane of an inquiry whose body asks for priority (nil: none
// asked, or the router could not tell, in which case the cell refuses a
// body it cannot read and otherwise the default holds). ok is false when
// the client may not use the lane it asks for. A priority that is no lane
// gets the default: the cell refuses it with 400 invalid-field.
func (p *Lanes) Lane(priority []byte) (lane []byte, ok bool) {
	switch string(priority) {
	case "high":
		return laneHigh, p.high
	case "normal":
		return laneNormal, p.normal
	}
	if p.def == "high" {
		return laneHigh, true
	}
	return laneNormal, true
}
