package cellctl

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/control"
)

// cellAdmin finds a cell's admin URL in the live map.
func (x *inv) cellAdmin(ctx context.Context, id string) (string, error) {
	reg, m, err := x.loadOnly(ctx)
	if err != nil {
		return "", err
	}
	defer reg.Close()
	if err := control.KnownCell(m, id); err != nil {
		return "", fmt.Errorf("%s", invalidReason(err))
	}
	c, _ := m.Cell(id)
	return c.Admin, nil
}

func failedListCommand() *command {
	limit := 100
	c := &command{
		name:      "failed list",
		argsUsage: "CELL",
		section:   secCells,
		summary:   "list a cell's failed inquiries",
		help: `Lists the failed inquiries of CELL (its error stream and DLQ): id, user,
reason, attempts and when it failed. Retry them with 'cellctl failed retry'.`,
		examples: `cellctl failed list c2
cellctl failed list c2 --json | jq -r '.[].id'`,
		minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) {
			fs.IntVar(&limit, "limit", limit, "list at most `N` (1..10000)")
		},
	}
	c.run = func(ctx context.Context, x *inv, args []string) error {
		if limit <= 0 || limit > 10000 {
			return usagef("--limit must be in 1..10000")
		}
		admin, err := x.cellAdmin(ctx, args[0])
		if err != nil {
			return err
		}
		items, err := x.admin().Failed(ctx, admin, limit)
		if err != nil {
			return fmt.Errorf("cell %s: %v", args[0], err)
		}
		if items == nil {
			items = []api.FailedInquiry{}
		}
		if x.g.json {
			return writeJSON(x.out, items)
		}
		if len(items) == 0 {
			fmt.Fprintf(x.out, "No failed inquiries in %s.\n", args[0])
			return nil
		}
		sort.SliceStable(items, func(i, j int) bool { return items[i].At.Before(items[j].At) })
		t := newTable(x.out, "ID", "USER", "FAILED AT", "ATTEMPTS", "SET", "REASON")
		for _, it := range items {
			when := "-"
			if !it.At.IsZero() {
				when = it.At.UTC().Format(time.RFC3339)
			}
			t.row(it.ID, it.UserID, when, itoa(it.Attempts), orDash(it.Set), it.Reason)
		}
		t.flush()
		fmt.Fprintf(x.out, "%d failed. Retry: cellctl failed retry %s ID... | --all\n", len(items), args[0])
		return nil
	}
	return c
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func failedRetryCommand() *command {
	var all bool
	c := &command{
		name:      "failed retry",
		argsUsage: "CELL (ID...|--all)",
		section:   secCells,
		summary:   "re-enqueue failed inquiries",
		help: `Re-enqueues failed inquiries of CELL: the given ids, or every failed one with
--all. Each goes through the pipeline again; handling is idempotent.`,
		examples: `cellctl failed retry c2 c2-01jd3m4x7k c2-01jd3m5a2b
cellctl failed retry c2 --all`,
		minArgs: 1, maxArgs: -1,
		flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&all, "all", false, "retry every failed inquiry of the cell")
		},
	}
	c.run = func(ctx context.Context, x *inv, args []string) error {
		id, ids := args[0], args[1:]
		switch {
		case all && len(ids) > 0:
			return usagef("give inquiry ids or --all, not both")
		case !all && len(ids) == 0:
			return usagef("give the inquiry ids to retry, or --all")
		}
		for _, q := range ids {
			if !strings.HasPrefix(q, id+"-") {
				return usagef("inquiry %q is not one of %s's (its ids start with %q)", q, id, id+"-")
			}
		}
		admin, err := x.cellAdmin(ctx, id)
		if err != nil {
			return err
		}
		res, err := x.admin().Retry(ctx, admin, ids, all)
		if err != nil {
			return fmt.Errorf("cell %s: %v", id, err)
		}
		if res.Retried == nil {
			res.Retried = []string{}
		}
		if x.g.json {
			if err := writeJSON(x.out, res); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(x.out, "Re-enqueued %d inquir%s in %s.\n", len(res.Retried), pluralY(len(res.Retried)), id)
			for _, q := range res.Retried {
				fmt.Fprintf(x.out, "  %s\n", q)
			}
			for _, q := range sortedKeys(res.Skipped) {
				fmt.Fprintf(x.out, "  %s: not retried: %s\n", q, res.Skipped[q])
			}
		}
		if n := len(res.Skipped); n > 0 {
			return fmt.Errorf("%d inquir%s could not be retried (see above)", n, pluralY(n))
		}
		return nil
	}
	return c
}

func pluralY(n int) string {
	if n == 1 {
		return "y"
	}
	return "ies"
}
