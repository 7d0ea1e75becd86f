package cellctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
)

func initCommand() *command {
	var slots int
	agencies := agencyFlag{}
	var force bool
	c := &command{
		name:    "init",
		section: secMap,
		summary: "create the map (refuses if one exists, unless --force)",
		help: `Creates version 1 of the cell map: the slot count and each agency's global
session limit, no cells yet (add them with 'cellctl provision'). Refuses when
the registry already holds a map; --force replaces it with an empty one whose
version continues from the old (every cell and override is forgotten).`,
		examples: `cellctl init --registry file:var/map.json --agency nice=80 --agency kcb=40
cellctl init --slots 4096 --agency nice=80 --dry-run`,
		maxArgs: 0,
		mutates: true,
		flags: func(fs *flag.FlagSet) {
			fs.IntVar(&slots, "slots", slotmap.DefaultSlots, "number of `N` slots users hash to (fixed for the map's life)")
			fs.Var(agencies, "agency", "an agency and its global session limit, `NAME=SESSIONS` (repeatable)")
			fs.BoolVar(&force, "force", false, "replace an existing map with an empty one")
		},
	}
	c.run = func(ctx context.Context, x *inv, _ []string) error {
		fresh, err := slotmap.New(slots, agencies)
		if err != nil {
			return errors.New("refused: " + invalidReason(err)) // before any map was read
		}
		reg, err := x.openRegistry()
		if err != nil {
			return err
		}
		defer reg.Close()
		r, err := x.controller(reg, nil).Init(ctx, control.InitChange{Map: fresh, Force: force, DryRun: c.dryRun,
			Planned: func(next, cur *slotmap.Map) {
				if x.g.json {
					return
				}
				old := int64(0)
				if cur != nil {
					old = cur.Version()
				}
				if old == 0 {
					fmt.Fprintf(x.out, "Plan: init (a new map, version 1)\n")
				} else {
					fmt.Fprintf(x.out, "Plan: init --force (map version %d → %d)\n", old, next.Version())
				}
				fmt.Fprintf(x.out, "  %d slots, agency session limits: %s, no cells.\n", next.Slots(), limitsStr(next.Agencies()))
				if cur != nil {
					fmt.Fprintf(x.out, "  Replaces version %d: its %d cell%s and %d override%s are forgotten.\n",
						old, len(cur.Cells()), plural(len(cur.Cells())), len(cur.Overrides()), plural(len(cur.Overrides())))
				}
			}})
		if err != nil {
			return err
		}
		res := initResult{DryRun: r.DryRun, Applied: r.Applied, Version: r.Map.Version(), Slots: r.Map.Slots(), Agencies: r.Map.Agencies(), Replaces: r.Replaces}
		switch {
		case x.g.json:
			return writeJSON(x.out, res)
		case r.DryRun:
			fmt.Fprintf(x.out, "\nDry run: nothing applied.\n")
		default:
			fmt.Fprintf(x.out, "\nApplied: map version %d (init).\n", r.Map.Version())
		}
		return nil
	}
	return c
}

type initResult struct {
	DryRun   bool           `json:"dry_run"`
	Applied  bool           `json:"applied"`
	Version  int64          `json:"version"`
	Replaces int64          `json:"replaces,omitempty"`
	Slots    int            `json:"slots"`
	Agencies map[string]int `json:"agencies"`
}

func mapFormatCommand() *command {
	c := &command{
		name:      "map format",
		argsUsage: "1|2",
		section:   secMap,
		summary:   "write the map in document format 1 or 2 from now on",
		help: `Sets the document format the map is written in from now on. Format 2 packs
the slot table into one string: a map of 1,000 cells fits in half the space
(under Consul's 512 KB limit) and decodes in a third of the time. Format 1
lists the table as runs, which routers and cells older than format 2 need:
they refuse a format 2 map and keep their last one. A map keeps the format
it was read in through every change; a new map (init) is in format 2.
Upgrade every router and cell first, then 'cellctl map format 2'; to go back
to older readers, 'cellctl map format 1' first. Nothing moves.`,
		examples: `cellctl map format 2 --dry-run
cellctl map format 2`,
		minArgs: 1, maxArgs: 1,
		mutates: true,
	}
	c.run = func(ctx context.Context, x *inv, args []string) error {
		f, err := intArg("format", args[0])
		if err != nil {
			return err
		}
		if f != 1 && f != 2 {
			return usagef("format %d: want 1 or 2", f)
		}
		return x.applyAndReport(ctx, control.SetFormat(f))
	}
	return c
}

