package cellctl

import (
	"context"
	"fmt"
	"strings"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// The agencies' session quotas per cell.

type quotaJSON struct {
	Version  int64                  `json:"version"`
	Agencies map[string]agencyQuota `json:"agencies"`
	Cells    []quotaCell            `json:"cells"`
}

type agencyQuota struct {
	Limit     int `json:"limit"`
	Allocated int `json:"allocated"`
}

type quotaCell struct {
	ID         string         `json:"id"`
	State      slotmap.State  `json:"state"`
	Weight     int            `json:"weight"`
	Quota      map[string]int `json:"quota"`
	FixedQuota map[string]int `json:"fixed_quota,omitempty"`
}

func quotaShowCommand(name string, hidden bool) *command {
	c := &command{
		name:    name,
		section: secInspect,
		hidden:  hidden,
		summary: "show every cell's session quota per agency",
		help: `Shows each cell's session quota per agency, the agencies' global limits and
how much of them is allocated. Quotas are derived (the limit split by weight
over active and draining cells) unless fixed with 'cellctl quota set' (marked *).
Change them with 'quota set AGENCY CELL N', 'quota clear AGENCY CELL' and
'quota limit AGENCY N'.`,
		examples: `cellctl quota
cellctl quota --json`,
		maxArgs: 0,
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
		q := quotaJSON{Version: m.Version(), Agencies: map[string]agencyQuota{}, Cells: []quotaCell{}}
		agencies := m.AgencyNames()
		for _, a := range agencies {
			q.Agencies[a] = agencyQuota{Limit: m.Agencies()[a]}
		}
		for _, cell := range m.Cells() {
			qc := quotaCell{ID: cell.ID, State: cell.State, Weight: cell.Weight, Quota: map[string]int{}, FixedQuota: cell.FixedQuota}
			for _, a := range agencies {
				qc.Quota[a] = cell.Quota[a]
				aq := q.Agencies[a]
				aq.Allocated += cell.Quota[a]
				q.Agencies[a] = aq
			}
			q.Cells = append(q.Cells, qc)
		}
		if x.g.json {
			return writeJSON(x.out, q)
		}
		fmt.Fprintf(x.out, "Session quotas, map version %d:\n", m.Version())
		header := []string{"CELL", "STATE", "WEIGHT"}
		for _, a := range agencies {
			header = append(header, strings.ToUpper(a))
		}
		t := newTable(x.out, header...)
		fixed := false
		for _, qc := range q.Cells {
			row := []string{qc.ID, string(qc.State), itoa(qc.Weight)}
			for _, a := range agencies {
				s := itoa(qc.Quota[a])
				if _, ok := qc.FixedQuota[a]; ok {
					s += "*"
					fixed = true
				}
				row = append(row, s)
			}
			t.row(row...)
		}
		alloc, limit := []string{"allocated", "", ""}, []string{"limit", "", ""}
		for _, a := range agencies {
			alloc = append(alloc, itoa(q.Agencies[a].Allocated))
			limit = append(limit, itoa(q.Agencies[a].Limit))
		}
		t.row(alloc...)
		t.row(limit...)
		t.flush()
		if fixed {
			fmt.Fprintf(x.out, "* fixed with 'cellctl quota set'\n")
		}
		return nil
	}
	return c
}

func quotaSetCommand() *command {
	c := &command{
		name:      "quota set",
		argsUsage: "AGENCY CELL N",
		section:   secMap,
		summary:   "fix a cell's session quota for an agency",
		help: `Fixes CELL's quota of AGENCY sessions at N; the rest of the agency's limit is
split by weight over the cells without a fixed quota. Refused when N or the
sum of fixed quotas would exceed the agency's global limit.`,
		examples: `cellctl quota set nice c1 30
cellctl quota set kcb c2 0 --dry-run`,
		minArgs: 3, maxArgs: 3,
		mutates: true,
	}
	c.run = func(ctx context.Context, x *inv, args []string) error {
		n, err := intArg("quota", args[2])
		if err != nil {
			return err
		}
		return x.applyAndReport(ctx, control.SetQuota(args[0], args[1], n))
	}
	return c
}

func quotaClearCommand() *command {
	c := &command{
		name:      "quota clear",
		argsUsage: "AGENCY CELL",
		section:   secMap,
		summary:   "return a fixed quota to the derived share",
		help:      `Drops CELL's fixed quota for AGENCY: it gets its share by weight again.`,
		examples:  `cellctl quota clear nice c1`,
		minArgs:   2, maxArgs: 2,
		mutates: true,
	}
	c.run = func(ctx context.Context, x *inv, args []string) error {
		return x.applyAndReport(ctx, control.ClearQuota(args[0], args[1]))
	}
	return c
}

func quotaLimitCommand() *command {
	c := &command{
		name:      "quota limit",
		argsUsage: "AGENCY N",
		section:   secMap,
		summary:   "set (or add) an agency's global session limit",
		help: `Sets AGENCY's global session limit to N (adding the agency if it is new); the
cells' derived quotas are split again. Refused if the fixed quotas no longer fit.`,
		examples: `cellctl quota limit nice 100
cellctl quota limit css 20 --dry-run`,
		minArgs: 2, maxArgs: 2,
		mutates: true,
	}
	c.run = func(ctx context.Context, x *inv, args []string) error {
		n, err := intArg("limit", args[1])
		if err != nil {
			return err
		}
		return x.applyAndReport(ctx, control.SetLimit(args[0], n))
	}
	return c
}
