package cellctl

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cellkit/cellkit/internal/slotmap"
)

// statusJSON is the machine form of 'cellctl status'.
type statusJSON struct {
	Registry   string       `json:"registry"`
	Version    int64        `json:"version"`
	Change     string       `json:"change"`
	Updated    time.Time    `json:"updated,omitzero"`
	AgeSeconds float64      `json:"age_seconds"`
	Slots      int          `json:"slots"`
	Cells      []cellStatus `json:"cells"`
}

// cellStatus is one cell: what the map says and what its admin API said.
type cellStatus struct {
	ID        string         `json:"id"`
	State     slotmap.State  `json:"state"`
	Weight    int            `json:"weight"`
	Slots     int            `json:"slots"`
	UsersPct  float64        `json:"users_pct"`
	Quota     map[string]int `json:"quota"`
	Admin     string         `json:"admin"`
	Reachable bool           `json:"reachable"`
	Error     string         `json:"error,omitempty"`
	Status    *CellStatus    `json:"status,omitempty"`
}

func statusCommand() *command {
	c := &command{
		name:    "status",
		section: secCells,
		summary: "one row per cell: map state and what the cell reports",
		help: `Shows the map version and its age, then one row per cell: its state, weight,
slots and share of users (from the map), and from its admin API: ready or not,
queue depth per lane (high/normal), oldest pending age, in flight, sessions in
use/pool size per agency, breaker states, failed inquiries (error stream/DLQ).
A cell whose admin API does not answer is shown as unreachable; the command
still succeeds. Cells are asked in parallel, each for at most 5 s.`,
		examples: `cellctl status
cellctl status --json | jq '.cells[] | select(.reachable | not) | .id'`,
		maxArgs: 0,
	}
	c.run = func(ctx context.Context, x *inv, _ []string) error {
		reg, m, err := x.loadOnly(ctx)
		if err != nil {
			return err
		}
		defer reg.Close()
		st := x.collectStatus(ctx, m)
		st.Registry = reg.Describe()
		if x.g.json {
			return writeJSON(x.out, st)
		}
		x.writeStatus(m, st)
		return nil
	}
	return c
}

// collectStatus asks every cell that is not drained for its status, in
// parallel.
func (x *inv) collectStatus(ctx context.Context, m *slotmap.Map) statusJSON {
	st := statusJSON{Version: m.Version(), Change: m.Change(), Updated: m.Updated(), Slots: m.Slots(), Cells: []cellStatus{}}
	if !m.Updated().IsZero() {
		st.AgeSeconds = x.cli.now().Sub(m.Updated()).Seconds()
	}
	counts := m.SlotCounts()
	cells := m.Cells()
	st.Cells = make([]cellStatus, len(cells))
	ac := x.admin()
	var wg sync.WaitGroup
	for i, c := range cells {
		cs := &st.Cells[i]
		*cs = cellStatus{ID: c.ID, State: c.State, Weight: c.Weight, Slots: counts[c.ID], Quota: c.Quota, Admin: c.Admin}
		if cs.Quota == nil {
			cs.Quota = map[string]int{}
		}
		if m.Slots() > 0 {
			cs.UsersPct = 100 * float64(cs.Slots) / float64(m.Slots())
		}
		wg.Go(func() {
			s, err := ac.status(ctx, c.Admin)
			if err != nil {
				cs.Error = err.Error()
				cs.Reachable = !unreachable(err)
				return
			}
			cs.Reachable, cs.Status = true, s
		})
	}
	wg.Wait()
	return st
}

func (x *inv) writeStatus(m *slotmap.Map, st statusJSON) {
	w := x.out
	fmt.Fprintf(w, "%s\n", x.mapHeader(m))
	fmt.Fprintf(w, "Registry %s\n\n", st.Registry)
	if len(st.Cells) == 0 {
		fmt.Fprintf(w, "No cells yet: add one with 'cellctl provision'.\n")
		return
	}
	agencies := m.AgencyNames()
	header := []string{"CELL", "STATE", "WEIGHT", "SLOTS", "USERS", "READY", "QUEUE H/N", "OLDEST", "IN FLIGHT"}
	for _, a := range agencies {
		header = append(header, strings.ToUpper(a))
	}
	header = append(header, "BREAKERS", "FAILED/DLQ")
	t := newTable(w, header...)
	var notes []string
	for _, c := range st.Cells {
		row := []string{c.ID, string(c.State), itoa(c.Weight), itoa(c.Slots), pct(c.Slots, st.Slots)}
		s := c.Status
		if s == nil {
			what := "unreachable"
			if c.Reachable {
				what = "error"
			}
			row = append(row, what)
			notes = append(notes, fmt.Sprintf("%s: %s", c.ID, c.Error))
			t.row(row...)
			continue
		}
		ready := "yes"
		if !s.Ready {
			ready = "no"
			if c.State == slotmap.Active {
				notes = append(notes, fmt.Sprintf("%s not ready: %s", c.ID, orNone(s.NotReady())))
			}
		}
		if !s.IntakeOpen() && c.State == slotmap.Active {
			notes = append(notes, fmt.Sprintf("%s: intake closed although the cell is active ('cellctl undrain %s' reopens it)", c.ID, c.ID))
		}
		if s.Map.Version != 0 && s.Map.Version != m.Version() {
			notes = append(notes, fmt.Sprintf("%s is on map version %d (registry %d)", c.ID, s.Map.Version, m.Version()))
		}
		queue, oldest := fmt.Sprintf("%d/%d", s.High(), s.Normal()), ageStr(s.OldestPending())
		if !s.Known() {
			queue, oldest = "?", "?"
			notes = append(notes, fmt.Sprintf("%s cannot read its queue: %s", c.ID, strings.Join(mapValues(s.Errors), "; ")))
		}
		row = append(row, ready, queue, oldest, fmt.Sprintf("%d", s.Inflight))
		var breakers []string
		for _, a := range agencies {
			as, ok := s.Agencies[a]
			if !ok {
				row = append(row, "-")
				continue
			}
			row = append(row, fmt.Sprintf("%d/%d", as.Pool.InUse, as.Pool.Size))
			if as.Breaker != "" && as.Breaker != "closed" {
				breakers = append(breakers, a+"="+as.Breaker)
			}
		}
		// Agencies the cell knows that the map does not (should not happen).
		for _, a := range slices.Sorted(maps.Keys(s.Agencies)) {
			if !slices.Contains(agencies, a) && s.Agencies[a].Breaker != "" && s.Agencies[a].Breaker != "closed" {
				breakers = append(breakers, a+"="+s.Agencies[a].Breaker)
			}
		}
		b := "closed"
		if len(breakers) > 0 {
			b = strings.Join(breakers, ",")
		}
		row = append(row, b, fmt.Sprintf("%d/%d", s.Failed, s.DLQ))
		t.row(row...)
	}
	t.flush()
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintf(w, "%s\n", n)
		}
	}
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, k := range sortedKeys(m) {
		out = append(out, k+": "+m[k])
	}
	return out
}