// mapAt reads the map a VERSION|FILE argument names: a version number from
// the history, or a file holding a map document ('map show --json > FILE').
func (x *inv) mapAt(ctx context.Context, reg registry.Registry, ref string) (*slotmap.Map, error) {
	if v, err := strconv.ParseInt(ref, 10, 64); err == nil {
		h := control.HistoryFor(reg)
		if h == nil {
			return nil, fmt.Errorf("registry %s keeps no history: diff against a saved file instead", reg.Describe())
		}
		m, err := h.Load(ctx, v)
		if errors.Is(err, control.ErrNotInHistory) {
			vs, _ := h.Versions(ctx)
			return nil, fmt.Errorf("map version %d is not in the history %s (%s); save maps with 'cellctl map show --json > FILE' and diff against the file", v, h.Describe(), versionsStr(vs))
		}
		if err != nil {
			return nil, fmt.Errorf("read version %d from the history %s: %v", v, h.Describe(), err)
		}
		return m, nil
	}
	data, err := os.ReadFile(ref)
	if err != nil {
		return nil, fmt.Errorf("read saved map: %v", err)
	}
	m, err := slotmap.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s holds no valid map: %s", ref, invalidReason(err))
	}
	return m, nil
}

func versionsStr(vs []int64) string {
	switch len(vs) {
	case 0:
		return "it is empty"
	case 1:
		return fmt.Sprintf("it has version %d", vs[0])
	}
	return fmt.Sprintf("it has versions %d to %d", vs[0], vs[len(vs)-1])
}

func (x *inv) loadOnly(ctx context.Context) (registry.Registry, *slotmap.Map, error) {
	reg, err := x.openRegistry()
	if err != nil {
		return nil, nil, err
	}
	m, err := x.load(ctx, reg)
	if err != nil {
		reg.Close()
		return nil, nil, err
	}
	return reg, m, nil
}

// mapHeader is the first line of map views.
func (x *inv) mapHeader(m *slotmap.Map) string {
	s := fmt.Sprintf("Map version %d", m.Version())
	if m.Change() != "" {
		s += " (" + m.Change() + ")"
	}
	if !m.Updated().IsZero() {
		ago := "just now"
		if d := x.cli.now().Sub(m.Updated()).Truncate(time.Second); d >= time.Second {
			ago = human(d) + " ago"
		}
		s += fmt.Sprintf(", updated %s (%s)", m.Updated().Format(time.RFC3339), ago)
	}
	return s
}

func mapShowCommand() *command {
	var version int64
	c := &command{
		name:    "map show",
		section: secInspect,
		summary: "show the map: cells, endpoints, quotas, overrides",
		help: `Shows the live map (or --version N from the history cellctl keeps next to the
registry): its cells with state, weight, slots, share of users, session quotas
and endpoints, the agencies' limits and the overrides. With --json it prints
the map document itself, which 'cellctl map diff FILE' can compare against
later.`,
		examples: `cellctl map show
cellctl map show --json > map-before-drain.json
cellctl map show --version 7`,
		maxArgs: 0,
		flags: func(fs *flag.FlagSet) {
			fs.Int64Var(&version, "version", 0, "show version `N` from the history instead of the live map")
		},
	}
	c.run = func(ctx context.Context, x *inv, _ []string) error {
		reg, m, err := x.loadOnly(ctx)
		if err != nil {
			return err
		}
		defer reg.Close()
		if version != 0 && version != m.Version() {
			if m, err = x.mapAt(ctx, reg, strconv.FormatInt(version, 10)); err != nil {
				return err
			}
		}
		if x.g.json {
			data, err := m.Encode()
			if err != nil {
				return err
			}
			_, err = x.out.Write(append(data, '\n'))
			return err
		}
		x.writeMap(m, reg.Describe())
		return nil
	}
	return c
}

