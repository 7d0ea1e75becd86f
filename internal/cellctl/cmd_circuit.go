package cellctl

import (
	"context"
	"fmt"
	"strings"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/slotmap"
)

func circuitCommand() *command {
	c := &command{
		name:      "circuit",
		argsUsage: "CELL AGENCY open|close|reset",
		section:   secCells,
		summary:   "force a cell's agency breaker open or closed, or reset it",
		help: `Forces CELL's circuit breaker for AGENCY open (every call fails fast: take an
agency out during an incident) or closed (calls go through whatever the error
rate), or resets it to automatic operation with a fresh window.`,
		examples: `cellctl circuit c1 nice open
cellctl circuit c1 nice reset`,
		minArgs: 3, maxArgs: 3,
	}
	c.run = func(ctx context.Context, x *inv, args []string) error {
		id, agency, action := args[0], args[1], args[2]
		switch action {
		case "open", "close", "reset":
		default:
			return usagef("action %q must be open, close or reset", action)
		}
		reg, m, err := x.loadOnly(ctx)
		if err != nil {
			return err
		}
		reg.Close()
		if err := control.KnownCell(m, id); err != nil {
			return fmt.Errorf("%s", invalidReason(err))
		}
		if _, ok := m.Agencies()[agency]; !ok {
			return fmt.Errorf("unknown agency %q (agencies: %s)", agency, strings.Join(m.AgencyNames(), ", "))
		}
		cell, _ := m.Cell(id)
		if cell.State == slotmap.Drained {
			x.warnf("%s is drained", id)
		}
		out, err := x.admin().Circuit(ctx, cell.Admin, agency, action)
		if err != nil {
			return fmt.Errorf("cell %s: %v", id, err)
		}
		if x.g.json {
			if out == nil {
				out = map[string]any{}
			}
			return writeJSON(x.out, out)
		}
		state := ""
		for _, k := range []string{"state", "breaker"} {
			if s, ok := out[k].(string); ok {
				state = s
				break
			}
		}
		if state != "" {
			fmt.Fprintf(x.out, "%s %s breaker: %s (%s).\n", id, agency, state, action)
		} else {
			fmt.Fprintf(x.out, "%s %s breaker: %s done.\n", id, agency, action)
		}
		return nil
	}
	return c
}
