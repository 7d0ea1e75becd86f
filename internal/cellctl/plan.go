package cellctl

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// firstRanges is how many slot ranges a plan lists before it summarises the
// rest ("… and K more"); --json lists them all.
const firstRanges = 8

// planJSON is the machine form of a plan.
type planJSON struct {
	*slotmap.Plan
	VersionBefore  int64          `json:"version_before"`
	VersionAfter   int64          `json:"version_after"`
	Slots          int            `json:"slots"`
	MovedFraction  float64        `json:"moved_fraction"`
	AgenciesBefore map[string]int `json:"agencies_before"`
	AgenciesAfter  map[string]int `json:"agencies_after"`
	// Traffic says where the cells' projected rates came from (--routers).
	Traffic *trafficSummary `json:"traffic,omitempty"`
	// Data is what the plan's data moves would carry, as their sources
	// measured it (none when no user changes cells).
	Data *dataJSON `json:"data,omitempty"`
}

// dataJSON is a plan's data to move, or why it could not be measured.
type dataJSON struct {
	control.PlanSize
	Error string `json:"error,omitempty"`
}

func toPlanJSON(p *slotmap.Plan) planJSON {
	j := planJSON{
		Plan:           p,
		VersionBefore:  p.Before.Version(),
		VersionAfter:   p.After.Version(),
		Slots:          p.After.Slots(),
		MovedFraction:  p.MovedFraction(),
		AgenciesBefore: p.Before.Agencies(),
		AgenciesAfter:  p.After.Agencies(),
	}
	if j.Moves == nil {
		c := *p
		c.Moves = []slotmap.Move{}
		j.Plan = &c
	}
	return j
}

// movePair sums the moves from one cell to another.
type movePair struct {
	from, to      string
	slots, ranges int
}

func movePairs(moves []slotmap.Move) []movePair {
	idx := map[[2]string]*movePair{}
	var pairs []*movePair
	for _, m := range moves {
		k := [2]string{m.FromCell, m.ToCell}
		p := idx[k]
		if p == nil {
			p = &movePair{from: m.FromCell, to: m.ToCell}
			idx[k] = p
			pairs = append(pairs, p)
		}
		p.slots += m.To - m.From + 1
		p.ranges++
	}
	out := make([]movePair, len(pairs))
	for i, p := range pairs {
		out[i] = *p
	}
	slices.SortFunc(out, func(a, b movePair) int {
		return cmp.Or(cmp.Compare(a.from, b.from), cmp.Compare(a.to, b.to))
	})
	return out
}

// usersPct renders a moved fraction with two decimals: "33.33%".
func usersPct(f float64) string {
	return strconv.FormatFloat(100*f, 'f', 2, 64) + "%"
}

// writePlan prints a plan for a human: what moves (as slot ranges, the
// first few listed), the share of users that move, and every cell's state,
// weight, slots and session quotas before → after.
func writePlan(w io.Writer, p *slotmap.Plan) {
	fmt.Fprintf(w, "Plan: %s (map version %d → %d)\n", p.Op, p.Before.Version(), p.After.Version())
	writeMoves(w, p)
	writeCellChanges(w, p)
	writeOverrideChanges(w, p)
	if b, a := p.Before.Format(), p.After.Format(); b != a {
		fmt.Fprintf(w, "Document format: %d → %d\n", b, a)
	}
}

func writeMoves(w io.Writer, p *slotmap.Plan) {
	if p.MovedSlots == 0 {
		fmt.Fprintf(w, "\nNo slot moves (0.00%% of users).\n")
		return
	}
	fmt.Fprintf(w, "\nMoves %d of %d slots (%s of users):\n", p.MovedSlots, p.After.Slots(), usersPct(p.MovedFraction()))
	t := newTable(w, "  FROM", "TO", "SLOTS", "RANGES")
	for _, mp := range movePairs(p.Moves) {
		t.row("  "+orNone(mp.from), orNone(mp.to), itoa(mp.slots), itoa(mp.ranges))
	}
	t.flush()
	fmt.Fprintf(w, "Ranges:\n")
	t = newTable(w)
	for _, m := range p.Moves[:min(len(p.Moves), firstRanges)] {
		t.row("  "+slotRange(m.From, m.To), orNone(m.FromCell)+" → "+orNone(m.ToCell))
	}
	t.flush()
	if rest := len(p.Moves) - firstRanges; rest > 0 {
		fmt.Fprintf(w, "  … and %d more range%s (--json lists them all)\n", rest, plural(rest))
	}
}