func (x *inv) writeMap(m *slotmap.Map, where string) {
	w := x.out
	fmt.Fprintf(w, "%s\n", x.mapHeader(m))
	fmt.Fprintf(w, "Registry %s, %d slots, agency session limits: %s\n", where, m.Slots(), limitsStr(m.Agencies()))
	if m.Format() == 1 {
		fmt.Fprintf(w, "Document format 1 (the table as runs): once every router and cell reads format 2, 'cellctl map format 2' packs it\n")
	}
	fmt.Fprintln(w)
	agencies := m.AgencyNames()
	header := []string{"CELL", "STATE", "WEIGHT", "SLOTS", "USERS"}
	for _, a := range agencies {
		header = append(header, strings.ToUpper(a))
	}
	header = append(header, "INTAKE", "ADMIN")
	counts := m.SlotCounts()
	cells := m.Cells()
	if len(cells) == 0 {
		fmt.Fprintf(w, "No cells yet: add one with 'cellctl provision'.\n")
	} else {
		t := newTable(w, header...)
		for _, c := range cells {
			row := []string{c.ID, string(c.State), itoa(c.Weight), itoa(counts[c.ID]), pct(counts[c.ID], m.Slots())}
			for _, a := range agencies {
				s := itoa(c.Quota[a])
				if _, ok := c.FixedQuota[a]; ok {
					s += "*"
				}
				row = append(row, s)
			}
			row = append(row, c.Intake, c.Admin)
			t.row(row...)
		}
		t.flush()
	}
	ov := m.Overrides()
	if len(ov) > 0 {
		fmt.Fprintf(w, "\nOverrides (%d):\n", len(ov))
		t := newTable(w)
		users := slices.Sorted(maps.Keys(ov))
		for _, u := range users[:min(len(users), 10)] {
			t.row("  "+u, "→ "+ov[u])
		}
		t.flush()
		if len(users) > 10 {
			fmt.Fprintf(w, "  … and %d more ('cellctl override list')\n", len(users)-10)
		}
	}
}

func mapLookupCommand() *command {
	c := &command{
		name:      "map lookup",
		argsUsage: "USER...",
		section:   secInspect,
		summary:   "where users go: slot, cell, override or not",
		help: `Shows where each USER's requests go under the live map: the slot the user id
hashes to, the cell that serves it, and whether an override pins the user
there (and which cell owns the slot otherwise).`,
		examples: `cellctl map lookup user-42
cellctl map lookup user-42 vip-user-17 --json`,
		minArgs: 1, maxArgs: -1,
	}
	c.run = func(ctx context.Context, x *inv, args []string) error {
		reg, m, err := x.loadOnly(ctx)
		if err != nil {
			return err
		}
		defer reg.Close()
		ov := m.Overrides()
		var rows []lookupJSON
		for _, u := range args {
			if !api.ValidUserID(u) {
				return usagef("user id %q must be 1-%d of [A-Za-z0-9_-]", u, api.MaxUserID)
			}
			r := m.Lookup(u)
			l := lookupJSON{User: u, Slot: r.Slot, Cell: r.Cell, Override: r.Override, SlotOwner: m.Owner(r.Slot), Version: m.Version()}
			if c, ok := m.Cell(r.Cell); ok {
				l.State = c.State
			}
			if pin, ok := ov[u]; ok && !r.Override {
				l.Pinned = pin
			}
			rows = append(rows, l)
		}
		if x.g.json {
			if len(rows) == 1 {
				return writeJSON(x.out, rows[0])
			}
			return writeJSON(x.out, rows)
		}
		fmt.Fprintf(x.out, "Map version %d:\n", m.Version())
		t := newTable(x.out, "USER", "SLOT", "CELL", "OVERRIDE")
		for _, l := range rows {
			o := "no"
			switch {
			case l.Override:
				o = "yes (slot owner " + orNone(l.SlotOwner) + ")"
			case l.Pinned != "":
				o = "pinned to " + l.Pinned + ", ignored (not active)"
			}
			t.row(l.User, itoa(l.Slot), orNone(l.Cell), o)
		}
		t.flush()
		return nil
	}
	return c
}

