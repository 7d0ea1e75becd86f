package cellctl

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// The overrides: users pinned to a cell.

func overrideSetCommand() *command {
	c := &command{
		name:      "override set",
		argsUsage: "USER CELL",
		section:   secMap,
		summary:   "pin a user to an active cell",
		help: `Pins USER to CELL, whatever slot the user hashes to (for hot users: see
'cellctl hotkeys'). CELL must be active. No slot moves; only that user's new
requests go to CELL (their earlier inquiries stay readable where they are).`,
		examples: `cellctl override set vip-user-17 c3`,
		minArgs:  2, maxArgs: 2,
		mutates: true, moves: true,
	}
	c.run = func(ctx context.Context, x *inv, args []string) error {
		return x.applyAndReport(ctx, control.SetOverride(args[0], args[1]))
	}
	return c
}

func overrideClearCommand() *command {
	c := &command{
		name:      "override clear",
		argsUsage: "USER",
		section:   secMap,
		summary:   "remove a user's pin",
		help:      `Removes USER's pin: the user goes back to the owner of their slot.`,
		examples:  `cellctl override clear vip-user-17`,
		minArgs:   1, maxArgs: 1,
		mutates: true, moves: true,
	}
	c.run = func(ctx context.Context, x *inv, args []string) error {
		return x.applyAndReport(ctx, control.ClearOverride(args[0]))
	}
	return c
}

type overrideRow struct {
	User   string `json:"user"`
	Slot   int    `json:"slot"`
	Cell   string `json:"cell"`
	State  string `json:"state"`
	Active bool   `json:"in_effect"`
}

func overrideListCommand() *command {
	c := &command{
		name:     "override list",
		section:  secInspect,
		summary:  "list the pinned users",
		help:     `Lists every pinned user, their slot, their cell and whether the pin is in effect (pins to a cell that is not active are kept but ignored).`,
		examples: `cellctl override list`,
		maxArgs:  0,
	}
	c.run = func(ctx context.Context, x *inv, _ []string) error {
		reg, err := x.openRegistry()
		if err != nil {
			return err
		}
		defer reg.Close()
		m, err := x.load(ctx, reg)
		if err != nil {
			return err
		}
		ov := m.Overrides()
		rows := []overrideRow{}
		for _, u := range slices.Sorted(maps.Keys(ov)) {
			cell, _ := m.Cell(ov[u])
			rows = append(rows, overrideRow{User: u, Slot: m.SlotOf(u), Cell: ov[u], State: string(cell.State), Active: cell.State == slotmap.Active})
		}
		if x.g.json {
			return writeJSON(x.out, rows)
		}
		if len(rows) == 0 {
			fmt.Fprintf(x.out, "No overrides (map version %d).\n", m.Version())
			return nil
		}
		t := newTable(x.out, "USER", "SLOT", "CELL", "IN EFFECT")
		for _, r := range rows {
			eff := "yes"
			if !r.Active {
				eff = "no (cell " + r.State + ")"
			}
			t.row(r.User, itoa(r.Slot), r.Cell, eff)
		}
		t.flush()
		return nil
	}
	return c
}