func writeCellChanges(w io.Writer, p *slotmap.Plan) {
	agencies := unionKeys(p.Before.Agencies(), p.After.Agencies())
	if len(p.Cells) == 0 {
		fmt.Fprintf(w, "\nNo cells.\n")
	} else {
		fmt.Fprintf(w, "\nCells (slots, users and session quotas before → after):\n")
		header := []string{"  CELL", "STATE", "WEIGHT", "SLOTS", "USERS"}
		projected := p.Cells[0].RateAfter != nil
		if projected {
			header = append(header, "REQ/S", "CAPACITY")
		}
		for _, a := range agencies {
			header = append(header, strings.ToUpper(a))
		}
		t := newTable(w, header...)
		fixed, over := false, false
		total := p.After.Slots()
		for _, c := range p.Cells {
			row := []string{
				"  " + c.ID,
				stateArrow(c.StateBefore, c.StateAfter),
				arrow(weightStr(c.WeightBefore), weightStr(c.WeightAfter)),
				arrow(itoa(c.SlotsBefore), itoa(c.SlotsAfter)),
				arrow(pct(c.SlotsBefore, total), pct(c.SlotsAfter, total)),
			}
			if projected {
				rate := arrow(rateStr(c.RateBefore), rateStr(c.RateAfter))
				capacity := "-"
				if c.CapacityAfter > 0 {
					capacity = itoa(c.CapacityAfter) + "/s"
					if *c.RateAfter > float64(c.CapacityAfter) {
						capacity += " !"
						over = true
					}
				}
				row = append(row, rate, capacity)
			}
			after, _ := p.After.Cell(c.ID)
			for _, a := range agencies {
				q := arrow(itoa(c.QuotaBefore[a]), itoa(c.QuotaAfter[a]))
				if _, ok := after.FixedQuota[a]; ok {
					q += "*"
					fixed = true
				}
				row = append(row, q)
			}
			t.row(row...)
		}
		t.flush()
		if fixed {
			fmt.Fprintf(w, "  * quota fixed with 'cellctl quota set'\n")
		}
		if projected {
			fmt.Fprintf(w, "  REQ/S: the routers' measured traffic (--routers) on the map before → after\n")
		}
		if over {
			fmt.Fprintf(w, "  ! projected over the capacity declared with 'cellctl capacity set'\n")
		}
		for _, c := range p.Cells {
			if c.CapacityBefore != c.CapacityAfter {
				fmt.Fprintf(w, "Declared capacity of %s: %s\n", c.ID, arrow(capacityStr(c.CapacityBefore), capacityStr(c.CapacityAfter)))
			}
		}
	}
	before, after := p.Before.Agencies(), p.After.Agencies()
	if !maps.Equal(before, after) {
		var parts []string
		for _, a := range agencies {
			parts = append(parts, a+" "+arrow(limitStr(before, a), limitStr(after, a)))
		}
		fmt.Fprintf(w, "Agency session limits: %s\n", strings.Join(parts, ", "))
	}
}

// capacityStr renders a declared capacity, "none" for 0.
func capacityStr(n int) string {
	if n == 0 {
		return "none"
	}
	return itoa(n) + "/s"
}

// rateStr renders a projected rate, "-" for none.
func rateStr(r *float64) string {
	if r == nil {
		return "-"
	}
	return strconv.FormatFloat(*r, 'f', 1, 64)
}

func limitStr(m map[string]int, a string) string {
	if n, ok := m[a]; ok {
		return itoa(n)
	}
	return "(none)"
}

func writeOverrideChanges(w io.Writer, p *slotmap.Plan) {
	if len(p.Overrides) == 0 {
		return
	}
	fmt.Fprintf(w, "\nOverrides (user → cell):\n")
	t := newTable(w)
	for _, o := range p.Overrides {
		slot := p.After.SlotOf(o.User)
		note := ""
		if o.To != "" {
			if c, ok := p.After.Cell(o.To); ok && c.State != slotmap.Active {
				note = "(ignored while " + string(c.State) + ")"
			}
		}
		t.row("  "+o.User, "slot "+itoa(slot), orNone(o.From)+" → "+orNone(o.To), note)
	}
	t.flush()
}

func stateArrow(before, after slotmap.State) string {
	switch {
	case before == "":
		return "new → " + string(after)
	case after == "":
		return string(before) + " → removed"
	}
	return arrow(string(before), string(after))
}

func weightStr(w int) string {
	if w == 0 {
		return "-"
	}
	return itoa(w)
}

func unionKeys(a, b map[string]int) []string {
	keys := maps.Clone(a)
	if keys == nil {
		keys = map[string]int{}
	}
	maps.Copy(keys, b)
	return slices.Sorted(maps.Keys(keys))
}