func mapDiffCommand() *command {
	var to string
	c := &command{
		name:      "map diff",
		argsUsage: "VERSION|FILE",
		section:   secInspect,
		summary:   "what changed since a version or a saved map",
		help: `Shows what changed from an earlier map to the live one (or to --to): slot
moves as ranges, the share of users that moved, cells' slots and quotas, and
overrides. The earlier map is a version number (from the last 50 versions
cellctl keeps next to the registry) or a file saved with
'cellctl map show --json > FILE'.`,
		examples: `cellctl map diff 7
cellctl map diff map-before-drain.json
cellctl map diff 7 --to 9 --json`,
		minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&to, "to", "", "compare against `VERSION|FILE` instead of the live map")
		},
	}
	c.run = func(ctx context.Context, x *inv, args []string) error {
		reg, cur, err := x.loadOnly(ctx)
		if err != nil {
			return err
		}
		defer reg.Close()
		from, err := x.mapAt(ctx, reg, args[0])
		if err != nil {
			return err
		}
		if to != "" {
			if cur, err = x.mapAt(ctx, reg, to); err != nil {
				return err
			}
		}
		p, err := slotmap.Compare(from, cur)
		if err != nil {
			return errors.New(invalidReason(err))
		}
		if x.g.json {
			return writeJSON(x.out, toPlanJSON(p))
		}
		fmt.Fprintf(x.out, "Changes from map version %d to %d", from.Version(), cur.Version())
		if cur.Change() != "" {
			fmt.Fprintf(x.out, " (latest: %s)", cur.Change())
		}
		fmt.Fprintln(x.out, ":")
		writeMoves(x.out, p)
		writeCellChanges(x.out, p)
		writeOverrideChanges(x.out, p)
		return nil
	}
	return c
}

func mapHistoryCommand() *command {
	c := &command{
		name:    "map history",
		section: secInspect,
		summary: "the map versions kept for 'map diff'",
		help: `Lists the map versions cellctl keeps next to the registry (the last 50 it
committed or planned against), with when and by which change they were made.`,
		examples: `cellctl map history`,
		maxArgs:  0,
	}
	c.run = func(ctx context.Context, x *inv, _ []string) error {
		reg, err := x.openRegistry()
		if err != nil {
			return err
		}
		defer reg.Close()
		h := control.HistoryFor(reg)
		if h == nil {
			return fmt.Errorf("registry %s keeps no history", reg.Describe())
		}
		vs, err := h.Versions(ctx)
		if err != nil {
			return registryError(reg, err)
		}
		rows := []historyRow{}
		for _, v := range vs {
			m, err := h.Load(ctx, v)
			if err != nil {
				x.warnf("version %d in the history: %v", v, err)
				continue
			}
			rows = append(rows, historyRow{Version: v, Updated: m.Updated(), Change: m.Change(), Cells: len(m.Cells()), Active: len(m.ActiveCells())})
		}
		if x.g.json {
			return writeJSON(x.out, rows)
		}
		if len(rows) == 0 {
			fmt.Fprintf(x.out, "The history %s is empty.\n", h.Describe())
			return nil
		}
		t := newTable(x.out, "VERSION", "UPDATED", "CELLS", "CHANGE")
		for _, r := range rows {
			up := "-"
			if !r.Updated.IsZero() {
				up = r.Updated.Format(time.RFC3339)
			}
			t.row(strconv.FormatInt(r.Version, 10), up, fmt.Sprintf("%d (%d active)", r.Cells, r.Active), r.Change)
		}
		t.flush()
		return nil
	}
	return c
}

type lookupJSON struct {
	User      string        `json:"user"`
	Slot      int           `json:"slot"`
	Cell      string        `json:"cell"`
	State     slotmap.State `json:"state,omitempty"`
	Override  bool          `json:"override"`
	SlotOwner string        `json:"slot_owner"`
	Pinned    string        `json:"pinned_to,omitempty"` // a pin that is not in effect
	Version   int64         `json:"version"`
}

type historyRow struct {
	Version int64     `json:"version"`
	Updated time.Time `json:"updated,omitzero"`
	Change  string    `json:"change"`
	Cells   int       `json:"cells"`
	Active  int       `json:"active"`
}
