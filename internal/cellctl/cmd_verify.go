package cellctl

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cellkit/cellkit/internal/slotmap"
)

// Verdicts of a verify check.
const (
	checkOK   = "ok"
	checkWarn = "warn"
	checkFail = "FAIL"
)

type check struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
}

type verifyJSON struct {
	Version    int64   `json:"version"`
	OK         bool    `json:"ok"`
	Violations int     `json:"violations"`
	Warnings   int     `json:"warnings"`
	Drift      []drift `json:"drift,omitempty"`
	Checks     []check `json:"checks"`
}

// drift is a slot range whose owner is not its rendezvous target.
type drift struct {
	From   int    `json:"from"`
	To     int    `json:"to"`
	Owner  string `json:"owner"`
	Target string `json:"target"`
}

func verifyCommand() *command {
	var maxDrift int
	c := &command{
		name:    "verify",
		section: secInspect,
		summary: "check the live map's invariants (non-zero exit on a violation)",
		help: `Checks the invariants of the live map and exits 1 if one is violated:

  - every slot is owned by an active cell, and there is an active cell;
  - every agency's quotas sum to at most its session limit, drained cells hold
    none, and derived quotas equal their share by weight;
  - the slot table equals the weighted-rendezvous target over the active
    cells, except for up to --max-drift slots: drift is listed as slot ranges
    with owner and target ('cellctl rebalance' moves them). Overrides are
    not drift: they pin users, not slots.

Warnings (exit 0): overrides to cells that are not active (ignored until the
cell is active again), active cells without sessions for an agency, active
cells that own no slot.`,
		examples: `cellctl verify
cellctl verify --json
cellctl verify --max-drift 100   # accept drift you know about`,
		maxArgs: 0,
		flags: func(fs *flag.FlagSet) {
			fs.IntVar(&maxDrift, "max-drift", 0, "accept up to `N` slots away from their target")
		},
	}
	c.run = func(ctx context.Context, x *inv, _ []string) error {
		reg, m, err := x.loadOnly(ctx)
		if err != nil {
			return err
		}
		defer reg.Close()
		v := verify(m, maxDrift)
		if x.g.json {
			if err := writeJSON(x.out, v); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(x.out, "Verify map version %d (%s):\n", m.Version(), reg.Describe())
			t := newTable(x.out)
			for _, c := range v.Checks {
				t.row("  "+c.Status, c.Name+": "+c.Detail)
			}
			t.flush()
			if len(v.Drift) > 0 {
				fmt.Fprintf(x.out, "Drift (slot range, owner → target):\n")
				t := newTable(x.out)
				for _, d := range v.Drift[:min(len(v.Drift), firstRanges)] {
					t.row("  "+slotRange(d.From, d.To), d.Owner+" → "+d.Target)
				}
				t.flush()
				if rest := len(v.Drift) - firstRanges; rest > 0 {
					fmt.Fprintf(x.out, "  … and %d more range%s (--json lists them all)\n", rest, plural(rest))
				}
			}
			verdict := "ok"
			if !v.OK {
				verdict = fmt.Sprintf("%d violation%s", v.Violations, plural(v.Violations))
			}
			fmt.Fprintf(x.out, "Result: %s, %d warning%s.\n", verdict, v.Warnings, plural(v.Warnings))
		}
		if !v.OK {
			return fmt.Errorf("map version %d violates %d invariant%s (see above)", m.Version(), v.Violations, plural(v.Violations))
		}
		return nil
	}
	return c
}

