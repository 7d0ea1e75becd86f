package cellctl

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/control"
)

func layoutCommand() *command {
	c := &command{
		name:      "layout",
		argsUsage: "CELL [ledger]",
		section:   secCells,
		summary:   "show how a cell keeps its inquiries, or switch its intake to the ledger",
		help: `Shows how CELL keeps its inquiries: the layout its intake writes (the ledger,
one message per inquiry accepted, or records, the layout before it) and
whether every instance's release knows the ledger.

With "ledger", switches the cell's intake to the ledger: every instance
writes it from a few seconds later on. The switch is recorded in the cell's
JetStream and never undone: refused unless every instance of the cell runs a
release that knows the ledger, and a rollout refuses to put a release that
does not on the cell afterwards. A rollout that finishes switches its cells
by itself; this is for a cell released otherwise.`,
		examples: `cellctl layout c1
cellctl layout c1 ledger`,
		minArgs: 1, maxArgs: 2,
	}
	c.run = func(ctx context.Context, x *inv, args []string) error {
		id := args[0]
		if len(args) == 2 && args[1] != "ledger" {
			return usagef("action %q must be ledger", args[1])
		}
		reg, m, err := x.loadOnly(ctx)
		if err != nil {
			return err
		}
		reg.Close()
		if err := control.KnownCell(m, id); err != nil {
			return fmt.Errorf("%s", invalidReason(err))
		}
		cell, _ := m.Cell(id)
		since, unaware, err := x.admin().Layouts(ctx, cell)
		if err != nil {
			return fmt.Errorf("cell %s: %v", id, err)
		}
		switching := len(args) == 2 && since.IsZero()
		if switching {
			if len(unaware) > 0 {
				return fmt.Errorf("cell %s not switched: %s on a release that does not know the ledger", id, strings.Join(unaware, ", "))
			}
			l, err := x.admin().SwitchToLedger(ctx, cell.Admins()[0])
			if err != nil {
				return fmt.Errorf("cell %s: %v", id, err)
			}
			since = *l.LedgerSince
		}
		writes := "records"
		if !since.IsZero() && !time.Now().Before(since) {
			writes = "ledger"
		}
		if x.g.json {
			out := map[string]any{"cell": id, "writes": writes, "unaware": nonNil(unaware)}
			if !since.IsZero() {
				out["ledger_since"] = since.UTC()
			}
			return writeJSON(x.out, out)
		}
		switch {
		case since.IsZero():
			fmt.Fprintf(x.out, "%s writes records (not switched to the ledger).\n", id)
		case writes == "records":
			fmt.Fprintf(x.out, "%s writes the ledger from %s.\n", id, since.UTC().Format(time.RFC3339))
		default:
			fmt.Fprintf(x.out, "%s writes the ledger since %s.\n", id, since.UTC().Format(time.RFC3339))
		}
		if len(unaware) > 0 {
			fmt.Fprintf(x.out, "On a release that does not know the ledger: %s.\n", strings.Join(unaware, ", "))
		}
		return nil
	}
	return c
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