// verify checks m's invariants. One piece: each check (structure,
// slots, quotas, target, overrides) reads the same cells and slot
// counts and adds to one verdict in the order the report prints them.
func verify(m *slotmap.Map, maxDrift int) verifyJSON {
	v := verifyJSON{Version: m.Version(), Checks: []check{}}
	add := func(name, status, format string, args ...any) {
		v.Checks = append(v.Checks, check{Name: name, Status: status, Detail: fmt.Sprintf(format, args...)})
		switch status {
		case checkFail:
			v.Violations++
		case checkWarn:
			v.Warnings++
		}
	}

	// Structure: the registry refuses invalid maps, so this fails only for a
	// registry written around cellctl and the registry package.
	if err := m.Validate(); err != nil {
		add("structure", checkFail, "%s", invalidReason(err))
	}

	cells := m.Cells()
	active := m.ActiveCells()
	counts := m.SlotCounts()
	owned := 0
	var bad []string
	for s := 0; s < m.Slots(); s++ {
		owner := m.Owner(s)
		if owner == "" {
			continue
		}
		owned++
		if c, _ := m.Cell(owner); c.State != slotmap.Active {
			bad = append(bad, fmt.Sprintf("slot %d on %s cell %s", s, c.State, owner))
		}
	}
	switch {
	case len(cells) == 0:
		// A map made by init whose first cell is yet to be provisioned
		// (an installation in progress: the operator provisions a cell
		// once its pods run) breaks no invariant.
		add("slots", checkWarn, "the map has no cell yet: no user can be served until one is provisioned")
	case len(active) == 0:
		add("slots", checkFail, "no cell is active: no slot is owned and no user can be served")
	case owned != m.Slots() || len(bad) > 0:
		add("slots", checkFail, "%d of %d slots owned; %s", owned, m.Slots(), strings.Join(bad[:min(len(bad), 3)], ", "))
	default:
		add("slots", checkOK, "all %d slots are owned by the %d active cell%s", m.Slots(), len(active), plural(len(active)))
	}
	for _, id := range active {
		if counts[id] == 0 {
			add("slots", checkWarn, "active cell %s owns no slot (its weight is too small for %d slots)", id, m.Slots())
		}
	}

	// Quotas: within limits, none on drained cells, derived ones equal to
	// their share (the planner's own derivation, through a no-op plan).
	limits := m.Agencies()
	var within []string
	quotaOK := true
	for _, a := range m.AgencyNames() {
		sum := 0
		for _, c := range cells {
			sum += c.Quota[a]
			if c.State == slotmap.Drained && c.Quota[a] > 0 {
				add("quotas", checkFail, "drained cell %s holds %d %s sessions", c.ID, c.Quota[a], a)
				quotaOK = false
			}
			if c.State == slotmap.Active && c.Quota[a] == 0 {
				add("quotas", checkWarn, "active cell %s has no %s sessions: its inquiries cannot call %s", c.ID, a, a)
			}
		}
		if sum > limits[a] {
			add("quotas", checkFail, "%s quotas sum to %d, over the agency's session limit %d", a, sum, limits[a])
			quotaOK = false
		}
		within = append(within, fmt.Sprintf("%s %d/%d", a, sum, limits[a]))
	}
	if p, err := m.Rebalance(); err == nil {
		for _, c := range cells {
			want, _ := p.After.Cell(c.ID)
			for _, a := range m.AgencyNames() {
				if _, fixed := c.FixedQuota[a]; !fixed && c.Quota[a] != want.Quota[a] {
					add("quotas", checkFail, "%s's %s quota is %d, its derived share is %d ('cellctl rebalance' rederives it)", c.ID, a, c.Quota[a], want.Quota[a])
					quotaOK = false
				}
			}
		}
	}
	if quotaOK {
		if len(within) == 0 {
			within = []string{"no agencies"}
		}
		add("quotas", checkOK, "within the agency limits (%s), derived shares match", strings.Join(within, ", "))
	}

	// Drift from the weighted-rendezvous target.
	slots := m.Drift()
	for _, s := range slots {
		owner, target := m.Owner(s), m.Target(s)
		if n := len(v.Drift); n > 0 {
			if d := &v.Drift[n-1]; d.To == s-1 && d.Owner == owner && d.Target == target {
				d.To = s
				continue
			}
		}
		v.Drift = append(v.Drift, drift{From: s, To: s, Owner: owner, Target: target})
	}
	switch {
	case len(slots) == 0:
		add("target", checkOK, "the table equals the weighted-rendezvous target")
	case len(slots) <= maxDrift:
		add("target", checkWarn, "%d slot%s (%s of users) away from their target, within --max-drift %d: %s",
			len(slots), plural(len(slots)), pct(len(slots), m.Slots()), maxDrift, driftPairs(v.Drift))
	default:
		add("target", checkFail, "%d slot%s (%s of users) away from their target (%s); 'cellctl rebalance' moves them, --max-drift accepts them",
			len(slots), plural(len(slots)), pct(len(slots), m.Slots()), driftPairs(v.Drift))
	}

	// Overrides.
	ov := m.Overrides()
	ignored := 0
	for _, u := range slices.Sorted(maps.Keys(ov)) {
		if c, _ := m.Cell(ov[u]); c.State != slotmap.Active {
			ignored++
			if ignored <= 5 {
				add("overrides", checkWarn, "user %s is pinned to %s cell %s: ignored until it is active again", u, c.State, c.ID)
			}
		}
	}
	if ignored > 5 {
		add("overrides", checkWarn, "… and %d more pins to cells that are not active", ignored-5)
	}
	if ignored == 0 {
		add("overrides", checkOK, "%d override%s, all to active cells", len(ov), plural(len(ov)))
	}
	v.OK = v.Violations == 0
	return v
}

// driftPairs summarises drift as "c1 → c3 12 slots, ...".
func driftPairs(ds []drift) string {
	sum := map[[2]string]int{}
	for _, d := range ds {
		sum[[2]string{d.Owner, d.Target}] += d.To - d.From + 1
	}
	keys := slices.SortedFunc(maps.Keys(sum), func(a, b [2]string) int {
		return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s → %s %d", k[0], k[1], sum[k]))
	}
	return strings.Join(parts, ", ")
}
